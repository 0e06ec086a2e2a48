/*
 * bench_cost: BENCH_ONLY=cost (and part of `make bench`).  What relaying
 * costs the primary per event, as a new user would measure it: a producer
 * commits one event per transaction at a steady rate, first alone, then
 * (with a binary log) beside a bare log reader, then with outboxd
 * relaying the same stream; the relay's statements and the mariadbd CPU
 * it adds per event, as a ratio to the producer's own, beside what
 * reading the binlog at all adds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

/* The application's own account: its statements are told apart from
 * the relay's and the bench's by it. */
#define PRODUCER_USER "outboxd_producer"
#define COST_CONF "/tmp/outboxd-bench-cost.yaml"
/* After the last commit, both windows run on this long: the relay's
 * marks of the last events fall in its window. */
#define COST_TAIL_S 2.0
/* At least this many events a case: a p99 of fewer says little. */
#define COST_MIN_EVENTS 200
#define COST_RUNS_MAX 9
/* Other clients' statements per second past which a case is taken
 * again, at most COST_TRIES times in all: a shared server's neighbour
 * in one window and not the other moves the CPU by more than the relay
 * costs at 10 events/s. */
#define COST_OTHERS_MAX 10.0
#define COST_TRIES 3

struct cost_case {
    long rate;
    const struct server *sv;
    const char *on_sent; /* mark or delete */
};

/* What the server had done at one moment, by its own counters. */
struct counters {
    long long producer, relay, questions; /* statements */
    double server_ms, outboxd_ms;         /* CPU, from /proc */
    /* CPU of each account's sessions by USER_STATISTICS: other clients
     * of the shared server do not blur it, but the server's background
     * threads and the binlog dump's streaming are not in it. */
    double producer_ms, relay_ms;
};

/* The same over a window: the difference of two readings. */
struct window {
    long events;
    double achieved; /* events/s the producer reached */
    double seconds;
    long binlog_readers; /* other clients' binlog dumps at its start */
    struct counters used;
    /* CPU of the sessions of each kind alive through the window */
    double session_ms[SESSION_KINDS];
};

struct cost_result {
    /* On the binlog server, beside_reader is the producer's stream with a
     * bare log reader attached: what a replica or Debezium costs alone;
     * least, the same with the least a relay does (struct least). */
    struct window alone, beside_reader, least, relayed;
    bool read;
    long delivered;        /* distinct events the consumer received */
    long repeats;          /* and messages of them received again */
    long unfinished;       /* rows not SENT (mark) or not deleted at the end */
    double woken;          /* outboxes the binlog wakes: 0 or 1 */
    double p50_ms, p99_ms; /* COMMIT's answer to the consumer */
};

/* ---- the accounts and the table ---- */

/* The producer's account, on both hosts a client on 127.0.0.1 may be
 * taken for (bench.c, relay_account), allowed to insert events only. */
static void
producer_account(const struct server *sv)
{
    static const char *const hosts[] = {"localhost", "127.0.0.1"};
    MYSQL *m = db_connect(sv, NULL);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++) {
        db_exec(m,
                "CREATE USER IF NOT EXISTS '" PRODUCER_USER "'@'%s' "
                "IDENTIFIED BY '" PRODUCER_USER "'",
                hosts[i]);
        db_exec(m, "GRANT INSERT ON " DB_NAME ".* TO '" PRODUCER_USER "'@'%s'",
                hosts[i]);
    }
    if (db_int(m, "SELECT @@GLOBAL.userstat") != 1)
        die("userstat is off on port %d: statements cannot be counted",
            sv->port);
    mysql_close(m);
}

/* A fresh database with sql/outbox.sql's table, both accounts on it. */
static void
cost_db_fresh(const struct settings *s, const struct server *sv)
{
    db_create(s, sv, DB_NAME);
    producer_account(sv);
}

static MYSQL *
producer_connect(const struct server *sv)
{
    MYSQL *m = mysql_init(NULL);
    if (!mysql_real_connect(m, "127.0.0.1", PRODUCER_USER, PRODUCER_USER,
                            DB_NAME, (unsigned)sv->port, NULL, 0))
        die("MariaDB on port %d as " PRODUCER_USER ": %s", sv->port,
            mysql_error(m));
    return m;
}

