/*
 * it_ordering: order per aggregate across several relays on one table,
 * against the real servers: three daemons with random SIGKILLs and a
 * route that fails for a while, three daemons without faults (each event
 * exactly once, rate against one relay), and a hot aggregate that must
 * move at a confirm round trip per event, not a poll interval; and
 * concurrent producers, with and without the aggregate's lock, for what
 * the consumer sees when commits come out of id order.
 */
#define _GNU_SOURCE
#include "itest.h"
#include "util.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

Suite *it_ordering_suite(void);

#define NRELAYS 3
/* The event type whose route is missing at first in the fault test. */
#define LATE_TYPE "Shipped"

/* Relays are children of the test process: if an assertion ends it, Check
 * kills its process group, relays included. */
struct ord_fx {
    struct it_fx it;
    struct it_fx_relay r[NRELAYS];
    int nrelays;
};

static void bind_all(struct ord_fx *f, const char *bindings);

/*
 * A scratch database, an exchange and a consumer queue bound with each
 * of the space-separated binding keys, and one config per relay.
 */
static void
fx_open(struct ord_fx *f, int nrelays, const char *bindings, const char *extra)
{
    memset(f, 0, sizeof(*f));
    it_fx_open(&f->it, "it_ord", "sql/outbox.sql");
    char first[64];
    sscanf(bindings, "%63s", first);
    f->it.consumer = it_consumer_new(f->it.ex, first);
    bind_all(f, bindings);
    f->nrelays = nrelays;
    for (int i = 0; i < nrelays; i++) {
        char suffix[8];
        snprintf(suffix, sizeof(suffix), "-r%d", i + 1);
        it_fx_relay_name(&f->it, &f->r[i], suffix);
        it_write_config(f->r[i].conf, f->r[i].id, f->it.db, "outbox_event",
                        f->it.ex, extra);
    }
}

static void
fx_start(struct ord_fx *f, int i)
{
    it_daemon_start(&f->r[i].d, f->r[i].conf, f->r[i].id);
}

static void
fx_close(struct ord_fx *f)
{
    for (int i = 0; i < f->nrelays; i++) {
        struct it_daemon *d = &f->r[i].d;
        if (d->pid > 0 && !it_daemon_signal_wait(d, SIGKILL, 5000))
            ck_abort_msg("relay %d did not die", i + 1);
        unlink(f->r[i].conf);
    }
    it_fx_close(&f->it);
}

/* ---- AMQP: one binding added while the test runs ---- */

static void
amqp_ok(amqp_rpc_reply_t r, const char *what)
{
    ck_assert_msg(r.reply_type == AMQP_RESPONSE_NORMAL, "%s failed (%d)", what,
                  r.reply_type);
}

static void
bind_queue(const char *queue, const char *exchange, const char *key)
{
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    struct timeval tv = {5, 0};
    ck_assert_int_eq(amqp_socket_open_noblock(sock, "127.0.0.1", 5672, &tv),
                     AMQP_STATUS_OK);
    amqp_ok(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest",
                       "guest"),
            "login");
    amqp_channel_open(conn, 1);
    amqp_ok(amqp_get_rpc_reply(conn), "channel.open");
    amqp_queue_bind(conn, 1, amqp_cstring_bytes(queue),
                    amqp_cstring_bytes(exchange), amqp_cstring_bytes(key),
                    amqp_empty_table);
    amqp_ok(amqp_get_rpc_reply(conn), "queue.bind");
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

static void
bind_all(struct ord_fx *f, const char *bindings)
{
    char *copy = strdup(bindings), *save = NULL;
    for (char *k = strtok_r(copy, " ", &save); k;
         k = strtok_r(NULL, " ", &save))
        bind_queue(it_consumer_queue(f->it.consumer), f->it.ex, k);
    free(copy);
}

/* ---- the workload ---- */

/*
 * n events over aggregates "<prefix>-<k>": mostly spread at random, with
 * bursts of 100 to 199 consecutive events of one aggregate; one event in
 * late_every (0: none) has the type LATE_TYPE.  Deterministic for a seed,
 * so that two runs compare.
 */
