/*
 * store_join: the read of a lean join (store_claim_more), one per event
 * in the steady state: its text, and its prepared form, which an outbox
 * that joins often keeps on its session so that the server parses the
 * statement once rather than once per event.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

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
    static const char *const forms[JOIN_FORMS] = {"range", "point", "free"};
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

/* The ids told since the lean claim, for the head-free joins: a doubt, a
 * lost id or more than fit, and the transaction's joins read the head of
 * the aggregate to its end. */
static void
note_unheld(struct store *st, const struct told_ids *ids)
{
    struct claim_scratch *c = &st->claim;
    if (c->proof == PROOF_NONE)
        return;
    if (ids->lost || ids->doubt || ids->n > TOLD_IDS - c->nunheld) {
        c->proof = PROOF_NONE;
        return;
    }
    for (size_t i = 0; i < ids->n; i++)
        c->unheld[c->nunheld++] = ids->id[i];
}

void
store_told_ids(struct store *st, const struct told_ids *ids)
{
    told_ids_add(&st->claim.told, ids->id, ids->n, !ids->lost);
    st->claim.tail_known = ids->tail_known;
    st->claim.tail = ids->tail;
    note_unheld(st, ids);
}

/* Where the head-free join may apply: order per aggregate that the head
 * column keeps, with no held DEAD rows (a finished row that still holds
 * its aggregate), rows found by id, and aggregates that the relay can
 * tell apart as the server does (compared as bytes). */
static bool
head_free_applies(const struct store *st)
{
    return st->ob->ordering == ORDERING_AGGREGATE &&
           st->plan.head_sql != NULL && st->ob->on_dead != ON_DEAD_HOLD &&
           st->plan.id_primary && st->plan.binary_aggregate;
}

/* Whether the transaction (first and its lean_next) holds row id. */
static bool
holds(const struct outbox_batch *first, uint64_t id)
{
    for (const struct outbox_batch *x = first; x != NULL; x = x->lean_next)
        for (size_t i = 0; i < x->n; i++)
            if (x->rows[i].id == id)
                return true;
    return false;
}

/*
 * Where the head-free join starts from (docs/design.md): the lean claim
 * holds a row of the last commit the binlog told.  The binlog may tell a
 * commit before the engine shows it to other reads; that row locked
 * proves its commit shown, and so every one before it, since commits are
 * shown in the binlog's order.  The proof's read then finds every row
 * they left unfinished; the binlog tells every commit after in commit
 * order.
 */
void
store_join_open(struct store *st, const struct outbox_batch *b)
{
    struct claim_scratch *c = &st->claim;
    c->nunheld = 0;
    c->proof = head_free_applies(st) && c->tail_known && holds(b, c->tail)
                   ? PROOF_DUE
                   : PROOF_NONE;
}

/*
 * The proof's read, at the first join that would leave the head out: the
 * table's unfinished rows are the transaction's and the one it is about
 * to lock.  Without locks of its own, as committed: a row committed since
 * counts too, and only denies the proof.  The ids themselves, at most one
 * more than may pass, along the status index: a COUNT over a derived
 * table built a temporary table on the server every time.  Made here
 * rather than at the claim, so that a transaction no event joins (every
 * event alone, at a few a second) pays nothing for it.
 */
static int
read_proof(struct store *st, const struct outbox_batch *first, uint64_t point,
           char *err, size_t errlen)
{
    size_t held = 0;
    for (const struct outbox_batch *x = first; x != NULL; x = x->lean_next)
        held += x->n;
    strbuf_reset(&st->sql);
    strbuf_addf(&st->sql,
                "SELECT `id` FROM %s WHERE `status` IN ('PENDING', 'RETRY', "
                "'PROCESSING') LIMIT %zu",
                st->table, held + 2);
    MYSQL_RES *res = store_run_select(st, "claim head-free check", err, errlen);
    if (res == NULL)
        return -1;
    st->claim.proof = mysql_num_rows(res) <= held + 1 ? PROOF_HELD : PROOF_NONE;
    for (MYSQL_ROW r;
         st->claim.proof == PROOF_HELD && (r = mysql_fetch_row(res)) != NULL;) {
        uint64_t id = strtoull(r[0], NULL, 10);
        if (id != point && !holds(first, id))
            st->claim.proof = PROOF_NONE;
    }
    mysql_free_result(res);
    return 0;
}

