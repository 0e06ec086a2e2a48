/*
 * store_claim: store_claim_batch.  Candidates located without locks,
 * then locked by id with FOR UPDATE SKIP LOCKED within batch_size and
 * batch_bytes; one expired lease reclaimed alone; duplicates flagged;
 * the rows marked PROCESSING under a fresh lease token; the probe that
 * keeps an idle outbox cheap.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "store_int.h"

/* The first claim's window, before any row's size is known: see
 * claim_window. */
#define FIRST_WINDOW 32
/* At most this long between two looks for expired leases, and for
 * delayed rows come due while rows keep coming. */
#define EXPIRED_LOOK_MS 1000
#define DELAYED_LOOK_MS 1000

static bool expired_look_due(const struct store *st);

static const enum outbox_status source_status[SRC_COUNT] = {
    OUTBOX_PROCESSING, OUTBOX_RETRY, OUTBOX_PENDING, OUTBOX_PENDING};

/* A delayed row is not claimed before its available_at, by the
 * database's clock (docs/contract.md section 1.4). */
const char *const store_claim_cond[SRC_COUNT] = {
    [SRC_EXPIRED] = "`status` = 'PROCESSING' AND `locked_until` <= NOW(6)",
    [SRC_RETRY] = "`status` = 'RETRY' AND `next_retry_at` <= NOW(6)",
    [SRC_DELAYED] = "`status` = 'PENDING' AND `available_at` <= NOW(6)",
    [SRC_PENDING] = "`status` = 'PENDING'",
};
const char *const store_undelayed_cond =
    "`status` = 'PENDING' AND `available_at` IS NULL";

/* "<relay_id>/<16 hex>": unique per claim, readable in locked_by. */
static void
make_token(const struct store *st, char *token, const char *relay_id)
{
    uint64_t rnd;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)wall_us() * 6364136223846793005ULL ^
              (uint64_t)getpid() ^ (uint64_t)clock_ms();
    size_t room = st->plan.token_chars - 17, n = 0;
    for (const char *s = relay_id ? relay_id : ""; *s && n < room; s++)
        token[n++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    snprintf(token + n, 18, "/%016" PRIx64, rnd);
}

static const char *
field_dup(struct outbox_batch *b, MYSQL_ROW r, const unsigned long *len, int i)
{
    return r[i] != NULL ? batch_memdup(b, r[i], len[i]) : NULL;
}

/* Payload and headers: the one copy from the client's packet buffer. */
static const char *
field_bulk(struct outbox_batch *b, MYSQL_ROW r, const unsigned long *len, int i)
{
    return r[i] != NULL ? batch_bulkdup(b, r[i], len[i]) : NULL;
}

/* "1718000000.123456" or "1718000000" to microseconds. */
int64_t
store_parse_us(const char *s)
{
    if (s == NULL)
        return 0;
    char *end;
    int64_t us = (int64_t)strtoll(s, &end, 10) * 1000000;
    int64_t frac = 0, scale = 100000;
    if (*end == '.')
        for (const char *p = end + 1; *p >= '0' && *p <= '9' && scale; p++) {
            frac += (*p - '0') * scale;
            scale /= 10;
        }
    return us + frac;
}

/* expires_at where the table has it and the row sets it. */
static void
add_expiry(const struct store *st, struct outbox_batch *b,
           struct outbox_row *row, MYSQL_ROW r, const unsigned long *len)
{
    int pos = st->plan.pos_optional[OPT_EXPIRES_AT];
    if (pos < 0 || r[pos] == NULL)
        return;
    row->has_expiry = true;
    row->expires_in_us = (int64_t)strtoll(r[pos], NULL, 10);
    row->expires_at = field_dup(b, r, len, pos + 1);
}

/* Copies one candidate into the batch's arena and bulk store: no malloc
 * per row, and the payload copied once. */
static void
add_candidate(struct store *st, struct outbox_batch *b, MYSQL_ROW r,
              const unsigned long *len, enum outbox_status from)
{
    struct outbox_row *row = batch_add(b);
    row->id = strtoull(r[COL_ID], NULL, 10);
    row->event_id = field_dup(b, r, len, COL_EVENT_ID);
    row->aggregate_type = field_dup(b, r, len, COL_AGGREGATE_TYPE);
    row->aggregate_id = field_dup(b, r, len, COL_AGGREGATE_ID);
    row->event_type = field_dup(b, r, len, COL_EVENT_TYPE);
    row->payload = field_bulk(b, r, len, COL_PAYLOAD);
    row->payload_len = r[COL_PAYLOAD] ? len[COL_PAYLOAD] : 0;
    row->created_us = store_parse_us(r[COL_CREATED]);
    long rc = r[COL_RETRY_COUNT] ? strtol(r[COL_RETRY_COUNT], NULL, 10) : 0;
    row->retry_count = rc > 0 ? (unsigned)rc : 0;
    /* A lease that expired counts as an attempt. */
    row->retry_count += from == OUTBOX_PROCESSING;
    row->claimed_from = from;
    const char **opt[NOPTIONAL] = {&row->headers, &row->trace_id,
                                   &row->traceparent};
    for (int i = 0; i < NOPTIONAL; i++)
        if (opt[i] != NULL && st->plan.pos_optional[i] >= 0)
            *opt[i] = i == OPT_HEADERS
                          ? field_bulk(b, r, len, st->plan.pos_optional[i])
                          : field_dup(b, r, len, st->plan.pos_optional[i]);
    add_expiry(st, b, row, r, len);
    size_t nc = st->ob->ncolumns;
    if (nc == 0)
        return;
    /* The pointer array comes from the arena too: copy, then repoint. */
    const char **cols = (const char **)(void *)batch_memdup(
        b, &r[st->plan.pos_columns], nc * sizeof(*cols));
    for (size_t i = 0; i < nc; i++)
        cols[i] = field_dup(b, r, len, st->plan.pos_columns + (int)i);
    row->columns = cols;
}

