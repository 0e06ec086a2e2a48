/* check_util: durations, sizes, backoff, bounded copies, the string builder. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

Suite *util_suite(void);

static const struct {
    const char *text;
    uint64_t ms;
} good_durations[] = {
    {"0ms", 0},     {"250ms", 250},  {"1s", 1000},         {"30s", 30000},
    {"5m", 300000}, {"2h", 7200000}, {"7d", 604800000ULL}, {"1500ms", 1500},
};

static const char *const bad_durations[] = {
    "",
    "10",
    "s",
    "-1s",
    "1.5s",
    "10x",
    "10 s",
    "5sec",
    "1ms ",
    "99999999999999999999999s",
    "18446744073709551615d",
};

START_TEST(test_duration_good)
{
    uint64_t ms = 12345;
    char err[ERR_LEN];
    ck_assert_int_eq(
        duration_parse(good_durations[_i].text, &ms, err, sizeof(err)), 0);
    ck_assert_uint_eq(ms, good_durations[_i].ms);
}
END_TEST

START_TEST(test_duration_bad)
{
    uint64_t ms = 12345;
    char err[ERR_LEN] = "";
    ck_assert_int_eq(duration_parse(bad_durations[_i], &ms, err, sizeof(err)),
                     -1);
    ck_assert_uint_eq(ms, 12345);
    ck_assert_msg(strstr(err, "duration") != NULL, "unclear error: %s", err);
}
END_TEST

START_TEST(test_duration_format)
{
    char buf[32];
    duration_format(120000, buf, sizeof(buf));
    ck_assert_str_eq(buf, "2m");
    duration_format(1500, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1500ms");
    duration_format(0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "0ms");
}
END_TEST

static const struct {
    const char *text;
    uint64_t bytes;
} good_sizes[] = {
    {"0", 0},
    {"65536", 65536},
    {"100B", 100},
    {"512KiB", 512 * 1024},
    {"16MiB", 16 * 1024 * 1024},
    {"1GiB", 1024ULL * 1024 * 1024},
    {"1099511627776", 1099511627776ULL},
};

static const char *const bad_sizes[] = {
    "",
    "MiB",
    "-1MiB",
    "1.5MiB",
    "16MB",
    "16mib",
    "16 MiB",
    "16M",
    "16k",
    "1MiB ",
    "99999999999999999999999",
    "17179869184GiB",
};

START_TEST(test_size_good)
{
    uint64_t bytes = 12345;
    char err[ERR_LEN];
    ck_assert_int_eq(size_parse(good_sizes[_i].text, &bytes, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(bytes, good_sizes[_i].bytes);
}
END_TEST

START_TEST(test_size_bad)
{
    uint64_t bytes = 12345;
    char err[ERR_LEN] = "";
    ck_assert_int_eq(size_parse(bad_sizes[_i], &bytes, err, sizeof(err)), -1);
    ck_assert_uint_eq(bytes, 12345);
    ck_assert_msg(strstr(err, "size") != NULL, "unclear error: %s", err);
}
END_TEST

START_TEST(test_size_format)
{
    char buf[32];
    size_format(16 * 1024 * 1024, buf, sizeof(buf));
    ck_assert_str_eq(buf, "16MiB");
    size_format(1536, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1536B");
    size_format(0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "0B");
    uint64_t back;
    size_parse("1536B", &back, buf, sizeof(buf));
    ck_assert_uint_eq(back, 1536);
}
END_TEST

START_TEST(test_backoff_bounds)
{
    for (unsigned attempt = 0; attempt < 40; attempt++)
        for (int k = 0; k < 50; k++) {
            uint64_t full = 1000ULL << (attempt < 20 ? attempt : 20);
            if (full > 300000)
                full = 300000;
            uint64_t d = backoff_ms(attempt, 1000, 300000);
            ck_assert_uint_ge(d, full / 2);
            ck_assert_uint_le(d, full);
        }
}
END_TEST

/* Within [ms - ms/spread, ms], and spread out: outboxes started together
 * drift apart only if the draws differ. */
