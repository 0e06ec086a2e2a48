/*
 * logrepeat: when a failure that repeats deserves a log line: at once,
 * then at most once per doubling step with the count since, and once
 * when it clears.  Pure (the caller passes the clock and logs).
 */
#ifndef OUTBOXD_LOGREPEAT_H
#define OUTBOXD_LOGREPEAT_H

#include <stdbool.h>
#include <stdint.h>

struct logrepeat {
    uint64_t initial_ms, max_ms; /* the steps, as the reconnect backoff's */
    uint64_t step_ms;            /* the quiet step in force */
    uint64_t since_ms;           /* clock of the run's first failure */
    uint64_t last_line_ms;       /* clock of the last line allowed */
    uint64_t total;              /* failures in the run */
    uint64_t unlogged;           /* failures since the last line */
    bool active;                 /* a run is under way */
    char text[256];              /* the failure of the last line */
};

enum logrepeat_verdict {
    LOGREPEAT_QUIET,  /* counted, no line */
    LOGREPEAT_FIRST,  /* a new failure: log it */
    LOGREPEAT_REPEAT, /* the same one a step later: log it with the count */
};

void logrepeat_init(struct logrepeat *lr, uint64_t initial_ms, uint64_t max_ms);
/*
 * A failure described by text at now_ms.  FIRST for the first of a run,
 * and for a text other than the last line's once initial_ms has passed
 * since that line; REPEAT once the step has passed since the last line
 * (the step then doubles, up to max_ms), *since set to the failures
 * since that line, this one included; QUIET otherwise.
 */
enum logrepeat_verdict logrepeat_failure(struct logrepeat *lr, const char *text,
                                         uint64_t now_ms, uint64_t *since);
/*
 * A success at now_ms: true when it ends a run, with its length from
 * the first failure and the number of failures in it.
 */
bool logrepeat_success(struct logrepeat *lr, uint64_t now_ms,
                       uint64_t *duration_ms, uint64_t *failures);

#endif
