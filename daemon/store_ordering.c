/*
 * store_ordering: with ordering: aggregate, the claim keeps a candidate
 * only when every unfinished earlier event of its aggregate is in the
 * batch (docs/contract.md section 1.3).  Counts come from one range read,
 * matched byte for byte, or from the exact per-candidate count.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "store_int.h"

static int
row_cmp_aggregate(const void *a, const void *b)
{
    const struct outbox_row *x = *(struct outbox_row *const *)a;
    const struct outbox_row *y = *(struct outbox_row *const *)b;
    int c = store_strcmp_null(x->aggregate_type, y->aggregate_type);
    if (c == 0)
        c = store_strcmp_null(x->aggregate_id, y->aggregate_id);
    return c != 0 ? c : store_row_cmp_id(x, y);
}

static bool
same_aggregate(const struct outbox_row *x, const struct outbox_row *y)
{
    return store_strcmp_null(x->aggregate_type, y->aggregate_type) == 0 &&
           store_strcmp_null(x->aggregate_id, y->aggregate_id) == 0;
}

/*
 * The exact count, one correlated subquery per candidate: the server
 * matches aggregates by the column's collation.  It reads every index
 * entry of each candidate's aggregate, SENT history included, so it is
 * only the fallback for what the fast path below cannot judge.
 */
static int
load_earlier_counts_exact(struct store *st, struct outbox_batch *b, char *err,
                          size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_adds(q, st->plan.count_sql);
    for (size_t i = 0; i < b->n; i++) {
        sql_add_id(q, b->rows[i].id, i == 0);
        b->rows[i].earlier_unfinished = UINT_MAX; /* unanswered: dropped */
    }
    strbuf_adds(q, ")");
    MYSQL_RES *res = store_run_select(st, "claim ordering check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        struct outbox_row *row = store_find_row(b, strtoull(r[0], NULL, 10));
        if (row != NULL && r[1] != NULL)
            row->earlier_unfinished = (unsigned)strtoul(r[1], NULL, 10);
    }
    mysql_free_result(res);
    return 0;
}

/* Splits byagg into aggregates; false when one of them has a NULL part. */
static bool
group_candidates(struct store *st, size_t n)
{
    st->claim.groups = store_grow(st->claim.groups, &st->claim.groups_cap, n,
                                  sizeof(*st->claim.groups));
    st->claim.ngroups = 0;
    for (size_t i = 0; i < n; i++) {
        const struct outbox_row *row = st->claim.byagg[i];
        if (row->aggregate_type == NULL || row->aggregate_id == NULL)
            return false;
        if (i == 0 || !same_aggregate(st->claim.byagg[i - 1], row))
            st->claim.groups[st->claim.ngroups++] = i;
    }
    return true;
}

static bool
ends_in_space(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 0;
    return len > 0 && s[len - 1] == ' ';
}

/* Whether the server surely sees row's aggregate apart from that of
 * every row of the batches from first on (its lean_next): compared as
 * bytes (a _bin collation), no value ending in a space (which the
 * collation's padding ignores). */
bool
store_aggregate_alone(const struct store *st, const struct outbox_row *row,
                      const struct outbox_batch *first)
{
    if (!st->plan.binary_aggregate || ends_in_space(row->aggregate_type) ||
        ends_in_space(row->aggregate_id))
        return false;
    for (const struct outbox_batch *x = first; x != NULL; x = x->lean_next)
        for (size_t i = 0; i < x->n; i++) {
            const struct outbox_row *held = &x->rows[i];
            if (same_aggregate(held, row) ||
                ends_in_space(held->aggregate_type) ||
                ends_in_space(held->aggregate_id))
                return false;
        }
    return true;
}

/*
 * Whether the server may see two of the candidates' aggregates, apart
 * byte for byte, as one: under a _bin collation only when a value ends
 * in a space.
 */