/* ---- the window ---- */

/* The two accounts' statements (as db_user_statements counts them) and
 * the CPU of their sessions, in one statement. */
static void
accounts_read(MYSQL *m, struct counters *c)
{
    const char *sql =
        "SELECT COALESCE(SUM(IF(USER = '" PRODUCER_USER "', n, 0)), 0), "
        "COALESCE(SUM(IF(USER = '" RELAY_USER
        "', n, 0)), 0) - (" DB_EXECUTES_SQL "), "
        "COALESCE(SUM(IF(USER = '" PRODUCER_USER "', CPU_TIME, 0)), 0), "
        "COALESCE(SUM(IF(USER = '" RELAY_USER "', CPU_TIME, 0)), 0) FROM "
        "(SELECT USER, CPU_TIME, SELECT_COMMANDS + UPDATE_COMMANDS + "
        "OTHER_COMMANDS AS n FROM information_schema.USER_STATISTICS) u";
    if (mysql_query(m, sql) != 0)
        die("SQL: %s: %s", mysql_error(m), sql);
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row = r != NULL ? mysql_fetch_row(r) : NULL;
    if (row == NULL)
        die("USER_STATISTICS answered no row");
    c->producer = atoll(row[0]);
    c->relay = atoll(row[1]);
    c->producer_ms = strtod(row[2], NULL) * 1000.0;
    c->relay_ms = strtod(row[3], NULL) * 1000.0;
    mysql_free_result(r);
}

/* Three statements of the bench's own; Questions counts them all. */
static struct counters
counters_read(MYSQL *m, pid_t server, pid_t outboxd, struct sessions *sessions)
{
    struct counters c;
    sessions_read(m, server, PRODUCER_USER, RELAY_USER, sessions);
    accounts_read(m, &c);
    c.server_ms = cpu_ms(server);
    c.outboxd_ms = outboxd > 0 ? cpu_ms(outboxd) : 0;
    c.questions = db_questions(m);
    return c;
}

static struct counters
counters_diff(struct counters a, struct counters b)
{
    return (struct counters){
        b.producer - a.producer,       b.relay - a.relay,
        b.questions - a.questions - 3, b.server_ms - a.server_ms,
        b.outboxd_ms - a.outboxd_ms,   b.producer_ms - a.producer_ms,
        b.relay_ms - a.relay_ms};
}

/* ---- the least a relay does ---- */

/* Events a least relay records in one statement and one commit: as many
 * as outboxd's lean transactions take at a steady 200 events/s. */
#define LEAST_EVENTS 16

/*
 * The least that a relay which locks each event as it commits asks of
 * the database, done in the producer's stream on the relay's account:
 * a locking read of each new row by id once its COMMIT answers, and
 * every LEAST_EVENTS events one statement recording them (on_sent) and
 * a commit.  No broker, no ordering, no stream of its own: beside the
 * log reader, what any such relay must cost over reading the binlog,
 * the floor that outboxd's own work is judged against.
 */
struct least {
    MYSQL *m;
    bool deletes; /* on_sent: delete */
    unsigned long long ids[LEAST_EVENTS];
    int n;
};