static void
insert_workload(MYSQL *db, const char *prefix, int n, int aggregates,
                int late_every, unsigned seed)
{
    static const char *const types[] = {"Created", "Paid"};
    size_t cap = 1000 * 512 + 256;
    char *sql = malloc(cap);
    int burst_left = 0, burst_agg = 0;
    for (int start = 0; start < n; start += 1000) {
        size_t len = (size_t)snprintf(
            sql, cap,
            "INSERT INTO outbox_event (event_id, aggregate_type, "
            "aggregate_id, event_type, payload) VALUES ");
        int end = start + 1000 < n ? start + 1000 : n;
        for (int i = start; i < end; i++) {
            int agg;
            if (burst_left == 0 && rand_r(&seed) % 400 == 0) {
                burst_left = 100 + rand_r(&seed) % 100;
                burst_agg = rand_r(&seed) % aggregates;
            }
            if (burst_left > 0) {
                burst_left--;
                agg = burst_agg;
            } else {
                agg = rand_r(&seed) % aggregates;
            }
            const char *type = late_every && rand_r(&seed) % late_every == 0
                                   ? LATE_TYPE
                                   : types[rand_r(&seed) % 2];
            len += (size_t)snprintf(sql + len, cap - len,
                                    "%s('%s-%d','Order','%s-%d','%s','{\"seq\":"
                                    "%d,\"pad\":\"%0200d\"}')",
                                    i > start ? "," : "", prefix, i, prefix,
                                    agg, type, i, 0);
        }
        it_db_exec(db, "%s", sql);
    }
    free(sql);
}

/* The number after the last '-' ("<prefix>-<i>"); -1 if none. */
static long
suffix_index(const char *s)
{
    const char *dash = s ? strrchr(s, '-') : NULL;
    return dash ? strtol(dash + 1, NULL, 10) : -1;
}

/* ---- what the consumer saw ---- */

struct tally {
    int n, aggregates;
    int *copies;     /* per event */
    long long *last; /* per aggregate: the outbox id last received */
    long distinct, duplicates;
};

static void
tally_init(struct tally *t, int n, int aggregates)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->aggregates = aggregates;
    t->copies = calloc((size_t)n, sizeof(*t->copies));
    t->last = calloc((size_t)aggregates, sizeof(*t->last));
}

static void
tally_free(struct tally *t)
{
    free(t->copies);
    free(t->last);
}

/*
 * docs/contract.md guarantee 1.3 as a consumer sees it: per aggregate the ids
 * never go down; a duplicate may repeat the event just seen, never an earlier
 * one.
 */
static void
tally_message(struct tally *t, const struct it_message *m)
{
    long i = suffix_index(m->message_id);
    long agg = suffix_index(m->h_aggregate_id);
    ck_assert_msg(i >= 0 && i < t->n, "unexpected message %s", m->message_id);
    ck_assert_msg(agg >= 0 && agg < t->aggregates, "aggregate %s",
                  m->h_aggregate_id);
    ck_assert_msg(m->h_outbox_id >= t->last[agg],
                  "aggregate %ld went back from id %lld to %lld (event %s)",
                  agg, t->last[agg], m->h_outbox_id, m->message_id);
    t->last[agg] = m->h_outbox_id;
    if (t->copies[i]++ == 0)
        t->distinct++;
    else
        t->duplicates++;
}

/* Receives for up to timeout_ms or until every event arrived. */
static void
receive_all(struct ord_fx *f, struct tally *t, int timeout_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (t->distinct < t->n && it_now_ms() < deadline)
        if (it_consumer_next(f->it.consumer, &m, 200) == 1) {
            tally_message(t, &m);
            it_message_free(&m);
        }
}

static double
rate(long n, uint64_t ms)
{
    return (double)n * 1000.0 / (double)(ms ? ms : 1);
}

/* Every event SENT, none left in any other state. */
static void
assert_all_sent(struct ord_fx *f, int n)
{
    if (!IT_WAIT(30000, it_db_count_status(f->it.sql, "SENT") == n))
        ck_abort_msg("%lld of %d SENT, %lld DEAD",
                     it_db_count_status(f->it.sql, "SENT"), n,
                     it_db_count_status(f->it.sql, "DEAD"));
}

/* ---- tests ---- */

enum { N = 20000, AGGS = 200 };

/*
 * Three relays, SIGKILLed at random and restarted, and events of type
 * LATE_TYPE unroutable (mandatory) until their binding appears: every
 * event arrives, and per aggregate in order.
 */
