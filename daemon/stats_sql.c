/*
 * stats_sql: status counts and the oldest pending age for the metrics.
 * Both queries stay on indexes whose size follows the backlog, not the
 * table: SENT rows are the bulk of a table kept for retention.sent
 * (millions of rows), and counting them every few seconds would stall
 * the relay sharing this session, so SENT is left out.
 */
#include "stats_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int
query_failed(MYSQL *db, char *err, size_t errlen)
{
    err_set(err, errlen, "counting rows: %s (%u)", mysql_error(db),
            mysql_errno(db));
    return -1;
}

static int
query(MYSQL *db, const char *sql, MYSQL_RES **res, char *err, size_t errlen)
{
    if (mysql_query(db, sql) != 0 || (*res = mysql_store_result(db)) == NULL)
        return query_failed(db, err, errlen);
    return 0;
}

/* With (status, id) this is a range scan over the unfinished rows only. */
static int
count_statuses(MYSQL *db, const char *table, struct outbox_counts *out,
               char *err, size_t errlen)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    char *sql = xasprintf(
        "SELECT `status`, COUNT(*) FROM %s WHERE `status` IN "
        "('PENDING', 'PROCESSING', 'RETRY', 'DEAD') GROUP BY `status`",
        table);
    int rc = query(db, sql, &res, err, errlen);
    free(sql);
    if (rc < 0)
        return -1;
    while ((row = mysql_fetch_row(res)) != NULL) {
        int s = row[0] ? outbox_status_parse(row[0]) : -1;
        if (s >= 0 && row[1] != NULL)
            out->rows[s] = strtoull(row[1], NULL, 10);
    }
    mysql_free_result(res);
    return 0;
}

/* The server's "unknown column": a table without available_at. */
#define ERRNO_BAD_FIELD 1054

/*
 * The next PENDING row in id order is the one the relay claims next, so
 * its age is how far behind the relay is; MIN(id) per status is one
 * index probe where MIN(created_at) would read every pending row.  On a
 * table with available_at, a delayed row is behind only once it is due,
 * by how long since (docs/contract.md section 5): an event delayed a day
 * is not a backlog a day old.  -1: nothing claimable is pending.
 */
static int
oldest_pending(MYSQL *db, const char *table, struct outbox_counts *out,
               char *err, size_t errlen)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char *sql = xasprintf(
        "SELECT GREATEST(COALESCE((SELECT TIMESTAMPDIFF(MICROSECOND, "
        "`created_at`, NOW(6)) FROM %s WHERE `id` = (SELECT MIN(`id`) "
        "FROM %s WHERE `status` = 'PENDING' AND `available_at` IS "
        "NULL)), -1), COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT "
        "MIN(`available_at`) FROM %s WHERE `status` = 'PENDING'), "
        "NOW(6)), -1))",
        table, table, table);
    if (mysql_query(db, sql) == 0) {
        res = mysql_store_result(db);
    } else if (mysql_errno(db) != ERRNO_BAD_FIELD) {
        /* not again: a lock wait would cost its neighbours another */
        free(sql);
        return query_failed(db, err, errlen);
    } else {
        free(sql);
        sql = xasprintf("SELECT TIMESTAMPDIFF(MICROSECOND, `created_at`, "
                        "NOW(6)) FROM %s WHERE `id` = (SELECT MIN(`id`) "
                        "FROM %s WHERE `status` = 'PENDING')",
                        table, table);
    }
    int rc = res == NULL ? query(db, sql, &res, err, errlen) : 0;
    free(sql);
    if (rc < 0)
        return -1;
    row = mysql_fetch_row(res);
    out->oldest_pending_us = row && row[0] ? strtoll(row[0], NULL, 10) : 0;
    if (out->oldest_pending_us < 0)
        out->oldest_pending_us = 0;
    mysql_free_result(res);
    return 0;
}

int
stats_sql_count(MYSQL *db, const char *table, struct outbox_counts *out,
                char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++)
        out->counted[s] = s != OUTBOX_SENT;
    int rc = count_statuses(db, table, out, err, errlen);
    if (rc == 0)
        rc = oldest_pending(db, table, out, err, errlen);
    if (rc < 0)
        out->errnum = mysql_errno(db); /* before the commit clears it */
    /* The session runs with autocommit off: end the read view and drop
     * the metadata lock, or an ALTER TABLE would wait on us. */
    if (mysql_commit(db) != 0 && rc == 0) {
        err_set(err, errlen, "counting rows: %s", mysql_error(db));
        rc = -1;
    }
    return rc;
}

/*
 * Since when the oldest hold: locked_until is when a row went DEAD
 * under hold (store_hold.c); a row that went DEAD otherwise (before hold
 * was configured) counts from its created_at.  Held rows are few and,
 * with sql/outbox.sql's `held`, read through its index alone.
 */
int
stats_sql_holds(MYSQL *db, const char *table, const char *held_cond,
                struct outbox_holds *out, char *err, size_t errlen)
{
    char *sql =
        xasprintf("SELECT COUNT(DISTINCT `aggregate_type`, `aggregate_id`), "
                  "TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(`locked_until`, "
                  "`created_at`)), NOW(6)) FROM %s WHERE %s",
                  table, held_cond);
    MYSQL_RES *res;
    memset(out, 0, sizeof(*out));
    int rc = query(db, sql, &res, err, errlen);
    free(sql);
    if (rc == 0) {
        MYSQL_ROW row = mysql_fetch_row(res);
        out->aggregates = row && row[0] ? strtoull(row[0], NULL, 10) : 0;
        out->oldest_us = row && row[1] ? strtoll(row[1], NULL, 10) : 0;
        if (out->oldest_us < 0)
            out->oldest_us = 0;
        mysql_free_result(res);
    }
    if (mysql_commit(db) != 0 && rc == 0) {
        err_set(err, errlen, "counting held aggregates: %s", mysql_error(db));
        rc = -1;
    }
    return rc;
}
