/*
 * store_finalize: recording a batch's outcomes (SENT or deleted, RETRY
 * with backoff, DEAD, released), one statement per outcome and error,
 * each fenced by the claim token; store_mark_sent does the same early.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Length of the valid UTF-8 sequence at s (n > 0 bytes left), 0 if
 * invalid. */
size_t
store_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return len;
}

/*
 * A strict sql_mode would otherwise fail the whole finalize on one byte
 * that last_error cannot store.
 */
const char *
store_clean_text(struct strbuf *out, const char *text, unsigned max_chars,
                 enum text_charset charset)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), max = (size_t)max_chars * 4, i = 0;
    strbuf_reset(out);
    strbuf_reserve(out, n < max ? n : max);
    for (unsigned chars = 0; i < n && chars < max_chars; chars++) {
        size_t len = store_utf8_len(s + i, n - i);
        bool fits = len == 1 || (len > 1 && charset != TEXT_ASCII &&
                                 (len < 4 || charset == TEXT_UTF8MB4));
        if (fits)
            strbuf_add(out, text + i, len);
        else
            strbuf_add(out, "?", 1);
        i += len ? len : 1;
    }
    return out->p;
}

enum fin_kind
store_classify(const struct outbox_row *row, unsigned max_retries,
               const char **error)
{
    *error = NULL;
    switch (row->state) {
    case ROW_ACKED:
        return FIN_SENT;
    case ROW_FAILED:
    case ROW_REJECTED:
        *error = row->error ? row->error : "failed (no reason given)";
        if (row->expired)
            return FIN_EXPIRED;
        return row->dead ? FIN_DEAD : FIN_RETRY;
    case ROW_PUBLISHED:
        /* Outcome unknown: it may have landed; at-least-once retries it. */
        *error = "no publisher confirm received";
        return row->retry_count + 1 > max_retries ? FIN_DEAD : FIN_RETRY;
    default: /* CLAIMED or RELEASED: never attempted */
        return FIN_RELEASE;
    }
}

/* Error text as last_error can store it. */
static const char *
clean_error(struct store *st, const char *text)
{
    return store_clean_text(&st->fin.text, text, st->plan.error_chars,
                            st->plan.error_charset);
}

static int
item_cmp(const void *a, const void *b)
{
    const struct fin_item *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    int c = store_strcmp_null(x->error, y->error);
    return c != 0 ? c : (x->id < y->id ? -1 : x->id > y->id);
}

static bool
same_group(const struct fin_item *x, const struct fin_item *y)
{
    return x->kind == y->kind && store_strcmp_null(x->error, y->error) == 0;
}

/* The statement's head, up to "WHERE `id` IN (". */
static void
add_outcome_head(struct store *st, const struct fin_item *it)
{
    struct strbuf *q = &st->sql;
    const struct outbox_config *ob = st->ob;
    if (it->kind == FIN_SENT && ob->on_sent == ON_SENT_DELETE) {
        strbuf_addf(q, "DELETE FROM %s WHERE `id` IN (", st->table);
        return;
    }
    strbuf_addf(q, "UPDATE %s SET ", st->table);
    switch (it->kind) {
    case FIN_SENT:
        strbuf_adds(q, "`status` = 'SENT', `sent_at` = NOW(6), "
                       "`last_error` = NULL");
        break;
    case FIN_RETRY:
        /* Doubling per attempt, capped, with jitter in [half, full] so
         * that relays do not retry in step; next_retry_at is assigned
         * before retry_count changes (see mark_claimed). */
        strbuf_addf(q,
                    "`status` = 'RETRY', `next_retry_at` = NOW(6) + INTERVAL "
                    "FLOOR(LEAST(%" PRIu64
                    " * POW(2, LEAST(`retry_count`, 40)), "
                    "%" PRIu64 ") * (0.5 + RAND() * 0.5)) MICROSECOND, "
                    "`last_error` = ",
                    ob->backoff_initial_ms * 1000, ob->backoff_max_ms * 1000);
        sql_add_string(st, clean_error(st, it->error));
        strbuf_adds(q, ", `retry_count` = `retry_count` + 1");
        break;
    case FIN_DEAD:
        strbuf_adds(q, "`status` = 'DEAD', `next_retry_at` = NULL, "
                       "`last_error` = ");
        sql_add_string(st, clean_error(st, it->error));
        strbuf_adds(q, ", `retry_count` = `retry_count` + 1");
        break;
    case FIN_EXPIRED:
        /* Never published: no attempt counted (docs/contract.md
         * section 6). */
        strbuf_adds(q, "`status` = 'DEAD', `next_retry_at` = NULL, "
                       "`last_error` = ");
        sql_add_string(st, clean_error(st, it->error));
        break;
    case FIN_RELEASE:
        /* No attempt counted; a row that has failed before goes back to
         * RETRY, due now. */
        strbuf_adds(q, "`next_retry_at` = IF(`retry_count` > 0, NOW(6), NULL), "
                       "`status` = IF(`retry_count` > 0, 'RETRY', 'PENDING')");
        break;
    }
    /* With hold, a DEAD row's locked_until says since when it holds. */
    strbuf_addf(q, ", `locked_by` = %s, `locked_until` = %s WHERE `id` IN (",
                it->kind == FIN_EXPIRED ? store_expired_locked_by(st) : "NULL",
                it->kind == FIN_DEAD ? store_dead_locked_until(st) : "NULL");
}

/* The statement for n items of one outcome, up to its fence. */
static void
add_outcome(struct store *st, const struct fin_item *it, size_t n)
{
    strbuf_reset(&st->sql);
    add_outcome_head(st, it);
    for (size_t i = 0; i < n; i++)
        sql_add_id(&st->sql, it[i].id, i == 0);
}

