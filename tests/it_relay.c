/*
 * it_relay: outboxd end to end against the real MariaDB and RabbitMQ,
 * with a real consumer: delivery exactly once and in order per
 * aggregate, the seed's DDL, unroutable events, the broker cut
 * mid-batch, and SIGTERM during a drain.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

Suite *it_relay_suite(void);

static void
fx_open(struct it_fx *f, const char *schema, const char *binding,
        const char *extra_keys)
{
    it_fx_open(f, "it_relay", schema);
    f->consumer = it_consumer_new(f->ex, binding);
    it_fx_write_config(f, extra_keys);
}

/* Index of "<prefix>-<i>"; -1 if the id is not one of ours (the prefix
 * too: a "ghost-1" is not "ok-1"). */
static long
event_index(const char *event_id, const char *prefix)
{
    size_t len = strlen(prefix);
    if (event_id == NULL || strncmp(event_id, prefix, len) != 0 ||
        event_id[len] != '-' || event_id[len + 1] < '0' ||
        event_id[len + 1] > '9')
        return -1;
    char *end;
    long i = strtol(event_id + len + 1, &end, 10);
    return *end == '\0' ? i : -1;
}

/*
 * Receives until want events "<prefix>-<i>" not seen before (copies[i]
 * == 0) arrived or the deadline; counts copies per event and checks that
 * per aggregate the outbox ids never go down.  Returns the number of new
 * events seen.
 */
static long
receive_new_events(struct it_fx *f, const char *prefix, int n, int aggregates,
                   int *copies, long want, int timeout_ms)
{
    long long *last = calloc((size_t)aggregates, sizeof(*last));
    long distinct = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (distinct < want && it_now_ms() < deadline) {
        if (it_consumer_next(f->consumer, &m, 500) == 0)
            continue;
        long i = event_index(m.message_id, prefix);
        ck_assert_msg(i >= 0 && i < n, "unexpected message %s", m.message_id);
        long agg = event_index(m.h_aggregate_id, prefix);
        ck_assert_msg(agg >= 0 && agg < aggregates, "aggregate %s",
                      m.h_aggregate_id);
        ck_assert_msg(m.h_outbox_id >= last[agg],
                      "aggregate %ld went back from id %lld to %lld", agg,
                      last[agg], m.h_outbox_id);
        last[agg] = m.h_outbox_id;
        if (copies[i]++ == 0)
            distinct++;
        it_message_free(&m);
    }
    free(last);
    return distinct;
}

static long
receive_events(struct it_fx *f, const char *prefix, int n, int aggregates,
               int *copies, int timeout_ms)
{
    return receive_new_events(f, prefix, n, aggregates, copies, n, timeout_ms);
}

/* docs/contract.md section 7: every property and header of one message. */
static void
check_message_properties(struct it_fx *f)
{
    struct it_message m;
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, headers, traceparent) "
               "VALUES ('props-1', 'Order', 'o-42', 'OrderPaid', "
               "'{\"amount\": 12.5}', '{\"tenant\": \"acme\"}', "
               "'00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')");
    it_db_exec(f->sql, "COMMIT");
    ck_assert_int_eq(it_consumer_next(f->consumer, &m, 20000), 1);
    ck_assert_str_eq(m.message_id, "props-1");
    ck_assert_str_eq(m.type, "OrderPaid");
    ck_assert_str_eq(m.content_type, "application/json");
    ck_assert_str_eq(m.app_id, "outboxd");
    ck_assert_int_eq(m.delivery_mode, 2);
    ck_assert_str_eq(m.routing_key, "Order.OrderPaid");
    ck_assert_str_eq(m.h_aggregate_type, "Order");
    ck_assert_str_eq(m.h_aggregate_id, "o-42");
    ck_assert_str_eq(m.h_traceparent,
                     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    ck_assert_int_eq(m.h_outbox_id,
                     it_db_int(f->sql, "SELECT id FROM outbox_event WHERE "
                                       "event_id = 'props-1'"));
    ck_assert_int_eq(m.timestamp,
                     it_db_int(f->sql,
                               "SELECT UNIX_TIMESTAMP(created_at) DIV 1 "
                               "FROM outbox_event WHERE event_id = "
                               "'props-1'"));
    /* MariaDB normalises JSON text on insert: compare with what it holds */
    char *payload = it_db_str(f->sql, "SELECT payload FROM outbox_event "
                                      "WHERE event_id = 'props-1'");
    ck_assert_str_eq(m.body, payload);
    free(payload);
    it_message_free(&m);
}

