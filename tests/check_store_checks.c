/* check_store_checks: which CHECK constraints a status update may skip. */
#include <check.h>

#include "store_checks.h"

Suite *store_checks_suite(void);

static bool
may_read(const char *clause)
{
    return check_clause_may_read(clause, store_written_columns,
                                 store_nwritten_columns);
}

START_TEST(test_json_payload_is_skippable)
{
    /* What MariaDB prints for sql/outbox.sql's JSON columns. */
    ck_assert(!may_read("json_valid(`payload`)"));
    ck_assert(!may_read("json_valid(`headers`)"));
    ck_assert(!may_read(
        "`retry_counter` > 0 and octet_length(`aggregate_id`) < 100"));
    ck_assert(!may_read("1"));
}
END_TEST

START_TEST(test_written_columns_are_found)
{
    ck_assert(may_read("`status` in ('PENDING','SENT')"));
    ck_assert(may_read("`retry_count` <= 10"));
    ck_assert(may_read("STATUS <> 'X'")); /* any case, bare */
    ck_assert(may_read("`sent_at` is null or `sent_at` >= `created_at`"));
    ck_assert(may_read("json_valid(`payload`) and `last_error` is null"));
    ck_assert(may_read("`a`+`locked_until`"));
    ck_assert(
        may_read("concat(`x`,'`')=`next_retry_at`")); /* a lone backtick */
    ck_assert(may_read(NULL));
}
END_TEST

START_TEST(test_only_whole_words)
{
    ck_assert(!may_read("`xstatus` > 0 and `status_text` <> ''"));
    ck_assert(!may_read("`sent_at2` is null"));
    /* Conservative where a name could be read as two: never a miss. */
    ck_assert(may_read("`my-status` > 0"));
    ck_assert(may_read("'status' = `a`"));
}
END_TEST

START_TEST(test_other_columns)
{
    const char *gen[] = {"unfinished"};
    ck_assert(check_clause_may_read("`unfinished` in (0,1)", gen, 1));
    ck_assert(!check_clause_may_read("json_valid(`payload`)", gen, 1));
}
END_TEST

Suite *
store_checks_suite(void)
{
    Suite *s = suite_create("store_checks");
    TCase *tc = tcase_create("clause");
    tcase_add_test(tc, test_json_payload_is_skippable);
    tcase_add_test(tc, test_written_columns_are_found);
    tcase_add_test(tc, test_only_whole_words);
    tcase_add_test(tc, test_other_columns);
    suite_add_tcase(s, tc);
    return s;
}
