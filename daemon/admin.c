/*
 * admin: outboxctl's statements on one outbox table.  Everything here
 * runs on the session store_connect opened (READ COMMITTED, UTC,
 * autocommit off) and ends its own transactions.  DEAD rows are never
 * touched by the relay, so the writes here cannot race a claim.
 */
#include "admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store.h"
#include "util.h"

/* dead retry --all: rows per transaction, so locks stay short. */
#define RETRY_BATCH ADMIN_RETRY_BATCH

/* The columns every retry resets; last_error stays (see admin.h). */
#define RETRY_SET                                                              \
    "SET `status` = 'PENDING', `retry_count` = 0, `next_retry_at` = NULL, "    \
    "`locked_by` = NULL, `locked_until` = NULL"

/* The server's "unknown column": a table without available_at. */
#define ERRNO_BAD_FIELD 1054

/* 'text', quoted and escaped for the session's character set. */
static void
sql_add_string(struct strbuf *s, MYSQL *db, const char *text)
{
    size_t n = strlen(text);
    strbuf_reserve(s, 2 * n + 2);
    s->p[s->len++] = '\'';
    s->len += mysql_real_escape_string(db, s->p + s->len, text, n);
    s->p[s->len++] = '\'';
    s->p[s->len] = '\0';
}

/* "<head>table<tail>": most statements here have that shape. */
static void
sql_table(struct strbuf *s, const char *head, const char *table,
          const char *tail)
{
    strbuf_reset(s);
    strbuf_adds(s, head);
    strbuf_adds(s, table);
    strbuf_adds(s, tail);
}

static int
db_error(MYSQL *db, const char *what, const char *table, char *err,
         size_t errlen)
{
    err_set(err, errlen, "%s on table %s: %s (error %u)", what, table,
            mysql_error(db), mysql_errno(db));
    /* Best effort: nothing of a failed transaction may stay open. */
    mysql_rollback(db);
    return -1;
}

static int
run(MYSQL *db, const struct strbuf *s, const char *what, const char *table,
    char *err, size_t errlen)
{
    if (mysql_real_query(db, s->p, s->len) != 0)
        return db_error(db, what, table, err, errlen);
    return 0;
}

static MYSQL_RES *
run_select(MYSQL *db, const struct strbuf *s, const char *what,
           const char *table, char *err, size_t errlen)
{
    if (run(db, s, what, table, err, errlen) < 0)
        return NULL;
    MYSQL_RES *res = mysql_store_result(db);
    if (res == NULL)
        db_error(db, what, table, err, errlen);
    return res;
}

/* Ends the read: a session left in a transaction holds a metadata lock. */
static int
commit(MYSQL *db, const char *what, const char *table, char *err, size_t errlen)
{
    if (mysql_commit(db) != 0)
        return db_error(db, what, table, err, errlen);
    return 0;
}

static uint64_t
affected(MYSQL *db)
{
    uint64_t n = (uint64_t)mysql_affected_rows(db);
    return n == UINT64_MAX ? 0 : n;
}

static char *
dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

/* ---- status ---- */

/*
 * Case-insensitive: under the seed's default collation 'pending' is
 * claimed like 'PENDING', so it must be counted with it.
 */
static void
add_status_count(struct admin_status *out, const char *name, uint64_t n)
{
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++)
        if (name != NULL && strcasecmp(name, outbox_status_name(s)) == 0) {
            out->rows[s] += n;
            return;
        }
    out->other += n;
}

static int
count_statuses(MYSQL *db, const char *table, struct admin_status *out,
               char *err, size_t errlen)
{
    struct strbuf s = {0};
    sql_table(&s, "SELECT `status`, COUNT(*) FROM ", table,
              " GROUP BY `status`");
    MYSQL_RES *res = run_select(db, &s, "counting rows", table, err, errlen);
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL)
        add_status_count(out, r[0], r[1] ? strtoull(r[1], NULL, 10) : 0);
    mysql_free_result(res);
    return 0;
}

/*
 * The next PENDING row in id order is the one the relay claims next: its
 * age is how far behind the relay is.  MIN(id) is one index probe on
 * (status, id) or (status, available_at, id); MIN(created_at) would read
 * every pending row.  With available_at, a delayed row is behind only
 * once due, by how long since (docs/contract.md section 5): -1 when
 * nothing claimable is pending.
 */
static void
oldest_pending_sql(struct strbuf *s, const char *table, bool delayed)
{
    strbuf_reset(s);
    if (!delayed) {
        sql_table(s,
                  "SELECT TIMESTAMPDIFF(MICROSECOND, `created_at`, NOW(6)) "
                  "FROM ",
                  table, " WHERE `id` = (SELECT MIN(`id`) FROM ");
        strbuf_adds(s, table);
        strbuf_adds(s, " WHERE `status` = 'PENDING')");
        return;
    }
    sql_table(s,
              "SELECT GREATEST(COALESCE((SELECT TIMESTAMPDIFF(MICROSECOND, "
              "`created_at`, NOW(6)) FROM ",
              table, " WHERE `id` = (SELECT MIN(`id`) FROM ");
    strbuf_adds(s, table);
    strbuf_adds(s, " WHERE `status` = 'PENDING' AND `available_at` IS NULL)), "
                   "-1), COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT "
                   "MIN(`available_at`) FROM ");
    strbuf_adds(s, table);
    strbuf_adds(s, " WHERE `status` = 'PENDING'), NOW(6)), -1))");
}

