/* check_logrepeat: which failures of a refusing server reach the log. */
#include <check.h>

#include "logrepeat.h"

Suite *logrepeat_suite(void);

/* A failure every 100 ms for a minute, as a claim loop would see it. */
static unsigned
lines_in_a_minute(struct logrepeat *lr, uint64_t *counted)
{
    unsigned lines = 0;
    uint64_t since, sum = 0;
    for (uint64_t t = 1000; t < 61000; t += 100) {
        enum logrepeat_verdict v =
            logrepeat_failure(lr, "claim: read-only (error 1290)", t, &since);
        if (v != LOGREPEAT_QUIET) {
            lines++;
            sum += since;
        }
    }
    *counted = sum;
    return lines;
}

START_TEST(test_first_then_doubling_steps)
{
    struct logrepeat lr;
    uint64_t counted;
    logrepeat_init(&lr, 1000, 30000);
    /* 600 failures: lines at 0, +1, +3, +7, +15, +31 s, then every 30 s. */
    ck_assert_uint_eq(lines_in_a_minute(&lr, &counted), 6);
    /* Every failure up to the last line (at +31 s) is in a line's count. */
    ck_assert_uint_eq(counted, 311);
    ck_assert_uint_eq(lr.total, 600);
}
END_TEST

START_TEST(test_first_logged_and_counts)
{
    struct logrepeat lr;
    uint64_t since;
    logrepeat_init(&lr, 1000, 30000);
    ck_assert_int_eq(logrepeat_failure(&lr, "e", 5000, &since),
                     LOGREPEAT_FIRST);
    ck_assert_uint_eq(since, 1);
    for (int i = 1; i <= 9; i++)
        ck_assert_int_eq(logrepeat_failure(&lr, "e", 5000 + i * 100, &since),
                         LOGREPEAT_QUIET);
    ck_assert_int_eq(logrepeat_failure(&lr, "e", 6000, &since),
                     LOGREPEAT_REPEAT);
    ck_assert_uint_eq(since, 10); /* the nine quiet ones and this one */
    /* The step doubled: nothing for 2 s after that line. */
    ck_assert_int_eq(logrepeat_failure(&lr, "e", 7900, &since),
                     LOGREPEAT_QUIET);
    ck_assert_int_eq(logrepeat_failure(&lr, "e", 8000, &since),
                     LOGREPEAT_REPEAT);
    ck_assert_uint_eq(since, 2);
}
END_TEST

/* "database writable again after 12s, 57 failed claims" */
START_TEST(test_clear_reports_run)
{
    struct logrepeat lr;
    uint64_t since, dur = 0, n = 0;
    logrepeat_init(&lr, 1000, 30000);
    ck_assert(!logrepeat_success(&lr, 100, &dur, &n));
    for (int i = 0; i < 57; i++)
        logrepeat_failure(&lr, "e", 1000 + (uint64_t)i * 200, &since);
    ck_assert(logrepeat_success(&lr, 13000, &dur, &n));
    ck_assert_uint_eq(dur, 12000);
    ck_assert_uint_eq(n, 57);
    /* Cleared: the next success says nothing, the next failure is new. */
    ck_assert(!logrepeat_success(&lr, 13100, &dur, &n));
    ck_assert_int_eq(logrepeat_failure(&lr, "e", 13200, &since),
                     LOGREPEAT_FIRST);
}
END_TEST

/* A changed error shows soon; two alternating ones still cannot flood. */
START_TEST(test_new_text_soon_but_bounded)
{
    struct logrepeat lr;
    uint64_t since;
    unsigned lines = 0;
    logrepeat_init(&lr, 1000, 30000);
    ck_assert_int_eq(logrepeat_failure(&lr, "a", 0, &since), LOGREPEAT_FIRST);
    ck_assert_int_eq(logrepeat_failure(&lr, "b", 500, &since), LOGREPEAT_QUIET);
    ck_assert_int_eq(logrepeat_failure(&lr, "b", 1000, &since),
                     LOGREPEAT_FIRST);
    for (uint64_t t = 1100; t < 11000; t += 100)
        lines += logrepeat_failure(&lr, t % 200 ? "a" : "b", t, &since) !=
                 LOGREPEAT_QUIET;
    ck_assert_uint_le(lines, 10); /* at most one a second */
}
END_TEST

Suite *
logrepeat_suite(void)
{
    Suite *s = suite_create("logrepeat");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_first_then_doubling_steps);
    tcase_add_test(tc, test_first_logged_and_counts);
    tcase_add_test(tc, test_clear_reports_run);
    tcase_add_test(tc, test_new_text_soon_but_bounded);
    suite_add_tcase(s, tc);
    return s;
}