static bool
aliases_possible(const struct store *st)
{
    if (!st->plan.binary_aggregate)
        return true;
    for (size_t g = 0; g < st->claim.ngroups; g++) {
        const struct outbox_row *row = st->claim.byagg[st->claim.groups[g]];
        if (ends_in_space(row->aggregate_type) ||
            ends_in_space(row->aggregate_id))
            return true;
    }
    return false;
}

/*
 * One statement: how many distinct aggregates the server sees among the
 * candidates (by the collation; left out when aliases_possible says it
 * cannot differ), then every unfinished row of those aggregates below
 * the highest candidate, read by range on idx_outbox_aggregate.
 * Committed state, no locks: see store_ordering_filter.
 */
static void
build_earlier_sql(struct store *st, const struct outbox_batch *b)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    if (aliases_possible(st)) {
        strbuf_addf(q,
                    "SELECT 0, NULL, NULL, COUNT(DISTINCT `aggregate_type`, "
                    "`aggregate_id`) FROM %s WHERE `id` IN (",
                    st->table);
        for (size_t i = 0; i < b->n; i++)
            sql_add_id(q, b->rows[i].id, i == 0);
        strbuf_adds(q, ") UNION ALL ");
    }
    strbuf_addf(q,
                "SELECT 1, `aggregate_type`, `aggregate_id`, `id` "
                "FROM %s WHERE (`aggregate_type`, `aggregate_id`) IN (",
                st->table);
    for (size_t g = 0; g < st->claim.ngroups; g++) {
        const struct outbox_row *row = st->claim.byagg[st->claim.groups[g]];
        strbuf_adds(q, g == 0 ? "(" : ",(");
        sql_add_string(st, row->aggregate_type);
        strbuf_adds(q, ",");
        sql_add_string(st, row->aggregate_id);
        strbuf_adds(q, ")");
    }
    strbuf_addf(q, ") AND %s AND `id` < %" PRIu64, store_unfinished_cond(st),
                b->rows[b->n - 1].id);
    store_hold_add_earlier(st, b);
}