/* A row whose lease expired passed ordering when it was first claimed;
 * its reclaim does not read it again. */
static bool
ordering_applies(const struct store *st, enum claim_source src)
{
    return src != SRC_EXPIRED && st->ob->ordering == ORDERING_AGGREGATE;
}

/* The candidates' statement from FROM to LIMIT, past held-back ones. */
static void
add_candidate_scan(struct store *st, enum claim_source src, size_t limit)
{
    strbuf_addf(&st->sql, " FROM %s `c`%s%s%s LIMIT %zu", st->table,
                st->plan.claim_where[src],
                ordering_applies(st, src) ? st->plan.unblocked_sql : "",
                st->plan.claim_order[src], limit);
}

/*
 * The lean read's candidates.  The filter past aggregates that a RETRY
 * or a delayed row holds back cost that read a quarter to a third of
 * its CPU; it only keeps the window free of rows the ordering drops
 * anyway (the head column, or the ordering check, finds them not
 * first), so it is left out while the last probe saw no such row, no
 * record wrote one, and no lean read met a row not first of its
 * aggregate or older than LEAN_YOUNG_S since.  A held row it lets
 * through is dropped by the ordering, and one that waited makes this
 * claim leased; the next lean read filters again.  on_dead: hold's part
 * stays: a held DEAD row is not unfinished, and only the filter stops
 * what is behind it.
 */
static void
add_lean_scan(struct store *st, size_t limit)
{
    const char *filter = "";
    if (ordering_applies(st, SRC_PENDING))
        filter = st->claim.held_possible ? st->plan.unblocked_sql
                                         : st->plan.hold_sql;
    strbuf_addf(&st->sql, " FROM %s `c`%s%s%s LIMIT %zu", st->table,
                st->plan.claim_where[SRC_PENDING], filter,
                st->plan.claim_order[SRC_PENDING], limit);
}

/* The lean read's columns after the select list (lock_lean). */
static void add_lean_columns(struct store *st, bool expired_look,
                             bool delayed_look);
static bool note_lean_row(struct store *st, MYSQL_ROW r, unsigned col,
                          bool expired_look, bool delayed_look);

/* One row of the lean read: head of its aggregate, young, the looks. */
static void
note_lean_read(struct store *st, MYSQL_ROW r, unsigned col, uint64_t id)
{
    if (st->claim.lean_heads) {
        if (r[col] != NULL && r[col][0] == '1')
            st->claim.heads[st->claim.nheads++] = id;
        else
            st->claim.held_possible = true; /* behind an earlier event */
        col++;
    }
    /* A row that waited may be one the filter would have passed over. */
    if (!note_lean_row(st, r, col, st->claim.lean_expired_look,
                       st->claim.lean_delayed_look)) {
        st->claim.lean_now = false;
        st->claim.held_possible = true;
    }
}

/*
 * A result read row by row (mysql_use_result): each row is copied from
 * the client's packet buffer into the batch and nothing else holds the
 * batch's payloads, where mysql_store_result would keep a second copy of
 * them all until freed.
 */