static void
least_open(struct least *l, const struct cost_case *c)
{
    *l = (struct least){.deletes = strcmp(c->on_sent, "delete") == 0};
    l->m = mysql_init(NULL);
    if (!mysql_real_connect(l->m, "127.0.0.1", RELAY_USER, RELAY_USER, DB_NAME,
                            (unsigned)c->sv->port, NULL, 0))
        die("MariaDB on port %d as " RELAY_USER ": %s", c->sv->port,
            mysql_error(l->m));
    db_exec(l->m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    mysql_autocommit(l->m, 0);
}

/* The held rows' outcomes in one statement, and the commit. */
static void
least_record(struct least *l)
{
    if (l->n == 0)
        return;
    struct strbuf q = {0};
    strbuf_adds(&q, l->deletes ? "DELETE FROM outbox_event WHERE id IN ("
                               : "UPDATE outbox_event SET status = 'SENT', "
                                 "sent_at = NOW(6) WHERE id IN (");
    for (int i = 0; i < l->n; i++)
        strbuf_addf(&q, "%s%llu", i > 0 ? ", " : "", l->ids[i]);
    strbuf_adds(&q, ")");
    db_exec(l->m, "%s", q.p);
    db_exec(l->m, "COMMIT");
    strbuf_free(&q);
    l->n = 0;
}

static void
least_event(struct least *l, unsigned long long id)
{
    db_exec(l->m,
            "SELECT id, event_id, payload FROM outbox_event WHERE id = %llu "
            "FOR UPDATE",
            id);
    l->ids[l->n++] = id;
    if (l->n == LEAST_EVENTS)
        least_record(l);
}

/* The payload's pad: events of about PAYLOAD_BYTES, as the drain's. */
static const char *
payload_pad(void)
{
    static char pad[PAYLOAD_BYTES - 60];
    if (pad[0] == '\0') {
        memset(pad, 'x', sizeof(pad) - 1);
        pad[sizeof(pad) - 1] = '\0';
    }
    return pad;
}

/*
 * n events at rate, each its own transaction (BEGIN; INSERT; COMMIT),
 * as an application writes them, each then taken by least when given.
 * Each one's time from before its INSERT to COMMIT's answer into trx_us;
 * the rate achieved.
 */
static double
produce(MYSQL *m, long rate, long n, int64_t *trx_us, struct least *least)
{
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        double wait = t0 + (double)i / (double)rate - now_s();
        if (wait > 0)
            sleep_s(wait);
        int64_t t = wall_us();
        db_exec(m, "BEGIN");
        db_exec(m,
                "INSERT INTO outbox_event (event_id, aggregate_type, "
                "aggregate_id, event_type, payload) VALUES ('c-%ld', "
                "'Order', '%ld', 'OrderCreated', '{\"i\":%ld,\"t\":%lld,"
                "\"pad\":\"%s\"}')",
                i, i % 1000, i, (long long)t, payload_pad());
        db_exec(m, "COMMIT");
        trx_us[i] = wall_us() - t;
        if (least != NULL)
            least_event(least, (unsigned long long)mysql_insert_id(m));
    }
    return (double)n / (now_s() - t0);
}

/*
 * The producer's stream over one window, read by the bench's account
 * (m): from before the first event to COST_TAIL_S after the last, the
 * same length with and without the relay.
 */
static struct window
window_run(MYSQL *m, const struct cost_case *c, long n, pid_t outboxd,
           int64_t *trx_us, struct least *least)
{
    struct window w = {.events = n};
    MYSQL *producer = producer_connect(c->sv);
    pid_t server = server_pid(c->sv);
    /* Each reads every commit of the producer's, on the server's CPU. */
    w.binlog_readers = (long)db_int(
        m, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE "
           "COMMAND LIKE 'Binlog Dump%' AND USER <> '" RELAY_USER "'");
    double t0 = now_s();
    struct sessions sa, sb;
    struct counters a = counters_read(m, server, outboxd, &sa);
    w.achieved = produce(producer, c->rate, n, trx_us, least);
    if (least != NULL)
        least_record(least);
    sleep_s(COST_TAIL_S);
    w.used = counters_diff(a, counters_read(m, server, outboxd, &sb));
    sessions_used(&sa, &sb, w.session_ms);
    w.seconds = now_s() - t0;
    mysql_close(producer);
    return w;
}

static long
events_of(const struct settings *s, long rate)
{
    long n = rate * s->cost_seconds;
    return n < COST_MIN_EVENTS ? COST_MIN_EVENTS : n;
}

/* What stands beside the producer in a window without outboxd. */
enum beside { BESIDE_NOTHING, BESIDE_READER, BESIDE_READER_AND_LEAST };

/*
 * The producer with no outboxd: the rows stay PENDING.  Beside a bare
 * log reader: what any reader of the binlog costs the primary (its dump
 * thread, and each commit's signal to it), which a primary with a
 * replica pays already; and with the least a relay does (struct least).
 */