START_TEST(test_three_relays_kills_and_late_route)
{
    enum { KILLS = 8, ROUTE_AFTER_MS = 6000 };
    struct ord_fx f;
    /* A short lease brings a killed relay's rows back soon; retries are
     * quick and many, so that the unroutable events end SENT. */
    fx_open(&f, NRELAYS, "Order.Created Order.Paid",
            "        lease: 4s\n"
            "        max_retries: 1000\n"
            "        backoff: { initial: 100ms, max: 1s }\n");
    insert_workload(f.it.sql, "ev", N, AGGS, 50, 42);
    struct tally t;
    tally_init(&t, N, AGGS);
    unsigned seed = (unsigned)getpid();
    uint64_t t0 = it_now_ms(), route_at = t0 + ROUTE_AFTER_MS;
    uint64_t next_kill = t0 + 1000 + (uint64_t)(rand_r(&seed) % 1500);
    uint64_t deadline = t0 + 150000;
    int kills = 0;
    for (int i = 0; i < NRELAYS; i++)
        fx_start(&f, i);
    struct it_message m;
    while (t.distinct < N && it_now_ms() < deadline) {
        uint64_t now = it_now_ms();
        if (route_at != 0 && now >= route_at) {
            bind_all(&f, "Order." LATE_TYPE);
            route_at = 0;
        }
        if (kills < KILLS && now >= next_kill) {
            int r = rand_r(&seed) % NRELAYS;
            ck_assert(it_daemon_signal_wait(&f.r[r].d, SIGKILL, 5000));
            fx_start(&f, r);
            kills++;
            next_kill = now + 700 + (uint64_t)(rand_r(&seed) % 1500);
        }
        if (it_consumer_next(f.it.consumer, &m, 100) == 1) {
            tally_message(&t, &m);
            it_message_free(&m);
        }
    }
    uint64_t ms = it_now_ms() - t0;
    ck_assert_msg(t.distinct == N, "%ld of %d events arrived", t.distinct, N);
    ck_assert_int_eq(route_at, 0);
    fprintf(stderr,
            "ordering, 3 relays, %d SIGKILLs, route late by %d ms: %d events "
            "in %llu ms = %.0f events/s, %ld duplicates\n",
            kills, ROUTE_AFTER_MS, N, (unsigned long long)ms, rate(N, ms),
            t.duplicates);
    assert_all_sent(&f, N);
    ck_assert_msg(
        it_db_int(f.it.sql,
                  "SELECT COUNT(*) FROM outbox_event WHERE event_type "
                  "= '" LATE_TYPE "' AND retry_count > 0") > 0,
        "no event of type " LATE_TYPE " was ever unroutable");
    tally_free(&t);
    fx_close(&f);
}
END_TEST

/*
 * When the relays' own work is done: no row left unfinished.  Watched
 * beside the consumer, whose pace would otherwise be what is measured.
 */
struct drain_watch {
    const char *db;
    uint64_t t0, sent_ms;
    pthread_t thread;
};

static void *
watch_main(void *arg)
{
    struct drain_watch *w = arg;
    MYSQL *m = it_db_connect(w->db);
    while (it_db_int(m, "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event "
                        "WHERE status IN ('PENDING', 'PROCESSING', 'RETRY') "
                        "LIMIT 1) x") > 0 &&
           it_now_ms() - w->t0 < 120000)
        it_sleep_ms(10);
    w->sent_ms = it_now_ms() - w->t0;
    mysql_close(m);
    return NULL;
}

/* Drains the workload with nrelays relays; returns the time until every
 * row was SENT. */
