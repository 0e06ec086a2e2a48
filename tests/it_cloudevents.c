/*
 * it_cloudevents: envelope: cloudevents end to end.  outboxd relays real
 * rows; a consumer built on the CloudEvents SDK from npm
 * (tests/cloudevents/consume.js) reads them from RabbitMQ in binary
 * content mode and validates each; this suite checks what it saw.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"

Suite *it_cloudevents_suite(void);

#define CE_DIR "tests/cloudevents"
#define CE_HEADERS                                                             \
    "cloudEvents_id,cloudEvents_source,cloudEvents_specversion,"               \
    "cloudEvents_subject,cloudEvents_time,cloudEvents_type"

/* The shared fixture, with a durable queue the Node consumer reads and
 * the file it writes what it received to. */
struct ce_fx {
    struct it_fx it;
    char queue[128], out[256];
};

static void
fx_open(struct ce_fx *f, const char *schema, const char *extra_keys)
{
    it_fx_open(&f->it, "it_ce", schema);
    snprintf(f->queue, sizeof(f->queue), "q_%s", f->it.name);
    snprintf(f->out, sizeof(f->out), "/tmp/%s.jsonl", f->it.name);
    /* The oracle for the time attribute: created_at as UTC. */
    it_db_exec(f->it.sql, "SET time_zone = '+00:00'");
    it_exchange_declare(f->it.ex, "topic");
    it_queue_declare(f->queue, f->it.ex, "#");
    it_fx_write_config(&f->it, extra_keys);
}

static void
fx_close(struct ce_fx *f)
{
    it_fx_close(&f->it);
    it_exchange_delete(f->it.ex);
    unlink(f->out);
}

static void
insert(struct ce_fx *f, const char *id, const char *agg_type, const char *agg,
       const char *type, const char *payload, const char *headers)
{
    char cols[64] = "", vals[300] = "";
    if (headers != NULL) {
        snprintf(cols, sizeof(cols), ", headers");
        snprintf(vals, sizeof(vals), ", '%s'", headers);
    }
    it_db_exec(f->it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status%s) VALUES ('%s', "
               "'%s', '%s', '%s', '%s', 'PENDING'%s)",
               cols, id, agg_type, agg, type, payload, vals);
    it_db_exec(f->it.sql, "COMMIT");
}

/* ---- the consumer's lines ---- */

#define LINE_KEYS 32

/* One JSON line of consume.js: its string members, and the flags. */
struct ce_line {
    char *key[LINE_KEYS], *val[LINE_KEYS];
    size_t n;
    bool valid, done;
    long long messages;
};

static int
line_member_cb(void *arg, const char *key, size_t keylen,
               const struct json_value *v)
{
    struct ce_line *l = arg;
    if (keylen == 5 && memcmp(key, "valid", 5) == 0)
        l->valid = v->type == JSON_BOOL && v->b;
    else if (keylen == 4 && memcmp(key, "done", 4) == 0)
        l->done = v->type == JSON_BOOL && v->b;
    else if (keylen == 8 && memcmp(key, "messages", 8) == 0)
        l->messages = v->type == JSON_INT ? v->i : -1;
    else if (v->type == JSON_STRING && l->n < LINE_KEYS) {
        l->key[l->n] = strndup(key, keylen);
        l->val[l->n++] = strndup(v->str, v->len);
    }
    return 0;
}

static void
line_parse(struct ce_line *l, const char *text)
{
    memset(l, 0, sizeof(*l));
    char *scratch = malloc(strlen(text) + 1), err[200];
    int rc = json_object_foreach(text, strlen(text), scratch, line_member_cb, l,
                                 err, sizeof(err));
    ck_assert_msg(rc == 0, "consumer line is not JSON (%s): %s", err, text);
    free(scratch);
}

/* The member's value; "" when absent, so that comparisons say which. */
static const char *
line_get(const struct ce_line *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->key[i], key) == 0)
            return l->val[i];
    return "";
}

static void
line_free(struct ce_line *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->key[i]);
        free(l->val[i]);
    }
}

