/* check_pacer: the adaptive claim pacing, step by step. */
#include <check.h>

#include "pacer.h"

Suite *pacer_suite(void);

static const struct pacer_limits lim = {
    .min_ms = 1, .poll_ms = 1000, .woken_ms = 10000};

START_TEST(test_full_claims_at_once)
{
    struct pacer p;
    pacer_init(&p, &lim);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(
            pacer_next(&p, &lim, PACER_FULL, false, PACER_NOT_DUE), 0);
}
END_TEST

/* Polling alone: the wait doubles from poll_min to poll_interval. */
START_TEST(test_poll_backoff_to_ceiling)
{
    struct pacer p;
    pacer_init(&p, &lim);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_FOUND, false, PACER_NOT_DUE),
                      1);
    uint64_t want[] = {2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000};
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++)
        ck_assert_uint_eq(
            pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE), want[i]);
}
END_TEST

/* Found rows start the backoff over: the next burst is seen soon. */
START_TEST(test_found_resets)
{
    struct pacer p;
    pacer_init(&p, &lim);
    for (int i = 0; i < 20; i++)
        pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE),
                      1000);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_FOUND, false, PACER_NOT_DUE),
                      1);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE),
                      2);
}
END_TEST

/* A live stream: a short settle after a wake that found nothing, then
 * its long ceiling. */
START_TEST(test_live_settles_then_waits_for_wakes)
{
    struct pacer p;
    pacer_init(&p, &lim);
    pacer_woken(&p, &lim);
    uint64_t want[] = {1, 2, 4, 8, 16, 10000, 10000};
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++)
        ck_assert_uint_eq(
            pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE), want[i]);
    pacer_woken(&p, &lim);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE),
                      1);
}
END_TEST

/* A live stream after rows were found: the rows behind them bring
 * their own wakes, so one look when the settle is over, then the
 * ceiling (or a row's due time, which that look reads). */
START_TEST(test_live_found_looks_once)
{
    struct pacer p;
    pacer_init(&p, &lim);
    pacer_woken(&p, &lim);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_FOUND, true, PACER_NOT_DUE),
                      PACER_SETTLE_MS);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE),
                      10000);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_FOUND, true, PACER_NOT_DUE),
                      PACER_SETTLE_MS);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, 700), 700);
    /* The stream went down since: the poll's backoff, from its ceiling */
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE),
                      1000);
}
END_TEST

/* A live stream's claim that found a row of every commit told needs no
 * look after it: the next wake, or a known due row, or the ceiling. */
START_TEST(test_live_found_all_needs_no_look)
{
    struct pacer p;
    pacer_init(&p, &lim);
    pacer_woken(&p, &lim);
    ck_assert_uint_eq(
        pacer_next(&p, &lim, PACER_FOUND_ALL, true, PACER_NOT_DUE), 10000);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_FOUND_ALL, true, 300), 300);
    /* A claim that found nothing after it waits at the ceiling too. */
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE),
                      10000);
    /* Polling alone, it is a found claim like any other. */
    pacer_init(&p, &lim);
    ck_assert_uint_eq(
        pacer_next(&p, &lim, PACER_FOUND_ALL, false, PACER_NOT_DUE), 1);
}
END_TEST

/* The stream went down: the poll's shorter ceiling applies at once. */
START_TEST(test_stream_down_uses_poll_ceiling)
{
    struct pacer p;
    pacer_init(&p, &lim);
    for (int i = 0; i < 20; i++)
        pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, false, PACER_NOT_DUE),
                      1000);
    ck_assert_uint_eq(pacer_ceiling(&lim, false), 1000);
    ck_assert_uint_eq(pacer_ceiling(&lim, true), 10000);
}
END_TEST

/* A RETRY row due sooner than the ceiling is claimed when it is due. */
START_TEST(test_due_row_caps_the_wait)
{
    struct pacer p;
    pacer_init(&p, &lim);
    for (int i = 0; i < 20; i++)
        pacer_next(&p, &lim, PACER_EMPTY, true, PACER_NOT_DUE);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, 2500), 2500);
    ck_assert_uint_eq(pacer_next(&p, &lim, PACER_EMPTY, true, 0), 0);
}
END_TEST

START_TEST(test_zero_min)
{
    const struct pacer_limits zero = {.min_ms = 0, .poll_ms = 4, .woken_ms = 4};
    struct pacer p;
    pacer_init(&p, &zero);
    ck_assert_uint_eq(pacer_next(&p, &zero, PACER_FOUND, false, PACER_NOT_DUE),
                      0);
    uint64_t want[] = {1, 2, 4, 4};
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++)
        ck_assert_uint_eq(
            pacer_next(&p, &zero, PACER_EMPTY, false, PACER_NOT_DUE), want[i]);
}
END_TEST

Suite *
pacer_suite(void)
{
    Suite *s = suite_create("pacer");
    TCase *tc = tcase_create("pace");
    tcase_add_test(tc, test_full_claims_at_once);
    tcase_add_test(tc, test_poll_backoff_to_ceiling);
    tcase_add_test(tc, test_found_resets);
    tcase_add_test(tc, test_live_settles_then_waits_for_wakes);
    tcase_add_test(tc, test_live_found_looks_once);
    tcase_add_test(tc, test_live_found_all_needs_no_look);
    tcase_add_test(tc, test_stream_down_uses_poll_ceiling);
    tcase_add_test(tc, test_due_row_caps_the_wait);
    tcase_add_test(tc, test_zero_min);
    suite_add_tcase(s, tc);
    return s;
}
