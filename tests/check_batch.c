/* check_batch: the row state machine and the batch arena. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "batch.h"
#include "log.h"

Suite *batch_suite(void);

START_TEST(test_legal_path)
{
    struct outbox_batch b;
    batch_init(&b);
    struct outbox_row *r = batch_add(&b);
    ck_assert_int_eq(r->state, ROW_CLAIMED);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_PUBLISHED, NULL), 0);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_FAILED, "nack"), 0);
    ck_assert_str_eq(r->error, "nack");
    batch_free(&b);
}
END_TEST

/* Never SENT without a publish: CLAIMED -> ACKED is refused. */
START_TEST(test_illegal_transitions)
{
    log_init(LOG_ERROR + 0, LOG_FORMAT_TEXT);
    struct outbox_batch b;
    batch_init(&b);
    struct outbox_row *r = batch_add(&b);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_ACKED, NULL), -1);
    ck_assert_int_eq(r->state, ROW_CLAIMED);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_PUBLISHED, NULL), 0);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_CLAIMED, NULL), -1);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_ACKED, NULL), 0);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_FAILED, "x"), -1);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_RELEASED, NULL), -1);
    ck_assert_int_eq(r->state, ROW_ACKED);
    batch_free(&b);
}
END_TEST

/* A publish whose outcome says nothing against the row (the broker
 * blocked, or closed the channel for another message) is given back. */
START_TEST(test_published_released)
{
    struct outbox_batch b;
    batch_init(&b);
    struct outbox_row *r = batch_add(&b);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_PUBLISHED, NULL), 0);
    ck_assert_int_eq(row_enter_state(&b, r, ROW_RELEASED, "broker blocked"), 0);
    ck_assert_str_eq(r->error, "broker blocked");
    ck_assert_int_eq(row_enter_state(&b, r, ROW_ACKED, NULL), -1);
    batch_free(&b);
}
END_TEST

START_TEST(test_arena_survives_growth)
{
    struct outbox_batch b;
    batch_init(&b);
    char big[10000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *first = batch_strdup(&b, "first");
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5000; i++) {
            struct outbox_row *r = batch_add(&b);
            r->event_id = batch_sprintf(&b, "ev-%d", i);
        }
        const char *huge = batch_strdup(&b, big);
        ck_assert_str_eq(first, "first");
        ck_assert_str_eq(huge, big);
        ck_assert_str_eq(b.rows[4999].event_id, "ev-4999");
        batch_reset(&b);
        ck_assert_uint_eq(b.n, 0);
        first = batch_strdup(&b, "first");
    }
    batch_free(&b);
}
END_TEST

/* store_claim.c keeps a row's column pointers in the arena: every piece of it
 * and of the bulk store, large or small, must be aligned for a pointer. */
START_TEST(test_arena_aligned)
{
    struct outbox_batch b;
    batch_init(&b);
    static char big[200000];
    const size_t sizes[] = {1, 3, 8, 13, 70000, 5, sizeof(big) - 1};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
        const char *p = batch_memdup(&b, big, sizes[i]);
        const char *q = batch_bulkdup(&b, big, sizes[i]);
        ck_assert_uint_eq((uintptr_t)p % _Alignof(void *), 0);
        ck_assert_uint_eq((uintptr_t)q % _Alignof(void *), 0);
    }
    ck_assert_uint_gt(b.bulk_bytes, sizeof(big));
    batch_release_bulk(&b);
    ck_assert_uint_eq(b.bulk_bytes, 0);
    batch_free(&b);
}
END_TEST

START_TEST(test_status_names)
{
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++)
        ck_assert_int_eq(outbox_status_parse(outbox_status_name(s)), s);
    ck_assert_int_eq(outbox_status_parse("sent"), -1);
}
END_TEST

Suite *
batch_suite(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("batch");
    tcase_add_test(tc, test_legal_path);
    tcase_add_test(tc, test_illegal_transitions);
    tcase_add_test(tc, test_published_released);
    tcase_add_test(tc, test_arena_survives_growth);
    tcase_add_test(tc, test_arena_aligned);
    tcase_add_test(tc, test_status_names);
    suite_add_tcase(s, tc);
    return s;
}
