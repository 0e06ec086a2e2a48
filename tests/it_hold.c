/*
 * it_hold: on_dead: hold against the real servers (docs/contract.md
 * section 1.3): a DEAD event holds the later events of its aggregate
 * while others flow, until outboxctl dead release or dead retry; skip
 * and the seed's DDL; outboxctl status, dead release and the gauges.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Suite *it_hold_suite(void);

#define LATER 5   /* events of the held aggregate after the poison one */
#define OTHERS 40 /* events of other aggregates */

/* Unroutable with mandatory: RETRY, then DEAD after one retry. */
#define FAST_DEAD                                                              \
    "        max_retries: 1\n"                                                 \
    "        backoff: { initial: 100ms, max: 200ms }\n"

/* The poison event of aggregate h-1 (event_type Poison: no queue is
 * bound to Order.Poison), its LATER successors, OTHERS elsewhere. */
static void
insert_poisoned(struct it_fx *f)
{
    it_db_exec(f->sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                       "aggregate_id, event_type, payload, status) VALUES "
                       "('poison-1', 'Order', 'h-1', 'Poison', '{}', "
                       "'PENDING')");
    for (int i = 1; i <= LATER; i++)
        it_db_exec(f->sql,
                   "INSERT INTO outbox_event (event_id, aggregate_type, "
                   "aggregate_id, event_type, payload, status) VALUES "
                   "('later-%d', 'Order', 'h-1', 'OrderCreated', '{}', "
                   "'PENDING')",
                   i);
    it_db_exec(f->sql, "COMMIT");
    it_db_insert_events(f->sql, "outbox_event", "ok", OTHERS, 8, 64);
}

static void
fx_open(struct it_fx *f, const char *schema, const char *extra)
{
    it_fx_open(f, "it_hold", schema);
    it_fx_write_config(f, extra);
    f->consumer = it_consumer_new(f->ex, "Order.OrderCreated");
}

/* Receives until the event `until` arrives; counts the others of
 * aggregate seen before it. */
static int
receive_until(struct it_fx *f, const char *until, const char *aggregate,
              int timeout_ms)
{
    int held_seen = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    while (it_now_ms() < deadline) {
        struct it_message m;
        if (it_consumer_next(f->consumer, &m, 500) == 0)
            continue;
        bool done = m.message_id && strcmp(m.message_id, until) == 0;
        held_seen += !done && m.h_aggregate_id &&
                     strcmp(m.h_aggregate_id, aggregate) == 0;
        it_message_free(&m);
        if (done)
            return held_seen;
    }
    ck_abort_msg("event %s did not arrive", until);
    return -1;
}

/*
 * The poison event goes DEAD; then an event of another aggregate,
 * inserted after it (a higher id than every held one), arrives: the
 * claim has passed the held events, and none of them came out.
 */
static void
expect_held(struct it_fx *f)
{
    ck_assert(IT_WAIT(30000, it_db_count_status(f->sql, "DEAD") == 1));
    it_db_insert_events(f->sql, "outbox_event", "marker", 1, 1, 16);
    ck_assert_int_eq(receive_until(f, "marker-0", "h-1", 30000), 0);
    ck_assert(IT_WAIT(10000, it_db_count_status(f->sql, "SENT") == OTHERS + 1));
    ck_assert_int_eq(it_db_int(f->sql, "SELECT COUNT(*) FROM outbox_event "
                                       "WHERE aggregate_id = 'h-1' AND "
                                       "status = 'PENDING'"),
                     LATER);
}

/* The held events, in their order, first; then nothing of h-1 again. */
static void
expect_in_order(struct it_fx *f, const char *first)
{
    struct it_message m;
    char want[32];
    for (int i = first ? 0 : 1; i <= LATER; i++) {
        if (i == 0)
            snprintf(want, sizeof(want), "%s", first);
        else
            snprintf(want, sizeof(want), "later-%d", i);
        ck_assert_int_eq(it_consumer_next(f->consumer, &m, 30000), 1);
        ck_assert_str_eq(m.message_id, want);
        it_message_free(&m);
    }
}