/* Runs the SDK consumer for want messages; its lines, the last "done". */
static size_t
consume(struct ce_fx *f, int want, struct ce_line *lines, size_t max)
{
    ck_assert_msg(
        access(it_src_path(CE_DIR "/node_modules/cloudevents"), F_OK) == 0,
        "the CloudEvents SDK is not installed: run `make "
        "cloudevents-deps` (npm ci in " CE_DIR ")");
    int rc = it_sh("cd '%s' && node consume.js '%s' '%s' %d 30000 >'%s'",
                   it_src_path(CE_DIR), IT_AMQP_URL, f->queue, want, f->out);
    ck_assert_msg(rc == 0, "consume.js exited %d", rc);
    char *text = it_file_read(f->out), *save = NULL;
    size_t n = 0;
    for (char *l = strtok_r(text, "\n", &save); l != NULL && n < max;
         l = strtok_r(NULL, "\n", &save))
        line_parse(&lines[n++], l);
    free(text);
    ck_assert_msg(n > 0 && lines[n - 1].done, "consume.js did not finish");
    ck_assert_int_eq(lines[n - 1].messages, (long long)n - 1);
    return n - 1;
}

static const struct ce_line *
find_event(const struct ce_line *lines, size_t n, const char *event_id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(line_get(&lines[i], "message_id"), event_id) == 0)
            return &lines[i];
    ck_abort_msg("event %s was not consumed", event_id);
    return NULL;
}

static char *
hex_decode(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned byte;
        ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &byte), 1);
        out[i] = (char)byte;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

/* Everything docs/contract.md section 7 promises a CloudEvents consumer
 * about one event, against what the table holds. */
static void
check_event(struct ce_fx *f, const struct ce_line *l, const char *event_id,
            const char *source)
{
    char *want_type = it_db_str(f->it.sql,
                                "SELECT event_type FROM outbox_event WHERE "
                                "event_id = '%s'",
                                event_id);
    char *want_subject = it_db_str(f->it.sql,
                                   "SELECT aggregate_id FROM outbox_event "
                                   "WHERE event_id = '%s'",
                                   event_id);
    char *want_time = it_db_str(f->it.sql,
                                "SELECT DATE_FORMAT(created_at, "
                                "'%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ') FROM "
                                "outbox_event WHERE event_id = '%s'",
                                event_id);
    char *payload = it_db_str(f->it.sql,
                              "SELECT payload FROM outbox_event WHERE "
                              "event_id = '%s'",
                              event_id);
    ck_assert_msg(l->valid, "%s: the SDK refused it: %s", event_id,
                  line_get(l, "error"));
    ck_assert_str_eq(line_get(l, "ce_headers"), CE_HEADERS);
    ck_assert_str_eq(line_get(l, "attr_specversion"), "1.0");
    ck_assert_str_eq(line_get(l, "attr_id"), event_id);
    ck_assert_str_eq(line_get(l, "attr_source"), source);
    ck_assert_str_eq(line_get(l, "attr_type"), want_type);
    ck_assert_str_eq(line_get(l, "attr_subject"), want_subject);
    ck_assert_str_eq(line_get(l, "attr_time"), want_time);
    ck_assert_str_eq(line_get(l, "attr_datacontenttype"), "application/json");
    /* What the SDK made of them: the same, time to its milliseconds. */
    ck_assert_str_eq(line_get(l, "sdk_id"), event_id);
    ck_assert_str_eq(line_get(l, "sdk_source"), source);
    ck_assert_str_eq(line_get(l, "sdk_type"), want_type);
    ck_assert_str_eq(line_get(l, "sdk_subject"), want_subject);
    ck_assert_str_eq(line_get(l, "sdk_specversion"), "1.0");
    ck_assert_int_eq(strncmp(line_get(l, "sdk_time"), want_time, 23), 0);
    size_t len;
    char *body = hex_decode(line_get(l, "body_hex"), &len);
    ck_assert_uint_eq(len, strlen(payload));
    ck_assert_int_eq(memcmp(body, payload, len), 0);
    free(body);
    free(payload);
    free(want_time);
    free(want_subject);
    free(want_type);
}

static void
lines_free(struct ce_line *lines, size_t n)
{
    for (size_t i = 0; i <= n; i++)
        line_free(&lines[i]);
}

/* ---- tests ---- */

#define SOURCE "https://shop.example/orders"

/*
 * The SDK accepts each event with the row's attributes and body; a row
 * that tries to set an attribute through its headers, and one with no
 * type, go DEAD with the reason and are never consumed.
 */