static struct window
cost_unrelayed(const struct settings *s, const struct cost_case *c,
               enum beside beside)
{
    long n = events_of(s, c->rate);
    int64_t *trx_us = xcalloc((size_t)n, sizeof(*trx_us));
    cost_db_fresh(s, c->sv);
    MYSQL *m = db_connect(c->sv, DB_NAME);
    pid_t pid = beside != BESIDE_NOTHING ? log_reader_start(c->sv) : 0;
    struct least least;
    if (beside == BESIDE_READER_AND_LEAST)
        least_open(&least, c);
    struct window w = window_run(
        m, c, n, 0, trx_us, beside == BESIDE_READER_AND_LEAST ? &least : NULL);
    if (beside == BESIDE_READER_AND_LEAST)
        mysql_close(least.m);
    if (pid != 0)
        log_reader_stop(pid);
    mysql_close(m);
    free(trx_us);
    return w;
}

/* ---- the relay ---- */

/* outboxd's defaults but for on_sent, which the case sets, and ordering,
 * which BENCH_COST_ORDERING may (to weigh what order per aggregate costs). */
static void
cost_config(const struct cost_case *c)
{
    const char *ordering = getenv("BENCH_COST_ORDERING");
    FILE *f = config_open(COST_CONF);
    fprintf(f,
            "  " DB_NAME ":\n    user: " RELAY_USER
            "\n    password: " RELAY_USER
            "\n    port: %d\n    database: " DB_NAME "\n"
            "    outboxes:\n      - table: outbox_event\n"
            "        exchange: " EXCHANGE "\n        on_sent: %s\n",
            c->sv->port, c->on_sent);
    if (ordering != NULL && *ordering != '\0')
        fprintf(f, "        ordering: %s\n", ordering);
    fclose(f);
}

/* Until outboxd is ready and, on the binlog server, woken by its stream;
 * then settle_s more, for it to be idle as between a user's events. */
static void
wait_settled(const struct settings *s, const struct server *sv)
{
    double t0 = now_s();
    for (;;) {
        char *page = daemon_ready() ? fetch_page("/metrics") : NULL;
        bool live = page != NULL && binlog_woken(page) >= 1;
        free(page);
        if (page != NULL && (live || !sv->binlog))
            break;
        if (now_s() - t0 > 30)
            die("outboxd was not ready%s 30 s after start (see "
                "/tmp/outboxd-bench.log)",
                sv->binlog ? " and woken by the binlog" : "");
        sleep_s(0.1);
    }
    sleep_s((double)s->cost_settle_seconds);
}

/* Rows of the stream not yet finished: not SENT, or not deleted. */
static long
rows_unfinished(MYSQL *m, const struct cost_case *c, long n)
{
    if (strcmp(c->on_sent, "delete") == 0)
        return (long)db_int(m, "SELECT COUNT(*) FROM outbox_event");
    return n - (long)db_int(m, "SELECT COUNT(*) FROM outbox_event WHERE "
                               "status = 'SENT'");
}

/* p50 and p99 of COMMIT's answer to the consumer, in ms. */
static void
commit_latencies(struct cost_result *r, const struct consumer *con,
                 const int64_t *trx_us)
{
    long n = con->expected;
    int64_t *after = xcalloc((size_t)n, sizeof(*after));
    for (long i = 0; i < n; i++) {
        int64_t d = con->latency_us[i] - trx_us[i];
        after[i] = d > 0 ? d : 0; /* 0: the wake came first */
    }
    qsort(after, (size_t)n, sizeof(*after), cmp_i64);
    r->p50_ms = (double)after[n / 2] / 1000.0;
    r->p99_ms = (double)after[n * 99 / 100] / 1000.0;
    free(after);
}

static double
woken_now(void)
{
    char *page = fetch_page("/metrics");
    double woken = page != NULL ? binlog_woken(page) : 0;
    free(page);
    return woken;
}