static MYSQL_RES *
run_select_stream(struct store *st, const char *what, char *err, size_t errlen)
{
    if (store_run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return NULL;
    MYSQL_RES *res = mysql_use_result(store_db(st));
    if (res == NULL)
        store_fail(st, what, err, errlen);
    return res;
}

/* A streamed read that failed between rows: the result is freed before
 * the session may be closed. */
static int
stream_fail(struct store *st, MYSQL_RES *res, const char *what, char *err,
            size_t errlen)
{
    unsigned code = mysql_errno(store_db(st));
    err_set(err, errlen, "%s %s: %s (error %u)", what, st->where,
            mysql_error(store_db(st)), code);
    st->conn.last_errno = code;
    mysql_free_result(res);
    if (store_errno_is_connection(code))
        store_close(st);
    return -1;
}

/* What is left of batch_bytes, by the payloads and headers taken; a
 * config built by hand, with no batch_bytes, has no byte bound. */
static uint64_t
bytes_left(const struct store *st, const struct outbox_batch *b)
{
    uint64_t budget = st->ob->batch_bytes;
    if (budget == 0)
        return UINT64_MAX;
    return b->bulk_bytes < budget ? budget - b->bulk_bytes : 0;
}

/* A row's payload and headers: what it counts against batch_bytes. */
static uint64_t
row_bytes(const struct store *st, MYSQL_ROW r, const unsigned long *len)
{
    uint64_t n = r[COL_PAYLOAD] != NULL ? len[COL_PAYLOAD] : 0;
    int h = st->plan.pos_optional[OPT_HEADERS];
    if (h >= 0 && r[h] != NULL)
        n += len[h];
    return n;
}

/* docs/contract.md section 1.6: a row joins the batch only within
 * batch_bytes, except as its first, so that a larger one goes alone. */
static bool
batch_takes(const struct store *st, const struct outbox_batch *b, uint64_t size)
{
    if (b->n == 0)
        return true;
    uint64_t left = bytes_left(st, b);
    return left > 0 && size <= left;
}

/*
 * Streams a locking read into the batch: at most limit rows, none of the
 * sorted skip[0..nskip), none from the first that would pass batch_bytes
 * on.  Rows past that cut are fetched (a streamed result must be read to
 * its end) but not copied: locked, never marked, the claim's commit
 * releases them unchanged, as it does the rows the ordering check drops.
 * *nread: the rows the read returned, skipped ones included.
 */
static int
add_locked_rows(struct store *st, struct outbox_batch *b, enum claim_source src,
                const uint64_t *skip, size_t nskip, size_t limit, size_t *nread,
                char *err, size_t errlen)
{
    MYSQL_RES *res = run_select_stream(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    size_t added = 0;
    bool cut = false;
    unsigned extras = mysql_num_fields(res) - st->claim.lean_extras;
    for (*nread = 0; (r = mysql_fetch_row(res)) != NULL; (*nread)++) {
        uint64_t id = strtoull(r[COL_ID], NULL, 10);
        if (st->claim.lean_extras > 0)
            note_lean_read(st, r, extras, id);
        if (nskip > 0 &&
            bsearch(&id, skip, nskip, sizeof(*skip), store_u64_cmp))
            continue;
        const unsigned long *len = mysql_fetch_lengths(res);
        uint64_t size = row_bytes(st, r, len);
        st->claim.seen_bytes += size;
        st->claim.seen_rows++;
        if (cut || added == limit)
            continue;
        if (!batch_takes(st, b, size)) {
            cut = st->claim.cut_short = true;
            continue;
        }
        add_candidate(st, b, r, len, source_status[src]);
        added++;
    }
    if (mysql_errno(store_db(st)) != 0)
        return stream_fail(st, res, "claim", err, errlen);
    mysql_free_result(res);
    return 0;
}

/*
 * A lean claim's read also says, at no extra statement, whether each
 * candidate is young, whether any lease has expired and whether a
 * delayed row is due.  Young: created
 * within LEAN_YOUNG_S.  A row that crashes the relay whenever it is
 * published leaves no trace of a lean attempt (its transaction rolls
 * back), so once it is older than that only leased claims, which count
 * their attempts, take it (docs/contract.md section 1.5).  An expired
 * lease makes the next claim a leased one, which reclaims it.
 */
static void
add_lean_columns(struct store *st, bool expired_look, bool delayed_look)
{
    strbuf_addf(&st->sql, ", `c`.`created_at` >= NOW(6) - INTERVAL %d SECOND",
                STORE_LEAN_YOUNG_S);
    if (expired_look)
        strbuf_addf(&st->sql,
                    ", EXISTS(SELECT 1 FROM %s WHERE `status` = 'PROCESSING' "
                    "AND `locked_until` <= NOW(6))",
                    st->table);
    if (delayed_look)
        strbuf_addf(&st->sql, ", EXISTS(SELECT 1 FROM %s `d`%s)", st->table,
                    st->plan.claim_where[SRC_DELAYED]);
}

/* One of the lean read's looks: whether it found rows due; the next
 * claim takes them leased (fetch_source, lean_applies). */
static bool
note_look(MYSQL_ROW r, unsigned col, uint64_t *none_ms)
{
    bool due = r[col] != NULL && r[col][0] == '1';
    *none_ms = due ? 0 : clock_ms();
    return due;
}

/* What a lean read's row said; false when the claim must be leased. */
static bool
note_lean_row(struct store *st, MYSQL_ROW r, unsigned col, bool expired_look,
              bool delayed_look)
{
    bool young = r[col] != NULL && r[col][0] == '1';
    if (expired_look && note_look(r, ++col, &st->claim.expired_none_ms))
        young = false;
    if (delayed_look)
        note_look(r, ++col, &st->claim.delayed_none_ms);
    return young;
}

/* The lean read replaces the look for due delayed rows, which a claim
 * makes at most every DELAYED_LOOK_MS. */
static bool
delayed_look_due(const struct store *st)
{
    return st->plan.claim_where[SRC_DELAYED] != NULL &&
           (st->claim.delayed_none_ms == 0 ||
            clock_ms() - st->claim.delayed_none_ms >= DELAYED_LOOK_MS);
}

/* Step one: the candidates' ids, by a read that takes no lock. */
static int
locate_candidates(struct store *st, enum claim_source src, size_t limit,
                  size_t *n, char *err, size_t errlen)
{
    bool heads = st->plan.head_sql != NULL && ordering_applies(st, src);
    strbuf_reset(&st->sql);
    strbuf_addf(&st->sql, "SELECT `c`.`id`%s", heads ? st->plan.head_sql : "");
    add_candidate_scan(st, src, limit);
    MYSQL_RES *res = store_run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    st->claim.located = store_grow(st->claim.located, &st->claim.located_cap,
                                   limit, sizeof(uint64_t));
    st->claim.heads = store_grow(st->claim.heads, &st->claim.heads_cap,
                                 st->claim.nheads + limit, sizeof(uint64_t));
    MYSQL_ROW r;
    *n = 0;
    while (*n < limit && (r = mysql_fetch_row(res)) != NULL) {
        uint64_t id = strtoull(r[0], NULL, 10);
        st->claim.located[(*n)++] = id;
        if (heads && r[1] != NULL && r[1][0] == '1')
            st->claim.heads[st->claim.nheads++] = id;
    }
    mysql_free_result(res);
    return 0;
}

/* Step two: those rows locked by id, if still candidates and not held. */
static int
lock_located(struct store *st, struct outbox_batch *b, enum claim_source src,
             size_t n, char *err, size_t errlen)
{
    strbuf_reset(&st->sql);
    strbuf_addf(&st->sql,
                "%s FROM %s `c` FORCE INDEX (PRIMARY) WHERE `c`.`id` IN (",
                st->plan.select_list, st->table);
    for (size_t i = 0; i < n; i++)
        sql_add_id(&st->sql, st->claim.located[i], i == 0);
    strbuf_addf(&st->sql, ") AND %s FOR UPDATE SKIP LOCKED",
                st->plan.claim_cond[src]);
    size_t nread;
    return add_locked_rows(st, b, src, NULL, 0, n, &nread, err, errlen);
}

/*
 * A lean claim's PENDING rows in one statement: the locking read along
 * the index, which also answers what the locate would (the head of its
 * aggregate, young, the looks) by subqueries that read without locks.
 * A steady state's claim finds a few rows at the head of the range, so
 * the locate's detour around delete-marked entries (fetch_candidates)
 * saves less than its statement costs.  The looks were a third of the
 * read of a tenant woken once a second: they are left out while the
 * binlog says there is nothing for them to find (store_set_quiet).
 */
static int
lock_lean(struct store *st, struct outbox_batch *b, size_t window,
          size_t *nread, char *err, size_t errlen)
{
    bool join = st->claim.lean_join;
    st->claim.lean_heads = st->plan.head_sql != NULL &&
                           ordering_applies(st, SRC_PENDING) &&
                           !(join && st->claim.join_form == JOIN_POINT_FREE);
    bool looks = !join && !st->claim.quiet;
    st->claim.lean_expired_look = looks && expired_look_due(st);
    st->claim.lean_delayed_look = looks && delayed_look_due(st);
    st->claim.lean_extras = 1 + st->claim.lean_heads +
                            st->claim.lean_expired_look +
                            st->claim.lean_delayed_look;
    st->claim.heads = store_grow(st->claim.heads, &st->claim.heads_cap,
                                 st->claim.nheads + window, sizeof(uint64_t));
    int rc = 0;
    if (join) {
        rc = store_join_sql(st, st->claim.lean_after, window, err, errlen);
    } else {
        strbuf_reset(&st->sql);
        strbuf_adds(&st->sql, st->plan.select_list);
        if (st->claim.lean_heads)
            strbuf_adds(&st->sql, st->plan.head_sql);
        add_lean_columns(st, st->claim.lean_expired_look,
                         st->claim.lean_delayed_look);
        add_lean_scan(st, window);
        strbuf_adds(&st->sql, " FOR UPDATE SKIP LOCKED");
    }
    if (rc == 0)
        rc = add_locked_rows(st, b, SRC_PENDING, NULL, 0, window, nread, err,
                             errlen);
    st->claim.lean_extras = 0;
    st->claim.lean_join = false;
    return rc;
}

/*
 * How many candidates to ask for.  Rows past the byte cut are still read
 * whole, so the window is a quarter more than the last claim's mean row
 * says will fit, capped at limit: all of it for small rows, which never
 * reach the budget.  Before any mean of its own, the mean its session's
 * other stores saw (tenants of one table), else FIRST_WINDOW: one extra
 * claim at start for small rows, where limit would read batch_size
 * large ones.
 */
static size_t
claim_window(const struct store *st, const struct outbox_batch *b, size_t limit)
{
    if (st->ob->batch_bytes == 0)
        return limit;
    uint64_t want = FIRST_WINDOW;
    uint64_t est = st->claim.row_bytes_est;
    if (est == 0) /* a tenant's first claim: its neighbours' rows */
        est = dbsession_row_bytes_hint(st->conn.sess);
    if (est > 0) {
        uint64_t left = bytes_left(st, b);
        want = (left + left / 4) / est;
    }
    if (want < 1)
        want = 1;
    return want < limit ? (size_t)want : limit;
}

/* A window narrower than the limit that came back full: more rows may
 * wait, so the claim counts as full and the next follows at once. */
static void
note_window(struct store *st, size_t window, size_t limit, size_t got)
{
    if (window < limit && got == window)
        st->claim.cut_short = true;
}

/* The mean row of this claim's locking reads sizes the next window. */
static void
note_row_bytes(struct store *st)
{
    if (st->claim.seen_rows == 0)
        return;
    uint64_t mean = st->claim.seen_bytes / st->claim.seen_rows;
    st->claim.row_bytes_est = mean > 0 ? mean : 1;
    dbsession_set_row_bytes_hint(st->conn.sess, st->claim.row_bytes_est);
}

/*
 * The rows of one source, at most limit and batch_bytes, locked.  They
 * are found by a plain read, then locked by id: a locking read along the
 * status index also goes through the lock system for every entry that
 * the last claims left delete-marked at the head of the PENDING range,
 * until purge removes them, and that grew with the purge lag to four
 * fifths of the claim's read in a drain, where a plain read passes them
 * cheaply.  The lock re-reads the condition on the latest version, so a
 * row that another relay took in between is not taken again.  When rows
 * were taken in between and more may wait, the locking read along the
 * index tops the batch up, past what other relays hold; it alone claims
 * from a table whose primary key is not led by id.  The byte budget is
 * applied as the locked rows stream in (add_locked_rows), so the locate
 * reads ids alone, as cheap for large rows as for small.
 */
static int
fetch_candidates(struct store *st, struct outbox_batch *b,
                 enum claim_source src, size_t limit, char *err, size_t errlen)
{
    if (st->plan.claim_cond[src] == NULL)
        return 0; /* SRC_DELAYED on a table without available_at */
    size_t window = claim_window(st, b, limit);
    size_t located = window, locked = 0, before = b->n, nread;
    if (st->claim.lean_now && src == SRC_PENDING) {
        if (lock_lean(st, b, window, &nread, err, errlen) < 0)
            return -1;
        note_window(st, window, limit, nread);
        return 0;
    }
    if (st->plan.id_primary) {
        if (locate_candidates(st, src, window, &located, err, errlen) < 0)
            return -1;
        note_window(st, window, limit, located);
        if (located == 0)
            return 0;
        if (src != SRC_PENDING)
            st->claim.lean_now = false; /* rows that waited: leased */
        if (lock_located(st, b, src, located, err, errlen) < 0)
            return -1;
        locked = b->n - before;
        if (locked == located || located < window || st->claim.cut_short)
            return 0;
        for (size_t i = 0; i < locked; i++)
            st->claim.located[i] = b->rows[before + i].id;
        qsort(st->claim.located, locked, sizeof(*st->claim.located),
              store_u64_cmp);
    }
    st->claim.lean_now = false; /* the locking read tells no age */
    strbuf_reset(&st->sql);
    strbuf_adds(&st->sql, st->plan.select_list);
    add_candidate_scan(st, src, window);
    strbuf_adds(&st->sql, " FOR UPDATE SKIP LOCKED");
    if (add_locked_rows(st, b, src, st->claim.located, locked, window - locked,
                        &nread, err, errlen) < 0)
        return -1;
    note_window(st, window, limit, nread);
    return 0;
}

/*
 * The look for due delayed rows is a statement per claim that finds none
 * on most: in a drain it cost 2 statements per 1,000 events.  So after
 * one that found none, claims skip it for DELAYED_LOOK_MS, and a row
 * that falls due in a drain waits at most that; an idle relay's probe
 * sees the row due and makes the next claim look at once.
 */
static int
fetch_source(struct store *st, struct outbox_batch *b, enum claim_source src,
             size_t limit, char *err, size_t errlen)
{
    if (src != SRC_DELAYED)
        return fetch_candidates(st, b, src, limit, err, errlen);
    /* A lean claim's read looks for them (add_lean_columns). */
    if (st->claim.delayed_none_ms != 0 &&
        (st->claim.lean_now ||
         clock_ms() - st->claim.delayed_none_ms < DELAYED_LOOK_MS))
        return 0;
    size_t before = b->n;
    if (fetch_candidates(st, b, src, limit, err, errlen) < 0)
        return -1;
    st->claim.delayed_none_ms = b->n > before ? 0 : clock_ms();
    return 0;
}

int
store_row_cmp_id(const void *a, const void *b)
{
    const struct outbox_row *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

struct outbox_row *
store_find_row(struct outbox_batch *b, uint64_t id)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->rows[mid].id == id)
            return &b->rows[mid];
        if (b->rows[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Reclaimed from an expired lease once too often: goes DEAD, not out. */
static bool
is_dying(const struct store *st, const struct outbox_row *row)
{
    return row->claimed_from == OUTBOX_PROCESSING &&
           row->retry_count > st->ob->max_retries;
}

static int
kill_expired(struct store *st, struct outbox_batch *b, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q,
                "UPDATE %s SET `status` = 'DEAD', `next_retry_at` = NULL, "
                "`last_error` = CONCAT("
                "'lease expired after ', `retry_count` + 1, ' attempts without "
                "a confirm (relay crashed or hung while publishing)'), "
                "`retry_count` = `retry_count` + 1, `locked_by` = NULL, "
                "`locked_until` = %s WHERE `id` IN (",
                st->table, store_dead_locked_until(st));
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        if (is_dying(st, &b->rows[i]))
            sql_add_id(q, b->rows[i].id, n++ == 0);
    if (n == 0)
        return 0;
    strbuf_adds(q, ")");
    uint64_t affected;
    return store_run_update(st, "claim", &affected, err, errlen);
}

/* Drops the dying and the out-of-order rows, keeping id order. */
static void
compact_batch(const struct store *st, struct outbox_batch *b)
{
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++)
        if (!st->claim.drop[i] && !is_dying(st, &b->rows[i]))
            b->rows[k++] = b->rows[i];
    b->n = k;
}

/* Past expires_at by the claim's own NOW(6): never published. */
static bool
past_expires_at(const struct outbox_row *row)
{
    return row->has_expiry && batch_expiry_ms_left(row->expires_in_us, 0) <= 0;
}

/*
 * docs/contract.md section 6: a row claimed at or after its expires_at
 * goes DEAD in the claim's own transaction, before anything of the batch
 * is published, so that the later events of its aggregate in the batch
 * may go out behind it.  No attempt is counted for the claim (one whose
 * lease expired still counts that attempt, as mark_claimed would); the
 * row stays in the batch, recorded, for the relay to count and log.
 */
static int
mark_past_expires_at(struct store *st, struct outbox_batch *b, char *err,
                     size_t errlen)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += past_expires_at(&b->rows[i]);
    if (n == 0)
        return 0;
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q,
                "UPDATE %s SET `retry_count` = `retry_count` + "
                "(`status` = 'PROCESSING'), `status` = 'DEAD', "
                "`next_retry_at` = NULL, `locked_by` = %s, "
                "`locked_until` = NULL, `last_error` = CASE `id`",
                st->table, store_expired_locked_by(st));
    for (size_t i = 0; i < b->n; i++) {
        struct outbox_row *row = &b->rows[i];
        if (!past_expires_at(row))
            continue;
        char why[256];
        batch_format_expiry(why, sizeof(why), row->expires_at, "claimed",
                            -row->expires_in_us);
        batch_expire_row(b, row, why, true);
        strbuf_addf(q, " WHEN %" PRIu64 " THEN ", row->id);
        sql_add_string(st, store_clean_text(&st->fin.text, why,
                                            st->plan.error_chars,
                                            st->plan.error_charset));
    }
    strbuf_adds(q, " END WHERE `id` IN (");
    for (size_t i = 0, k = 0; i < b->n; i++)
        if (b->rows[i].expired)
            sql_add_id(q, b->rows[i].id, k++ == 0);
    strbuf_adds(q, ")");
    uint64_t affected;
    return store_run_update(st, "claim", &affected, err, errlen);
}

