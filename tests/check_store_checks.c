/* check_store_checks: which CHECK constraints a status update may skip. */
#include <check.h>
#include <stdio.h>

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

/* sql/outbox.sql's table as MariaDB 10.11 prints it (abridged). */
static const char outbox_sql[] =
    "CREATE TABLE `outbox_event` (\n"
    "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n"
    "  `payload` longtext NOT NULL CHECK (json_valid(`payload`)),\n"
    "  `headers` longtext DEFAULT NULL CHECK (json_valid(`headers`)),\n"
    "  `status` varchar(16) NOT NULL DEFAULT 'PENDING',\n"
    "  `unfinished` tinyint(4) GENERATED ALWAYS AS (`status` in "
    "('PENDING','RETRY','PROCESSING')) VIRTUAL,\n"
    "  PRIMARY KEY (`id`),\n"
    "  KEY `idx_outbox_status` (`status`,`id`)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

static const char *const generated[] = {"unfinished"};

static enum store_checks
judge_with(const char *line)
{
    char sql[2048];
    snprintf(sql, sizeof(sql),
             "CREATE TABLE `t` (\n  `id` int,\n%s\n) ENGINE=InnoDB", line);
    return store_checks_judge(sql, generated, 1);
}

START_TEST(test_judge_tables)
{
    ck_assert_int_eq(store_checks_judge(outbox_sql, generated, 1),
                     CHECKS_SKIPPABLE);
    ck_assert_int_eq(judge_with("  `payload` blob NOT NULL"), CHECKS_NONE);
    ck_assert_int_eq(
        judge_with("  `status` varchar(16) CHECK (`status` <> 'X'),"),
        CHECKS_NEEDED);
    ck_assert_int_eq(
        judge_with("  CONSTRAINT `c1` CHECK (`retry_count` < 100)"),
        CHECKS_NEEDED);
    ck_assert_int_eq(
        judge_with("  CONSTRAINT `c2` CHECK (`unfinished` in (0,1))"),
        CHECKS_NEEDED); /* follows status */
    ck_assert_int_eq(
        judge_with("  CONSTRAINT `c3` CHECK (octet_length(`event_id`) > 0)"),
        CHECKS_SKIPPABLE);
    ck_assert_int_eq(store_checks_judge(NULL, generated, 1), CHECKS_NEEDED);
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
    tcase_add_test(tc, test_judge_tables);
    suite_add_tcase(s, tc);
    return s;
}