static int
oldest_pending(MYSQL *db, const char *table, struct admin_status *out,
               char *err, size_t errlen)
{
    struct strbuf s = {0};
    bool delayed = true;
    oldest_pending_sql(&s, table, delayed);
    const char *what = "finding the oldest PENDING row";
    MYSQL_RES *res = run_select(db, &s, what, table, err, errlen);
    if (res == NULL && mysql_errno(db) == ERRNO_BAD_FIELD) {
        delayed = false; /* a table without available_at */
        oldest_pending_sql(&s, table, delayed);
        res = run_select(db, &s, what, table, err, errlen);
    }
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    out->oldest_pending_us = r && r[0] ? strtoll(r[0], NULL, 10) : 0;
    out->pending = delayed ? out->oldest_pending_us >= 0 : r != NULL;
    if (out->oldest_pending_us < 0) /* a created_at in the future */
        out->oldest_pending_us = 0;
    mysql_free_result(res);
    return 0;
}

int
admin_status(MYSQL *db, const char *table, struct admin_status *out, char *err,
             size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (count_statuses(db, table, out, err, errlen) < 0 ||
        oldest_pending(db, table, out, err, errlen) < 0)
        return -1;
    return commit(db, "counting rows", table, err, errlen);
}

/* ---- dead list ---- */

static int
count_dead(MYSQL *db, const char *table, uint64_t *total, char *err,
           size_t errlen)
{
    struct strbuf s = {0};
    sql_table(&s, "SELECT COUNT(*) FROM ", table, " WHERE `status` = 'DEAD'");
    MYSQL_RES *res =
        run_select(db, &s, "counting DEAD rows", table, err, errlen);
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    *total = r && r[0] ? strtoull(r[0], NULL, 10) : 0;
    mysql_free_result(res);
    return 0;
}

static void
copy_dead_row(struct admin_dead_row *d, MYSQL_ROW r)
{
    d->id = r[0] ? strtoull(r[0], NULL, 10) : 0;
    d->event_id = dup_or_null(r[1]);
    d->aggregate_type = dup_or_null(r[2]);
    d->aggregate_id = dup_or_null(r[3]);
    d->event_type = dup_or_null(r[4]);
    d->retry_count = r[5] ? strtoul(r[5], NULL, 10) : 0;
    d->created_at = dup_or_null(r[6]);
    d->last_error = dup_or_null(r[7]);
    d->released = r[8] != NULL && strcmp(r[8], "1") == 0;
}

int
admin_dead_list(MYSQL *db, const char *table, unsigned limit,
                struct admin_dead_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (count_dead(db, table, &out->total, err, errlen) < 0)
        return -1;
    struct strbuf s = {0};
    sql_table(&s,
              "SELECT `id`, `event_id`, `aggregate_type`, `aggregate_id`, "
              "`event_type`, `retry_count`, `created_at`, `last_error`, "
              "`locked_by` <=> '" STORE_RELEASED "' FROM ",
              table, "");
    strbuf_addf(&s, " WHERE `status` = 'DEAD' ORDER BY `id` LIMIT %u", limit);
    MYSQL_RES *res =
        run_select(db, &s, "listing DEAD rows", table, err, errlen);
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    size_t n = (size_t)mysql_num_rows(res);
    out->rows = xcalloc(n ? n : 1, sizeof(*out->rows));
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL)
        copy_dead_row(&out->rows[out->n++], r);
    mysql_free_result(res);
    return commit(db, "listing DEAD rows", table, err, errlen);
}

void
admin_dead_list_free(struct admin_dead_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        struct admin_dead_row *d = &l->rows[i];
        free(d->event_id);
        free(d->aggregate_type);
        free(d->aggregate_id);
        free(d->event_type);
        free(d->created_at);
        free(d->last_error);
    }
    free(l->rows);
    memset(l, 0, sizeof(*l));
}

/* ---- dead retry ---- */

int
admin_dead_count(MYSQL *db, const char *table, uint64_t *total, char *err,
                 size_t errlen)
{
    if (count_dead(db, table, total, err, errlen) < 0)
        return -1;
    return commit(db, "counting DEAD rows", table, err, errlen);
}

/*
 * One short transaction: at most max rows (0 for RETRY_BATCH) matching
 * where, in id order, get set.  Called until it changes fewer than
 * asked, it walks them all, and the events of one aggregate change in
 * their order.
 */