static uint64_t
drain_without_faults(int nrelays)
{
    struct ord_fx f;
    fx_open(&f, nrelays, "Order.*", NULL);
    insert_workload(f.it.sql, "ev", N, AGGS, 0, 42);
    struct tally t;
    tally_init(&t, N, AGGS);
    struct drain_watch w = {.db = f.it.db, .t0 = it_now_ms()};
    ck_assert_int_eq(pthread_create(&w.thread, NULL, watch_main, &w), 0);
    for (int i = 0; i < nrelays; i++)
        fx_start(&f, i);
    receive_all(&f, &t, 120000);
    uint64_t ms = it_now_ms() - w.t0;
    pthread_join(w.thread, NULL);
    ck_assert_msg(t.distinct == N, "%ld of %d events arrived", t.distinct, N);
    fprintf(stderr,
            "ordering, %d relay%s, no faults: %d events SENT in %llu ms = "
            "%.0f events/s, all consumed after %llu ms\n",
            nrelays, nrelays > 1 ? "s" : "", N, (unsigned long long)w.sent_ms,
            rate(N, w.sent_ms), (unsigned long long)ms);
    assert_all_sent(&f, N);
    /* nothing more may arrive: every event exactly once */
    struct it_message extra;
    if (it_consumer_next(f.it.consumer, &extra, 1000) == 1)
        ck_abort_msg("duplicate or stray message %s", extra.message_id);
    ck_assert_int_eq(t.duplicates, 0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(t.copies[i] == 1, "event %d arrived %d times", i,
                      t.copies[i]);
    /* no relay saw its lease taken, mid-batch or at finalize */
    for (int i = 0; i < nrelays; i++)
        ck_assert_msg(
            it_sh("grep -q 'lost the lease' '%s'", f.r[i].d.log_path) != 0,
            "relay %d lost a lease without faults", i + 1);
    tally_free(&t);
    fx_close(&f);
    return w.sent_ms;
}

/* Three relays without faults: exactly once; compared with one relay. */
START_TEST(test_three_relays_exactly_once)
{
    uint64_t three = drain_without_faults(NRELAYS);
    uint64_t one = drain_without_faults(1);
    fprintf(stderr, "ordering: 3 relays drain at %.2fx the rate of one\n",
            (double)one / (double)(three ? three : 1));
}
END_TEST

/*
 * 2,000 consecutive events of one aggregate: each waits for the confirm
 * of the one before, but never for a poll interval: batches are a prefix
 * of the aggregate, one event per wave, and a full batch claims again at
 * once.  2,000 poll intervals would be 200 s; the bound is a tenth.
 */
static uint64_t
drain_hot_aggregate(const char *ordering)
{
    enum { HOT = 2000, POLL_MS = 100 };
    char extra[128];
    snprintf(extra, sizeof(extra),
             "        poll_interval: %dms\n"
             "        ordering: %s\n",
             POLL_MS, ordering);
    struct ord_fx f;
    fx_open(&f, 1, "Order.*", extra);
    insert_workload(f.it.sql, "hot", HOT, 1, 0, 7);
    struct tally t;
    tally_init(&t, HOT, 1);
    uint64_t t0 = it_now_ms();
    fx_start(&f, 0);
    receive_all(&f, &t, HOT * POLL_MS / 10);
    uint64_t ms = it_now_ms() - t0;
    ck_assert_msg(t.distinct == HOT,
                  "ordering %s: %ld of %d events of one aggregate in %llu ms",
                  ordering, t.distinct, HOT, (unsigned long long)ms);
    fprintf(stderr,
            "ordering %s, one hot aggregate: %d events in %llu ms = %.0f "
            "events/s (%.1f ms per event)\n",
            ordering, HOT, (unsigned long long)ms, rate(HOT, ms),
            (double)ms / HOT);
    assert_all_sent(&f, HOT);
    ck_assert_int_eq(t.duplicates, 0);
    tally_free(&t);
    fx_close(&f);
    return ms;
}

START_TEST(test_hot_aggregate)
{
    drain_hot_aggregate("aggregate");
}
END_TEST

/* ordering: none publishes a batch as one wave: far faster on a hot
 * aggregate (its consumer check still holds: one relay, no faults). */
START_TEST(test_hot_aggregate_ordering_none)
{
    drain_hot_aggregate("none");
}
END_TEST

/*
 * Guarantee 5: an aggregate held back by its first event (in RETRY,
 * backing off) with more than batch_size events queued behind it must
 * not stall the other aggregates: the claim pages past what ordering
 * would drop.
 */
START_TEST(test_held_aggregate_does_not_stall_table)
{
    enum { HELD = 700, OTHERS = 50 };
    struct ord_fx f;
    fx_open(&f, 1, "Order.*", "        batch_size: 100\n");
    it_db_exec(f.it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, retry_count, "
               "next_retry_at, last_error) VALUES ('held-0', 'Order', "
               "'held', 'OrderCreated', '{}', 'RETRY', 1, NOW(6) + INTERVAL "
               "1 HOUR, 'NO_ROUTE: test')");
    it_db_insert_events(f.it.sql, "outbox_event", "queued", HELD, 1, 32);
    it_db_exec(f.it.sql, "UPDATE outbox_event SET aggregate_id = 'held' WHERE "
                         "event_id LIKE 'queued-%%'");
    it_db_insert_events(f.it.sql, "outbox_event", "free", OTHERS, OTHERS, 32);
    it_db_exec(f.it.sql, "COMMIT");
    fx_start(&f, 0);
    /* every other aggregate gets through while "held" waits */
    ck_assert_msg(
        IT_WAIT(20000, it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event "
                                           "WHERE event_id LIKE 'free-%%' AND "
                                           "status = 'SENT'") == OTHERS),
        "the table stalled behind one held aggregate");
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event "
                                         "WHERE aggregate_id = 'held' AND "
                                         "status <> 'PENDING' AND event_id <> "
                                         "'held-0'"),
                     0);
    fx_close(&f);
}
END_TEST