/* The same stream with outboxd relaying it to a consumer. */
static void
cost_relayed(const struct settings *s, const struct cost_case *c,
             struct cost_result *r)
{
    long n = events_of(s, c->rate);
    struct consumer con = {.expected = n};
    con.latency_us = xcalloc((size_t)n, sizeof(*con.latency_us));
    int64_t *trx_us = xcalloc((size_t)n, sizeof(*trx_us));
    cost_db_fresh(s, c->sv);
    queue_reset(s);
    cost_config(c);
    pid_t pid = start_daemon(s, COST_CONF);
    pthread_t th;
    pthread_create(&th, NULL, consume_latencies, &con);
    wait_settled(s, c->sv); /* the consumer subscribes meanwhile */
    MYSQL *m = db_connect(c->sv, DB_NAME);
    r->relayed = window_run(m, c, n, pid, trx_us, NULL);
    r->unfinished = rows_unfinished(m, c, n);
    r->woken = woken_now();
    pthread_join(th, NULL);
    r->delivered = con.received;
    r->repeats = con.repeats;
    stop_daemon(pid);
    mysql_close(m);
    if (r->delivered == n)
        commit_latencies(r, &con, trx_us);
    free(con.latency_us);
    free(trx_us);
    queue_reset(s);
}

/* ---- the cases ---- */

static const char *
cost_name(const struct cost_case *c, char *buf, size_t len)
{
    snprintf(buf, len, "%ld/s %s %s", c->rate, c->sv->name, c->on_sent);
    return buf;
}

static double
per_event(double v, const struct window *w)
{
    return v / (double)w->events;
}

/* mariadbd's /proc CPU per event in window w over that in base. */
static double
added_ms(const struct window *w, const struct window *base)
{
    return per_event(w->used.server_ms, w) -
           per_event(base->used.server_ms, base);
}

/* That as a ratio to what base costs: over the producer alone, the
 * headline; over the producer beside a log reader, what the relay costs
 * a primary whose binlog a replica reads already. */
static double
added_ratio(const struct window *w, const struct window *base)
{
    return added_ms(w, base) / per_event(base->used.server_ms, base);
}

/* The relay's mariadbd CPU per event, over the producer's own. */
static double
cost_ratio(const struct cost_result *r)
{
    return added_ratio(&r->relayed, &r->alone);
}

/*
 * Statements per second of clients neither the producer's nor the
 * relay's: the servers are shared, and another client's work in one
 * window and not the other would show as the relay's CPU.
 */
static double
others_per_s(const struct window *w)
{
    const struct counters *u = &w->used;
    return (double)(u->questions - u->producer - u->relay) / w->seconds;
}

static bool
cost_disturbed(const struct cost_result *r)
{
    return others_per_s(&r->alone) > COST_OTHERS_MAX ||
           (r->read && others_per_s(&r->beside_reader) > COST_OTHERS_MAX) ||
           (r->read && others_per_s(&r->least) > COST_OTHERS_MAX) ||
           others_per_s(&r->relayed) > COST_OTHERS_MAX;
}

/* The relay's own server threads (sessions and binlog dump) over its
 * producer's session, in the same window: the difference of windows
 * (cost_ratio) also carries the producer's and the background's drift. */
static double
threads_ratio(const struct window *w)
{
    const double *ms = w->session_ms;
    return (ms[SESSION_RELAY] + ms[SESSION_DUMP]) / ms[SESSION_PRODUCER];
}

/* mariadbd's CPU outside the accounts' sessions, per event. */
static double
rest_ms(const struct window *w)
{
    const double *ms = w->session_ms;
    return per_event(w->used.server_ms - ms[SESSION_PRODUCER] -
                         ms[SESSION_RELAY] - ms[SESSION_DUMP],
                     w);
}

static void
print_cost_threads(const struct cost_result *r)
{
    const struct window *a = &r->alone, *w = &r->relayed;
    const double *ms = w->session_ms;
    printf("  (mariadbd's threads by /proc, relayed: producer's session "
           "%.2f ms/event (alone %.2f), relay's sessions %.2f and binlog "
           "dump %.2f = %.1fx the producer's session; the rest of mariadbd "
           "%.2f ms/event alone, %.2f relayed)\n",
           per_event(ms[SESSION_PRODUCER], w),
           per_event(a->session_ms[SESSION_PRODUCER], a),
           per_event(ms[SESSION_RELAY], w), per_event(ms[SESSION_DUMP], w),
           threads_ratio(w), rest_ms(a), rest_ms(w));
}