START_TEST(test_spread_bounds)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int k = 0; k < 1000; k++) {
        uint64_t d = spread_ms(10000, 4);
        ck_assert_uint_ge(d, 7500);
        ck_assert_uint_le(d, 10000);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    ck_assert_uint_lt(lo, 8000);
    ck_assert_uint_gt(hi, 9500);
    ck_assert_uint_eq(spread_ms(3, 4), 3); /* nothing to spread */
    ck_assert_uint_eq(spread_ms(10, 0), 10);
}
END_TEST

START_TEST(test_str_copy_truncates)
{
    char buf[4];
    ck_assert_uint_eq(str_copy(buf, "abcdef", sizeof(buf)), 6);
    ck_assert_str_eq(buf, "abc");
}
END_TEST

START_TEST(test_strbuf_grows)
{
    struct strbuf b = {0};
    strbuf_reset(&b);
    ck_assert_str_eq(b.p, "");
    for (int i = 0; i < 1000; i++)
        strbuf_addf(&b, "%d,", i);
    strbuf_adds(&b, "end");
    strbuf_add(&b, "xyz", 1);
    ck_assert_uint_eq(b.len, strlen(b.p));
    ck_assert_int_eq(strncmp(b.p, "0,1,2,", 6), 0);
    ck_assert_str_eq(b.p + b.len - 8, "999,endx");
    size_t cap = b.cap;
    strbuf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, cap); /* memory kept */
    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    strbuf_addf(&b, "<%s>", big);
    ck_assert_uint_eq(b.len, sizeof(big) + 1);
    ck_assert_int_eq(b.p[b.len - 1], '>');
    strbuf_free(&b);
    ck_assert_ptr_null(b.p);
    ck_assert_uint_eq(b.cap, 0);
}
END_TEST

START_TEST(test_xasprintf)
{
    char *p = xasprintf("%s.%u", "db", 42u);
    ck_assert_str_eq(p, "db.42");
    free(p);
}
END_TEST

/* Names of databases and schemas: letters, digits and the given few. */
START_TEST(test_str_is_word)
{
    ck_assert(str_is_word("tenant_0001", "_"));
    ck_assert(str_is_word("a$b-c", "_$-"));
    ck_assert(!str_is_word("", "_"));
    ck_assert(!str_is_word("a.b", "_-"));
    ck_assert(!str_is_word("t\xc3\xa9", "_"));
}
END_TEST

START_TEST(test_port_parse)
{
    ck_assert_uint_eq(port_parse("3306"), 3306);
    ck_assert_uint_eq(port_parse("1"), 1);
    ck_assert_uint_eq(port_parse("65535"), 65535);
    ck_assert_uint_eq(port_parse("0"), 0);
    ck_assert_uint_eq(port_parse("65536"), 0);
    ck_assert_uint_eq(port_parse(""), 0);
    ck_assert_uint_eq(port_parse("+80"), 0);
    ck_assert_uint_eq(port_parse("80 "), 0);
    ck_assert_uint_eq(port_parse("100000"), 0);
}
END_TEST

Suite *
util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("duration");
    tcase_add_loop_test(tc, test_duration_good, 0,
                        sizeof(good_durations) / sizeof(*good_durations));
    tcase_add_loop_test(tc, test_duration_bad, 0,
                        sizeof(bad_durations) / sizeof(*bad_durations));
    tcase_add_test(tc, test_str_is_word);
    tcase_add_test(tc, test_port_parse);
    tcase_add_test(tc, test_duration_format);
    tcase_add_loop_test(tc, test_size_good, 0,
                        sizeof(good_sizes) / sizeof(*good_sizes));
    tcase_add_loop_test(tc, test_size_bad, 0,
                        sizeof(bad_sizes) / sizeof(*bad_sizes));
    tcase_add_test(tc, test_size_format);
    tcase_add_test(tc, test_backoff_bounds);
    tcase_add_test(tc, test_spread_bounds);
    tcase_add_test(tc, test_str_copy_truncates);
    tcase_add_test(tc, test_strbuf_grows);
    tcase_add_test(tc, test_xasprintf);
    suite_add_tcase(s, tc);
    return s;
}