/*
 * retry_count is assigned before status: MySQL assigns left to right
 * with the new values, MariaDB may assign simultaneously; this order
 * reads the old status under both.
 */
static int
mark_claimed(struct store *st, struct outbox_batch *b, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q,
                "UPDATE %s SET `retry_count` = `retry_count` + "
                "(`status` = 'PROCESSING'), `status` = 'PROCESSING', "
                "`next_retry_at` = NULL, `locked_by` = ",
                st->table);
    sql_add_string(st, b->token);
    strbuf_addf(q,
                ", `locked_until` = NOW(6) + INTERVAL %" PRIu64
                " MICROSECOND WHERE `id` IN (",
                st->ob->lease_ms * 1000);
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        if (!b->rows[i].recorded) /* expired: DEAD already */
            sql_add_id(q, b->rows[i].id, n++ == 0);
    if (n == 0)
        return 0;
    strbuf_adds(q, ")");
    uint64_t affected;
    if (store_run_update(st, "claim", &affected, err, errlen) < 0)
        return -1;
    if (affected != n) {
        /* Cannot happen while we hold the row locks; refuse if it does. */
        err_set(err, errlen, "claim %s: marked %" PRIu64 " of %zu locked rows",
                st->where, affected, n);
        st->conn.last_errno = 0;
        return -1;
    }
    return 0;
}