START_TEST(test_sdk_accepts_events)
{
    struct ce_fx f;
    fx_open(&f, "sql/outbox.sql",
            "        envelope: cloudevents\n"
            "        cloudevents_source: \"" SOURCE "\"\n"
            "        max_retries: 0\n");
    insert(&f, "ce-1", "Order", "o-1", "OrderCreated", "{\"n\": 1}",
           "{\"tenant\": \"acme\"}");
    insert(&f, "ce-forged", "Order", "o-2", "OrderPaid", "{}",
           "{\"cloudEvents_type\": \"Refunded\"}");
    insert(&f, "ce-notype", "Order", "o-3", "", "{}", NULL);
    insert(&f, "ce-2", "Order", "o-1", "OrderPaid",
           "{\"name\": \"caf\xc3\xa9 \xe2\x98\x95\", \"amount\": 12.50}", NULL);
    insert(&f, "ce-3", "Invoice", "i-9", "InvoiceIssued", "[1, 2, 3]", NULL);
    it_fx_start(&f.it);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 3 &&
                                 it_db_count_status(f.it.sql, "DEAD") == 2));
    char *why = it_db_str(f.it.sql, "SELECT last_error FROM outbox_event WHERE "
                                    "event_id = 'ce-forged'");
    ck_assert_msg(strstr(why, "key \"cloudEvents_type\" would set a "
                              "CloudEvents attribute") != NULL,
                  "%s", why);
    free(why);
    why = it_db_str(f.it.sql, "SELECT last_error FROM outbox_event WHERE "
                              "event_id = 'ce-notype'");
    ck_assert_msg(strstr(why, "a CloudEvent needs a type") != NULL, "%s", why);
    free(why);
    struct ce_line lines[8];
    size_t n = consume(&f, 3, lines, 8);
    ck_assert_uint_eq(n, 3);
    check_event(&f, find_event(lines, n, "ce-1"), "ce-1", SOURCE);
    check_event(&f, find_event(lines, n, "ce-2"), "ce-2", SOURCE);
    check_event(&f, find_event(lines, n, "ce-3"), "ce-3", SOURCE);
    /* Its aggregate's order holds in the queue. */
    ck_assert_str_eq(line_get(&lines[0], "message_id"), "ce-1");
    lines_free(lines, n);
    fx_close(&f);
}
END_TEST

/* The seed's DDL (no headers column, second-precision created_at) and
 * the default source. */
START_TEST(test_seed_ddl_default_source)
{
    struct ce_fx f;
    fx_open(&f, "tests/data/seed_outbox.sql",
            "        envelope: cloudevents\n");
    insert(&f, "seed-1", "Order", "o-1", "OrderCreated", "{\"n\": 1}", NULL);
    insert(&f, "seed-2", "Order", "o-1", "OrderShipped", "{\"n\": 2}", NULL);
    it_fx_start(&f.it);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 2));
    struct ce_line lines[4];
    size_t n = consume(&f, 2, lines, 4);
    ck_assert_uint_eq(n, 2);
    char source[160];
    snprintf(source, sizeof(source), "outboxd://%s/outbox_event", f.it.db);
    check_event(&f, &lines[0], "seed-1", source);
    check_event(&f, &lines[1], "seed-2", source);
    ck_assert_ptr_nonnull(strstr(line_get(&lines[0], "attr_time"), ".000000Z"));
    lines_free(lines, n);
    fx_close(&f);
}
END_TEST

/* Without the key nothing changes: no cloudEvents_ header, so the SDK
 * sees no event, and a row's cloudEvents_ header passes as before. */
START_TEST(test_default_envelope_unchanged)
{
    struct ce_fx f;
    fx_open(&f, "sql/outbox.sql", NULL);
    insert(&f, "plain-1", "Order", "o-1", "OrderCreated", "{\"n\": 1}", NULL);
    insert(&f, "plain-2", "Order", "o-2", "OrderCreated", "{}",
           "{\"cloudEvents_id\": \"mine\"}");
    it_fx_start(&f.it);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 2));
    struct ce_line lines[4];
    size_t n = consume(&f, 2, lines, 4);
    ck_assert_uint_eq(n, 2);
    const struct ce_line *l = find_event(lines, n, "plain-1");
    ck_assert_str_eq(line_get(l, "ce_headers"), "");
    ck_assert(!l->valid);
    l = find_event(lines, n, "plain-2");
    ck_assert_str_eq(line_get(l, "ce_headers"), "cloudEvents_id");
    ck_assert_str_eq(line_get(l, "attr_id"), "mine");
    lines_free(lines, n);
    fx_close(&f);
}
END_TEST

Suite *
it_cloudevents_suite(void)
{
    Suite *s = suite_create("it_cloudevents");
    TCase *tc = tcase_create("sdk");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sdk_accepts_events);
    tcase_add_test(tc, test_seed_ddl_default_source);
    tcase_add_test(tc, test_default_envelope_unchanged);
    suite_add_tcase(s, tc);
    return s;
}
