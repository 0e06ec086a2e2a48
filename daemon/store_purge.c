/*
 * store_purge: retention (docs/contract.md section 8), deleting old SENT
 * rows by a walk of the primary key, one short transaction per step,
 * resumed where the last call stopped.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* One step of the walk: the rows read, the expired among them. */
struct purge_step {
    size_t seen, expired;
    uint64_t last_id;
    bool last_young; /* the last row read was created after the cutoff */
    bool capped;     /* stopped at the cap: the walk is not over */
};

/* Evaluated per statement: each one is exact at its own time. */
static void
sql_add_cutoff(struct strbuf *q, uint64_t older_than_ms)
{
    strbuf_addf(q, "NOW(6) - INTERVAL %" PRIu64 " MICROSECOND",
                older_than_ms * 1000);
}

/*
 * The next batch rows by primary key, read without locks.  The walk is
 * bounded by batch whatever the indexes: a DELETE ... WHERE status =
 * 'SENT' AND sent_at < ... LIMIT n reads every younger SENT row when
 * fewer than n are old, which is the whole retention window.
 */
static int
purge_scan(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_adds(q, "SELECT `id`, `status` = 'SENT' AND `sent_at` < ");
    sql_add_cutoff(q, older_than_ms);
    strbuf_adds(q, ", `created_at` >= ");
    sql_add_cutoff(q, older_than_ms);
    strbuf_addf(q, " FROM %s WHERE `id` > %" PRIu64 " ORDER BY `id` LIMIT %u",
                st->table, st->purge.from, batch);
    MYSQL_RES *res = store_run_select(st, "retention", err, errlen);
    if (res == NULL)
        return -1;
    st->purge.ids = store_grow(st->purge.ids, &st->purge.cap, batch,
                               sizeof(*st->purge.ids));
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        /* The rows after the cap are read again by the next step. */
        if (ps->expired == cap) {
            ps->capped = true;
            break;
        }
        ps->last_id = strtoull(r[0], NULL, 10);
        ps->last_young = r[2] != NULL && r[2][0] == '1';
        if (r[1] != NULL && r[1][0] == '1')
            st->purge.ids[ps->expired++] = ps->last_id;
        ps->seen++;
    }
    mysql_free_result(res);
    return 0;
}

/* By primary key, the condition checked again: locks exactly these rows,
 * none that a claim could want. */
static int
purge_delete(struct store *st, uint64_t older_than_ms, size_t n,
             uint64_t *deleted, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q, "DELETE FROM %s WHERE `id` IN (", st->table);
    for (size_t i = 0; i < n; i++)
        sql_add_id(q, st->purge.ids[i], i == 0);
    strbuf_adds(q, ") AND `status` = 'SENT' AND `sent_at` < ");
    sql_add_cutoff(q, older_than_ms);
    return store_run_update(st, "retention", deleted, err, errlen);
}

static int
purge_once(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, uint64_t *deleted, char *err, size_t errlen)
{
    memset(ps, 0, sizeof(*ps));
    *deleted = 0;
    if (purge_scan(st, older_than_ms, batch, cap, ps, err, errlen) < 0)
        return -1;
    if (ps->expired > 0 &&
        purge_delete(st, older_than_ms, ps->expired, deleted, err, errlen) < 0)
        return -1;
    /* Even a step that deleted nothing commits: it ends the read. */
    return store_commit(st, "retention", err, errlen);
}

/*
 * A relay user without the DELETE privilege is a choice, not a broken
 * table: the relay keeps running and only retention reports it.
 */
static void
purge_fail(struct store *st, char *err, size_t errlen)
{
    store_rollback(st);
    if (st->conn.last_errno != ERRNO_TABLE_ACCESS_DENIED ||
        store_db(st) == NULL)
        return;
    st->conn.ready = true;
    st->conn.schema_error = false;
    size_t len = err != NULL ? strlen(err) : errlen;
    if (len + 1 < errlen)
        err_set(err + len, errlen - len,
                "; grant DELETE on %s or set retention.sent to 0s", st->where);
}

static int
purge_step(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, uint64_t *deleted, char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        if (store_require_ready(st, "retention", err, errlen) < 0)
            return -1;
        st->conn.last_errno = 0;
        if (purge_once(st, older_than_ms, batch, cap, ps, deleted, err,
                       errlen) == 0)
            return 0;
        purge_fail(st, err, errlen);
        if (attempt == STORE_ATTEMPTS ||
            !store_errno_is_deadlock(st->conn.last_errno))
            return -1;
    }
}

/* One step of the walk and where the next one starts; res adds up. */
static int
purge_advance(struct store *st, uint64_t older_than_ms, unsigned batch,
              size_t cap, struct store_purge *res, char *err, size_t errlen)
{
    struct purge_step ps;
    uint64_t deleted;
    if (purge_step(st, older_than_ms, batch, cap, &ps, &deleted, err, errlen) <
        0)
        return -1;
    res->deleted += deleted;
    res->batches += deleted > 0;
    res->examined += ps.seen;
    /* Rows created after the cutoff were sent after it too; ids and
     * created_at rise together, so the rest is younger still.  What an
     * out-of-order created_at hides now, the next walk finds. */
    if (!ps.capped && (ps.seen < batch || ps.last_young)) {
        st->purge.from = 0;
        res->done = true;
    } else {
        st->purge.from = ps.last_id;
    }
    return 0;
}

int
store_purge_sent(struct store *st, uint64_t older_than_ms, unsigned batch,
                 uint64_t deadline_ms, struct store_purge *res, char *err,
                 size_t errlen)
{
    memset(res, 0, sizeof(*res));
    batch = batch ? batch : 1;
    while (!res->done) {
        if (purge_advance(st, older_than_ms, batch, batch, res, err, errlen) <
            0)
            return -1;
        if (!res->done && deadline_ms != 0 && clock_ms() >= deadline_ms)
            return 0;
    }
    return 0;
}

int
store_purge_sent_step(struct store *st, uint64_t older_than_ms, unsigned batch,
                      uint64_t max, struct store_purge *res, char *err,
                      size_t errlen)
{
    batch = batch ? batch : 1;
    size_t cap = max != 0 && max < batch ? (size_t)max : batch;
    return purge_advance(st, older_than_ms, batch, cap, res, err, errlen);
}