/* The told ids the transaction came to hold leave unheld. */
static void
prune_unheld(struct store *st, const struct outbox_batch *first)
{
    struct claim_scratch *c = &st->claim;
    size_t kept = 0;
    for (size_t i = 0; i < c->nunheld; i++)
        if (!holds(first, c->unheld[i]))
            c->unheld[kept++] = c->unheld[i];
    c->nunheld = kept;
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
    if (st->claim.lean_heads && form != JOIN_POINT_FREE)
        strbuf_adds(q, st->plan.head_sql);
    strbuf_addf(q, ", `c`.`created_at` >= NOW(6) - INTERVAL %d SECOND",
                STORE_LEAN_YOUNG_S);
    strbuf_addf(q, " FROM %s `c` FORCE INDEX (PRIMARY) WHERE %s", st->table,
                st->plan.claim_cond[SRC_PENDING]);
    if (form != JOIN_RANGE)
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

/*
 * The join's form.  Head-free when the proof holds and the one id told
 * that the transaction does not hold is the row it is about to lock:
 * every commit told before that row's is then one of its own rows (the
 * binlog's order is the commit order).
 */
int
store_join_pick(struct store *st, const struct outbox_batch *first,
                uint64_t after, char *err, size_t errlen)
{
    struct claim_scratch *c = &st->claim;
    c->join_point = told_point(st, after);
    c->told = (struct told_ids){0};
    prune_unheld(st, first);
    c->join_form = c->join_point != 0 ? JOIN_POINT : JOIN_RANGE;
    if (c->join_point == 0 || c->proof == PROOF_NONE || c->nunheld != 1 ||
        c->unheld[0] != c->join_point)
        return 0;
    if (c->proof == PROOF_DUE &&
        read_proof(st, first, c->join_point, err, errlen) < 0)
        return -1;
    if (c->proof == PROOF_HELD)
        c->join_form = JOIN_POINT_FREE;
    return 0;
}

/*
 * After a head-free join: the row it read leads its aggregate unless the
 * transaction holds another of the same aggregate, which it published
 * first and may yet fail: then the ordering check reads the counts and
 * drops it.  The row leaves unheld only once it is in the transaction's
 * batches (prune_unheld): one dropped (by the ordering, or as not young)
 * stays locked but unpublished, and a later event of its aggregate must
 * not pass it, so the joins after read the head again.
 */
void
store_join_read(struct store *st, const struct outbox_batch *first,
                const struct outbox_batch *b)
{
    struct claim_scratch *c = &st->claim;
    if (c->join_form != JOIN_POINT_FREE)
        return;
    for (size_t i = 0; i < b->n; i++)
        if (store_aggregate_alone(st, &b->rows[i], first))
            c->heads[c->nheads++] = b->rows[i].id;
}

int
store_join_sql(struct store *st, uint64_t after, size_t window, char *err,
               size_t errlen)
{
    uint64_t gen = dbsession_generation(st->conn.sess);
    enum join_form form = (enum join_form)st->claim.join_form;
    uint64_t point = st->claim.join_point;
    atomic_fetch_add_explicit(&st->joins[form], 1, memory_order_relaxed);
    if (join_prepares(st, form, gen) &&
        prepare_join(st, form, gen, err, errlen) < 0)
        return -1;
    strbuf_reset(&st->sql);
    if (join_prepared(st, form) && form != JOIN_RANGE) {
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
store_joins(struct store *st, uint64_t *joins, uint64_t *by_id,
            uint64_t *head_free)
{
    *head_free =
        atomic_load_explicit(&st->joins[JOIN_POINT_FREE], memory_order_relaxed);
    *by_id = *head_free +
             atomic_load_explicit(&st->joins[JOIN_POINT], memory_order_relaxed);
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