static void
expect_dead_kept(struct it_fx *f)
{
    char *st = it_db_str(f->sql, "SELECT CONCAT(status, ' ', locked_by, ' ', "
                                 "last_error) FROM outbox_event WHERE "
                                 "event_id = 'poison-1'");
    ck_assert_msg(st && strncmp(st, "DEAD released ", 14) == 0 &&
                      strstr(st, "NO_ROUTE"),
                  "poison-1: %s", st ? st : "(null)");
    free(st);
}

/* status, text and JSON: one aggregate held. */
static void
expect_status_held(struct it_fx *f)
{
    struct it_ctl_run r = it_ctl(f->conf, "status");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "1 aggregate held by DEAD events, "
                                             "the oldest for "),
                  "rc %d: %s%s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    r = it_ctl(f->conf, "--json status");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "\"held_aggregates\":1,"
                                             "\"oldest_hold_age_seconds\":"),
                  "%s", r.out);
    it_ctl_free(&r);
}

START_TEST(test_hold_release)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", FAST_DEAD "        on_dead: hold\n");
    insert_poisoned(&f);
    it_fx_start(&f);
    expect_held(&f);
    expect_status_held(&f);
    struct it_ctl_run r = it_ctl(f.conf, "--json dead list");
    ck_assert_msg(strstr(r.out, "\"holds\":true}"), "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead release --all --dry-run");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "would release 1 held DEAD row\n"),
                  "%s%s", r.out, r.err);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json dead release poison-1 nosuch-1");
    ck_assert_msg(r.rc == 1 && strstr(r.out, "\"released\":1,\"not_found\":"
                                             "[\"nosuch-1\"]"),
                  "rc %d: %s%s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    expect_in_order(&f, NULL);
    ck_assert(IT_WAIT(10000,
                      it_db_count_status(f.sql, "SENT") == OTHERS + 1 + LATER));
    expect_dead_kept(&f);
    r = it_ctl(f.conf, "status");
    ck_assert_msg(strstr(r.out, "0 aggregates held by DEAD events\n"), "%s",
                  r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead list");
    ck_assert_msg(strstr(r.out, " HOLDS ") && strstr(r.out, " released "), "%s",
                  r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json dead list");
    ck_assert_msg(strstr(r.out, "\"holds\":false}"), "%s", r.out);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

/* The cause fixed (a bound routing key), retry sends it and the rest. */
START_TEST(test_hold_retry)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", FAST_DEAD "        on_dead: hold\n");
    insert_poisoned(&f);
    it_fx_start(&f);
    expect_held(&f);
    it_db_exec(f.sql, "UPDATE outbox_event SET event_type = 'OrderCreated' "
                      "WHERE event_id = 'poison-1'");
    it_db_exec(f.sql, "COMMIT");
    struct it_ctl_run r = it_ctl(f.conf, "dead retry poison-1");
    ck_assert_msg(r.rc == 0, "%s%s", r.out, r.err);
    it_ctl_free(&r);
    expect_in_order(&f, "poison-1");
    ck_assert(IT_WAIT(10000,
                      it_db_count_status(f.sql, "SENT") == OTHERS + 2 + LATER));
    it_fx_close(&f);
}
END_TEST

/* An expired event goes DEAD released: with hold it holds nothing. */
START_TEST(test_hold_spares_expired)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", FAST_DEAD "        on_dead: hold\n");
    it_db_exec(f.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                      "aggregate_id, event_type, payload, expires_at) VALUES "
                      "('gone-1', 'Order', 'x-1', 'OrderCreated', '{}', "
                      "NOW(6) - INTERVAL 1 MINUTE)");
    it_db_exec(f.sql, "COMMIT");
    it_fx_start(&f);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.sql, "DEAD") == 1));
    /* A later claim: the DEAD row is on the table, not in the batch. */
    it_db_exec(f.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                      "aggregate_id, event_type, payload) VALUES ('after-1', "
                      "'Order', 'x-1', 'OrderCreated', '{}')");
    it_db_exec(f.sql, "COMMIT");
    /* the consumer's side: gone-1, had it gone out, would have come
     * before after-1, which is the first of x-1 to come */
    ck_assert_int_eq(receive_until(&f, "after-1", "x-1", 30000), 0);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE event_id = 'gone-1' AND status = "
                                      "'DEAD' AND locked_by = 'released' AND "
                                      "last_error LIKE 'expired at %%'"),
                     1);
    struct it_ctl_run r = it_ctl(f.conf, "--json status");
    ck_assert_msg(strstr(r.out, "\"held_aggregates\":0"), "%s", r.out);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

