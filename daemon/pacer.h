/*
 * pacer: when an outbox's worker claims next.  At once while claims
 * fill batches, then a backoff that doubles from poll_min towards a
 * ceiling while they find nothing; a wake from the binlog starts it over.
 * Pure arithmetic, so the unit tests can walk it step by step.
 */
#ifndef OUTBOXD_PACER_H
#define OUTBOXD_PACER_H

#include <stdbool.h>
#include <stdint.h>

/*
 * With a live wake stream, claims after a wake still back off from
 * poll_min, up to this step: the server may tell of a commit a moment
 * before the rows are visible to other sessions.  Past it the ceiling is
 * wake_poll_interval, since the next insert brings its own wake.
 */
#define PACER_SETTLE_MS 16

/* No row falls due at a known time (pacer_next's due_in_ms). */
#define PACER_NOT_DUE UINT64_MAX

struct pacer_limits {
    uint64_t min_ms;   /* poll_min */
    uint64_t poll_ms;  /* poll_interval: the ceiling polling alone */
    uint64_t woken_ms; /* wake_poll_interval: with a live wake stream */
};

enum pacer_outcome {
    PACER_FULL,  /* the claim filled a batch: more rows wait */
    PACER_FOUND, /* it found rows, fewer than a batch */
    /* it found and published a row of every commit told since the last
     * claim: with a live stream no look follows */
    PACER_FOUND_ALL,
    PACER_EMPTY, /* it found none */
};

struct pacer {
    uint64_t step_ms; /* the next empty claim's wait */
};

/* A fresh pacer claims at poll_min after its first empty claim. */
void pacer_init(struct pacer *p, const struct pacer_limits *lim);
/* A wake arrived: claim now, and back off from poll_min again. */
void pacer_woken(struct pacer *p, const struct pacer_limits *lim);
/*
 * The wait before the next claim after one with this outcome.  live: a
 * wake stream serves the outbox.  due_in_ms: when the empty claim saw the
 * next row fall due (a RETRY backoff ending, a lease expiring), or
 * PACER_NOT_DUE.
 */
uint64_t pacer_next(struct pacer *p, const struct pacer_limits *lim,
                    enum pacer_outcome out, bool live, uint64_t due_in_ms);
/* The ceiling in force: what an idle outbox waits at most. */
uint64_t pacer_ceiling(const struct pacer_limits *lim, bool live);

#endif