/* Issue 2, test 1: 10,000 events over 100 aggregates. */
START_TEST(test_drain_exactly_once_in_order)
{
    enum { N = 10000, AGGS = 100 };
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", "#", NULL);
    it_db_insert_events(f.sql, "outbox_event", "ev", N, AGGS, 256);
    int *copies = calloc(N, sizeof(*copies));
    uint64_t t0 = it_now_ms();
    it_fx_start(&f);
    ck_assert_int_eq(receive_events(&f, "ev", N, AGGS, copies, 120000), N);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.sql, "SENT") == N));
    uint64_t ms = it_now_ms() - t0;
    fprintf(stderr, "drain: %d events in %llu ms = %.0f events/s\n", N,
            (unsigned long long)ms, N * 1000.0 / (double)(ms ? ms : 1));
    check_message_properties(&f);
    /* nothing more may arrive: every event exactly once */
    struct it_message extra;
    if (it_consumer_next(f.consumer, &extra, 1000) == 1)
        ck_abort_msg("duplicate or stray message %s", extra.message_id);
    for (int i = 0; i < N; i++)
        ck_assert_msg(copies[i] == 1, "event %d arrived %d times", i,
                      copies[i]);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE sent_at IS NULL OR locked_by "
                                      "IS NOT NULL"),
                     0);
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 10000));
    ck_assert(WIFEXITED(f.d.status) && WEXITSTATUS(f.d.status) == 0);
    free(copies);
    it_fx_close(&f);
}
END_TEST

/* Issue 2, test 2: the seed's exact DDL works unchanged. */
START_TEST(test_seed_ddl)
{
    enum { N = 500, AGGS = 20 };
    struct it_fx f;
    fx_open(&f, "tests/data/seed_outbox.sql", "#", NULL);
    it_db_insert_events(f.sql, "outbox_event", "seed", N, AGGS, 100);
    int *copies = calloc(N, sizeof(*copies));
    it_fx_start(&f);
    ck_assert_int_eq(receive_events(&f, "seed", N, AGGS, copies, 60000), N);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.sql, "SENT") == N));
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE sent_at IS NULL"),
                     0);
    free(copies);
    it_fx_close(&f);
}
END_TEST

/* Issue 2, test 3: unroutable with mandatory goes RETRY then DEAD,
 * never SENT, while other events flow. */
START_TEST(test_unroutable_dead)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", "Order.#",
            "        max_retries: 2\n"
            "        backoff: { initial: 100ms, max: 200ms }\n");
    it_db_exec(f.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                      "aggregate_id, event_type, payload) VALUES "
                      "('ghost-1', 'Ghost', 'g-1', 'Boo', '{}')");
    it_db_insert_events(f.sql, "outbox_event", "ok", 100, 10, 64);
    it_db_exec(f.sql, "COMMIT");
    it_fx_start(&f);
    int copies[100] = {0};
    ck_assert_int_eq(receive_events(&f, "ok", 100, 10, copies, 30000), 100);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.sql, "DEAD") == 1));
    char *err = it_db_str(f.sql, "SELECT last_error FROM outbox_event WHERE "
                                 "event_id = 'ghost-1'");
    ck_assert_msg(err && strstr(err, "NO_ROUTE") && strstr(err, f.ex) &&
                      strstr(err, "Ghost.Boo"),
                  "last_error: %s", err ? err : "(null)");
    free(err);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT retry_count FROM outbox_event "
                                      "WHERE event_id = 'ghost-1'"),
                     3);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE event_id = 'ghost-1' AND "
                                      "sent_at IS NOT NULL"),
                     0);
    ck_assert_int_eq(it_db_count_status(f.sql, "SENT"), 100);
    it_fx_close(&f);
}
END_TEST

static bool
rabbit_up(void)
{
    return it_sh("rabbitmqctl -q await_startup >/dev/null 2>&1") == 0;
}

/* Event ids currently SENT, as a 0/1 map. */
static long
snapshot_sent(struct it_fx *f, const char *prefix, char *sent, int n)
{
    mysql_query(f->sql, "SELECT event_id FROM outbox_event WHERE status = "
                        "'SENT'");
    MYSQL_RES *res = mysql_store_result(f->sql);
    ck_assert_ptr_nonnull(res);
    long count = 0;
    MYSQL_ROW row;
    memset(sent, 0, (size_t)n);
    while ((row = mysql_fetch_row(res)) != NULL) {
        long i = event_index(row[0], prefix);
        ck_assert(i >= 0 && i < n);
        sent[i] = 1;
        count++;
    }
    mysql_free_result(res);
    it_db_exec(f->sql, "COMMIT");
    return count;
}

