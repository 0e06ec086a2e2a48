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
#include <strings.h>

#include "amqpconn.h"
#include "batch.h"
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
    char *got = amqpconn_mask_url(masks[_i].url);
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

#define CE_SOURCE "outboxd://orders/outbox_event"

static struct publisher *
ce_publisher(void)
{
    struct publisher *p = publisher_new(&broker, "unit");
    publisher_set_envelope(p, ENVELOPE_CLOUDEVENTS, CE_SOURCE);
    return p;
}

/* A string header's value is want, exactly. */
static void
assert_str_header(const amqp_basic_properties_t *props, const char *key,
                  const char *want)
{
    const amqp_table_entry_t *e = header(props, key);
    ck_assert_msg(e != NULL, "no header %s", key);
    ck_assert_int_eq(e->value.kind, AMQP_FIELD_KIND_UTF8);
    ck_assert_uint_eq(e->value.value.bytes.len, strlen(want));
    ck_assert_msg(memcmp(e->value.value.bytes.bytes, want, strlen(want)) == 0,
                  "%s is %.*s, not %s", key, (int)e->value.value.bytes.len,
                  (const char *)e->value.value.bytes.bytes, want);
}

static size_t
count_ce_headers(const amqp_basic_properties_t *props)
{
    size_t n = 0;
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_bytes_t *k = &props->headers.entries[i].key;
        n += k->len >= 11 && strncasecmp(k->bytes, "cloudEvents", 11) == 0;
    }
    return n;
}

/* docs/contract.md section 7: binary content mode, the binding's names,
 * strings throughout, outboxd's own properties and headers kept. */
START_TEST(test_encode_cloudevents)
{
    struct publisher *p = ce_publisher();
    struct outbox_row row = row_make("{\"tenant\": \"acme\"}");
    row.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    amqp_basic_properties_t props;
    char why[300] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), 0);
    assert_str_header(&props, "cloudEvents_specversion", "1.0");
    assert_str_header(&props, "cloudEvents_id", "ev-1");
    assert_str_header(&props, "cloudEvents_source", CE_SOURCE);
    assert_str_header(&props, "cloudEvents_type", "OrderPaid");
    assert_str_header(&props, "cloudEvents_subject", "o-1");
    assert_str_header(&props, "cloudEvents_time",
                      "2023-11-14T22:13:20.123456Z");
    ck_assert_uint_eq(count_ce_headers(&props), 6);
    /* datacontenttype is the content-type property, not a header. */
    ck_assert(props._flags & AMQP_BASIC_CONTENT_TYPE_FLAG);
    ck_assert_uint_eq(props.content_type.len, strlen("application/json"));
    ck_assert_ptr_null(header(&props, "cloudEvents_datacontenttype"));
    assert_str_header(&props, "aggregate_type", "Order");
    assert_str_header(&props, "aggregate_id", "o-1");
    assert_str_header(&props, "traceparent", row.traceparent);
    assert_str_header(&props, "tenant", "acme");
    ck_assert_int_eq(header(&props, "outbox_id")->value.value.i64, 7);
    ck_assert_int_eq(props.headers.num_entries, 11);
    ck_assert_uint_eq(props.message_id.len, 4);
    ck_assert_int_eq(props.timestamp, 1700000000);
    publisher_free(p);
}
END_TEST

/* RFC 3339 in UTC with six fraction digits, whatever the fraction. */
static const struct {
    int64_t us;
    const char *time;
} ce_times[] = {
    {1, "1970-01-01T00:00:00.000001Z"},
    {1700000000000000, "2023-11-14T22:13:20.000000Z"},
    {951782400999999, "2000-02-29T00:00:00.999999Z"},
    {4102444799500000, "2099-12-31T23:59:59.500000Z"},
};

START_TEST(test_encode_cloudevents_time)
{
    struct publisher *p = ce_publisher();
    struct outbox_row row = row_make(NULL);
    row.created_us = ce_times[_i].us;
    amqp_basic_properties_t props;
    char why[300] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), 0);
    assert_str_header(&props, "cloudEvents_time", ce_times[_i].time);
    publisher_free(p);
}
END_TEST