/*
 * Sorts the candidates by id, drops those that ordering holds back, and
 * moves those reclaimed once too often to DEAD in this transaction.
 */
static int
filter_candidates(struct store *st, struct outbox_batch *b, char *err,
                  size_t errlen)
{
    if (b->n == 0)
        return 0;
    qsort(b->rows, b->n, sizeof(*b->rows), store_row_cmp_id);
    st->claim.drop = store_grow(st->claim.drop, &st->claim.drop_cap, b->n, 1);
    memset(st->claim.drop, 0, b->n);
    if (st->ob->ordering == ORDERING_AGGREGATE &&
        store_ordering_filter(st, b, err, errlen) < 0)
        return -1;
    if (kill_expired(st, b, err, errlen) < 0)
        return -1;
    compact_batch(st, b);
    return 0;
}

/*
 * Whether any lease has expired, read without locks, before the locking
 * read: that one skips a row someone holds locked at that instant, and
 * a look that runs once a second must not take that for "none" again
 * and again (until the row is taken, every claim looks).
 */
static int
expired_exists(struct store *st, bool *exists, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q,
                "SELECT 1 FROM %s WHERE `status` = 'PROCESSING' AND "
                "`locked_until` <= NOW(6) LIMIT 1",
                st->table);
    MYSQL_RES *res = store_run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    *exists = mysql_fetch_row(res) != NULL;
    mysql_free_result(res);
    return 0;
}

