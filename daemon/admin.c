/*
 * admin: outboxctl's statements on one outbox table, built and run
 * through the store's door (store.h) on the session store_connect opened
 * (READ COMMITTED, UTC, autocommit off); each ends its own transaction.  DEAD
 * rows are never touched by the relay, so the writes here cannot race a claim.
 */
#include "admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "util.h"

/* dead retry --all: rows per transaction, so locks stay short. */
#define RETRY_BATCH ADMIN_RETRY_BATCH

/* The columns every retry resets; last_error stays (see admin.h). */
#define RETRY_SET                                                              \
    "SET `status` = 'PENDING', `retry_count` = 0, `next_retry_at` = NULL, "    \
    "`locked_by` = NULL, `locked_until` = NULL"

/* A failed statement: nothing of its transaction may stay open. */
static int
failed(struct store *st)
{
    store_rollback(st);
    return -1;
}

/* Ends the read: a session left in a transaction holds a metadata lock. */
static int
commit(struct store *st, const char *what, char *err, size_t errlen)
{
    if (store_commit(st, what, err, errlen) != 0)
        return failed(st);
    return 0;
}

static char *
dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

/* The one number a COUNT(*) of the statement built returns. */
static int
select_count(struct store *st, const char *what, uint64_t *total, char *err,
             size_t errlen)
{
    MYSQL_RES *res = store_run_select(st, what, err, errlen);
    if (res == NULL)
        return failed(st);
    MYSQL_ROW r = mysql_fetch_row(res);
    *total = r && r[0] ? strtoull(r[0], NULL, 10) : 0;
    mysql_free_result(res);
    return 0;
}

/* ---- status ---- */

int
admin_status(struct store *st, struct admin_status *out, char *err,
             size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (store_count_statuses(st, true, out->rows, &out->other, err, errlen) <
            0 ||
        store_oldest_pending(st, &out->oldest_pending_us, err, errlen) < 0)
        return failed(st);
    out->pending = out->oldest_pending_us >= 0;
    if (!out->pending)
        out->oldest_pending_us = 0;
    return commit(st, "counting rows of", err, errlen);
}

/* ---- dead list ---- */

static int
count_dead(struct store *st, uint64_t *total, char *err, size_t errlen)
{
    store_sql_begin(st, "SELECT COUNT(*) FROM ", " WHERE `status` = 'DEAD'");
    return select_count(st, "counting DEAD rows of", total, err, errlen);
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
admin_dead_list(struct store *st, unsigned limit, struct admin_dead_list *out,
                char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (count_dead(st, &out->total, err, errlen) < 0)
        return -1;
    struct strbuf *q = store_sql_begin(
        st,
        "SELECT `id`, `event_id`, `aggregate_type`, `aggregate_id`, "
        "`event_type`, `retry_count`, `created_at`, `last_error`, "
        "`locked_by` <=> '" STORE_RELEASED "' FROM ",
        "");
    strbuf_addf(q, " WHERE `status` = 'DEAD' ORDER BY `id` LIMIT %u", limit);
    MYSQL_RES *res = store_run_select(st, "listing DEAD rows of", err, errlen);
    if (res == NULL)
        return failed(st);
    size_t n = (size_t)mysql_num_rows(res);
    out->rows = xcalloc(n ? n : 1, sizeof(*out->rows));
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL)
        copy_dead_row(&out->rows[out->n++], r);
    mysql_free_result(res);
    return commit(st, "listing DEAD rows of", err, errlen);
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
admin_dead_count(struct store *st, uint64_t *total, char *err, size_t errlen)
{
    if (count_dead(st, total, err, errlen) < 0)
        return -1;
    return commit(st, "counting DEAD rows of", err, errlen);
}

/*
 * One short transaction: at most max rows (0 for RETRY_BATCH) matching
 * where, in id order, get set.  Called until it changes fewer than
 * asked, it walks them all, and the events of one aggregate change in
 * their order.
 */
static int
change_batch(struct store *st, const char *set, const char *where,
             const char *what, unsigned max, uint64_t *changed, char *err,
             size_t errlen)
{
    unsigned n = max != 0 && max < RETRY_BATCH ? max : RETRY_BATCH;
    struct strbuf *q = store_sql_begin(st, "UPDATE ", " ");
    strbuf_addf(q, "%s WHERE %s ORDER BY `id` LIMIT %u", set, where, n);
    uint64_t k = 0;
    *changed = 0;
    if (store_run_update(st, what, &k, err, errlen) < 0)
        return failed(st);
    if (commit(st, what, err, errlen) < 0)
        return -1;
    *changed = k;
    return 0;
}

/* One UPDATE of the row event_id names, if where holds for it. */
static int
change_id(struct store *st, const char *set, const char *where,
          const char *what, const char *event_id, uint64_t *changed, char *err,
          size_t errlen)
{
    struct strbuf *q = store_sql_begin(st, "UPDATE ", " ");
    strbuf_addf(q, "%s WHERE %s AND `event_id` = ", set, where);
    store_sql_add_string(st, event_id);
    return store_run_update(st, what, changed, err, errlen);
}

/*
 * One statement per event id: the affected rows say whether that id
 * matched, under the column's own collation, which a client-side compare
 * of the names could not match.
 */
static int
change_ids(struct store *st, const char *set, const char *where,
           const char *what, const char *const *event_ids, size_t n,
           bool *found, uint64_t *changed, char *err, size_t errlen)
{
    bool *hit = xcalloc(n ? n : 1, sizeof(*hit));
    uint64_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t k = 0;
        rc = change_id(st, set, where, what, event_ids[i], &k, err, errlen);
        hit[i] = k > 0;
        total += k;
    }
    rc = rc == 0 ? commit(st, what, err, errlen) : failed(st);
    /* Only a committed change counts: found[] adds up over outboxes. */
    for (size_t i = 0; i < n && rc == 0; i++)
        found[i] = found[i] || hit[i];
    *changed = rc == 0 ? total : 0;
    free(hit);
    return rc;
}