/* The spec forbids empty optional attributes: they are left out. */
START_TEST(test_encode_cloudevents_optional)
{
    struct publisher *p = ce_publisher();
    struct outbox_row row = row_make(NULL);
    row.aggregate_id = "";
    row.created_us = 0;
    amqp_basic_properties_t props;
    char why[300] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), 0);
    ck_assert_ptr_null(header(&props, "cloudEvents_subject"));
    ck_assert_ptr_null(header(&props, "cloudEvents_time"));
    ck_assert_uint_eq(count_ce_headers(&props), 4);
    publisher_free(p);
}
END_TEST

/* Row headers a CloudEvents consumer would read as attributes, under
 * either separator and in any case: the row is refused, never sent with
 * a forged or contradicting attribute. */
static const char *const forged_keys[] = {
    "cloudEvents_id",   "cloudEvents_type", "cloudEvents:source",
    "CLOUDEVENTS_time", "cloudevents_ext",  "cloudEvents_",
};

START_TEST(test_encode_cloudevents_forged)
{
    struct publisher *p = ce_publisher();
    char headers[128], want[128], why[300] = "";
    snprintf(headers, sizeof(headers), "{\"tenant\": \"a\", \"%s\": \"x\"}",
             forged_keys[_i]);
    snprintf(want, sizeof(want),
             "headers refused: key \"%s\" would set a CloudEvents attribute "
             "(envelope cloudevents: outboxd sets those)",
             forged_keys[_i]);
    struct outbox_row row = row_make(headers);
    amqp_basic_properties_t props;
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), -1);
    ck_assert_str_eq(why, want);
    publisher_free(p);
}
END_TEST

/* Names that only look alike pass through as they always did; and the
 * default envelope adds nothing and refuses nothing. */
START_TEST(test_encode_cloudevents_lookalikes)
{
    struct publisher *p = ce_publisher();
    const char *headers = "{\"cloudEventsId\": 1, \"x_cloudEvents_id\": 2, "
                          "\"cloudEvent_id\": 3}";
    struct outbox_row row = row_make(headers);
    amqp_basic_properties_t props;
    char why[300] = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), 0);
    ck_assert_ptr_nonnull(header(&props, "cloudEventsId"));
    ck_assert_ptr_nonnull(header(&props, "x_cloudEvents_id"));
    publisher_free(p);

    p = publisher_new(&broker, "unit");
    row = row_make("{\"cloudEvents_id\": \"mine\"}");
    row.event_type = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), 0);
    ck_assert_uint_eq(count_ce_headers(&props), 1);
    assert_str_header(&props, "cloudEvents_id", "mine");
    ck_assert_int_eq(props.headers.num_entries, 4);
    publisher_free(p);
}
END_TEST

/* A CloudEvent needs a non-empty id and type. */
START_TEST(test_encode_cloudevents_rejects)
{
    struct publisher *p = ce_publisher();
    amqp_basic_properties_t props;
    char why[300] = "";
    struct outbox_row row = row_make(NULL);
    row.event_id = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), -1);
    ck_assert_str_eq(why, "event_id is empty: a CloudEvent needs an id");
    row = row_make(NULL);
    row.event_type = NULL;
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), -1);
    ck_assert_str_eq(why, "event_type is empty: a CloudEvent needs a type");
    row.event_type = "";
    ck_assert_int_eq(
        publisher_encode_row(p, &row, 131072, &props, why, sizeof(why)), -1);
    publisher_free(p);
}
END_TEST

/* ---- a shared connection, without a broker ---- */

static char *serve_urls[] = {"amqp://guest:guest@127.0.0.1:5672/",
                             "amqp://guest:guest@127.0.0.2:5672/"};