/* Issue 2, test 4: the broker stopped in the middle of a large batch. */
START_TEST(test_broker_cut_mid_batch)
{
    enum { N = 20000, AGGS = 500 };
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", "#", "        batch_size: 2000\n");
    char queue[128];
    snprintf(queue, sizeof(queue), "%s", it_consumer_queue(f.consumer));
    it_db_insert_events(f.sql, "outbox_event", "cut", N, AGGS, 256);
    it_fx_start(&f);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.sql, "SENT") >= 1000));
    ck_assert_int_eq(it_sh("rabbitmqctl -q stop_app"), 0);
    /* let the relay record what was confirmed before the cut */
    long long before = -1, now = it_db_count_status(f.sql, "SENT");
    while (now != before) {
        it_sleep_ms(1500);
        before = now;
        now = it_db_count_status(f.sql, "SENT");
    }
    ck_assert_msg(now < N, "the cut came too late to test anything");
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 15000));
    char *sent = malloc(N);
    long nsent = snapshot_sent(&f, "cut", sent, N);
    it_consumer_close(f.consumer);
    f.consumer = NULL;
    ck_assert_int_eq(it_sh("rabbitmqctl -q start_app"), 0);
    ck_assert(IT_WAIT(60000, rabbit_up()));
    /* every row marked SENT was confirmed, so its message is queued */
    f.consumer = it_consumer_attach(queue);
    int *copies = calloc(N, sizeof(*copies));
    receive_events(&f, "cut", N, AGGS, copies, 5000);
    for (int i = 0; i < N; i++)
        ck_assert_msg(!sent[i] || copies[i] > 0,
                      "event %d is SENT but was never delivered", i);
    fprintf(stderr, "broker cut: %ld of %d SENT before the cut\n", nsent, N);
    /* and after the relay comes back, every event arrives */
    it_fx_start(&f);
    long distinct = 0;
    for (int i = 0; i < N; i++)
        distinct += copies[i] > 0;
    distinct +=
        receive_new_events(&f, "cut", N, AGGS, copies, N - distinct, 120000);
    ck_assert_int_eq(distinct, N);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.sql, "SENT") == N));
    free(copies);
    free(sent);
    it_fx_close(&f);
}
END_TEST

/* Issue 2, test 5: SIGTERM during a drain exits 0 in time, and every
 * message that went out has its row SENT. */
START_TEST(test_sigterm_during_drain)
{
    enum { N = 20000, AGGS = 1000 };
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql", "#", NULL);
    it_db_insert_events(f.sql, "outbox_event", "term", N, AGGS, 256);
    it_fx_start(&f);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.sql, "SENT") >= 2000));
    uint64_t t0 = it_now_ms();
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 10000));
    uint64_t took = it_now_ms() - t0;
    ck_assert(WIFEXITED(f.d.status));
    ck_assert_int_eq(WEXITSTATUS(f.d.status), 0);
    fprintf(stderr, "SIGTERM: exited 0 after %llu ms\n",
            (unsigned long long)took);
    ck_assert_int_eq(it_db_count_status(f.sql, "PROCESSING"), 0);
    char *sent = malloc(N);
    long nsent = snapshot_sent(&f, "term", sent, N);
    ck_assert_msg(nsent < N, "the drain finished before SIGTERM");
    int *copies = calloc(N, sizeof(*copies));
    long got = receive_events(&f, "term", N, AGGS, copies, 3000);
    for (int i = 0; i < N; i++)
        ck_assert_msg(copies[i] == 0 || sent[i],
                      "event %d was delivered but its row is not SENT", i);
    ck_assert_int_eq(got, nsent);
    free(copies);
    free(sent);
    it_fx_close(&f);
}
END_TEST

Suite *
it_relay_suite(void)
{
    Suite *s = suite_create("it_relay");
    TCase *tc = tcase_create("end_to_end");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_drain_exactly_once_in_order);
    tcase_add_test(tc, test_seed_ddl);
    tcase_add_test(tc, test_unroutable_dead);
    tcase_add_test(tc, test_broker_cut_mid_batch);
    tcase_add_test(tc, test_sigterm_during_drain);
    suite_add_tcase(s, tc);
    return s;
}
