/*
 * store_join: the read of a lean join (store_claim_more), one per event
 * in the steady state: its text, and its prepared form, which an outbox
 * that joins often keeps on its session so that the server parses the
 * statement once rather than once per event.
 */
#include <inttypes.h>
#include <stdio.h>

#include "store_int.h"

/* Joins sent as text in one session before the read is prepared: a
 * prepared statement holds server memory for the session's life, which
 * a thousand tenants that rarely join should not each cost it. */
#define JOIN_PREPARE_AFTER 8

static _Atomic unsigned join_names;

void
store_join_init(struct store *st)
{
    unsigned n =
        atomic_fetch_add_explicit(&join_names, 1, memory_order_relaxed);
    static const char *const forms[JOIN_FORMS] = {"range", "point"};
    for (int f = 0; f < JOIN_FORMS; f++)
        snprintf(st->join.form[f].name, sizeof(st->join.form[f].name),
                 "outboxd_join_%s_%u", forms[f], n + 1);
}

void
store_join_plan_changed(struct store *st)
{
    for (int f = 0; f < JOIN_FORMS; f++)
        st->join.form[f].prepared_gen = 0;
}

void
store_told_ids(struct store *st, const struct told_ids *ids)
{
    told_ids_add(&st->claim.told, ids->id, ids->n, !ids->lost);
}

/*
 * The join's text, its values given as "?" to prepare it or as the
 * values themselves: the range past after, at most limit rows, or the
 * row point (JOIN_POINT) if it lies past after.  It reads past the
 * transaction's last row: the rows below it that it does not hold are a
 * late commit's (a producer that took a lower id committed later), left
 * to the next claim, which the pacer makes at once when the rows found
 * fall short of the commits told; rows of aggregates whose earlier event
 * it holds, which wait for its commit anyway; or rows another relay
 * holds.  The filter past aggregates held back by a RETRY or a delayed
 * row is left out: those committed meanwhile are few, and the ordering
 * check drops them (the head column says they are not first), where the
 * filter doubled the read's cost; on_dead: hold's part stays, since a
 * held DEAD row is not unfinished and the head column alone would pass
 * the rows behind it.  No looks for expired leases or due delayed rows:
 * the claim that opens the next transaction makes them.  Its rows are
 * the few committed since the last one, so it walks the primary key from
 * there, in id order whatever the table's indexes (LIMIT bounds its
 * locks): a read through the status index locks each row twice, its
 * entry and the row, and cost the join about a fifth more.  The row the
 * binlog told of is one step down the primary key, not a walk: a fifth
 * less again for the read on an idle server.
 */
static void
add_join_text(const struct store *st, struct strbuf *q, enum join_form form,
              const char *point, const char *after, const char *limit)
{
    bool ordering = st->ob->ordering == ORDERING_AGGREGATE;
    strbuf_adds(q, st->plan.select_list);
    if (st->claim.lean_heads)
        strbuf_adds(q, st->plan.head_sql);
    strbuf_addf(q, ", `c`.`created_at` >= NOW(6) - INTERVAL %d SECOND",
                STORE_LEAN_YOUNG_S);
    strbuf_addf(q, " FROM %s `c` FORCE INDEX (PRIMARY) WHERE %s", st->table,
                st->plan.claim_cond[SRC_PENDING]);
    if (form == JOIN_POINT)
        strbuf_addf(q, " AND `c`.`id` = %s AND `c`.`id` > %s%s", point, after,
                    ordering ? st->plan.hold_sql : "");
    else
        strbuf_addf(q, " AND `c`.`id` > %s%s ORDER BY `c`.`id` LIMIT %s", after,
                    ordering ? st->plan.hold_sql : "", limit);
    strbuf_adds(q, " FOR UPDATE SKIP LOCKED");
}

/* Whether the join's form is prepared on the session as it stands. */
static bool
join_prepared(const struct store *st, enum join_form form)
{
    uint64_t gen = st->join.form[form].prepared_gen;
    return gen != 0 && gen == dbsession_generation(st->conn.sess);
}

/*
 * PREPARE on the open session (within the lean transaction: it neither
 * commits nor ends it).  A server that refuses (max_prepared_stmt_count
 * reached, say) gets the text for the rest of the session; only a
 * failure that ends the session or concerns the table fails the join.
 */