static char *other_urls[] = {"amqp://guest:guest@127.0.0.1:5672/",
                             "amqp://guest:guest@127.0.0.3:5672/"};

static struct broker_config
serve_broker(void)
{
    struct broker_config b = {
        .name = "main",
        .urls = serve_urls,
        .nurls = 2,
        .heartbeat_ms = 30000,
        .connect_timeout_ms = 5000,
        .confirm_timeout_ms = 30000,
        .tls = {.verify_peer = true, .verify_hostname = true},
    };
    return b;
}

/* What makes a connection different is not served; a publisher's own
 * confirm_timeout is. */
START_TEST(test_amqpconn_serves)
{
    struct broker_config a = serve_broker(), b = serve_broker();
    struct amqpconn *c = amqpconn_new(&a, "unit");
    ck_assert(amqpconn_serves(c, &b));
    b.confirm_timeout_ms = 1000;
    ck_assert(amqpconn_serves(c, &b));
    b = serve_broker();
    b.name = "other";
    ck_assert(!amqpconn_serves(c, &b));
    b = serve_broker();
    b.urls = other_urls;
    ck_assert(!amqpconn_serves(c, &b));
    b = serve_broker();
    b.nurls = 1;
    ck_assert(!amqpconn_serves(c, &b));
    b = serve_broker();
    b.heartbeat_ms = 10000;
    ck_assert(!amqpconn_serves(c, &b));
    b = serve_broker();
    b.tls.ca_file = "/etc/ca.pem";
    ck_assert(!amqpconn_serves(c, &b));
    b = serve_broker();
    b.tls.enabled = true;
    ck_assert(!amqpconn_serves(c, &b));
    amqpconn_free(c);
}
END_TEST

/* Before any connect: every call says not connected, none crashes. */
START_TEST(test_shared_unconnected)
{
    struct broker_config a = serve_broker();
    struct amqpconn *c = amqpconn_new(&a, "unit");
    struct publisher *p = publisher_new_shared(c, NULL);
    struct publisher *q = publisher_new_shared(c, &a);
    char err[ERR_LEN];
    ck_assert(!amqpconn_is_connected(c));
    ck_assert(!publisher_is_connected(p));
    ck_assert_uint_eq(publisher_channel(p), 0);
    ck_assert_uint_eq(amqpconn_channels(c), 0);
    ck_assert_int_eq(amqpconn_poll(c, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "amqp://guest:***@127.0.0.1:5672/: not connected");
    ck_assert_int_eq(publisher_poll(p, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "amqp://guest:***@127.0.0.1:5672/: not connected");
    struct outbox_batch b;
    batch_init(&b);
    struct outbox_row *row = batch_add(&b);
    *row = row_make(NULL);
    ck_assert_int_eq(
        publisher_publish_wave(p, &b, &row, 1, true, 0, err, sizeof(err)), -1);
    ck_assert_int_eq(row->state, ROW_CLAIMED);
    publisher_disconnect(q); /* nothing to close */
    ck_assert_str_eq(publisher_url(q), "amqp://guest:***@127.0.0.1:5672/");
    batch_free(&b);
    publisher_free(p);
    publisher_free(q);
    amqpconn_free(c);
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
    tcase_add_test(tc, test_amqpconn_serves);
    tcase_add_test(tc, test_shared_unconnected);
    suite_add_tcase(s, tc);

    tc = tcase_create("cloudevents");
    tcase_add_test(tc, test_encode_cloudevents);
    tcase_add_loop_test(tc, test_encode_cloudevents_time, 0,
                        sizeof(ce_times) / sizeof(*ce_times));
    tcase_add_test(tc, test_encode_cloudevents_optional);
    tcase_add_loop_test(tc, test_encode_cloudevents_forged, 0,
                        sizeof(forged_keys) / sizeof(*forged_keys));
    tcase_add_test(tc, test_encode_cloudevents_lookalikes);
    tcase_add_test(tc, test_encode_cloudevents_rejects);
    suite_add_tcase(s, tc);
    return s;
}
