/* check_batch: the row state machine and the batch arena. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "batch.h"
#include "log.h"
#include "util.h"

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

/* The next claim's large payloads land in the mapping the last batch
 * gave back, not in fresh pages to fault and zero. */
START_TEST(test_bulk_mapping_reused)
{
    static char big[100000];
    batch_spares_expire(UINT64_MAX);
    struct outbox_batch a, b;
    batch_init(&a);
    batch_init(&b);
    const char *first = batch_bulkdup(&a, big, sizeof(big));
    batch_release_bulk(&a);
    ck_assert_uint_gt(batch_spare_bytes(), sizeof(big));
    const char *again = batch_bulkdup(&b, big, sizeof(big));
    ck_assert_ptr_eq(again, first);
    ck_assert_uint_eq(batch_spare_bytes(), 0);
    batch_free(&a);
    batch_free(&b);
}
END_TEST

/* A spare much larger than the payload stays where it is: reused, it
 * would keep resident pages the payload never needed. */
START_TEST(test_bulk_spare_fits_size)
{
    static char big[1048576];
    batch_spares_expire(UINT64_MAX);
    struct outbox_batch b;
    batch_init(&b);
    batch_bulkdup(&b, big, sizeof(big));
    batch_release_bulk(&b);
    size_t spare = batch_spare_bytes();
    ck_assert_uint_gt(spare, sizeof(big));
    batch_bulkdup(&b, big, 100000);
    ck_assert_uint_eq(batch_spare_bytes(), spare);
    batch_free(&b);
    batch_spares_expire(UINT64_MAX);
}
END_TEST

/* What a drain leaves is bounded, and goes once unused for the idle
 * limit; until then the next claims may still take it. */
START_TEST(test_bulk_spares_bounded_and_expire)
{
    static char big[1048576];
    batch_spares_expire(UINT64_MAX);
    struct outbox_batch b;
    batch_init(&b);
    for (int i = 0; i < 40; i++)
        batch_bulkdup(&b, big, sizeof(big));
    batch_release_bulk(&b);
    size_t spare = batch_spare_bytes();
    ck_assert_uint_le(spare, BATCH_SPARE_BYTES);
    ck_assert_uint_gt(spare, BATCH_SPARE_BYTES - 2 * sizeof(big));
    uint64_t put_by = clock_ms();
    batch_spares_expire(put_by); /* younger than the limit: kept */
    ck_assert_uint_eq(batch_spare_bytes(), spare);
    batch_spares_expire(put_by + BATCH_SPARE_IDLE_MS);
    ck_assert_uint_eq(batch_spare_bytes(), 0);
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

/* docs/contract.md section 6: whole milliseconds left, floored. */
START_TEST(test_expiry_ms_left)
{
    ck_assert_int_eq(batch_expiry_ms_left(60000000, 0), 60000);
    ck_assert_int_eq(batch_expiry_ms_left(1000, 0), 1);
    ck_assert_int_eq(batch_expiry_ms_left(999, 0),
                     0); /* rounds to 0: expired */
    ck_assert_int_eq(batch_expiry_ms_left(0, 0), 0);
    ck_assert_int_eq(batch_expiry_ms_left(-1, 0), -1);
    ck_assert_int_eq(batch_expiry_ms_left(-1500, 0), -2);
    ck_assert_int_eq(batch_expiry_ms_left(5000000, 4999), 1);
    ck_assert_int_eq(batch_expiry_ms_left(5000000, 5000), 0);
    ck_assert_int_eq(batch_expiry_ms_left(5000000, 5001), -1);
}
END_TEST

START_TEST(test_format_expiry)
{
    char buf[128];
    batch_format_expiry(buf, sizeof(buf), "2026-12-01 10:00:00.000000",
                        "claimed", 12345678);
    ck_assert_str_eq(buf, "expired at 2026-12-01 10:00:00.000000 UTC, "
                          "claimed 12.3 s later");
    batch_format_expiry(buf, sizeof(buf), "2026-12-01 10:00:00.000000",
                        "claimed", 49999);
    ck_assert_str_eq(buf, "expired at 2026-12-01 10:00:00.000000 UTC, "
                          "claimed 0.0 s later");
    batch_format_expiry(buf, sizeof(buf), NULL, "due to be published", -5);
    ck_assert_str_eq(buf, "expired at ? UTC, due to be published 0.0 s later");
    batch_format_expiry(buf, sizeof(buf), "x", "claimed", 86400000000LL);
    ck_assert_str_eq(buf, "expired at x UTC, claimed 86400.0 s later");
}
END_TEST

/* An expired row is DEAD with no attempt: REJECTED, dead and expired. */
START_TEST(test_expire_row)
{
    struct outbox_batch b;
    batch_init(&b);
    struct outbox_row *r = batch_add(&b);
    batch_expire_row(&b, r, "expired at x UTC, claimed 1.0 s later", true);
    ck_assert_int_eq(r->state, ROW_REJECTED);
    ck_assert(r->dead && r->expired && r->recorded);
    ck_assert_str_eq(r->error, "expired at x UTC, claimed 1.0 s later");
    batch_free(&b);
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
    tcase_add_test(tc, test_bulk_mapping_reused);
    tcase_add_test(tc, test_bulk_spare_fits_size);
    tcase_add_test(tc, test_bulk_spares_bounded_and_expire);
    tcase_add_test(tc, test_status_names);
    tcase_add_test(tc, test_expiry_ms_left);
    tcase_add_test(tc, test_format_expiry);
    tcase_add_test(tc, test_expire_row);
    suite_add_tcase(s, tc);
    return s;
}