/*
 * A lease that expired means its relay died or hung, maybe because of
 * one of its rows: such rows are reclaimed one per batch.  Alone, a row
 * that crashes the relay counts attempts against itself only and ends
 * DEAD alone, while each other row of its batch pays one attempt.
 */
static int
claim_expired(struct store *st, struct outbox_batch *b, size_t cap, char *err,
              size_t errlen)
{
    bool exists;
    if (expired_exists(st, &exists, err, errlen) < 0)
        return -1;
    if (!exists) {
        st->claim.expired_none_ms = clock_ms();
        return 0;
    }
    if (fetch_candidates(st, b, SRC_EXPIRED, cap, err, errlen) < 0 ||
        filter_candidates(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 1)
        b->n = 1; /* the lowest id: the first unfinished of its aggregate */
    return 0;
}

/*
 * The look for expired leases reads every PROCESSING row, the batches in
 * flight included, to find none on most claims: it ran at every claim
 * and cost an eighth of the database's time in a drain.  A lease is
 * seconds long, so once a second is soon enough; after a find it looks
 * again at once, as a dead relay leaves a batch of them.
 */
static bool
expired_look_due(const struct store *st)
{
    uint64_t every = st->ob->lease_ms / 4 < EXPIRED_LOOK_MS
                         ? st->ob->lease_ms / 4
                         : EXPIRED_LOOK_MS;
    return st->claim.expired_none_ms == 0 ||
           clock_ms() - st->claim.expired_none_ms >= every;
}

/*
 * Flags each claimed row whose event_id an earlier row already has: the
 * relay sends it DEAD rather than publish a message_id that consumers
 * deduplicate away.  A non-locking read through the event_id index.
 */
static int
find_duplicates(struct store *st, struct outbox_batch *b, char *err,
                size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q,
                "SELECT c.`id`, MIN(p.`id`) FROM %s c JOIN %s p ON "
                "p.`event_id` = c.`event_id` AND p.`id` < c.`id` "
                "WHERE c.`id` IN (",
                st->table, st->table);
    for (size_t i = 0; i < b->n; i++)
        sql_add_id(q, b->rows[i].id, i == 0);
    strbuf_adds(q, ") GROUP BY c.`id`");
    MYSQL_RES *res = store_run_select(st, "claim duplicate check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        struct outbox_row *row = store_find_row(b, strtoull(r[0], NULL, 10));
        if (row != NULL && r[1] != NULL)
            row->duplicate_of = strtoull(r[1], NULL, 10);
    }
    mysql_free_result(res);
    return 0;
}

/*
 * After a claim that did not fill its batch, the next one first asks in
 * one read whether any row is claimable now, and when the next falls
 * due: an idle outbox then costs this statement and a commit per poll,
 * where the claim's reads would cost three or four.  Each part is one
 * index probe on sql/outbox.sql's table: (status, available_at, id),
 * whose first delayed entry also tells when the next delayed row falls
 * due; next_retry_at; the leases of the PROCESSING rows, the few in
 * flight (see build_probe_sql for a drain of several relays).  When rows
 * are there, the claim that follows skips the looks the probe answered:
 * retries not due, no lease run out, no delayed row due.  The same read
 * asks whether the server went read-only: an idle relay writes nothing
 * that would be refused, and must still leave a demoted primary.
 */
enum probe_column {
    PROBE_PENDING,
    PROBE_RETRY,
    PROBE_LEASE,
    PROBE_RO,
    PROBE_DELAYED
};

static void
build_probe_sql(struct store *st, bool lease_look)
{
    struct strbuf *q = &st->sql;
    const char *pending = st->plan.claim_where[SRC_PENDING];
    strbuf_reset(q);
    strbuf_addf(q,
                "SELECT EXISTS(SELECT 1 FROM %s%s), TIMESTAMPDIFF(MICROSECOND, "
                "NOW(6), (SELECT MIN(`next_retry_at`) FROM %s WHERE `status` "
                "= 'RETRY')), ",
                st->table, pending, st->table);
    /* In a drain of several relays the PROCESSING rows are their batches
     * in flight: with rows pending, their leases are read at most as often
     * as the claim's own look for expired ones reads them. */
    if (!lease_look)
        strbuf_addf(q, "IF(EXISTS(SELECT 1 FROM %s%s), NULL, ", st->table,
                    pending);
    strbuf_addf(q,
                "TIMESTAMPDIFF(MICROSECOND, NOW(6), (SELECT "
                "MIN(`locked_until`) FROM %s WHERE `status` = "
                "'PROCESSING'))%s, @@global.read_only",
                st->table, lease_look ? "" : ")");
    if (st->plan.available_at)
        strbuf_addf(q,
                    ", TIMESTAMPDIFF(MICROSECOND, NOW(6), (SELECT "
                    "MIN(`available_at`) FROM %s WHERE `status` = "
                    "'PENDING'))",
                    st->table);
}

