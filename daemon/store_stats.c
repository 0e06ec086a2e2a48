/*
 * store_stats: the table's counts for outboxctl status and the gauges,
 * written once for both and for either shape of the table.  They stay
 * on indexes whose size follows the backlog, not the table, but for
 * SENT, which only a one-shot count asks for.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store_int.h"

/*
 * Case-insensitive: under the seed's default collation 'pending' is
 * claimed like 'PENDING', so it must be counted with it.
 */
static void
add_status_count(uint64_t rows[OUTBOX_STATUS_COUNT], uint64_t *other,
                 const char *name, uint64_t n)
{
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++)
        if (name != NULL && strcasecmp(name, outbox_status_name(s)) == 0) {
            rows[s] += n;
            return;
        }
    *other += n;
}

/*
 * SENT rows are the bulk of a table kept for retention.sent (millions of
 * rows): the gauges, every few seconds on the session the relay shares,
 * leave them out and range-scan (status, id) over the unfinished rows.
 */
int
store_count_statuses(struct store *st, bool with_sent,
                     uint64_t rows[OUTBOX_STATUS_COUNT], uint64_t *other,
                     char *err, size_t errlen)
{
    const char *tail = with_sent ? " GROUP BY `status`"
                                 : " WHERE `status` IN ('PENDING', "
                                   "'PROCESSING', 'RETRY', 'DEAD') GROUP BY "
                                   "`status`";
    store_sql_begin(st, "SELECT `status`, COUNT(*) FROM ", tail);
    MYSQL_RES *res = store_run_select(st, "counting rows of", err, errlen);
    if (res == NULL)
        return -1;
    memset(rows, 0, OUTBOX_STATUS_COUNT * sizeof(rows[0]));
    *other = 0;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL)
        add_status_count(rows, other, r[0],
                         r[1] ? strtoull(r[1], NULL, 10) : 0);
    mysql_free_result(res);
    return 0;
}

/* The age of the row with the least id among cond's, clamped to 0 (a
 * created_at in the future), or -1 for none: as SQL. */
static void
add_oldest_by_id(struct store *st, const char *cond)
{
    struct strbuf *q = &st->sql;
    strbuf_adds(q, "COALESCE((SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, "
                   "`created_at`, NOW(6)), 0) FROM ");
    strbuf_adds(q, st->table);
    strbuf_adds(q, " WHERE `id` = (SELECT MIN(`id`) FROM ");
    strbuf_adds(q, st->table);
    strbuf_addf(q, " WHERE %s)), -1)", cond);
}

/*
 * The next PENDING row in id order is the one the relay claims next, so
 * its age is how far behind the relay is; MIN(id) is one index probe on
 * (status, id) or (status, available_at, id) where MIN(created_at) would
 * read every pending row.  On a table with available_at, a delayed row
 * is behind only once it is due, by how long since (docs/contract.md
 * section 5): an event delayed a day is not a backlog a day old.  The
 * schema check said which table this is, so nothing is tried and
 * failed: a lock wait would cost the session's neighbours another.
 */
int
store_oldest_pending(struct store *st, int64_t *age_us, char *err,
                     size_t errlen)
{
    strbuf_reset(&st->sql);
    strbuf_adds(&st->sql, "SELECT GREATEST(");
    if (!st->plan.available_at) {
        add_oldest_by_id(st, "`status` = 'PENDING'");
    } else {
        add_oldest_by_id(st, "`status` = 'PENDING' AND `available_at` IS NULL");
        strbuf_adds(&st->sql, ", COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT "
                              "MIN(`available_at`) FROM ");
        strbuf_adds(&st->sql, st->table);
        strbuf_adds(&st->sql, " WHERE `status` = 'PENDING'), NOW(6)), -1)");
    }
    strbuf_adds(&st->sql, ", -1)");
    MYSQL_RES *res =
        store_run_select(st, "finding the oldest PENDING row of", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    *age_us = r && r[0] ? strtoll(r[0], NULL, 10) : -1;
    mysql_free_result(res);
    return 0;
}

/*
 * Since when the oldest hold: locked_until is when a row went DEAD
 * under hold (store_hold.c); a row that went DEAD otherwise (before hold
 * was configured) counts from its created_at.  Held rows are few and,
 * with sql/outbox.sql's `held`, read through its index alone.
 */
int
store_count_holds(struct store *st, uint64_t *aggregates, int64_t *oldest_us,
                  char *err, size_t errlen)
{
    const char *held = store_hold_cond(st);
    *aggregates = 0;
    *oldest_us = 0;
    if (held == NULL)
        return 0;
    store_sql_begin(st,
                    "SELECT COUNT(DISTINCT `aggregate_type`, `aggregate_id`), "
                    "TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(`locked_until`, "
                    "`created_at`)), NOW(6)) FROM ",
                    " WHERE ");
    strbuf_adds(&st->sql, held);
    MYSQL_RES *res =
        store_run_select(st, "counting held aggregates of", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    *aggregates = r && r[0] ? strtoull(r[0], NULL, 10) : 0;
    *oldest_us = r && r[1] ? strtoll(r[1], NULL, 10) : 0;
    if (*oldest_us < 0)
        *oldest_us = 0;
    mysql_free_result(res);
    return 0;
}