/* The relay's sessions over the least relay's, per event: the steadier
 * comparison, each a thread's own CPU. */
static double
sessions_over_least(const struct cost_result *r)
{
    const struct window *w = &r->relayed, *l = &r->least;
    return per_event(w->session_ms[SESSION_RELAY], w) /
           per_event(l->session_ms[SESSION_RELAY], l);
}

/* The headline beside what reading the binlog at all costs: a log
 * reader pays that too, and a primary with a replica pays it already. */
static void
print_cost_reader(const struct cost_result *r)
{
    const struct window *b = &r->beside_reader;
    if (!r->read)
        return;
    printf("  (beside a bare log reader, mariadb-binlog streaming as a "
           "replica or Debezium does: the reader adds %.2f ms/event = %.1fx "
           "the producer, whose session takes %.2f ms/event beside it; the "
           "relay adds %.2f ms/event over the two = %.1fx what they cost)\n",
           added_ms(b, &r->alone), added_ratio(b, &r->alone),
           per_event(b->session_ms[SESSION_PRODUCER], b),
           added_ms(&r->relayed, b), added_ratio(&r->relayed, b));
    const struct window *l = &r->least;
    printf("  (beside the same reader, the least a relay that locks each "
           "event as it commits does: a locking read of each by id, a "
           "record and a commit per %d; it adds %.1f stmts %.2f ms/event = "
           "%.1fx what the producer and the reader cost, its session %.2f "
           "ms/event, the relay's sessions %.1fx that)\n",
           LEAST_EVENTS, per_event((double)l->used.relay, l), added_ms(l, b),
           added_ratio(l, b), per_event(l->session_ms[SESSION_RELAY], l),
           sessions_over_least(r));
}

/* What the headline rests on, and what could blur it. */
static void
print_cost_detail(const struct cost_result *r)
{
    const struct window *a = &r->alone, *w = &r->relayed;
    double producer_ms = per_event(w->used.producer_ms, w);
    double relay_ms = per_event(w->used.relay_ms, w);
    printf("  (%ld events at %.0f/s alone, %.0f/s relayed; wake %s; "
           "the sessions' own CPU by USER_STATISTICS, relayed: producer "
           "%.2f ms/event, relay %.2f ms/event = %.1fx; Questions per "
           "event %.1f alone, %.1f relayed; other clients' statements "
           "%.1f/s alone, %.1f/s relayed; other clients' binlog readers %ld "
           "alone, %ld relayed; outboxd CPU %.2f ms/event; %ld rows "
           "unfinished %.0f s after the last commit)\n",
           w->events, a->achieved, w->achieved,
           r->woken > 0 ? "binlog" : "poll", producer_ms, relay_ms,
           relay_ms / producer_ms, per_event((double)a->used.questions, a),
           per_event((double)w->used.questions, w), others_per_s(a),
           others_per_s(w), a->binlog_readers, w->binlog_readers,
           per_event(w->used.outboxd_ms, w), r->unfinished, COST_TAIL_S);
}

static void
print_cost(const struct cost_case *c, const struct cost_result *r)
{
    char name[64];
    const struct window *a = &r->alone, *w = &r->relayed;
    double alone_ms = per_event(a->used.server_ms, a);
    printf("cost %s: producer %.1f stmts %.2f ms/event; relay adds %.1f "
           "stmts %.2f ms/event = %.1fx the producer; %ld/%ld delivered "
           "(%ld twice)",
           cost_name(c, name, sizeof(name)),
           per_event((double)a->used.producer, a), alone_ms,
           per_event((double)w->used.relay, w),
           per_event(w->used.server_ms, w) - alone_ms, cost_ratio(r),
           r->delivered, w->events, r->repeats);
    if (r->delivered == w->events)
        printf(", p50 %.1f ms, p99 %.1f ms from COMMIT", r->p50_ms, r->p99_ms);
    if (cost_disturbed(r))
        printf(" (disturbed by other clients %d times: see below)", COST_TRIES);
    printf("\n");
    print_cost_detail(r);
    print_cost_threads(r);
    print_cost_reader(r);
}

