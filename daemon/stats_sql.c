/*
 * stats_sql: the gauges' row counts, oldest pending age and holds, read
 * through the store (store_stats.c) between the relay's cycles, each
 * read ending its transaction so that an ALTER TABLE never waits on it.
 */
#include "stats_sql.h"

#include <string.h>

#include "dbsession.h"

/* The session runs with autocommit off: end the read view and drop the
 * metadata lock, or an ALTER TABLE would wait on us. */
static int
end_read(struct store *st, int rc, const char *what, char *err, size_t errlen)
{
    if (rc < 0) {
        store_rollback(st);
        return -1;
    }
    return store_commit(st, what, err, errlen);
}

int
stats_sql_count(struct store *st, struct outbox_counts *out, char *err,
                size_t errlen)
{
    uint64_t other;
    memset(out, 0, sizeof(*out));
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++)
        out->counted[s] = s != OUTBOX_SENT;
    int rc = store_count_statuses(st, false, out->rows, &other, err, errlen);
    if (rc == 0)
        rc = store_oldest_pending(st, &out->oldest_pending_us, err, errlen);
    if (out->oldest_pending_us < 0)
        out->oldest_pending_us = 0;
    if (rc < 0)
        out->errnum = dbsession_last_errno(store_dbsession(st));
    return end_read(st, rc, "counting rows of", err, errlen);
}

int
stats_sql_holds(struct store *st, struct outbox_holds *out, char *err,
                size_t errlen)
{
    memset(out, 0, sizeof(*out));
    int rc =
        store_count_holds(st, &out->aggregates, &out->oldest_us, err, errlen);
    return end_read(st, rc, "counting held aggregates of", err, errlen);
}