static int
prepare_join(struct store *st, enum join_form form, uint64_t gen, char *err,
             size_t errlen)
{
    struct strbuf text = {0};
    strbuf_reset(&text);
    add_join_text(st, &text, form, "?", "?", "?");
    strbuf_reset(&st->sql);
    strbuf_addf(&st->sql, "PREPARE %s FROM ", st->join.form[form].name);
    sql_add_string(st, text.p);
    strbuf_free(&text);
    if (store_run_query(st, st->sql.p, st->sql.len, "claim", err, errlen) ==
        0) {
        st->join.form[form].prepared_gen = gen;
        return 0;
    }
    if (store_db(st) == NULL || !st->conn.ready)
        return -1;
    st->join.form[form].refused_gen = gen;
    st->conn.last_errno = 0;
    return 0;
}

/* Whether this join prepares first: often enough joined, not refused. */
static bool
join_prepares(struct store *st, enum join_form form, uint64_t gen)
{
    struct join_form_prep *f = &st->join.form[form];
    if (f->texts_gen != gen) {
        f->texts_gen = gen;
        f->texts = 0;
    }
    if (f->refused_gen == gen || f->texts < JOIN_PREPARE_AFTER)
        return false;
    return !join_prepared(st, form);
}

/*
 * The one row the binlog told of since the last read, past after, where
 * the primary key is led by id: 0 if there is none such (none told, more
 * than one, some unknown), and the range is read instead.
 */
static uint64_t
told_point(const struct store *st, uint64_t after)
{
    const struct told_ids *t = &st->claim.told;
    if (!st->plan.id_primary || t->lost)
        return 0;
    uint64_t point = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->id[i] <= after)
            continue; /* held already: read by this transaction */
        if (point != 0)
            return 0;
        point = t->id[i];
    }
    return point;
}

int
store_join_sql(struct store *st, uint64_t after, size_t window, char *err,
               size_t errlen)
{
    uint64_t gen = dbsession_generation(st->conn.sess);
    uint64_t point = told_point(st, after);
    enum join_form form = point != 0 ? JOIN_POINT : JOIN_RANGE;
    st->claim.told = (struct told_ids){0};
    atomic_fetch_add_explicit(&st->joins[form], 1, memory_order_relaxed);
    if (join_prepares(st, form, gen) &&
        prepare_join(st, form, gen, err, errlen) < 0)
        return -1;
    strbuf_reset(&st->sql);
    if (join_prepared(st, form) && form == JOIN_POINT) {
        strbuf_addf(&st->sql, "EXECUTE %s USING %" PRIu64 ", %" PRIu64,
                    st->join.form[form].name, point, after);
        return 0;
    }
    if (join_prepared(st, form)) {
        strbuf_addf(&st->sql, "EXECUTE %s USING %" PRIu64 ", %zu",
                    st->join.form[form].name, after, window);
        return 0;
    }
    char p[24], a[24], l[24];
    snprintf(p, sizeof(p), "%" PRIu64, point);
    snprintf(a, sizeof(a), "%" PRIu64, after);
    snprintf(l, sizeof(l), "%zu", window);
    add_join_text(st, &st->sql, form, p, a, l);
    st->join.form[form].texts++;
    return 0;
}

void
store_joins(struct store *st, uint64_t *joins, uint64_t *by_id)
{
    *by_id = atomic_load_explicit(&st->joins[JOIN_POINT], memory_order_relaxed);
    *joins = *by_id +
             atomic_load_explicit(&st->joins[JOIN_RANGE], memory_order_relaxed);
}

void
store_join_forget(struct store *st)
{
    if (store_db(st) == NULL)
        return;
    for (int f = 0; f < JOIN_FORMS; f++) {
        if (!join_prepared(st, f))
            continue;
        char sql[64];
        int n = snprintf(sql, sizeof(sql), "DEALLOCATE PREPARE %s",
                         st->join.form[f].name);
        (void)dbsession_query(st->conn.sess, sql, (size_t)n);
        st->join.form[f].prepared_gen = 0;
    }
}
