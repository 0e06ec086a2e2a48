/*
 * check_store: the store's planners without a server: the claim plan
 * picked from a table's indexes, what the server reports read back, and
 * how outcomes and their error text are recorded.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_int.h"
#include "store_plan.h"

Suite *store_suite(void);

/* A column of an index, as information_schema.STATISTICS has it. */
#define COL(index, column)                                                     \
    {                                                                          \
        index, column, false, false                                            \
    }
#define UNIQUE(index, column)                                                  \
    {                                                                          \
        index, column, false, true                                             \
    }
#define PREFIX(index, column)                                                  \
    {                                                                          \
        index, column, true, false                                             \
    }
#define NCOLS(a) (sizeof(a) / sizeof((a)[0]))

/* sql/outbox.sql's indexes, in the order the schema check reads them. */
static const struct index_column recommended[] = {
    COL("idx_outbox_aggregate", "aggregate_type"),
    COL("idx_outbox_aggregate", "aggregate_id"),
    COL("idx_outbox_aggregate", "unfinished"),
    COL("idx_outbox_aggregate", "id"),
    COL("idx_outbox_due", "next_retry_at"),
    COL("idx_outbox_status", "status"),
    COL("idx_outbox_status", "available_at"),
    COL("idx_outbox_status", "id"),
    UNIQUE("PRIMARY", "id"),
    UNIQUE("uk_outbox_event_id", "event_id"),
};

/* tests/data/seed_outbox.sql's: no index on (status, id). */
static const struct index_column seed[] = {
    COL("idx_outbox_aggregate", "aggregate_type"),
    COL("idx_outbox_aggregate", "aggregate_id"),
    COL("idx_outbox_aggregate", "created_at"),
    COL("idx_outbox_claim", "status"),
    COL("idx_outbox_claim", "next_retry_at"),
    COL("idx_outbox_claim", "created_at"),
    UNIQUE("PRIMARY", "id"),
    UNIQUE("uk_outbox_event_id", "event_id"),
};

static void
assert_claim_order(const struct index_column *ix, size_t n, const char *want)
{
    char *order = store_pick_claim_order(ix, n);
    ck_assert_ptr_nonnull(order);
    ck_assert_str_eq(order, want);
    free(order);
}

/* PROCESSING rows come in the index's order; the PENDING ones, split by
 * available_at, are claimed in id order all the same (source_order). */
START_TEST(test_claim_order_recommended)
{
    assert_claim_order(recommended, NCOLS(recommended), "`available_at`, `id`");
}
END_TEST

/* ORDER BY id there would lock the whole PENDING backlog: the claim
 * walks the seed's status index in its own order. */
START_TEST(test_claim_order_seed)
{
    assert_claim_order(seed, NCOLS(seed),
                       "`next_retry_at`, `created_at`, `id`");
}
END_TEST

/* An index on (status) alone, or on (status, id) beside the seed's, wins
 * wherever it comes. */
START_TEST(test_claim_order_status_index_wins)
{
    const struct index_column alone[] = {COL("a_claim", "status"),
                                         COL("a_claim", "created_at"),
                                         COL("b_status", "status")};
    assert_claim_order(alone, NCOLS(alone), "`id`");
    const struct index_column with_id[] = {
        COL("a_claim", "status"), COL("a_claim", "created_at"),
        COL("z_status", "status"), COL("z_status", "id")};
    assert_claim_order(with_id, NCOLS(with_id), "`id`");
}
END_TEST

/* Of two indexes led by status, neither ordering by id: the first. */
START_TEST(test_claim_order_first_status_index)
{
    const struct index_column ix[] = {
        COL("a", "status"), COL("a", "created_at"), COL("a", "id"),
        COL("b", "status"), COL("b", "next_retry_at")};
    assert_claim_order(ix, NCOLS(ix), "`created_at`, `id`");
}
END_TEST

/* A prefix or an expression after status gives no usable order, and an
 * index on a prefix of status is not led by status: id, as with none. */