/* One case, taken again while other clients disturbed it; the last
 * try's figures, marked when it was disturbed too. */
static struct cost_result
cost_run(const struct settings *s, const struct cost_case *c)
{
    struct cost_result r;
    for (int tries = 1;; tries++) {
        r = (struct cost_result){0};
        r.alone = cost_unrelayed(s, c, BESIDE_NOTHING);
        r.read = c->sv->binlog;
        if (r.read) {
            r.beside_reader = cost_unrelayed(s, c, BESIDE_READER);
            r.least = cost_unrelayed(s, c, BESIDE_READER_AND_LEAST);
        }
        cost_relayed(s, c, &r);
        bool lost = r.delivered < r.relayed.events; /* dies below */
        if (lost || !cost_disturbed(&r) || tries == COST_TRIES)
            break;
        char name[64];
        printf("cost %s: other clients sent %.1f statements/s alone, %.1f/s "
               "relayed (more than %.0f/s): taken again\n",
               cost_name(c, name, sizeof(name)), others_per_s(&r.alone),
               others_per_s(&r.relayed), COST_OTHERS_MAX);
    }
    print_cost(c, &r);
    if (r.delivered < r.relayed.events)
        die("cost: the consumer received %ld of %ld events", r.delivered,
            r.relayed.events);
    return r;
}

/* The figures a run of a case is judged by, per event. */
enum spread_figure {
    SPREAD_STMTS,    /* the relay's statements */
    SPREAD_ADDED,    /* mariadbd's /proc CPU added over the producer alone */
    SPREAD_RATIO,    /* that over the producer alone: the headline */
    SPREAD_THREADS,  /* the relay's server threads, ms */
    SPREAD_SAME,     /* those over the producer's session, same window */
    SPREAD_READER,   /* a bare log reader's /proc CPU, over the producer */
    SPREAD_OVER,     /* the relay's over the producer and reader's, over it */
    SPREAD_LEAST,    /* the least relay's over the same */
    SPREAD_SESSIONS, /* the relay's sessions over the least relay's */
    SPREAD_FIGURES
};

/* One run's figures, as print_cost and print_cost_threads give them. */
static void
spread_figures(const struct cost_result *r, double v[SPREAD_FIGURES])
{
    const struct window *a = &r->alone, *w = &r->relayed;
    const double *ms = w->session_ms;
    v[SPREAD_STMTS] = per_event((double)w->used.relay, w);
    v[SPREAD_ADDED] =
        per_event(w->used.server_ms, w) - per_event(a->used.server_ms, a);
    v[SPREAD_RATIO] = cost_ratio(r);
    v[SPREAD_THREADS] = per_event(ms[SESSION_RELAY] + ms[SESSION_DUMP], w);
    v[SPREAD_SAME] = threads_ratio(w);
    v[SPREAD_READER] = r->read ? added_ratio(&r->beside_reader, &r->alone) : 0;
    v[SPREAD_OVER] = r->read ? added_ratio(w, &r->beside_reader) : 0;
    v[SPREAD_LEAST] = r->read ? added_ratio(&r->least, &r->beside_reader) : 0;
    v[SPREAD_SESSIONS] = r->read ? sessions_over_least(r) : 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The lowest, median and highest of n values (sorted in place). */
static void
spread_of(double *v, long n, double out[3])
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    out[0] = v[0];
    out[1] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    out[2] = v[n - 1];
}

/* One figure's "low/median/high", then after. */
static void
print_three(const char *fmt, const double f[3], const char *after)
{
    for (int i = 0; i < 3; i++) {
        printf(fmt, f[i]);
        printf("%s", i < 2 ? "/" : after);
    }
}

/*
 * The runs' range and median of each figure: the headline, a difference
 * of two windows, moves with the machine between them by more than a
 * change to the relay moves it, so a case is judged over several runs.
 */