static int
change_batch(MYSQL *db, const char *table, const char *set, const char *where,
             const char *what, unsigned max, uint64_t *changed, char *err,
             size_t errlen)
{
    struct strbuf s = {0};
    unsigned n = max != 0 && max < RETRY_BATCH ? max : RETRY_BATCH;
    sql_table(&s, "UPDATE ", table, " ");
    strbuf_addf(&s, "%s WHERE %s ORDER BY `id` LIMIT %u", set, where, n);
    *changed = 0;
    int rc = run(db, &s, what, table, err, errlen);
    strbuf_free(&s);
    uint64_t k = rc == 0 ? affected(db) : 0;
    if (rc == 0)
        rc = commit(db, what, table, err, errlen);
    if (rc == 0)
        *changed = k;
    return rc;
}

/*
 * One statement per event id: the affected rows say whether that id
 * matched, under the column's own collation, which a client-side compare
 * of the names could not match.
 */
static int
change_ids(MYSQL *db, const char *table, const char *set, const char *where,
           const char *what, const char *const *event_ids, size_t n,
           bool *found, uint64_t *changed, char *err, size_t errlen)
{
    struct strbuf s = {0};
    bool *hit = xcalloc(n ? n : 1, sizeof(*hit));
    uint64_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sql_table(&s, "UPDATE ", table, " ");
        strbuf_addf(&s, "%s WHERE %s AND `event_id` = ", set, where);
        sql_add_string(&s, db, event_ids[i]);
        rc = run(db, &s, what, table, err, errlen);
        uint64_t k = rc == 0 ? affected(db) : 0;
        hit[i] = k > 0;
        total += k;
    }
    if (rc == 0)
        rc = commit(db, what, table, err, errlen);
    /* Only a committed change counts: found[] adds up over outboxes. */
    for (size_t i = 0; i < n && rc == 0; i++)
        found[i] = found[i] || hit[i];
    *changed = rc == 0 ? total : 0;
    free(hit);
    strbuf_free(&s);
    return rc;
}

int
admin_dead_retry_batch(MYSQL *db, const char *table, unsigned max,
                       uint64_t *retried, char *err, size_t errlen)
{
    return change_batch(db, table, RETRY_SET, "`status` = 'DEAD'",
                        "retrying DEAD rows", max, retried, err, errlen);
}

int
admin_dead_retry_ids(MYSQL *db, const char *table, const char *const *event_ids,
                     size_t n, bool *found, uint64_t *retried, char *err,
                     size_t errlen)
{
    return change_ids(db, table, RETRY_SET, "`status` = 'DEAD'",
                      "retrying DEAD rows", event_ids, n, found, retried, err,
                      errlen);
}

/* ---- dead release ---- */

/* docs/design.md, The state machine: DEAD stays, last_error stays. */
#define RELEASE_SET                                                            \
    "SET `locked_by` = '" STORE_RELEASED "', `locked_until` = NOW(6)"

static int
count_where(MYSQL *db, const char *table, const char *where, const char *what,
            uint64_t *total, char *err, size_t errlen)
{
    struct strbuf s = {0};
    sql_table(&s, "SELECT COUNT(*) FROM ", table, " WHERE ");
    strbuf_adds(&s, where);
    MYSQL_RES *res = run_select(db, &s, what, table, err, errlen);
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    *total = r && r[0] ? strtoull(r[0], NULL, 10) : 0;
    mysql_free_result(res);
    return commit(db, what, table, err, errlen);
}

int
admin_held_count(MYSQL *db, const char *table, const char *held_cond,
                 uint64_t *total, char *err, size_t errlen)
{
    return count_where(db, table, held_cond, "counting held DEAD rows", total,
                       err, errlen);
}

int
admin_dead_release_batch(MYSQL *db, const char *table, const char *held_cond,
                         unsigned max, uint64_t *released, char *err,
                         size_t errlen)
{
    return change_batch(db, table, RELEASE_SET, held_cond,
                        "releasing DEAD rows", max, released, err, errlen);
}

int
admin_dead_release_ids(MYSQL *db, const char *table, const char *held_cond,
                       const char *const *event_ids, size_t n, bool *found,
                       uint64_t *released, char *err, size_t errlen)
{
    return change_ids(db, table, RELEASE_SET, held_cond, "releasing DEAD rows",
                      event_ids, n, found, released, err, errlen);
}

/* ---- purge ---- */

/*
 * The rows a purge now would delete, for its progress and --dry-run:
 * the same condition as store_purge_sent, counted on (status, id).
 */
int
admin_purge_count(MYSQL *db, const char *table, uint64_t older_than_ms,
                  uint64_t *total, char *err, size_t errlen)
{
    struct strbuf s = {0};
    sql_table(&s, "SELECT COUNT(*) FROM ", table, "");
    strbuf_addf(&s,
                " WHERE `status` = 'SENT' AND `sent_at` < NOW(6) - INTERVAL "
                "%" PRIu64 " MICROSECOND",
                older_than_ms * 1000);
    MYSQL_RES *res =
        run_select(db, &s, "counting SENT rows", table, err, errlen);
    strbuf_free(&s);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    *total = r && r[0] ? strtoull(r[0], NULL, 10) : 0;
    mysql_free_result(res);
    return commit(db, "counting SENT rows", table, err, errlen);
}