START_TEST(test_claim_order_unusable_indexes)
{
    const struct index_column prefix[] = {COL("a", "status"),
                                          PREFIX("a", "event_type")};
    assert_claim_order(prefix, NCOLS(prefix), "`id`");
    const struct index_column expr[] = {COL("a", "status"), COL("a", NULL)};
    assert_claim_order(expr, NCOLS(expr), "`id`");
    const struct index_column status_prefix[] = {PREFIX("a", "status"),
                                                 COL("a", "created_at")};
    assert_claim_order(status_prefix, NCOLS(status_prefix), "`id`");
    assert_claim_order(NULL, 0, "`id`");
}
END_TEST

/* Column names are quoted, backticks doubled, case ignored for status. */
START_TEST(test_claim_order_quotes)
{
    const struct index_column ix[] = {COL("a", "STATUS"), COL("a", "x`y")};
    assert_claim_order(ix, NCOLS(ix), "`x``y`, `id`");
}
END_TEST

START_TEST(test_dup_check)
{
    ck_assert_int_eq(store_pick_dup_check(recommended, NCOLS(recommended)),
                     DUP_IMPOSSIBLE);
    ck_assert_int_eq(store_pick_dup_check(seed, NCOLS(seed)), DUP_IMPOSSIBLE);
    const struct index_column plain[] = {COL("e", "event_id")};
    ck_assert_int_eq(store_pick_dup_check(plain, 1), DUP_INDEXED);
    /* Unique only together with another column: event_id may repeat. */
    const struct index_column pair[] = {UNIQUE("e", "event_id"),
                                        UNIQUE("e", "aggregate_id")};
    ck_assert_int_eq(store_pick_dup_check(pair, 2), DUP_INDEXED);
    const struct index_column prefix[] = {PREFIX("e", "event_id")};
    ck_assert_int_eq(store_pick_dup_check(prefix, 1), DUP_UNINDEXED);
    const struct index_column second[] = {COL("e", "aggregate_id"),
                                          COL("e", "event_id")};
    ck_assert_int_eq(store_pick_dup_check(second, 2), DUP_UNINDEXED);
    ck_assert_int_eq(store_pick_dup_check(NULL, 0), DUP_UNINDEXED);
    const struct index_column both[] = {COL("a", "event_id"),
                                        UNIQUE("b", "event_id")};
    ck_assert_int_eq(store_pick_dup_check(both, 2), DUP_IMPOSSIBLE);
}
END_TEST

START_TEST(test_retry_index)
{
    char *ix = store_pick_retry_index(recommended, NCOLS(recommended));
    ck_assert_str_eq(ix, "`idx_outbox_due`");
    free(ix);
    /* The seed's next_retry_at is second in its index: none to force. */
    ck_assert_ptr_null(store_pick_retry_index(seed, NCOLS(seed)));
    const struct index_column prefix[] = {PREFIX("d", "next_retry_at")};
    ck_assert_ptr_null(store_pick_retry_index(prefix, 1));
    const struct index_column quoted[] = {
        COL("a", "status"), COL("d`x", "next_retry_at"), COL("d`x", "id")};
    ix = store_pick_retry_index(quoted, NCOLS(quoted));
    ck_assert_str_eq(ix, "`d``x`");
    free(ix);
}
END_TEST

/* The index both claims of delayed rows are forced onto; none on the
 * seed's table, or where available_at is not second or id not third. */
START_TEST(test_delay_index)
{
    char *ix = store_pick_delay_index(recommended, NCOLS(recommended));
    ck_assert_str_eq(ix, "`idx_outbox_status`");
    free(ix);
    ck_assert_ptr_null(store_pick_delay_index(seed, NCOLS(seed)));
    const struct index_column alone[] = {COL("a`x", "status"),
                                         COL("a`x", "available_at")};
    ix = store_pick_delay_index(alone, NCOLS(alone));
    ck_assert_str_eq(ix, "`a``x`");
    free(ix);
    const struct index_column unusable[] = {
        COL("a", "available_at"),  COL("a", "status"),
        COL("b", "status"),        PREFIX("b", "available_at"),
        COL("c", "status"),        COL("c", "available_at"),
        COL("c", "created_at"),    COL("d", "status"),
        COL("d", "next_retry_at"), COL("d", "available_at")};
    ck_assert_ptr_null(store_pick_delay_index(unusable, NCOLS(unusable)));
    ck_assert_ptr_null(store_pick_delay_index(NULL, 0));
}
END_TEST