static void
print_spread(const struct cost_case *c, const struct cost_result *runs, long n)
{
    double col[SPREAD_FIGURES][COST_RUNS_MAX], f[SPREAD_FIGURES][3];
    for (long i = 0; i < n; i++) {
        double v[SPREAD_FIGURES];
        spread_figures(&runs[i], v);
        for (int k = 0; k < SPREAD_FIGURES; k++)
            col[k][i] = v[k];
    }
    for (int k = 0; k < SPREAD_FIGURES; k++)
        spread_of(col[k], n, f[k]);
    char name[64];
    printf("cost %s over %ld runs (low/median/high): relay adds ",
           cost_name(c, name, sizeof(name)), n);
    print_three("%.1f", f[SPREAD_STMTS], " stmts, ");
    print_three("%.2f", f[SPREAD_ADDED], " ms/event = ");
    print_three("%.1f", f[SPREAD_RATIO], "x the producer; relay's threads ");
    print_three("%.2f", f[SPREAD_THREADS], " ms/event = ");
    print_three("%.1f", f[SPREAD_SAME], "x the producer's session");
    if (runs[0].read) {
        printf("; a bare log reader adds ");
        print_three("%.1f", f[SPREAD_READER],
                    "x the producer, the relay over the two ");
        print_three("%.1f", f[SPREAD_OVER],
                    "x what they cost, the least relay ");
        print_three("%.1f", f[SPREAD_LEAST],
                    "x; the relay's sessions over the least relay's ");
        print_three("%.1f", f[SPREAD_SESSIONS], "x");
    }
    printf("\n");
}

/* Whether word is one of list's comma-separated items. */
static bool
listed(const char *list, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t item = end != NULL ? (size_t)(end - p) : strlen(p);
        if (item == len && strncmp(p, word, len) == 0)
            return true;
        p = end != NULL ? end + 1 : NULL;
    }
    return false;
}

static const char *
env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? v : def;
}

/* The case is one BENCH_COST_RATES, _BINLOG and _ON_SENT ask for. */
static bool
cost_wanted(const struct cost_case *c)
{
    char rate[24];
    snprintf(rate, sizeof(rate), "%ld", c->rate);
    return listed(env_or("BENCH_COST_RATES", "10,200,1000"), rate) &&
           listed(env_or("BENCH_COST_BINLOG", "off,on"),
                  c->sv->binlog ? "on" : "off") &&
           listed(env_or("BENCH_COST_ON_SENT", "mark,delete"), c->on_sent);
}

static void
cost_case_runs(const struct settings *s, const struct cost_case *c, long runs)
{
    struct cost_result r[COST_RUNS_MAX];
    for (long i = 0; i < runs; i++)
        r[i] = cost_run(s, c);
    if (runs > 1)
        print_spread(c, r, runs);
}

/*
 * Every rate, binlog off and on, on_sent mark and delete; each case the
 * producer alone, then relayed.  Cases left out by BENCH_COST_RATES,
 * BENCH_COST_BINLOG or BENCH_COST_ON_SENT are named as skipped.
 */
void
measure_cost(const struct settings *s)
{
    static const long rates[] = {10, 200, 1000};
    static const char *const on_sents[] = {"mark", "delete"};
    const struct server *servers[] = {&with_binlog, &no_binlog};
    long runs = env_long("BENCH_COST_RUNS", 1);
    if (runs < 1 || runs > COST_RUNS_MAX || s->cost_seconds < 1 ||
        s->cost_settle_seconds < 0)
        die("BENCH_COST_RUNS must be 1 to %d, BENCH_COST_SECONDS at least 1, "
            "BENCH_COST_SETTLE_SECONDS at least 0",
            COST_RUNS_MAX);
    struct strbuf skipped = {0};
    for (size_t i = 0; i < sizeof(rates) / sizeof(*rates); i++)
        for (size_t j = 0; j < 2; j++)
            for (size_t k = 0; k < 2; k++) {
                struct cost_case c = {rates[i], servers[j], on_sents[k]};
                char name[64];
                if (cost_wanted(&c))
                    cost_case_runs(s, &c, runs);
                else
                    strbuf_addf(&skipped, "%s%s", skipped.len > 0 ? ", " : "",
                                cost_name(&c, name, sizeof(name)));
            }
    if (skipped.len > 0)
        printf("cost skipped: %s\n", skipped.p);
    strbuf_free(&skipped);
}
