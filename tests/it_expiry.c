/*
 * it_expiry: expires_at end to end against the real servers with a real
 * consumer: rows past it DEAD and never consumed, the rest delivered in
 * order behind them, the AMQP expiration that RabbitMQ enforces, and the
 * seed's table without the column unchanged.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *it_expiry_suite(void);

static void
fx_open(struct it_fx *f, const char *schema, const char *extra_keys)
{
    it_fx_open(f, "it_expiry", schema);
    f->consumer = it_consumer_new(f->ex, "#");
    it_fx_write_config(f, extra_keys);
    /* Literal times in the inserts below are UTC, as outboxd's are. */
    it_db_exec(f->sql, "SET time_zone = '+00:00'");
}

/* One event; expires is an SQL expression ("NULL", "NOW(6) + ..."). */
static void
insert_event(struct it_fx *f, const char *event_id, const char *agg_type,
             const char *agg_id, const char *expires)
{
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, expires_at) VALUES "
               "('%s', '%s', '%s', 'Happened', '{}', %s)",
               event_id, agg_type, agg_id, expires);
}

static char *
column_of(struct it_fx *f, const char *column, const char *event_id)
{
    return it_db_str(f->sql,
                     "SELECT %s FROM outbox_event WHERE event_id = '%s'",
                     column, event_id);
}

/* The DEAD row of an event that expired at 2020-01-01 00:00:00 UTC. */
static void
check_expired_row(struct it_fx *f, const char *event_id)
{
    char *status = column_of(f, "status", event_id);
    char *err = column_of(f, "last_error", event_id);
    ck_assert_str_eq(status, "DEAD");
    static const char head[] = "expired at 2020-01-01 00:00:00.000000 UTC, "
                               "claimed ";
    ck_assert_msg(err != NULL && strncmp(err, head, strlen(head)) == 0 &&
                      strstr(err, " s later") != NULL,
                  "last_error of %s: %s", event_id, err ? err : "(null)");
    /* Never attempted: no attempt counted, no lease left, never sent. */
    ck_assert_int_eq(it_db_int(f->sql,
                               "SELECT retry_count + (locked_by IS NOT NULL) "
                               "+ (sent_at IS NOT NULL) FROM outbox_event "
                               "WHERE event_id = '%s'",
                               event_id),
                     0);
    free(status);
    free(err);
}

/*
 * docs/contract.md section 6: past expires_at, DEAD and never consumed;
 * in the future or NULL, delivered; the events of an aggregate behind an
 * expired one follow in order.
 */
START_TEST(test_expired_dead_never_consumed)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", NULL);
    const char *past = "'2020-01-01 00:00:00'";
    insert_event(&f, "a-1", "Order", "a", past);
    insert_event(&f, "a-2", "Order", "a", "NULL");
    insert_event(&f, "a-3", "Order", "a", past);
    insert_event(&f, "a-4", "Order", "a", "NOW(6) + INTERVAL 1 HOUR");
    insert_event(&f, "b-1", "Order", "b", past);
    insert_event(&f, "c-1", "Order", "c", "NULL");
    it_db_exec(f.sql, "COMMIT");
    it_fx_start(&f);
    const char *want[] = {"a-2", "a-4", "c-1"};
    bool seen[3] = {false};
    long long last_a = 0;
    for (int got = 0; got < 3;) {
        struct it_message m;
        ck_assert_msg(it_consumer_next(f.consumer, &m, 20000) == 1,
                      "%d of 3 live events arrived", got);
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(m.message_id, want[i]) == 0)
                k = i;
        ck_assert_msg(k >= 0, "expired or stray event %s consumed",
                      m.message_id);
        ck_assert_msg(!seen[k], "%s arrived twice", m.message_id);
        ck_assert_msg(m.expiration == NULL, "expiration sent with the key off");
        if (m.message_id[0] == 'a') {
            ck_assert_int_gt(m.h_outbox_id, last_a);
            last_a = m.h_outbox_id;
        }
        seen[k] = true;
        got++;
        it_message_free(&m);
    }
    ck_assert(IT_WAIT(20000, it_db_count_status(f.sql, "SENT") == 3 &&
                                 it_db_count_status(f.sql, "DEAD") == 3));
    check_expired_row(&f, "a-1");
    check_expired_row(&f, "a-3");
    check_expired_row(&f, "b-1");
    struct it_message extra;
    if (it_consumer_next(f.consumer, &extra, 1000) == 1)
        ck_abort_msg("expired or duplicate event %s consumed",
                     extra.message_id);
    ck_assert(it_file_has(f.d.log_path, "past their expires_at"));
    it_fx_close(&f);
}
END_TEST

