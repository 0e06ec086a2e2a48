/*
 * logrepeat: keeps a refusing server from flooding the log (one line per
 * try, ten a second) while every failure is still counted by the caller.
 */
#include "logrepeat.h"

#include <string.h>

#include "util.h"

void
logrepeat_init(struct logrepeat *lr, uint64_t initial_ms, uint64_t max_ms)
{
    memset(lr, 0, sizeof(*lr));
    lr->initial_ms = initial_ms;
    lr->max_ms = max_ms;
    lr->step_ms = initial_ms;
}

static enum logrepeat_verdict
allow(struct logrepeat *lr, enum logrepeat_verdict v, const char *text,
      uint64_t now_ms, uint64_t *since)
{
    *since = lr->unlogged;
    lr->unlogged = 0;
    lr->last_line_ms = now_ms;
    str_copy(lr->text, text, sizeof(lr->text));
    return v;
}

enum logrepeat_verdict
logrepeat_failure(struct logrepeat *lr, const char *text, uint64_t now_ms,
                  uint64_t *since)
{
    lr->total++;
    lr->unlogged++;
    if (!lr->active) {
        lr->active = true;
        lr->since_ms = now_ms;
        lr->step_ms = lr->initial_ms;
        return allow(lr, LOGREPEAT_FIRST, text, now_ms, since);
    }
    uint64_t quiet = now_ms - lr->last_line_ms;
    /* A new text shows soon, but alternating texts still cannot flood. */
    if (strncmp(text, lr->text, sizeof(lr->text) - 1) != 0 &&
        quiet >= lr->initial_ms)
        return allow(lr, LOGREPEAT_FIRST, text, now_ms, since);
    if (quiet < lr->step_ms) {
        *since = lr->unlogged;
        return LOGREPEAT_QUIET;
    }
    lr->step_ms = lr->step_ms * 2 > lr->max_ms ? lr->max_ms : lr->step_ms * 2;
    return allow(lr, LOGREPEAT_REPEAT, text, now_ms, since);
}

bool
logrepeat_success(struct logrepeat *lr, uint64_t now_ms, uint64_t *duration_ms,
                  uint64_t *failures)
{
    if (!lr->active)
        return false;
    *duration_ms = now_ms - lr->since_ms;
    *failures = lr->total;
    logrepeat_init(lr, lr->initial_ms, lr->max_ms);
    return true;
}
