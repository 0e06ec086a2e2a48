/*
 * it_pool: outboxes sharing one worker thread are served in turn: an
 * event of an idle outbox goes out while another on the same thread
 * drains a backlog, and the process holds the threads relay.workers
 * asks for, not one per outbox.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

Suite *it_pool_suite(void);

/* Rows in a batch of either outbox: the unit of their turns. */
#define BATCH 500

/* Both outboxes in one file, on relay.workers threads; b_keys are lines
 * appended to B's outbox keys (indented 8 spaces). */
static void
write_two_outbox_config(const char *path, const char *relay_id, struct it_fx *a,
                        struct it_fx *b, unsigned workers, const char *b_keys)
{
    char ua[64], pa[64], ub[64], pb[64];
    it_db_grant_relay(a->db, "outbox_event", ua, sizeof(ua), pa, sizeof(pa));
    it_db_grant_relay(b->db, "outbox_event", ub, sizeof(ub), pb, sizeof(pb));
    const char *entry = "  %s:\n"
                        "    host: 127.0.0.1\n"
                        "    port: 3306\n"
                        "    user: %s\n"
                        "    password: %s\n"
                        "    database: %s\n"
                        "    outboxes:\n"
                        "      - table: outbox_event\n"
                        "        broker: main\n"
                        "        exchange: \"%s\"\n"
                        "        batch_size: %d\n"
                        "%s";
    char *ea = xasprintf(entry, a->db, ua, pa, a->db, a->ex, BATCH, "");
    char *eb = xasprintf(entry, b->db, ub, pb, b->db, b->ex, BATCH, b_keys);
    it_write_file(path,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"\"\n"
                  "  workers: %u\n"
                  "brokers:\n"
                  "  main:\n"
                  "    url: %s\n"
                  "databases:\n"
                  "%s%s",
                  relay_id, workers, IT_AMQP_URL, ea, eb);
    free(ea);
    free(eb);
}

static long
daemon_threads(pid_t pid)
{
    char path[64], *text;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    text = it_file_read(path);
    const char *p = strstr(text, "Threads:");
    long n = p ? strtol(p + 8, NULL, 10) : -1;
    free(text);
    return n;
}

/*
 * relay.workers: 1 puts both outboxes on one loop.  A's backlog drains
 * a batch at a time; B's event, committed once A is under way, goes out
 * between two of A's batches, long before A's backlog is done: from
 * B's commit to its arrival A records a few batches (B's 20 ms poll,
 * the turn of A's under way, the batch A claimed ahead and the one it
 * records beside, margin for a loaded machine), not the rest of its
 * backlog.
 */
START_TEST(test_idle_outbox_not_starved_by_a_backlog)
{
    const int backlog = 50000, within = 20 * BATCH;
    struct it_fx a, b;
    it_fx_open(&a, "it_pool_a", "sql/outbox.sql");
    it_fx_open(&b, "it_pool_b", "sql/outbox.sql");
    a.consumer = it_consumer_new(a.ex, "#");
    b.consumer = it_consumer_new(b.ex, "#");
    it_db_insert_events(a.sql, "outbox_event", "a", backlog, 100, 64);
    write_two_outbox_config(a.conf, a.name, &a, &b, 1,
                            "        poll_interval: 20ms\n");
    it_fx_start(&a);
    ck_assert_msg(IT_WAIT(30000, it_db_count_status(a.sql, "SENT") > 0),
                  "A's drain did not start");
    it_db_insert_events(b.sql, "outbox_event", "b", 1, 1, 64);
    long long a_at_commit = it_db_count_status(a.sql, "SENT");
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(b.consumer, &m, 30000), 1);
    long long a_sent = it_db_count_status(a.sql, "SENT");
    ck_assert_str_eq(m.message_id, "b-0");
    it_message_free(&m);
    fprintf(stderr,
            "it_pool: B's event out with %lld of A's %d SENT, %lld of them "
            "since its commit\n",
            a_sent, backlog, a_sent - a_at_commit);
    ck_assert_msg(a_sent - a_at_commit <= within,
                  "B's event waited for %lld of A's events (at most %d)",
                  a_sent - a_at_commit, within);
    /* main, the one loop and its helper, and at most a binlog stream per
     * database account: never a thread per outbox. */
    long threads = daemon_threads(a.d.pid);
    ck_assert_msg(threads > 0 && threads <= 5, "%ld threads", threads);
    ck_assert(IT_WAIT(120000, it_db_count_status(a.sql, "SENT") == backlog));
    /* A's own consumer: its events, each once (nothing after them for
     * two seconds once all are SENT). */
    long got = 0;
    while (it_consumer_next(a.consumer, &m, 2000) == 1) {
        ck_assert_msg(strncmp(m.message_id, "a-", 2) == 0, "stray %s",
                      m.message_id);
        got++;
        it_message_free(&m);
    }
    ck_assert_int_eq(got, backlog);
    it_fx_close(&a);
    it_teardown(&b.d, b.consumer, b.sql, b.db, b.conf);
}
END_TEST