/*
 * docs/contract.md section 7: with expiration_from_expires_at the time
 * left goes out as the AMQP expiration, and RabbitMQ drops a message that
 * nobody consumed by then while it keeps one without.
 */
START_TEST(test_expiration_enforced_by_broker)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", "        expiration_from_expires_at: true\n");
    char queue[96];
    it_unique_name(queue, sizeof(queue), "it_expiry_idle");
    it_queue_declare(queue, f.ex, "Idle.#");
    insert_event(&f, "ttl-1", "Order", "t", "NOW(6) + INTERVAL 60 SECOND");
    insert_event(&f, "nottl-1", "Order", "n", "NULL");
    /* The one that expires first, at the head of the idle queue. */
    insert_event(&f, "idle-1", "Idle", "i", "NOW(6) + INTERVAL 8 SECOND");
    insert_event(&f, "idle-2", "Idle", "j", "NULL");
    it_db_exec(f.sql, "COMMIT");
    it_fx_start(&f);
    int checked = 0;
    for (int got = 0; got < 4; got++) {
        struct it_message m;
        ck_assert_int_eq(it_consumer_next(f.consumer, &m, 20000), 1);
        if (strcmp(m.message_id, "ttl-1") == 0) {
            ck_assert_ptr_nonnull(m.expiration);
            long ms = strtol(m.expiration, NULL, 10);
            ck_assert_msg(ms > 50000 && ms <= 60000, "expiration %s",
                          m.expiration);
            checked++;
        } else if (strcmp(m.message_id, "nottl-1") == 0) {
            ck_assert_ptr_null(m.expiration);
            checked++;
        }
        it_message_free(&m);
    }
    ck_assert_int_eq(checked, 2);
    ck_assert(IT_WAIT(20000, it_db_count_status(f.sql, "SENT") == 4));
    /* Both reached the idle queue; the broker drops the expiring one. */
    long held = it_queue_messages(queue);
    ck_assert_msg(held == 2, "idle queue holds %ld", held);
    ck_assert(IT_WAIT(20000, it_queue_messages(queue) == 1));
    struct it_consumer *idle = it_consumer_attach(queue);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(idle, &m, 5000), 1);
    ck_assert_str_eq(m.message_id, "idle-2");
    it_message_free(&m);
    it_consumer_free(idle);
    it_fx_close(&f);
}
END_TEST

/* The seed's table has no expires_at: with the key on, nothing changes. */
START_TEST(test_seed_ddl_unchanged)
{
    enum { N = 200 };
    struct it_fx f;
    fx_open(&f, "tests/data/seed_outbox.sql",
            "        expiration_from_expires_at: true\n");
    it_db_insert_events(f.sql, "outbox_event", "seed", N, 10, 64);
    it_fx_start(&f);
    struct it_message *msgs = NULL;
    size_t n = it_consumer_drain(f.consumer, &msgs, N + 10, 3000, 60000);
    ck_assert_uint_eq(n, N);
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_null(msgs[i].expiration);
        it_message_free(&msgs[i]);
    }
    free(msgs);
    ck_assert(IT_WAIT(20000, it_db_count_status(f.sql, "SENT") == N));
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 0);
    it_fx_close(&f);
}
END_TEST

Suite *
it_expiry_suite(void)
{
    Suite *s = suite_create("it_expiry");
    TCase *tc = tcase_create("expiry");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_expired_dead_never_consumed);
    tcase_add_test(tc, test_expiration_enforced_by_broker);
    tcase_add_test(tc, test_seed_ddl_unchanged);
    suite_add_tcase(s, tc);
    return s;
}
