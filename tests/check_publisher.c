/*
 * check_publisher: what the publisher does without a broker: the masked
 * URLs that logs show, and a row's values into AMQP properties and
 * headers (publisher_encode_row), including inputs the fuzzers found.
 */
#include <amqp.h>
#include <amqp_framing.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher.h"
#include "util.h"

Suite *publisher_suite(void);

static const struct {
    const char *url, *masked;
} masks[] = {
    {"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/"},
    {"amqps://u:p%40ss@host:5671/vh", "amqps://u:***@host:5671/vh"},
    {"amqp://:pw@host", "amqp://:***@host"},
    {"amqp://u:@h", "amqp://u:***@h"},
    {"amqp://u@host/", "amqp://u@host/"},
    {"amqp://host:5672/", "amqp://host:5672/"},
    {"amqp://u:p@[::1]:5672/%2f", "amqp://u:***@[::1]:5672/%2f"},
    /* fuzz_url: no password in the url, so amqp_parse_url points at its
     * default "guest" outside the text; that is not an offset into it. */
    {"amqps://", "amqps://"},
    {"amqp://", "amqp://"},
    /* Refused by amqp_parse_url: nothing between "user:" (or "://") and
     * the last '@', nothing after "://" without an '@'. */
    {"amqp://user:secret", "amqp://***"},
    {"amqp://u:p@h@x", "amqp://u:***@x"},
    {"amqp://u:pa/ss@host", "amqp://u:***@host"},
    {"amqp://userpass@h@x", "amqp://***@x"},
    {"http://guest:guest@127.0.0.1/", "http://guest:***@127.0.0.1/"},
    {"no scheme:secret", "***"},
};

START_TEST(test_mask_url)
{
    char *got = publisher_mask_url(masks[_i].url);
    ck_assert_str_eq(got, masks[_i].masked);
    free(got);
}
END_TEST

static struct broker_config broker = {.name = "unit"};

static struct outbox_row
row_make(const char *headers)
{
    struct outbox_row row = {
        .id = 7,
        .event_id = "ev-1",
        .aggregate_type = "Order",
        .aggregate_id = "o-1",
        .event_type = "OrderPaid",
        .headers = headers,
        .exchange = "orders",
        .routing_key = "Order.OrderPaid",
        .created_us = 1700000000123456,
    };
    return row;
}

static const amqp_table_entry_t *
header(const amqp_basic_properties_t *props, const char *key)
{
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == strlen(key) &&
            memcmp(e->key.bytes, key, e->key.len) == 0)
            return e;
    }
    return NULL;
}

START_TEST(test_encode_row)
{
    struct publisher *p = publisher_new(&broker, "unit");
    struct outbox_row row =
        row_make("{\"tenant\": \"acme\", \"n\": 3, \"outbox_id\": 99}");
    amqp_basic_properties_t props;
    char err[ERR_LEN] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, err, sizeof(err)), 0);
    ck_assert_int_eq(props.timestamp, 1700000000);
    ck_assert_int_eq(props.delivery_mode, 2);
    ck_assert_int_eq(props.headers.num_entries, 5);
    const amqp_table_entry_t *e = header(&props, "tenant");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->value.kind, AMQP_FIELD_KIND_UTF8);
    /* The built-in header wins over the column's. */
    e = header(&props, "outbox_id");
    ck_assert_int_eq(e->value.value.i64, 7);
    publisher_free(p);
}
END_TEST

/* RabbitMQ's per-message TTL, only where the relay set one. */
START_TEST(test_encode_expiration)
{
    struct publisher *p = publisher_new(&broker, "unit");
    struct outbox_row row = row_make(NULL);
    amqp_basic_properties_t props;
    char err[ERR_LEN] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, err, sizeof(err)), 0);
    ck_assert(!(props._flags & AMQP_BASIC_EXPIRATION_FLAG));
    row.expiration = "1500";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, err, sizeof(err)), 0);
    ck_assert(props._flags & AMQP_BASIC_EXPIRATION_FLAG);
    ck_assert_uint_eq(props.expiration.len, 4);
    ck_assert_int_eq(memcmp(props.expiration.bytes, "1500", 4), 0);
    publisher_free(p);
}
END_TEST

START_TEST(test_encode_rejects)
{
    struct publisher *p = publisher_new(&broker, "unit");
    amqp_basic_properties_t props;
    char err[ERR_LEN];
    struct outbox_row row = row_make("{\"a\": ");
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "invalid headers JSON") != NULL, "%s", err);
    row = row_make(NULL);
    row.event_id = NULL;
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "event_id is NULL");
    /* 5000 bytes of header cannot fit a 4096-byte frame. */
    char *big = malloc(6000);
    snprintf(big, 6000, "{\"k\": \"%05000d\"}", 0);
    row = row_make(big);
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 4096, &props, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "too large") != NULL, "%s", err);
    free(big);
    publisher_free(p);
}
END_TEST

Suite *
publisher_suite(void)
{
    Suite *s = suite_create("publisher");
    TCase *tc = tcase_create("offline");
    tcase_add_loop_test(tc, test_mask_url, 0, sizeof(masks) / sizeof(*masks));
    tcase_add_test(tc, test_encode_row);
    tcase_add_test(tc, test_encode_expiration);
    tcase_add_test(tc, test_encode_rejects);
    suite_add_tcase(s, tc);
    return s;
}