/* The longest the relay's statement on db's table has waited for its
 * lock so far, in ms; -1 while none waits. */
static double
relay_lock_wait_ms(MYSQL *sql, const char *db)
{
    char *t = it_db_str(sql,
                        "SELECT MAX(TIME_MS) FROM information_schema."
                        "PROCESSLIST WHERE STATE LIKE 'Waiting for table "
                        "metadata lock%%' AND INFO LIKE '%%`%s`%%'",
                        db);
    double ms = t != NULL ? atof(t) : -1;
    free(t);
    return ms;
}

/*
 * A's table locked by somebody else for 12 s (LOCK TABLES, as a dump or
 * a migration takes it): each of A's statements waits 1 s for it and
 * fails, and A leaves its table alone for longer after each (1, 2, 4
 * s): a handful of waits, where a try every cycle made a dozen.  B's
 * event on the same thread goes out while A's table is still locked,
 * long before 8 s (a lock wait of 10 s, tried three times, held it 30 s).
 * A goes on once the lock is gone.
 */
START_TEST(test_locked_table_holds_its_neighbour_briefly)
{
    enum { B_WITHIN_MS = 8000, LOCK_MS = 12000, MAX_WAITS = 6 };
    struct it_fx a, b;
    it_fx_open(&a, "it_pool_a", "sql/outbox.sql");
    it_fx_open(&b, "it_pool_b", "sql/outbox.sql");
    a.consumer = it_consumer_new(a.ex, "#");
    b.consumer = it_consumer_new(b.ex, "#");
    it_db_insert_events(a.sql, "outbox_event", "a", 1, 1, 64);
    it_db_insert_events(b.sql, "outbox_event", "b", 1, 1, 64);
    write_two_outbox_config(a.conf, a.name, &a, &b, 1, "");
    it_fx_start(&a);
    ck_assert(IT_WAIT(30000, it_db_count_status(a.sql, "SENT") == 1 &&
                                 it_db_count_status(b.sql, "SENT") == 1));
    MYSQL *locker = it_db_connect(a.db);
    it_db_exec(locker, "LOCK TABLES outbox_event WRITE");
    uint64_t locked_at = it_now_ms(), committed = 0, sent_after = 0;
    int waits = 0;
    /* Each wait of the relay seen once: a new one starts its time at 0. */
    for (double last = -1; it_now_ms() - locked_at < LOCK_MS; it_sleep_ms(20)) {
        double ms = relay_lock_wait_ms(b.sql, a.db);
        waits += ms >= 0 && (last < 0 || ms < last);
        last = ms;
        if (waits > 0 && committed == 0) {
            it_db_insert_events(b.sql, "outbox_event", "late", 1, 1, 64);
            committed = it_now_ms();
        }
        if (committed > 0 && sent_after == 0 &&
            it_db_count_status(b.sql, "SENT") == 2)
            sent_after = it_now_ms() - committed;
    }
    it_db_exec(locker, "UNLOCK TABLES");
    mysql_close(locker);
    fprintf(stderr,
            "it_pool: A's table locked %d s: the relay waited for it %d "
            "times; B's event SENT %llu ms after its commit\n",
            LOCK_MS / 1000, waits, (unsigned long long)sent_after);
    ck_assert_msg(committed > 0, "the relay never waited for A's table");
    ck_assert_msg(sent_after > 0 &&
                      committed + sent_after < locked_at + B_WITHIN_MS,
                  "B's event waited out A's lock");
    ck_assert_msg(waits <= MAX_WAITS, "A tried its locked table %d times",
                  waits);
    it_db_insert_events(a.sql, "outbox_event", "after", 1, 1, 64);
    ck_assert(IT_WAIT(30000, it_db_count_status(a.sql, "SENT") == 2));
    it_fx_close(&a);
    it_teardown(&b.d, b.consumer, b.sql, b.db, b.conf);
}
END_TEST

Suite *
it_pool_suite(void)
{
    Suite *s = suite_create("it_pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_idle_outbox_not_starved_by_a_backlog);
    tcase_add_test(tc, test_locked_table_holds_its_neighbour_briefly);
    suite_add_tcase(s, tc);
    return s;
}