START_TEST(test_id_primary)
{
    ck_assert(store_pick_id_primary(recommended, NCOLS(recommended)));
    ck_assert(store_pick_id_primary(seed, NCOLS(seed)));
    const struct index_column tenant[] = {UNIQUE("PRIMARY", "tenant"),
                                          UNIQUE("PRIMARY", "id")};
    ck_assert(!store_pick_id_primary(tenant, 2));
    const struct index_column unique_id[] = {UNIQUE("uk_id", "id")};
    ck_assert(!store_pick_id_primary(unique_id, 1));
    ck_assert(!store_pick_id_primary(NULL, 0));
}
END_TEST

static struct outbox_row
row_in(enum row_state state, unsigned retry_count)
{
    return (struct outbox_row){.state = state, .retry_count = retry_count};
}

START_TEST(test_classify_outcomes)
{
    const char *error = "x";
    struct outbox_row row = row_in(ROW_ACKED, 0);
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_SENT);
    ck_assert_ptr_null(error);
    row = row_in(ROW_FAILED, 0);
    row.error = "broker said no";
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_RETRY);
    ck_assert_str_eq(error, "broker said no");
    row.dead = true;
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_DEAD);
    ck_assert_str_eq(error, "broker said no");
    row = row_in(ROW_REJECTED, 0);
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_RETRY);
    ck_assert_str_eq(error, "failed (no reason given)");
    row = row_in(ROW_CLAIMED, 2);
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_RELEASE);
    ck_assert_ptr_null(error);
    row = row_in(ROW_RELEASED, 9);
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_RELEASE);
    ck_assert_ptr_null(error);
}
END_TEST

/* Past expires_at when due to be published: DEAD, no attempt counted. */
START_TEST(test_classify_expired)
{
    const char *error;
    struct outbox_row row = row_in(ROW_REJECTED, 0);
    row.error = "expired at x UTC, due to be published 0.0 s later";
    row.dead = row.expired = true;
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_EXPIRED);
    ck_assert_str_eq(error, row.error);
}
END_TEST

/* Published, no confirm: an attempt, DEAD once past max_retries. */
START_TEST(test_classify_unconfirmed)
{
    const char *error;
    struct outbox_row row = row_in(ROW_PUBLISHED, 2);
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_RETRY);
    ck_assert_str_eq(error, "no publisher confirm received");
    row.retry_count = 3;
    ck_assert_int_eq(store_classify(&row, 3, &error), FIN_DEAD);
    ck_assert_str_eq(error, "no publisher confirm received");
}
END_TEST

static void
assert_clean(const char *text, unsigned max, enum text_charset cs,
             const char *want)
{
    struct strbuf out = {0};
    ck_assert_str_eq(store_clean_text(&out, text, max, cs), want);
    /* Reused, as finalize does: nothing of the first call is left. */
    ck_assert_str_eq(store_clean_text(&out, "", max, cs), "");
    ck_assert_str_eq(store_clean_text(&out, text, max, cs), want);
    strbuf_free(&out);
}

#define EURO "\xe2\x82\xac"     /* U+20AC, 3 bytes */
#define GRIN "\xf0\x9f\x98\x80" /* U+1F600, 4 bytes */
#define E_ACUTE "\xc3\xa9"      /* U+00E9, 2 bytes */

START_TEST(test_clean_text_charsets)
{
    const char *text = "a" E_ACUTE EURO GRIN "z";
    assert_clean(text, 100, TEXT_UTF8MB4, text);
    assert_clean(text, 100, TEXT_UTF8MB3, "a" E_ACUTE EURO "?z");
    assert_clean(text, 100, TEXT_ASCII, "a???z");
}
END_TEST

