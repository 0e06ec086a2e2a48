/*
 * stats_sql: the cheap read-only queries behind the outboxd_rows,
 * outboxd_oldest_pending_age_seconds and hold gauges, run on the store's
 * session.
 */
#ifndef OUTBOXD_STATS_SQL_H
#define OUTBOXD_STATS_SQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "store.h"

struct outbox_counts {
    uint64_t rows[OUTBOX_STATUS_COUNT];
    bool counted[OUTBOX_STATUS_COUNT]; /* SENT is not: see stats_sql.c */
    int64_t oldest_pending_us;         /* 0 when nothing is pending */
    unsigned errnum; /* the server's error when a count failed, else 0 */
};

/*
 * Counts the rows of the store's table per status and the age of the
 * next PENDING row, then ends the transaction.  -1 with err filled on an
 * SQL error.
 */
int stats_sql_count(struct store *st, struct outbox_counts *out, char *err,
                    size_t errlen);

/* on_dead: hold: the aggregates held by a DEAD event, and the age of the
 * oldest hold (0 with none). */
struct outbox_holds {
    uint64_t aggregates;
    int64_t oldest_us;
};

/*
 * Counts them (none for an outbox that does not hold), then ends the
 * transaction.  -1 with err filled on an SQL error.
 */
int stats_sql_holds(struct store *st, struct outbox_holds *out, char *err,
                    size_t errlen);

#endif