/* ---- concurrent producers (docs/contract.md section 1.3) ---- */

enum { PRODUCERS = 10, PER_PRODUCER = 60, PAGGS = 4 };
#define PEVENTS (PRODUCERS * PER_PRODUCER)

/*
 * What a producer knows of one of its events: the id the INSERT got, and
 * when it sent COMMIT and when COMMIT returned (the commit itself happened
 * in between); then where the consumer saw it.
 */
struct pevent {
    unsigned long long id;
    int agg;
    uint64_t commit_sent_us, commit_done_us;
    long pos, copies;
};

struct producers {
    const char *db;
    bool lock; /* each transaction locks its aggregate's row first */
    unsigned max_pause_us, seed;
    struct pevent ev[PEVENTS];
    pthread_mutex_t mu;
    char error[ERR_LEN]; /* the first producer's SQL error */
};

struct producer_arg {
    struct producers *p;
    int index;
};

static uint64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Runs one statement and discards its result; -1 with the error kept. */
static int
producer_sql(struct producers *p, MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) == 0) {
        MYSQL_RES *res = mysql_store_result(m);
        if (res)
            mysql_free_result(res);
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    if (p->error[0] == '\0')
        snprintf(p->error, sizeof(p->error), "%s: %s", sql, mysql_error(m));
    pthread_mutex_unlock(&p->mu);
    return -1;
}

/*
 * One business transaction: (lock the aggregate,) insert its event, do
 * something else for a while, commit.  The id is taken at the INSERT, the
 * row becomes visible at the COMMIT: the pause is the window in which a
 * later id of the same aggregate can commit first.
 */
static int
produce_one(struct producers *p, MYSQL *m, int k, unsigned *seed)
{
    struct pevent *e = &p->ev[k];
    char sql[512];
    e->agg = rand_r(seed) % PAGGS;
    useconds_t pause = (useconds_t)(rand_r(seed) % (p->max_pause_us + 1));
    if (producer_sql(p, m, "START TRANSACTION") < 0)
        return -1;
    snprintf(sql, sizeof(sql),
             "SELECT version FROM aggregates WHERE id = %d FOR UPDATE", e->agg);
    if (p->lock && producer_sql(p, m, sql) < 0)
        return -1;
    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox_event (event_id, aggregate_type, "
             "aggregate_id, event_type, payload) VALUES ('pc-%d', 'Order', "
             "'pa-%d', 'Changed', '{\"k\": %d}')",
             k, e->agg, k);
    if (producer_sql(p, m, sql) < 0)
        return -1;
    e->id = mysql_insert_id(m);
    snprintf(sql, sizeof(sql),
             "UPDATE aggregates SET version = version + 1 WHERE id = %d",
             e->agg);
    if (p->lock && producer_sql(p, m, sql) < 0)
        return -1;
    usleep(pause);
    e->commit_sent_us = now_us();
    if (producer_sql(p, m, "COMMIT") < 0)
        return -1;
    e->commit_done_us = now_us();
    return 0;
}

static void *
producer_main(void *arg)
{
    struct producer_arg *a = arg;
    struct producers *p = a->p;
    unsigned seed = p->seed + 7919u * (unsigned)a->index;
    MYSQL *m = mysql_init(NULL);
    if (mysql_real_connect(m, "127.0.0.1", IT_DB_USER, IT_DB_PASSWORD, p->db,
                           IT_DB_PORT, NULL, 0) == NULL) {
        producer_sql(p, m, "connect");
    } else {
        for (int i = 0; i < PER_PRODUCER; i++)
            if (produce_one(p, m, a->index * PER_PRODUCER + i, &seed) < 0)
                break;
    }
    mysql_close(m);
    return NULL;
}

