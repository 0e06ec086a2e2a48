/*
 * bench: what bench.c's sections share with the files of the bench that
 * measure apart (bench_tenants.c): the servers, the daemon, the broker.
 */
#ifndef OUTBOXD_BENCH_H
#define OUTBOXD_BENCH_H

#include <amqp.h>
#include <mysql.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define DB_NAME "outboxd_bench"
#define EXCHANGE "outboxd.bench"
#define QUEUE "outboxd.bench"
#define PAYLOAD_BYTES 256
#define RELAY_USER "outboxd_bench"
#define RELAY_BATCH 500 /* outboxd's default batch_size */
/* outboxd's metrics listener during a drain: where its time went */
#define METRICS_PORT 19180

struct settings {
    const char *outboxd;
    const char *src;
    long backlog;
    long aggregates;
    long ceiling_messages;
    long drain_runs; /* each drain's median is of this many */
    long latency_rate;
    long latency_seconds;
    long slow_latency_seconds; /* at 10 events/s */
    long idle_outboxes;
    long idle_settle_seconds; /* for the backoff to reach its ceiling */
    long idle_seconds;
    const char *queue_mode;   /* x-queue-mode of the bench queue, or "" */
    long delayed;             /* rows delayed a day below the backlog's ids */
    long cost_seconds;        /* of each cost case's stream */
    long cost_settle_seconds; /* outboxd idle before the stream */
};

/* The two MariaDB servers of tests/servers.sh. */
struct server {
    const char *name;
    int port;
    const char *pidfile; /* pidof cannot tell the two mariadbd apart */
    bool binlog;
};
extern const struct server no_binlog, with_binlog;

struct drain_result {
    double rate;      /* first: median_run sorts runs by it */
    double low, high; /* the slowest and fastest of the runs */
    long rss_kib;
    double statements_per_1000;
    double cpu_ms_per_1000[3]; /* mariadbd, RabbitMQ, outboxd */
    double seconds;
    double wait_s[2]; /* what outboxd waited on: broker, database */
    double woken;     /* outboxes the binlog woke at the end: 0 or 1 */
};

/* What a drain runs against: a server, its wake (NULL: auto) and the
 * outbox's batch_size (0: its default). */
struct target {
    const struct server *sv;
    const char *wake;
    long batch_size;
};

/* Latencies by the events' own numbers, whatever order they arrive in. */
struct consumer {
    long expected;
    int64_t *latency_us;
    long received;
    long repeats; /* messages of an event received before: duplicates */
};

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double now_s(void);
void sleep_s(double s);
long env_long(const char *name, long def);

MYSQL *db_connect(const struct server *sv, const char *db);
void db_exec(MYSQL *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
long long db_int(MYSQL *m, const char *sql);
/* Statements user sent so far (USER_STATISTICS: userstat is on). */
long long db_user_statements(MYSQL *m, const char *user);
/* The server's EXECUTEs of prepared statements so far (db_user_statements). */
#define DB_EXECUTES_SQL                                                        \
    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE "       \
    "VARIABLE_NAME = 'COM_EXECUTE_SQL'"
long long db_questions(MYSQL *m);
/* A fresh database db with sql/outbox.sql's table and the relay's
 * account (RELAY_USER) on it; userstat on. */
void db_create(const struct settings *s, const struct server *sv,
               const char *db);
pid_t server_pid(const struct server *sv);

/* The server threads of the accounts' sessions, by PROCESSLIST's TID:
 * what each kind of session cost mariadbd, from /proc, on the server's
 * own clock, where the difference of two windows also carries what the
 * producer costs more or less from one window to the next. */
enum session_kind {
    SESSION_PRODUCER,
    SESSION_RELAY,
    SESSION_DUMP,
    SESSION_KINDS
};
#define SESSIONS_MAX 64

struct session_cpu {
    long long id; /* the connection's */
    enum session_kind kind;
    double ms;
};

struct sessions {
    long n;
    struct session_cpu s[SESSIONS_MAX];
};

/* The sessions of producer (NULL: none) and relay, the relay's binlog
 * dumps apart. */
void sessions_read(MYSQL *m, pid_t server, const char *producer,
                   const char *relay, struct sessions *out);
/* Each kind's CPU over a window, of the sessions alive at both ends. */
void sessions_used(const struct sessions *a, const struct sessions *b,
                   double used[SESSION_KINDS]);
double cpu_ms(pid_t pid);
/* A process by its name (pidof -s), 0 if none runs. */
pid_t pid_of(const char *name);

/* A connection to the local RabbitMQ, channel 1 open. */
amqp_connection_state_t amqp_open(void);
void amqp_done(amqp_connection_state_t c);
void queue_reset(const struct settings *s);
/* A consumer of the bench queue, on a thread of its own (pthread). */
void *consume_latencies(void *arg);
int cmp_i64(const void *a, const void *b);

/* A config file with relay and brokers written, "databases:" open. */
FILE *config_open(const char *path);
/* The same with relay_keys ("  workers: 4\n", say) in its relay map. */
FILE *config_open_relay(const char *path, const char *relay_keys);
pid_t start_daemon(const struct settings *s, const char *conf);
void stop_daemon(pid_t pid);
long peak_rss_kib(pid_t pid);
char *fetch_page(const char *path);
double metric_sum(const char *page, const char *name, const char *label);
double binlog_woken(const char *page);
bool daemon_ready(void);
double empty_claims(void);
struct drain_result measure_drain_median(const struct settings *s,
                                         struct target to, const char *ordering,
                                         long sent, long held);

/* bench_reader.c: mariadb-binlog streaming sv's binlog from its end, as
 * a replica or Debezium does; started once the server shows it. */
pid_t log_reader_start(const struct server *sv);
void log_reader_stop(pid_t pid);

/* bench_cost.c: BENCH_ONLY=cost. */
void measure_cost(const struct settings *s);

/* bench_tenants.c: BENCH_ONLY=tenants. */
void measure_tenants(const struct settings *s);

#endif
