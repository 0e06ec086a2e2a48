/*
 * pacer: the arithmetic of adaptive polling (see pacer.h), kept apart
 * from the worker's event loop so that each step can be tested.
 */
#include "pacer.h"

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

uint64_t
pacer_ceiling(const struct pacer_limits *lim, bool live)
{
    return live ? lim->woken_ms : lim->poll_ms;
}

void
pacer_init(struct pacer *p, const struct pacer_limits *lim)
{
    p->step_ms = lim->min_ms;
}

void
pacer_woken(struct pacer *p, const struct pacer_limits *lim)
{
    p->step_ms = lim->min_ms;
}

/* The doubling step, which a live stream cuts short past the settle. */
static uint64_t
empty_wait(struct pacer *p, const struct pacer_limits *lim, bool live)
{
    uint64_t ceiling = pacer_ceiling(lim, live);
    uint64_t wait = p->step_ms;
    if (live && wait > PACER_SETTLE_MS)
        wait = ceiling;
    wait = min_u64(wait, ceiling);
    uint64_t next = p->step_ms == 0 ? 1 : p->step_ms * 2;
    p->step_ms = min_u64(next, ceiling);
    return wait;
}

uint64_t
pacer_next(struct pacer *p, const struct pacer_limits *lim,
           enum pacer_outcome out, bool live, uint64_t due_in_ms)
{
    if (out == PACER_FULL) {
        p->step_ms = lim->min_ms;
        return 0;
    }
    if (out == PACER_FOUND_ALL && live) {
        p->step_ms = pacer_ceiling(lim, live);
        return min_u64(p->step_ms, due_in_ms);
    }
    if (out == PACER_FOUND || out == PACER_FOUND_ALL) {
        /* More may be committing right behind these: look again soon.
         * With a live stream they bring their own wakes: one look once
         * the settle is over, for a row told before it was visible and
         * for when a delayed row, a retry or a lease falls due (the
         * claim after a short batch probes first), then the ceiling. */
        if (live) {
            p->step_ms = pacer_ceiling(lim, live);
            return min_u64(PACER_SETTLE_MS, p->step_ms);
        }
        p->step_ms = lim->min_ms;
        return empty_wait(p, lim, live);
    }
    return min_u64(empty_wait(p, lim, live), due_in_ms);
}