/* One of the probe's "due in" columns: a row due now, or the soonest;
 * returns whether one is due now. */
static bool
note_due(MYSQL_ROW r, unsigned nfields, unsigned i, bool *now, uint64_t *due)
{
    if (r == NULL || i >= nfields || r[i] == NULL)
        return false;
    long long us = strtoll(r[i], NULL, 10);
    if (us <= 0)
        *now = true;
    else if ((uint64_t)(us + 999) / 1000 < *due)
        *due = (uint64_t)(us + 999) / 1000;
    return us <= 0;
}

/* What the probe answered, for the claim that follows it at once: a
 * look it answered "none" is as good as one the claim made itself. */
static void
note_probed(struct store *st, bool lease_known, bool lease_over,
            bool delayed_due)
{
    uint64_t now = clock_ms();
    if (lease_over)
        st->claim.expired_none_ms = 0;
    else if (lease_known)
        st->claim.expired_none_ms = now;
    if (st->plan.available_at)
        st->claim.delayed_none_ms = delayed_due ? 0 : now;
}

/* *now: a row is claimable now; *retry_due: a RETRY row is due. */
static int
probe(struct store *st, bool *now, bool *retry_due, uint64_t *due_in_ms,
      char *err, size_t errlen)
{
    bool lease_look = expired_look_due(st);
    build_probe_sql(st, lease_look);
    MYSQL_RES *res = store_run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    unsigned nf = mysql_num_fields(res);
    bool ro = r != NULL && r[PROBE_RO] != NULL && strcmp(r[PROBE_RO], "0") != 0;
    bool pending = r != NULL && r[PROBE_PENDING] != NULL &&
                   strcmp(r[PROBE_PENDING], "0") != 0;
    *now = pending;
    *due_in_ms = UINT64_MAX;
    *retry_due = note_due(r, nf, PROBE_RETRY, now, due_in_ms);
    bool lease_over = note_due(r, nf, PROBE_LEASE, now, due_in_ms);
    bool delayed_due = note_due(r, nf, PROBE_DELAYED, now, due_in_ms);
    st->claim.held_possible = r == NULL || r[PROBE_RETRY] != NULL ||
                              (PROBE_DELAYED < nf && r[PROBE_DELAYED] != NULL);
    mysql_free_result(res);
    if (ro && !dbsession_read_only_allowed(st->conn.sess))
        return store_refuse_read_only(st, err, errlen);
    /* Without the look, the leases were read only with nothing pending. */
    note_probed(st, lease_look || !pending, lease_over, delayed_due);
    return 0;
}

/* The most rows one claim takes. */
static size_t
claim_cap(const struct store *st)
{
    return st->ob->batch_size ? st->ob->batch_size : 1;
}

/* The sources after the expired leases, in turn, until the batch is
 * full or cut short; RETRY left out when the probe saw none due. */
static int
fetch_sources(struct store *st, struct outbox_batch *b, size_t cap,
              bool retry_due, char *err, size_t errlen)
{
    for (int s = retry_due ? SRC_RETRY : SRC_DELAYED;
         s < SRC_COUNT && b->n < cap && !st->claim.cut_short; s++)
        if (fetch_source(st, b, s, cap - b->n, err, errlen) < 0)
            return -1;
    return 0;
}

/* The lease in whole seconds: how long the server lets a lean claim's
 * transaction idle (dbsession_set_idle_trx_timeout). */
static unsigned
lease_seconds(const struct store *st)
{
    uint64_t s = (st->ob->lease_ms + 999) / 1000;
    return s > 0 ? (unsigned)s : 1;
}

/*
 * docs/design.md, The lean steady state: a claim after a short batch
 * may leave its rows PENDING, locked by its open transaction, and
 * finalize marks them SENT and commits; one write of each row and one
 * commit per batch, where a leased claim writes PROCESSING and commits
 * first.  Not before a leased claim has committed in this process (a
 * row that killed the last one is then claimed leased first), not
 * while an expired lease may wait, and only where the server ends a
 * frozen relay's transaction by itself.  Never on a Galera node: its
 * locks do not keep another node's claim off the rows, which only lose
 * at commit, after both had published them (docs/design.md, Running
 * against a Galera cluster); a leased claim loses before it publishes.
 */
static bool
lean_applies(struct store *st, const struct outbox_batch *b)
{
    return st->ob->lean && b->lean_allowed && st->claim.lean_ok &&
           st->claim.probe_first && st->claim.expired_none_ms != 0 &&
           st->plan.id_primary && !dbsession_is_galera(st->conn.sess) &&
           dbsession_set_idle_trx_timeout(st->conn.sess, lease_seconds(st)) ==
               0;
}

/* Whether the claim probes first; sets *retry_due when it does not. */
static bool
probe_needed(struct store *st, bool *retry_due)
{
    if (!st->claim.probe_first)
        return false;
    /* Woken: rows were committed, and due RETRY rows wait for a claim
     * that probes (after a short batch with failures, or the ceiling). */
    if (st->claim.lean_now && st->claim.woken) {
        *retry_due = false;
        return false;
    }
    return true;
}

/*
 * Rows were there (the probe saw them, or ordering held them back) and
 * none could be taken: another transaction holds them, or an earlier
 * event of theirs.  A leased claim's rows fall due when its lease ends,
 * which the probe reads; a lean claim's are PENDING and fall due when
 * their relay commits, or when the server ends its transaction after a
 * lease (dbsession_set_idle_trx_timeout), which no probe can read: look
 * again after a lease at the latest.
 */