/* One statement for a run of items with the same outcome and error. */
static int
finalize_group(struct store *st, const char *token, const struct fin_item *it,
               size_t n, size_t *lost, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    add_outcome(st, it, n);
    /* The fence: only rows still under this claim's lease. */
    strbuf_adds(q, ") AND `status` = 'PROCESSING' AND `locked_by` = ");
    sql_add_string(st, token);
    uint64_t affected;
    if (store_run_update(st, "finalize", &affected, err, errlen) < 0)
        return -1;
    *lost += affected < n ? n - (size_t)affected : 0;
    return 0;
}

/*
 * A lean batch's run of outcomes: the rows are still locked by the
 * claim's transaction, which is the fence, and still PENDING; every one
 * of them must change, or the batch is not this transaction's any more.
 */
static int
finalize_lean_group(struct store *st, const struct fin_item *it, size_t n,
                    char *err, size_t errlen)
{
    add_outcome(st, it, n);
    strbuf_adds(&st->sql, ") AND `status` = 'PENDING'");
    uint64_t affected;
    if (store_run_update(st, "finalize", &affected, err, errlen) < 0)
        return -1;
    if (affected != n) {
        err_set(err, errlen,
                "finalize %s: recorded %" PRIu64 " of %zu locked rows",
                st->where, affected, n);
        st->conn.last_errno = 0;
        return -1;
    }
    return 0;
}

/*
 * Ends a lean claim's transaction: its outcomes (a row never attempted
 * needs no statement: it is PENDING already) and one commit.  No second
 * attempt: a deadlock or a lost session rolled the whole transaction
 * back, the rows are PENDING and unlocked again, and the caller must
 * not record them elsewhere.
 */
static int
finalize_lean(struct store *st, size_t n, char *err, size_t errlen)
{
    st->conn.last_errno = 0;
    if (store_require_session(st, "finalize", err, errlen) < 0)
        return -1;
    if (dbsession_generation(st->conn.sess) != st->claim.lean_gen) {
        err_set(err, errlen, "finalize %s: the claim's session is gone",
                st->where);
        return -1;
    }
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1;
             j < n && same_group(&st->fin.items[i], &st->fin.items[j]); j++)
            ;
        if (finalize_lean_group(st, &st->fin.items[i], j - i, err, errlen) <
            0) {
            store_rollback(st);
            return -1;
        }
    }
    if (store_commit(st, "finalize", err, errlen) < 0) {
        store_rollback(st);
        return -1;
    }
    return 0;
}

static int
finalize_once(struct store *st, struct outbox_batch *b, size_t n, size_t *lost,
              char *err, size_t errlen)
{
    *lost = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1;
             j < n && same_group(&st->fin.items[i], &st->fin.items[j]); j++)
            ;
        if (finalize_group(st, b->token, &st->fin.items[i], j - i, lost, err,
                           errlen) < 0)
            return -1;
    }
    return store_commit(st, "finalize", err, errlen);
}

/* Records the n outcomes in st->fin.items, retried on a deadlock. */
static int
finalize_items(struct store *st, struct outbox_batch *b, size_t n, size_t *lost,
               char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        if (store_require_session(st, "finalize", err, errlen) < 0)
            return -1;
        st->conn.last_errno = 0;
        if (finalize_once(st, b, n, lost, err, errlen) == 0)
            return 0;
        store_rollback(st);
        *lost = 0;
        if (attempt == STORE_ATTEMPTS ||
            !store_errno_is_deadlock(st->conn.last_errno))
            return -1;
    }
}

/* The outcomes of b's rows to record, after the first n items. */
static size_t
fin_items_of(struct store *st, const struct outbox_batch *b, size_t n)
{
    st->fin.items = store_grow(st->fin.items, &st->fin.items_cap, n + b->n,
                               sizeof(*st->fin.items));
    for (size_t i = 0; i < b->n; i++) {
        if (b->rows[i].recorded)
            continue; /* store_mark_sent did it */
        st->fin.items[n].kind = store_classify(&b->rows[i], st->ob->max_retries,
                                               &st->fin.items[n].error);
        if (st->fin.items[n].kind == FIN_RETRY)
            st->claim.held_possible = true; /* its aggregate waits */
        if (b->lean && st->fin.items[n].kind == FIN_RELEASE)
            continue; /* PENDING, and its lock goes with the commit */
        st->fin.items[n++].id = b->rows[i].id;
    }
    return n;
}

int
store_finalize_batch(struct store *st, struct outbox_batch *b, size_t *lost,
                     char *err, size_t errlen)
{
    *lost = 0;
    size_t n = 0;
    for (const struct outbox_batch *x = b; x != NULL; x = x->lean_next)
        n = fin_items_of(st, x, n);
    if (n > 0)
        qsort(st->fin.items, n, sizeof(*st->fin.items), item_cmp);
    if (b->lean)
        return finalize_lean(st, n, err, errlen);
    if (n == 0)
        return 0;
    return finalize_items(st, b, n, lost, err, errlen);
}

int
store_mark_sent(struct store *st, struct outbox_batch *b,
                struct outbox_row **rows, size_t n, size_t *lost, char *err,
                size_t errlen)
{
    *lost = 0;
    if (n == 0)
        return 0;
    if (b->lean) {
        err_set(err, errlen, "mark sent %s: a lean batch is one wave",
                st->where);
        return -1;
    }
    st->fin.items = store_grow(st->fin.items, &st->fin.items_cap, n,
                               sizeof(*st->fin.items));
    for (size_t i = 0; i < n; i++)
        st->fin.items[i] =
            (struct fin_item){.kind = FIN_SENT, .id = rows[i]->id};
    if (finalize_items(st, b, n, lost, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        rows[i]->recorded = true;
    return 0;
}