/* The candidates' aggregate that is byte-for-byte (type, id); or -1. */
static ssize_t
find_group(const struct store *st, const char *type, const char *id)
{
    size_t lo = 0, hi = st->claim.ngroups;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct outbox_row *row = st->claim.byagg[st->claim.groups[mid]];
        int c = strcmp(row->aggregate_type, type);
        if (c == 0)
            c = strcmp(row->aggregate_id, id);
        if (c == 0)
            return (ssize_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/*
 * Collects the unfinished rows by aggregate.  Returns 1 when the server
 * matched aggregates that bytes tell apart ('a' and 'A' under a _ci
 * collation, trailing spaces under PAD SPACE): the exact count decides.
 */
static int
read_earlier(struct store *st, MYSQL_RES *res, size_t *n)
{
    MYSQL_ROW r;
    int rc = 0;
    *n = 0;
    while (rc == 0 && (r = mysql_fetch_row(res)) != NULL) {
        if (r[0][0] == '0') {
            if (strtoull(r[3], NULL, 10) != st->claim.ngroups)
                rc = 1;
            continue;
        }
        ssize_t g = find_group(st, r[1], r[2]);
        if (g < 0) {
            rc = 1;
            continue;
        }
        st->claim.earlier =
            store_grow(st->claim.earlier, &st->claim.earlier_cap, *n + 1,
                       sizeof(*st->claim.earlier));
        st->claim.earlier[(*n)++] =
            (struct earlier){(size_t)g, strtoull(r[3], NULL, 10)};
    }
    return rc;
}

static int
earlier_cmp(const void *a, const void *b)
{
    const struct earlier *x = a, *y = b;
    if (x->g != y->g)
        return x->g < y->g ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Each candidate's count: the unfinished rows of its aggregate below it. */
static void
count_earlier(struct store *st, size_t nrows, size_t nearlier)
{
    if (nearlier > 1) /* qsort may not be given NULL, even for none */
        qsort(st->claim.earlier, nearlier, sizeof(*st->claim.earlier),
              earlier_cmp);
    size_t e = 0;
    for (size_t g = 0; g < st->claim.ngroups; g++) {
        size_t end =
            g + 1 < st->claim.ngroups ? st->claim.groups[g + 1] : nrows;
        while (e < nearlier && st->claim.earlier[e].g < g)
            e++;
        size_t first = e;
        for (size_t i = st->claim.groups[g]; i < end; i++) {
            struct outbox_row *row = st->claim.byagg[i];
            while (e < nearlier && st->claim.earlier[e].g == g &&
                   st->claim.earlier[e].id < row->id)
                e++;
            row->earlier_unfinished = (unsigned)(e - first);
        }
    }
}

/*
 * Counts, for each candidate, the unfinished events of its aggregate
 * before it.  Fast path: one range read of the unfinished rows of the
 * candidates' aggregates, matched here byte for byte; the exact query
 * when a NULL aggregate or a collation makes bytes a poor judge.
 */
static int
load_earlier_counts(struct store *st, struct outbox_batch *b, char *err,
                    size_t errlen)
{
    if (!group_candidates(st, b->n))
        return load_earlier_counts_exact(st, b, err, errlen);
    build_earlier_sql(st, b);
    MYSQL_RES *res = store_run_select(st, "claim ordering check", err, errlen);
    if (res == NULL)
        return -1;
    size_t n;
    int rc = read_earlier(st, res, &n);
    mysql_free_result(res);
    if (rc != 0)
        return load_earlier_counts_exact(st, b, err, errlen);
    count_earlier(st, b->n, n);
    return 0;
}

/*
 * Whether the locate found every candidate to be the first unfinished
 * event of its aggregate: then none has an earlier one to wait for, and
 * no two share an aggregate.  That read is committed state, as the
 * ordering check's own, a lock earlier: an earlier event that commits
 * in between is no different from one that commits after the check.
 */
static bool
all_located_heads(struct store *st, const struct outbox_batch *b)
{
    if (st->claim.nheads < b->n)
        return false;
    qsort(st->claim.heads, st->claim.nheads, sizeof(*st->claim.heads),
          store_u64_cmp);
    for (size_t i = 0; i < b->n; i++)
        if (!bsearch(&b->rows[i].id, st->claim.heads, st->claim.nheads,
                     sizeof(*st->claim.heads), store_u64_cmp))
            return false;
    return true;
}

/*
 * Keeps a candidate only when every unfinished earlier event of its
 * aggregate is in the batch: the k-th candidate of an aggregate (by id)
 * must have exactly k unfinished events before it.  The counts come
 * from a non-locking read of committed state: a locking read would skip
 * the rows another relay is claiming right now and undercount.  Rows
 * going DEAD here hold their place like the others: DEAD finishes them
 * in this same transaction.  Comparing aggregates byte-wise is at most
 * stricter than the column's collation: that can delay a row, never
 * reorder one.
 */
int
store_ordering_filter(struct store *st, struct outbox_batch *b, char *err,
                      size_t errlen)
{
    if (all_located_heads(st, b)) {
        for (size_t i = 0; i < b->n; i++)
            b->rows[i].earlier_unfinished = 0;
        return 0;
    }
    st->claim.byagg = store_grow(st->claim.byagg, &st->claim.byagg_cap, b->n,
                                 sizeof(*st->claim.byagg));
    for (size_t i = 0; i < b->n; i++)
        st->claim.byagg[i] = &b->rows[i];
    qsort(st->claim.byagg, b->n, sizeof(*st->claim.byagg), row_cmp_aggregate);
    if (load_earlier_counts(st, b, err, errlen) < 0)
        return -1;
    unsigned k = 0;
    bool broken = false;
    for (size_t i = 0; i < b->n; i++, k++) {
        struct outbox_row *row = st->claim.byagg[i];
        if (i == 0 || !same_aggregate(st->claim.byagg[i - 1], row)) {
            k = 0;
            broken = false;
        }
        if (broken || row->earlier_unfinished != k) {
            broken = true;
            st->claim.drop[row - b->rows] = 1;
        }
    }
    return 0;
}