/* PRODUCERS threads, each on its own connection, all at once. */
static void
run_producers(struct producers *p)
{
    pthread_t t[PRODUCERS];
    struct producer_arg args[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        args[i] = (struct producer_arg){p, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, producer_main, &args[i]),
                         0);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(t[i], NULL);
    ck_assert_msg(p->error[0] == '\0', "producer failed (seed %u): %s", p->seed,
                  p->error);
}

/* The relays claim before the producers start: one event, consumed. */
static void
wait_relay_running(struct ord_fx *f)
{
    it_db_exec(f->it.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                          "aggregate_id, event_type, payload) VALUES ('warm', "
                          "'Order', 'warm', 'Changed', '{}')");
    for (int i = 0; i < f->nrelays; i++)
        fx_start(f, i);
    struct it_message m;
    ck_assert_msg(it_consumer_next(f->it.consumer, &m, 20000) == 1,
                  "the relays published nothing within 20 s");
    ck_assert_str_eq(m.message_id, "warm");
    it_message_free(&m);
}

/*
 * Records each event's place in the consumer's sequence until every one
 * arrived, then makes sure nothing more comes: every event exactly once.
 */
static void
receive_positions(struct ord_fx *f, struct producers *p)
{
    long seen = 0, pos = 0;
    uint64_t deadline = it_now_ms() + 30000;
    struct it_message m;
    while (seen < PEVENTS && it_now_ms() < deadline)
        if (it_consumer_next(f->it.consumer, &m, 200) == 1) {
            long k = suffix_index(m.message_id);
            ck_assert_msg(k >= 0 && k < PEVENTS, "stray message %s",
                          m.message_id);
            ck_assert_int_eq(m.h_outbox_id, (long long)p->ev[k].id);
            if (p->ev[k].copies++ == 0)
                seen++;
            p->ev[k].pos = pos++;
            it_message_free(&m);
        }
    ck_assert_msg(seen == PEVENTS, "%ld of %d events arrived (seed %u)", seen,
                  PEVENTS, p->seed);
    assert_all_sent(f, PEVENTS + 1);
    if (it_consumer_next(f->it.consumer, &m, 1000) == 1)
        ck_abort_msg("event %s arrived twice (seed %u)", m.message_id, p->seed);
    for (int k = 0; k < PEVENTS; k++)
        ck_assert_msg(p->ev[k].copies == 1, "event pc-%d arrived %ld times", k,
                      p->ev[k].copies);
}

/*
 * One run of the producers against a fresh table and two relays, which
 * poll often: the closer a claim follows a commit, the likelier it sees
 * a higher id committed before a lower one.
 */
static void
producers_round(struct producers *p)
{
    struct ord_fx f;
    fx_open(&f, 2, "Order.*", "        poll_interval: 5ms\n");
    it_db_exec(f.it.sql, "CREATE TABLE aggregates (id INT PRIMARY KEY, version "
                         "INT NOT NULL DEFAULT 0) ENGINE=InnoDB");
    for (int a = 0; a < PAGGS; a++)
        it_db_exec(f.it.sql, "INSERT INTO aggregates (id) VALUES (%d)", a);
    wait_relay_running(&f);
    p->db = f.it.db;
    p->error[0] = '\0';
    memset(p->ev, 0, sizeof(p->ev));
    run_producers(p);
    receive_positions(&f, p);
    fx_close(&f);
}

/* a's COMMIT returned before b's was sent: a surely committed first. */
static bool
committed_before(const struct pevent *a, const struct pevent *b)
{
    return a->commit_done_us < b->commit_sent_us;
}

/*
 * What the docs promise without the producer's lock, pair by pair within
 * an aggregate: a lower id that committed before a higher one arrives
 * before it.  Returns the pairs the consumer saw against id order, each
 * of which must be a higher id that may have committed first; counts the
 * pairs surely committed in id order and those surely against it.
 */
struct pair_counts {
    long in_order, against;
};

static long
check_commit_order(const struct producers *p, struct pair_counts *surely)
{
    long inversions = 0;
    *surely = (struct pair_counts){0, 0};
    for (int i = 0; i < PEVENTS; i++)
        for (int j = 0; j < PEVENTS; j++) {
            const struct pevent *a = &p->ev[i], *b = &p->ev[j];
            if (a->agg != b->agg || a->id >= b->id)
                continue;
            if (committed_before(a, b)) {
                ck_assert_msg(a->pos < b->pos,
                              "id %llu committed before id %llu of aggregate "
                              "%d but arrived after it (seed %u)",
                              a->id, b->id, a->agg, p->seed);
                surely->in_order++;
            }
            if (committed_before(b, a))
                surely->against++;
            if (b->pos < a->pos)
                inversions++;
        }
    return inversions;
}