static void
note_rows_held(const struct store *st, struct outbox_batch *b)
{
    if (st->ob->lease_ms < b->due_in_ms)
        b->due_in_ms = st->ob->lease_ms;
}

static int
claim_once(struct store *st, const char *relay_id, struct outbox_batch *b,
           char *err, size_t errlen)
{
    bool now = true, retry_due = true;
    st->claim.lean_now = lean_applies(st, b);
    bool probed = probe_needed(st, &retry_due);
    if (probed && probe(st, &now, &retry_due, &b->due_in_ms, err, errlen) < 0)
        return -1;
    if (!now)
        return store_commit(st, "claim", err, errlen);
    if (retry_due || st->claim.expired_none_ms == 0)
        st->claim.lean_now = false; /* attempts to count, leases to take */
    make_token(st, b->token, relay_id);
    st->claim.nheads = 0;
    st->claim.cut_short = false;
    st->claim.seen_bytes = st->claim.seen_rows = 0;
    size_t cap = claim_cap(st);
    if (!st->claim.lean_now && expired_look_due(st) &&
        claim_expired(st, b, cap, err, errlen) < 0)
        return -1;
    if (b->n > 0) {
        b->candidates = cap; /* cut short on purpose: claim again at once */
    } else {
        if (fetch_sources(st, b, cap, retry_due, err, errlen) < 0)
            return -1;
        /* Cut by bytes or by the window: claim again at once. */
        b->candidates = st->claim.cut_short ? cap : b->n;
        if (filter_candidates(st, b, err, errlen) < 0)
            return -1;
    }
    note_row_bytes(st);
    if (b->n == 0 && (probed || b->candidates > 0))
        note_rows_held(st, b);
    if (mark_past_expires_at(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 0 && st->plan.dup_check == DUP_INDEXED &&
        find_duplicates(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 0 && st->claim.lean_now) {
        b->lean = true; /* the transaction stays open: finalize ends it */
        st->claim.lean_gen = dbsession_generation(st->conn.sess);
        store_join_open(st, b);
        return 0;
    }
    if (b->n > 0 && mark_claimed(st, b, err, errlen) < 0)
        return -1;
    /* Even an empty claim commits: it ends the read and frees the MDL. */
    return store_commit(st, "claim", err, errlen);
}

/* The highest id the open transaction holds, first's and its
 * lean_next's: a join reads past it (store_join.c). */
static uint64_t
last_held(const struct outbox_batch *first)
{
    uint64_t last = 0;
    for (const struct outbox_batch *x = first; x != NULL; x = x->lean_next)
        for (size_t i = 0; i < x->n; i++)
            if (x->rows[i].id > last)
                last = x->rows[i].id;
    return last;
}

int
store_claim_more(struct store *st, const struct outbox_batch *first,
                 struct outbox_batch *b, char *err, size_t errlen)
{
    size_t cap = claim_cap(st);
    st->claim.lean_join = true;
    st->claim.lean_after = last_held(first);
    st->claim.lean_now = true;
    st->claim.nheads = 0;
    st->claim.cut_short = false;
    st->claim.seen_bytes = st->claim.seen_rows = 0;
    if (store_join_pick(st, first, st->claim.lean_after, err, errlen) < 0 ||
        fetch_candidates(st, b, SRC_PENDING, cap, err, errlen) < 0)
        return -1;
    store_join_read(st, first, b);
    b->candidates = st->claim.cut_short ? cap : b->n;
    if (!st->claim.lean_now) {
        b->n = 0; /* locked till the commit, taken by the next claim */
        return 0;
    }
    if (filter_candidates(st, b, err, errlen) < 0 ||
        mark_past_expires_at(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 0 && st->plan.dup_check == DUP_INDEXED &&
        find_duplicates(st, b, err, errlen) < 0)
        return -1;
    b->lean = b->n > 0;
    return 0;
}

void
store_set_woken(struct store *st, bool woken)
{
    st->claim.woken = woken;
    st->claim.told = (struct told_ids){0}; /* the claim reads them all */
}

void
store_set_quiet(struct store *st, bool quiet)
{
    st->claim.quiet = quiet;
}

int
store_claim_batch(struct store *st, const char *relay_id,
                  struct outbox_batch *b, char *err, size_t errlen)
{
    st->lost_race = false;
    for (int attempt = 1;; attempt++) {
        batch_reset(b);
        if (store_require_ready(st, "claim", err, errlen) < 0 ||
            (attempt == 1 && store_refresh_schema(st, err, errlen) < 0))
            return -1;
        st->conn.last_errno = 0;
        if (claim_once(st, relay_id, b, err, errlen) == 0) {
            /* A claim short of its batch emptied the table, or nearly:
             * the next one asks first (see build_probe_sql). */
            st->claim.probe_first = b->candidates < claim_cap(st);
            st->claim.lean_ok = st->claim.lean_ok || !b->lean;
            return 0;
        }
        store_rollback(st);
        batch_reset(b);
        if (!store_errno_is_deadlock(st->conn.last_errno))
            return -1;
        atomic_fetch_add_explicit(&st->conflicts, 1, memory_order_relaxed);
        if (attempt == STORE_ATTEMPTS) {
            st->lost_race = true;
            return -1;
        }
    }
}

/*
 * A deadlock in a claim is a race lost to another claim; on a Galera
 * node also to another node's, found at COMMIT by certification (1213
 * too), since row locks do not reach across nodes.  Nothing was
 * written: the rows are the winner's.  A normal event with several
 * relays, not a database failure (docs/design.md, Running against a
 * Galera cluster).
 */
bool
store_claim_lost_race(const struct store *st)
{
    return st->lost_race;
}

uint64_t
store_claim_conflicts(struct store *st)
{
    return atomic_load_explicit(&st->conflicts, memory_order_relaxed);
}