/* skip, the default: the later events go out once it is DEAD. */
START_TEST(test_skip_default)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", FAST_DEAD);
    insert_poisoned(&f);
    it_fx_start(&f);
    ck_assert(
        IT_WAIT(30000, it_db_count_status(f.sql, "SENT") == OTHERS + LATER));
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 1);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE locked_by IS NOT NULL OR "
                                      "(status = 'DEAD' AND locked_until IS "
                                      "NOT NULL)"),
                     0);
    struct it_ctl_run r = it_ctl(f.conf, "dead release --all");
    ck_assert_msg(r.rc == 64 && strstr(r.err, "no outbox has on_dead: hold"),
                  "rc %d: %s", r.rc, r.err);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json status");
    ck_assert_msg(strstr(r.out, "\"held_aggregates\":null"), "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json dead list");
    ck_assert_msg(strstr(r.out, "\"holds\":null}"), "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead list");
    ck_assert_msg(!strstr(r.out, "HOLDS"), "%s", r.out);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

/* The seed's DDL has no `held`: hold reads status and locked_by. */
START_TEST(test_hold_seed_ddl)
{
    struct it_fx f;
    fx_open(&f, "tests/data/seed_outbox.sql",
            FAST_DEAD "        on_dead: hold\n");
    insert_poisoned(&f);
    it_fx_start(&f);
    expect_held(&f);
    struct it_ctl_run r = it_ctl(f.conf, "dead release --all");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "1 DEAD row released"), "%s%s",
                  r.out, r.err);
    it_ctl_free(&r);
    expect_in_order(&f, NULL);
    expect_dead_kept(&f);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_hold_gauges)
{
    struct it_fx f;
    char series[256];
    fx_open(&f, "sql/outbox.sql", FAST_DEAD "        on_dead: hold\n");
    unsigned port = it_fx_listen(&f);
    insert_poisoned(&f);
    it_fx_start(&f);
    expect_held(&f);
    snprintf(series, sizeof(series),
             "outboxd_held_aggregates{outbox=\"%s.outbox_event\"} ", f.db);
    ck_assert(IT_WAIT(20000, it_metric(port, series) == 1));
    snprintf(series, sizeof(series),
             "outboxd_oldest_hold_seconds{outbox=\"%s.outbox_event\"} ", f.db);
    ck_assert(IT_WAIT(20000, it_metric(port, series) > 0));
    struct it_ctl_run r = it_ctl(f.conf, "dead release poison-1");
    ck_assert_int_eq(r.rc, 0);
    it_ctl_free(&r);
    ck_assert(IT_WAIT(20000, it_metric(port, series) == 0));
    it_fx_close(&f);
}
END_TEST

Suite *
it_hold_suite(void)
{
    Suite *s = suite_create("it_hold");
    TCase *tc = tcase_create("hold");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hold_release);
    tcase_add_test(tc, test_hold_spares_expired);
    tcase_add_test(tc, test_hold_retry);
    tcase_add_test(tc, test_skip_default);
    tcase_add_test(tc, test_hold_seed_ddl);
    tcase_add_test(tc, test_hold_gauges);
    suite_add_tcase(s, tc);
    return s;
}