int
admin_dead_retry_batch(struct store *st, unsigned max, uint64_t *retried,
                       char *err, size_t errlen)
{
    return change_batch(st, RETRY_SET, "`status` = 'DEAD'",
                        "retrying DEAD rows of", max, retried, err, errlen);
}

int
admin_dead_retry_ids(struct store *st, const char *const *event_ids, size_t n,
                     bool *found, uint64_t *retried, char *err, size_t errlen)
{
    return change_ids(st, RETRY_SET, "`status` = 'DEAD'",
                      "retrying DEAD rows of", event_ids, n, found, retried,
                      err, errlen);
}

/* ---- dead release ---- */

/* docs/design.md, The state machine: DEAD stays, last_error stays. */
#define RELEASE_SET                                                            \
    "SET `locked_by` = '" STORE_RELEASED "', `locked_until` = NOW(6)"

int
admin_held_count(struct store *st, const char *held_cond, uint64_t *total,
                 char *err, size_t errlen)
{
    const char *what = "counting held DEAD rows of";
    struct strbuf *q = store_sql_begin(st, "SELECT COUNT(*) FROM ", " WHERE ");
    strbuf_adds(q, held_cond);
    if (select_count(st, what, total, err, errlen) < 0)
        return -1;
    return commit(st, what, err, errlen);
}

int
admin_dead_release_batch(struct store *st, const char *held_cond, unsigned max,
                         uint64_t *released, char *err, size_t errlen)
{
    return change_batch(st, RELEASE_SET, held_cond, "releasing DEAD rows of",
                        max, released, err, errlen);
}

int
admin_dead_release_ids(struct store *st, const char *held_cond,
                       const char *const *event_ids, size_t n, bool *found,
                       uint64_t *released, char *err, size_t errlen)
{
    return change_ids(st, RELEASE_SET, held_cond, "releasing DEAD rows of",
                      event_ids, n, found, released, err, errlen);
}

/* ---- purge ---- */

/*
 * The rows a purge now would delete, for its progress and --dry-run:
 * the same condition as store_purge_sent, counted on (status, id).
 */
int
admin_purge_count(struct store *st, uint64_t older_than_ms, uint64_t *total,
                  char *err, size_t errlen)
{
    const char *what = "counting SENT rows of";
    struct strbuf *q = store_sql_begin(st, "SELECT COUNT(*) FROM ", "");
    strbuf_addf(q,
                " WHERE `status` = 'SENT' AND `sent_at` < NOW(6) - INTERVAL "
                "%" PRIu64 " MICROSECOND",
                older_than_ms * 1000);
    if (select_count(st, what, total, err, errlen) < 0)
        return -1;
    return commit(st, what, err, errlen);
}