/* Invalid bytes become one '?' each, in every charset. */
START_TEST(test_clean_text_invalid)
{
    assert_clean("a\xff"
                 "b\xc3",
                 100, TEXT_UTF8MB4, "a?b?");
    assert_clean("\xed\xa0\x80", 100, TEXT_UTF8MB4, "???"); /* surrogate */
    assert_clean("\xc0\xaf", 100, TEXT_UTF8MB3, "??");      /* overlong */
    assert_clean("x\x80y", 100, TEXT_ASCII, "x?y");
}
END_TEST

/* The cap counts characters, not bytes, as the column does. */
START_TEST(test_clean_text_cap)
{
    assert_clean("abcdef", 4, TEXT_UTF8MB4, "abcd");
    assert_clean(GRIN GRIN GRIN, 2, TEXT_UTF8MB4, GRIN GRIN);
    assert_clean(GRIN GRIN GRIN, 2, TEXT_UTF8MB3, "??");
    assert_clean(EURO "abc", 1, TEXT_UTF8MB4, EURO);
    assert_clean("abc", 0, TEXT_UTF8MB4, "");
    /* A long text, cut at STORE_ERROR_CHARS-like caps. */
    char big[5000];
    memset(big, 'e', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    struct strbuf out = {0};
    ck_assert_uint_eq(strlen(store_clean_text(&out, big, 1024, TEXT_ASCII)),
                      1024);
    strbuf_free(&out);
}
END_TEST

static size_t
len_of(const char *s, size_t n)
{
    return store_utf8_len((const unsigned char *)s, n);
}

START_TEST(test_utf8_len_valid)
{
    ck_assert_uint_eq(len_of("a", 1), 1);
    ck_assert_uint_eq(len_of("\x7f", 1), 1);
    ck_assert_uint_eq(len_of("\xc2\x80", 2), 2);         /* U+0080 */
    ck_assert_uint_eq(len_of("\xdf\xbf", 2), 2);         /* U+07FF */
    ck_assert_uint_eq(len_of("\xe0\xa0\x80", 3), 3);     /* U+0800 */
    ck_assert_uint_eq(len_of("\xed\x9f\xbf", 3), 3);     /* U+D7FF */
    ck_assert_uint_eq(len_of("\xef\xbf\xbf", 3), 3);     /* U+FFFF */
    ck_assert_uint_eq(len_of("\xf0\x90\x80\x80", 4), 4); /* U+10000 */
    ck_assert_uint_eq(len_of("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
    ck_assert_uint_eq(len_of(GRIN "tail", 8), 4);
}
END_TEST

START_TEST(test_utf8_len_invalid)
{
    ck_assert_uint_eq(len_of("\x80", 1), 0);             /* continuation */
    ck_assert_uint_eq(len_of("\xc0\x80", 2), 0);         /* overlong NUL */
    ck_assert_uint_eq(len_of("\xc1\xbf", 2), 0);         /* overlong */
    ck_assert_uint_eq(len_of("\xe0\x9f\xbf", 3), 0);     /* overlong */
    ck_assert_uint_eq(len_of("\xed\xa0\x80", 3), 0);     /* surrogate */
    ck_assert_uint_eq(len_of("\xf0\x8f\xbf\xbf", 4), 0); /* overlong */
    ck_assert_uint_eq(len_of("\xf4\x90\x80\x80", 4), 0); /* past 10FFFF */
    ck_assert_uint_eq(len_of("\xf5\x80\x80\x80", 4), 0);
    ck_assert_uint_eq(len_of("\xff", 1), 0);
    ck_assert_uint_eq(len_of("\xc3(", 2), 0);            /* bad continuation */
    ck_assert_uint_eq(len_of("\xe2\x82", 2), 0);         /* cut short */
    ck_assert_uint_eq(len_of("\xf0\x9f\x98\x80", 3), 0); /* past n */
}
END_TEST

START_TEST(test_parse_us)
{
    ck_assert_int_eq(store_parse_us("1718000000.123456"), 1718000000123456);
    ck_assert_int_eq(store_parse_us("1718000000"), 1718000000000000);
    ck_assert_int_eq(store_parse_us("1718000000.5"), 1718000000500000);
    ck_assert_int_eq(store_parse_us("0.000001"), 1);
    /* Digits past the microsecond are dropped, not rounded. */
    ck_assert_int_eq(store_parse_us("7.1234569"), 7123456);
}
END_TEST

START_TEST(test_parse_us_bad)
{
    ck_assert_int_eq(store_parse_us(NULL), 0);
    ck_assert_int_eq(store_parse_us(""), 0);
    ck_assert_int_eq(store_parse_us("soon"), 0);
    ck_assert_int_eq(store_parse_us("12.x"), 12000000);
}
END_TEST

/* The versions check_version compares with STORE_MIN_*. */
START_TEST(test_parse_version)
{
    ck_assert_uint_eq(store_parse_version("10.11.6-MariaDB"), 101106);
    ck_assert_uint_eq(store_parse_version("8.0.36"), 80036);
    ck_assert_uint_eq(store_parse_version("8.0"), 80000);
    ck_assert_uint_ge(store_parse_version("10.6.0-MariaDB"), STORE_MIN_MARIADB);
    ck_assert_uint_lt(store_parse_version("10.5.23-MariaDB"),
                      STORE_MIN_MARIADB);
    ck_assert_uint_lt(store_parse_version("8.0.0"), STORE_MIN_MYSQL);
    ck_assert_uint_eq(store_parse_version("unknown"), 0);
}
END_TEST

START_TEST(test_parse_charset)
{
    ck_assert_int_eq(store_parse_charset("utf8mb4"), TEXT_UTF8MB4);
    ck_assert_int_eq(store_parse_charset("UTF8MB4"), TEXT_UTF8MB4);
    ck_assert_int_eq(store_parse_charset("utf8mb3"), TEXT_UTF8MB3);
    ck_assert_int_eq(store_parse_charset("utf8"), TEXT_UTF8MB3);
    ck_assert_int_eq(store_parse_charset("latin1"), TEXT_ASCII);
    ck_assert_int_eq(store_parse_charset(NULL), TEXT_ASCII);
}
END_TEST

/* As MariaDB and MySQL print sql/outbox.sql's column; anything else
 * (another state set, a negation) is not trusted. */
START_TEST(test_unfinished_expression)
{
    ck_assert(store_is_unfinished_expression(
        "`status` in ('PENDING','RETRY','PROCESSING')"));
    ck_assert(store_is_unfinished_expression(
        "(`status` in (_utf8mb4'PENDING',_utf8mb4'RETRY',"
        "_utf8mb4'PROCESSING'))"));
    ck_assert(
        !store_is_unfinished_expression("`status` in ('PENDING','RETRY')"));
    ck_assert(!store_is_unfinished_expression(
        "`status` not in ('PENDING','RETRY','PROCESSING')"));
    ck_assert(!store_is_unfinished_expression(
        "`status` in ('PENDING','RETRY','PROCESSING','SENT')"));
    ck_assert(!store_is_unfinished_expression(NULL));
}
END_TEST

/* MariaDB's and MySQL's spelling of sql/outbox.sql's `held`. */
START_TEST(test_held_expression)
{
    ck_assert(
        store_is_held_expression("`status` = 'DEAD' and `locked_by` is null"));
    ck_assert(store_is_held_expression(
        "((`status` = _utf8mb4'DEAD') and (`locked_by` is null))"));
    ck_assert(!store_is_held_expression("`status` = 'DEAD'"));
    ck_assert(!store_is_held_expression(
        "`status` = 'DEAD' and `locked_by` is not null"));
    ck_assert(
        !store_is_held_expression("`status` = 'DEAD' or `locked_by` is null"));
    ck_assert(!store_is_held_expression(
        "`status` in ('DEAD','RETRY') and `locked_by` is null"));
    ck_assert(!store_is_held_expression(NULL));
}
END_TEST

START_TEST(test_binary_collation)
{
    ck_assert(store_is_binary_collation("utf8mb4_bin"));
    ck_assert(store_is_binary_collation("utf8mb4_0900_bin"));
    ck_assert(store_is_binary_collation("latin1_bin"));
    ck_assert(!store_is_binary_collation("utf8mb4_general_ci"));
    ck_assert(!store_is_binary_collation("_bin"));
    ck_assert(!store_is_binary_collation(NULL));
}
END_TEST

/* A store with the one row held that a lean claim locked, its head-free
 * proof read; id 1 held, rows of ids told after. */
static struct store *
join_store(struct outbox_batch *first, struct outbox_row *rows)
{
    struct store *st = calloc(1, sizeof(*st));
    ck_assert_ptr_nonnull(st);
    st->plan.id_primary = true;
    st->claim.proof = PROOF_HELD;
    rows[0].id = 1;
    *first = (struct outbox_batch){.rows = rows, .n = 1};
    return st;
}

/* The binlog tells of id; the next join by it is picked. */
static int
told_and_picked(struct store *st, const struct outbox_batch *first, uint64_t id,
                bool doubt_first)
{
    char err[128];
    if (doubt_first)
        store_told_ids(st, &(struct told_ids){.doubt = true});
    store_told_ids(st, &(struct told_ids){.id = {id}, .n = 1});
    ck_assert_int_eq(store_join_pick(st, first, id - 1, err, sizeof(err)), 0);
    ck_assert_uint_eq(st->claim.join_point, id);
    return st->claim.join_form;
}

/* With the proof read, a join by the one id told leaves the head out
 * while every commit told inserts rows the transaction goes on to hold;
 * a doubt told after the proof (a row updated, which may be unfinished
 * again) ends it for the transaction's later joins. */
START_TEST(test_join_doubt_ends_head_free)
{
    struct outbox_row rows[2] = {{0}};
    struct outbox_batch first;
    struct store *st = join_store(&first, rows);
    ck_assert_int_eq(told_and_picked(st, &first, 2, false), JOIN_POINT_FREE);
    rows[1].id = 2; /* joined */
    first.n = 2;
    ck_assert_int_eq(told_and_picked(st, &first, 3, true), JOIN_POINT);
    ck_assert_int_eq(st->claim.proof, PROOF_NONE);
    free(st);

    st = join_store(&first, rows);
    ck_assert_int_eq(told_and_picked(st, &first, 2, false), JOIN_POINT_FREE);
    rows[1].id = 2;
    first.n = 2;
    ck_assert_int_eq(told_and_picked(st, &first, 3, false), JOIN_POINT_FREE);
    free(st);
}
END_TEST

Suite *
store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *plan = tcase_create("plan");
    tcase_add_test(plan, test_claim_order_recommended);
    tcase_add_test(plan, test_claim_order_seed);
    tcase_add_test(plan, test_claim_order_status_index_wins);
    tcase_add_test(plan, test_claim_order_first_status_index);
    tcase_add_test(plan, test_claim_order_unusable_indexes);
    tcase_add_test(plan, test_claim_order_quotes);
    tcase_add_test(plan, test_dup_check);
    tcase_add_test(plan, test_retry_index);
    tcase_add_test(plan, test_delay_index);
    tcase_add_test(plan, test_id_primary);
    suite_add_tcase(s, plan);
    TCase *fin = tcase_create("finalize");
    tcase_add_test(fin, test_classify_outcomes);
    tcase_add_test(fin, test_classify_unconfirmed);
    tcase_add_test(fin, test_classify_expired);
    tcase_add_test(fin, test_clean_text_charsets);
    tcase_add_test(fin, test_clean_text_invalid);
    tcase_add_test(fin, test_clean_text_cap);
    tcase_add_test(fin, test_utf8_len_valid);
    tcase_add_test(fin, test_utf8_len_invalid);
    suite_add_tcase(s, fin);
    TCase *parse = tcase_create("parse");
    tcase_add_test(parse, test_parse_us);
    tcase_add_test(parse, test_parse_us_bad);
    tcase_add_test(parse, test_parse_version);
    tcase_add_test(parse, test_parse_charset);
    tcase_add_test(parse, test_unfinished_expression);
    tcase_add_test(parse, test_held_expression);
    tcase_add_test(parse, test_binary_collation);
    suite_add_tcase(s, parse);
    TCase *join = tcase_create("join");
    tcase_add_test(join, test_join_doubt_ends_head_free);
    suite_add_tcase(s, join);
    return s;
}
