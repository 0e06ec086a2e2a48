/*
 * admin: the SQL behind outboxctl on one outbox table: rows per status,
 * the DEAD rows, and putting DEAD rows back to PENDING.  Library style:
 * returns -1 and fills err, never prints; runs on a connected store,
 * whose statement builder and runner it uses.
 */
#ifndef OUTBOXD_ADMIN_H
#define OUTBOXD_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "store.h"

#define ADMIN_DEAD_LIMIT 100   /* dead list without --limit */
#define ADMIN_RETRY_BATCH 1000 /* dead retry --all: rows per transaction */

struct admin_status {
    uint64_t rows[OUTBOX_STATUS_COUNT];
    uint64_t other;            /* a status outboxd does not know: never sent */
    bool pending;              /* any PENDING row at all */
    int64_t oldest_pending_us; /* age of the next PENDING row to be claimed */
};

struct admin_dead_row {
    uint64_t id;
    char *event_id, *aggregate_type, *aggregate_id, *event_type;
    char *created_at; /* "YYYY-MM-DD HH:MM:SS[.ffffff]", UTC */
    char *last_error; /* NULL when the column is */
    unsigned long retry_count;
    bool released; /* outboxctl dead release gave it up (on_dead: hold) */
};

struct admin_dead_list {
    struct admin_dead_row *rows; /* oldest first (by id) */
    size_t n;
    uint64_t total; /* DEAD rows in the table, beyond the limit too */
};

/* Counts every status (SENT too: this is one-shot, unlike the gauges). */
int admin_status(struct store *st, struct admin_status *out, char *err,
                 size_t errlen) __attribute__((warn_unused_result));

/* Up to limit DEAD rows, oldest first.  Free with admin_dead_list_free. */
int admin_dead_list(struct store *st, unsigned limit,
                    struct admin_dead_list *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void admin_dead_list_free(struct admin_dead_list *l);

/* DEAD rows in the table, for dead retry's progress and --dry-run. */
int admin_dead_count(struct store *st, uint64_t *total, char *err,
                     size_t errlen) __attribute__((warn_unused_result));

/* SENT rows whose sent_at is more than older_than_ms ago. */
int admin_purge_count(struct store *st, uint64_t older_than_ms, uint64_t *total,
                      char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * DEAD back to PENDING with retry_count 0 and no lease or retry time;
 * last_error is kept as the evidence of the last failure until the row
 * is SENT (which clears it) or fails again (which replaces it).
 *
 * _batch is one short transaction of at most max rows (0 for
 * ADMIN_RETRY_BATCH) in id order; called until it retries fewer than
 * asked, it is `dead retry --all`, and the events of one aggregate come
 * back in their order.  _ids sets found[i] when event_ids[i] named a
 * DEAD row, all in one transaction.  *retried counts the rows changed;
 * on -1 nothing was.
 */
int admin_dead_retry_batch(struct store *st, unsigned max, uint64_t *retried,
                           char *err, size_t errlen)
    __attribute__((warn_unused_result));
int admin_dead_retry_ids(struct store *st, const char *const *event_ids,
                         size_t n, bool *found, uint64_t *retried, char *err,
                         size_t errlen) __attribute__((warn_unused_result));

/*
 * on_dead: hold (held_cond: store_hold_cond).  A release keeps the row
 * DEAD with its last_error and marks it released, so that its aggregate
 * flows again; _batch and _ids as the retries above.  _count: the DEAD
 * rows that hold now.
 */
int admin_held_count(struct store *st, const char *held_cond, uint64_t *total,
                     char *err, size_t errlen)
    __attribute__((warn_unused_result));
int admin_dead_release_batch(struct store *st, const char *held_cond,
                             unsigned max, uint64_t *released, char *err,
                             size_t errlen) __attribute__((warn_unused_result));
int admin_dead_release_ids(struct store *st, const char *held_cond,
                           const char *const *event_ids, size_t n, bool *found,
                           uint64_t *released, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