static unsigned
producers_seed(void)
{
    const char *s = getenv("IT_ORDER_SEED");
    unsigned seed = s ? (unsigned)strtoul(s, NULL, 10)
                      : (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "ordering, producers: seed %u (IT_ORDER_SEED)\n", seed);
    return seed;
}

static struct producers *
producers_new(bool lock, unsigned max_pause_ms, unsigned seed)
{
    struct producers *p = calloc(1, sizeof(*p));
    ck_assert_ptr_nonnull(p);
    p->lock = lock;
    p->max_pause_us = max_pause_ms * 1000;
    p->seed = seed;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

static void
producers_free(struct producers *p)
{
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/*
 * Producers that lock the aggregate's row before inserting its event:
 * ids of one aggregate are taken in commit order, and the consumer sees
 * them never go down, each event exactly once.
 */
START_TEST(test_locking_producers_keep_id_order)
{
    struct producers *p = producers_new(true, 20, producers_seed());
    producers_round(p);
    for (int i = 0; i < PEVENTS; i++)
        for (int j = 0; j < PEVENTS; j++) {
            const struct pevent *a = &p->ev[i], *b = &p->ev[j];
            if (a->agg == b->agg && a->id < b->id)
                ck_assert_msg(a->pos < b->pos,
                              "aggregate %d: id %llu arrived after id %llu "
                              "although its producer held the lock (seed %u)",
                              a->agg, a->id, b->id, p->seed);
        }
    fprintf(stderr,
            "ordering, locking producers: %d events on %d aggregates, ids "
            "never went down\n",
            PEVENTS, PAGGS);
    producers_free(p);
}
END_TEST

/*
 * Producers that do not lock: a transaction that took id 10 can commit
 * after the one that took id 11 was published; 10 then arrives after 11.
 * Every event still arrives exactly once, and a lower id that committed
 * first arrives first.  The inversion must actually happen (else the
 * test proved nothing): the pauses grow until it does, three rounds at
 * most.
 */
START_TEST(test_unlocked_producers_commit_order)
{
    long inversions = 0;
    struct pair_counts surely;
    unsigned pause_ms = 20, seed = producers_seed();
    for (int round = 0; round < 3 && inversions == 0; round++, pause_ms *= 2) {
        struct producers *p = producers_new(false, pause_ms, seed + round);
        producers_round(p);
        inversions = check_commit_order(p, &surely);
        fprintf(stderr,
                "ordering, unlocked producers, pauses up to %u ms: %d events; "
                "pairs of an aggregate surely committed in id order %ld (all "
                "arrived in order), surely against it %ld; %ld arrived "
                "against id order\n",
                pause_ms, PEVENTS, surely.in_order, surely.against, inversions);
        producers_free(p);
    }
    ck_assert_msg(inversions > 0,
                  "no id inversion could be provoked in 3 rounds (seeds %u "
                  "to %u)",
                  seed, seed + 2);
}
END_TEST

Suite *
it_ordering_suite(void)
{
    Suite *s = suite_create("it_ordering");
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 240);
    tcase_add_test(faults, test_three_relays_kills_and_late_route);
    suite_add_tcase(s, faults);
    TCase *relays = tcase_create("relays");
    tcase_set_timeout(relays, 240);
    tcase_add_test(relays, test_three_relays_exactly_once);
    suite_add_tcase(s, relays);
    TCase *hot = tcase_create("hot");
    tcase_set_timeout(hot, 120);
    tcase_add_test(hot, test_hot_aggregate);
    tcase_add_test(hot, test_hot_aggregate_ordering_none);
    tcase_add_test(hot, test_held_aggregate_does_not_stall_table);
    suite_add_tcase(s, hot);
    TCase *producers = tcase_create("producers");
    tcase_set_timeout(producers, 120);
    tcase_add_test(producers, test_locking_producers_keep_id_order);
    tcase_add_test(producers, test_unlocked_producers_commit_order);
    suite_add_tcase(s, producers);
    return s;
}
