/*
 * bench: `make bench`.  Measures, in one run on the local servers, the
 * broker's own ceiling for persistent publishes with confirms on one
 * channel, then outboxd's drain of a backlog, its commit-to-consumer
 * latency at a steady rate, its peak RSS and its database statements
 * per 1,000 events, and prints the drain as a ratio to the ceiling.
 * The drain, the latency and the cost of idle outboxes are measured
 * against both MariaDB servers of tests/servers.sh: without a binary log
 * outboxd polls, with one it wakes on commits read from it.  Last, one
 * outboxd over many tenant schemas (bench_tenants.c).
 */
#define _GNU_SOURCE
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

void
die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* ---- database ---- */

const struct server no_binlog = {"binlog off", 3306, "/run/mysqld/mysqld.pid",
                                 false};
const struct server with_binlog = {"binlog on", 3307,
                                   "/run/mysqld/mysqld-binlog.pid", true};

MYSQL *
db_connect(const struct server *sv, const char *db)
{
    MYSQL *m = mysql_init(NULL);
    if (!mysql_real_connect(m, "127.0.0.1", "outboxd", "outboxd", db,
                            (unsigned)sv->port, NULL, 0))
        die("MariaDB on port %d: %s", sv->port, mysql_error(m));
    return m;
}

void
db_exec(MYSQL *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = xvasprintf(fmt, ap);
    va_end(ap);
    if (mysql_query(m, sql) != 0)
        die("SQL: %s: %.200s", mysql_error(m), sql);
    MYSQL_RES *r = mysql_store_result(m);
    if (r)
        mysql_free_result(r);
    free(sql);
}

long long
db_int(MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) != 0)
        die("SQL: %s: %s", mysql_error(m), sql);
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
    long long v = row && row[0] ? atoll(row[0]) : 0;
    if (r)
        mysql_free_result(r);
    return v;
}

/*
 * Statements a relay's own user sent so far: MariaDB's user statistics
 * count per user, so tests or other clients on the server do not blur it.
 * They count an EXECUTE twice (itself and the SELECT it runs), where the
 * server's Questions count it once, as it is one statement sent: the
 * relay's prepared joins are the only EXECUTEs on the bench's servers,
 * so the server's count of them is taken off.
 */
long long
db_user_statements(MYSQL *m, const char *user)
{
    char sql[384];
    snprintf(sql, sizeof(sql),
             "SELECT COALESCE(SUM(SELECT_COMMANDS + UPDATE_COMMANDS + "
             "OTHER_COMMANDS), 0) - (" DB_EXECUTES_SQL
             ") FROM information_schema.USER_STATISTICS WHERE USER = '%s'",
             user);
    return db_int(m, sql);
}

static long long
db_relay_statements(MYSQL *m)
{
    return db_user_statements(m, RELAY_USER);
}

/* The server's Questions: every client's statements, each read too. */
long long
db_questions(MYSQL *m)
{
    return db_int(m, "SELECT VARIABLE_VALUE FROM "
                     "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME "
                     "= 'QUESTIONS'");
}

pid_t
server_pid(const struct server *sv)
{
    FILE *f = fopen(sv->pidfile, "r");
    int pid = 0;
    if (f == NULL || fscanf(f, "%d", &pid) != 1)
        die("cannot read %s", sv->pidfile);
    fclose(f);
    return (pid_t)pid;
}

/*
 * The relay's account, as both hosts a client on 127.0.0.1 may be taken
 * for: the binlog server, fresh from mysql_install_db, keeps an anonymous
 * ''@localhost that matches before a '%' account would.  Reading the
 * binary log takes the two global privileges (binlog.c).
 */
static void
relay_account(MYSQL *m, const char *db)
{
    static const char *const hosts[] = {"localhost", "127.0.0.1"};
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++) {
        db_exec(m,
                "CREATE USER IF NOT EXISTS '" RELAY_USER "'@'%s' IDENTIFIED "
                "BY '" RELAY_USER "'",
                hosts[i]);
        db_exec(m,
                "GRANT SELECT, UPDATE, DELETE ON %s.* TO '" RELAY_USER "'@'%s'",
                db, hosts[i]);
        db_exec(m,
                "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" RELAY_USER
                "'@'%s'",
                hosts[i]);
    }
}

/* A fresh database db with the outbox table of sql/outbox.sql. */
void
db_create(const struct settings *s, const struct server *sv, const char *db)
{
    MYSQL *m = db_connect(sv, NULL);
    db_exec(m, "DROP DATABASE IF EXISTS %s", db);
    db_exec(m, "CREATE DATABASE %s", db);
    relay_account(m, db);
    db_exec(m, "SET GLOBAL userstat = 1");
    mysql_close(m);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "mariadb -h127.0.0.1 -P%d -uoutboxd -poutboxd %s"
             " < '%s/sql/outbox.sql'",
             sv->port, db, s->src);
    if (system(cmd) != 0)
        die("loading sql/outbox.sql failed");
}

static void
db_recreate(const struct settings *s, const struct server *sv)
{
    db_create(s, sv, DB_NAME);
}

/*
 * n rows delayed for a day, in aggregates of their own so that ordering
 * holds nothing of the backlog behind them: generated by the server
 * (MariaDB's sequence engine), 100,000 to a statement.
 */
static void
db_fill_delayed(MYSQL *m, long n)
{
    for (long start = 1; start <= n; start += 100000) {
        long end = start + 99999 < n ? start + 99999 : n;
        db_exec(m,
                "INSERT INTO outbox_event (event_id, aggregate_type, "
                "aggregate_id, event_type, payload, available_at) SELECT "
                "CONCAT('dl-', seq), 'Delayed', seq %% 1000, 'OrderCreated', "
                "CONCAT('{\"seq\":', seq, ',\"pad\":\"', REPEAT('x', 216), "
                "'\"}'), NOW(6) + INTERVAL 1 DAY FROM seq_%ld_to_%ld",
                start, end);
        db_exec(m, "COMMIT");
    }
}

/* Inserts n events over the given aggregates in 1,000-row statements. */
static void
db_fill(MYSQL *m, const char *status, long first, long n, long aggregates)
{
    struct strbuf sql = {0};
    char pad[PAYLOAD_BYTES];
    strbuf_reserve(&sql, 1000 * (PAYLOAD_BYTES + 200));
    memset(pad, 'x', sizeof(pad));
    pad[PAYLOAD_BYTES - 40] = '\0'; /* the JSON around it makes 256 */
    for (long start = first; start < first + n; start += 1000) {
        long end = start + 1000 < first + n ? start + 1000 : first + n;
        strbuf_reset(&sql);
        strbuf_adds(
            &sql,
            "INSERT INTO outbox_event (event_id, aggregate_type, "
            "aggregate_id, event_type, payload, status, sent_at) VALUES ");
        for (long i = start; i < end; i++)
            strbuf_addf(&sql,
                        "%s('b-%ld','Order','%ld','OrderCreated','{\"seq\":%ld,"
                        "\"pad\":\"%s\"}','%s',%s)",
                        i > start ? "," : "", i, i % aggregates, i, pad, status,
                        strcmp(status, "SENT") == 0 ? "NOW(6) - INTERVAL 1 HOUR"
                                                    : "NULL");
        db_exec(m, "%s", sql.p);
        db_exec(m, "COMMIT");
    }
    strbuf_free(&sql);
}

/* ---- broker ---- */

amqp_connection_state_t
amqp_open(void)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(c);
    if (amqp_socket_open(sock, "127.0.0.1", 5672) != AMQP_STATUS_OK)
        die("cannot connect to RabbitMQ");
    amqp_rpc_reply_t r = amqp_login(c, "/", 0, 131072, 0,
                                    AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        die("RabbitMQ login failed");
    amqp_channel_open(c, 1);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
        die("channel.open failed");
    return c;
}

void
amqp_done(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/*
 * The bench queue declared afresh, bound to the bench exchange: a purge
 * would keep what the queue was (RabbitMQ 3.10 leaves a queue once made
 * lazy by a policy lazy after the policy is gone).
 */
void
queue_reset(const struct settings *s)
{
    amqp_connection_state_t c = amqp_open();
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(EXCHANGE),
                          amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                          amqp_empty_table);
    amqp_queue_delete(c, 1, amqp_cstring_bytes(QUEUE), 0, 0);
    amqp_table_entry_t mode = {
        amqp_cstring_bytes("x-queue-mode"),
        {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes(s->queue_mode)}}};
    amqp_table_t args = {s->queue_mode[0] != '\0' ? 1 : 0, &mode};
    amqp_queue_declare(c, 1, amqp_cstring_bytes(QUEUE), 0, 1, 0, 0, args);
    amqp_queue_bind(c, 1, amqp_cstring_bytes(QUEUE),
                    amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("#"),
                    amqp_empty_table);
    if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
        die("declaring the bench queue failed");
    amqp_done(c);
}

/* A server thread's time on a CPU in ms (schedstat's nanoseconds: the
 * clock ticks of stat are too coarse for a session at 10 events/s). */
static double
thread_ms(pid_t server, long long tid)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task/%lld/schedstat", (int)server,
             tid);
    FILE *f = fopen(path, "r");
    unsigned long long ns = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &ns) != 1)
        ns = 0;
    fclose(f);
    return (double)ns / 1e6;
}

void
sessions_read(MYSQL *m, pid_t server, const char *producer, const char *relay,
              struct sessions *out)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT ID, TID, USER, COMMAND FROM "
             "information_schema.PROCESSLIST WHERE USER IN ('%s', '%s')",
             producer ? producer : relay, relay);
    if (mysql_query(m, sql) != 0)
        die("SQL: %s: %s", mysql_error(m), sql);
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row;
    out->n = 0;
    while (r != NULL && (row = mysql_fetch_row(r)) != NULL &&
           out->n < SESSIONS_MAX) {
        struct session_cpu *c = &out->s[out->n++];
        c->id = atoll(row[0]);
        c->kind = strcmp(row[2], relay) != 0                ? SESSION_PRODUCER
                  : strncmp(row[3], "Binlog Dump", 11) == 0 ? SESSION_DUMP
                                                            : SESSION_RELAY;
        c->ms = thread_ms(server, atoll(row[1]));
    }
    mysql_free_result(r);
}

/* A session's thread may have served another before it, and the
 * relay's are all open before a window starts. */
void
sessions_used(const struct sessions *a, const struct sessions *b,
              double used[SESSION_KINDS])
{
    for (int k = 0; k < SESSION_KINDS; k++)
        used[k] = 0;
    for (long i = 0; i < b->n; i++)
        for (long j = 0; j < a->n; j++)
            if (a->s[j].id == b->s[i].id)
                used[b->s[i].kind] += b->s[i].ms - a->s[j].ms;
}

/* CPU time (user + system) a process has used, in milliseconds. */
double
cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the parenthesised name: state is field 3, utime 14 */
    const char *p = strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0;
    if (p == NULL || sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                            "%*u %llu %llu",
                            &utime, &stime) != 2)
        return 0;
    return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

pid_t
pid_of(const char *name)
{
    char cmd[128], line[32];
    snprintf(cmd, sizeof(cmd), "pidof -s %s", name);
    FILE *f = popen(cmd, "r");
    pid_t pid = 0;
    if (f != NULL && fgets(line, sizeof(line), f) != NULL)
        pid = (pid_t)atoi(line);
    if (f != NULL)
        pclose(f);
    return pid;
}

struct ceiling {
    double rate; /* first: median_run sorts runs by it */
    double rabbit_ms_per_1000, self_ms_per_1000; /* CPU per 1000 messages */
    double low, high; /* the slowest and fastest of the runs */
};

#define CEILING_RUNS 3
#define DRAIN_RUNS_MAX 9

/* Properties, headers and mandatory as outboxd publishes (docs/contract.md
 * section 7). */
static void
shape_like_outboxd(amqp_basic_properties_t *p, amqp_table_entry_t h[3])
{
    h[0] = (amqp_table_entry_t){
        amqp_cstring_bytes("aggregate_type"),
        {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes("Order")}}};
    h[1] = (amqp_table_entry_t){
        amqp_cstring_bytes("aggregate_id"),
        {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes("a-123")}}};
    h[2] = (amqp_table_entry_t){amqp_cstring_bytes("outbox_id"),
                                {AMQP_FIELD_KIND_I64, {.i64 = 123456}}};
    p->_flags |= AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                 AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_TYPE_FLAG |
                 AMQP_BASIC_APP_ID_FLAG;
    p->headers = (amqp_table_t){3, h};
    p->message_id = amqp_cstring_bytes("bench-00000000123456");
    p->timestamp = (uint64_t)time(NULL);
    p->type = amqp_cstring_bytes("OrderCreated");
    p->app_id = amqp_cstring_bytes("outboxd");
}

/* Persistent JSON messages, shaped as outboxd's or bare; headers holds
 * the shaped ones' table. */
static amqp_basic_properties_t
message_properties(bool shaped, amqp_table_entry_t headers[3])
{
    amqp_basic_properties_t p = {
        ._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG,
        .delivery_mode = 2,
        .content_type = amqp_cstring_bytes("application/json")};
    if (shaped)
        shape_like_outboxd(&p, headers);
    return p;
}

/* A connection whose channel 1 is in confirm mode. */
static amqp_connection_state_t
amqp_open_confirming(void)
{
    amqp_connection_state_t c = amqp_open();
    amqp_confirm_select(c, 1);
    amqp_get_rpc_reply(c);
    return c;
}

/* How the ceiling's publisher sends: the bench's two ceilings and the
 * relay's own pattern. */
struct publishing {
    bool shaped;  /* properties and headers as outboxd's (docs/contract.md
                     section 7) */
    long window;  /* unconfirmed messages at most */
    bool in_turn; /* each window confirmed before the next goes out */
    size_t body;  /* message size; 0: PAYLOAD_BYTES */
};

/* How many messages are confirmed, after one more ack frame. */
static long
read_acked(amqp_connection_state_t c, long acked)
{
    amqp_frame_t f;
    if (amqp_simple_wait_frame(c, &f) != AMQP_STATUS_OK)
        die("lost the broker while measuring the ceiling");
    if (f.frame_type != AMQP_FRAME_METHOD ||
        f.payload.method.id != AMQP_BASIC_ACK_METHOD)
        die("unexpected frame while measuring the ceiling");
    amqp_basic_ack_t *ack = f.payload.method.decoded;
    long tag = (long)ack->delivery_tag;
    return ack->multiple || tag > acked ? tag : acked;
}

/*
 * The broker's ceiling: persistent 256-byte messages with confirms on one
 * channel, 1,000 unconfirmed at most, the way a good relay publishes.
 * Bare, or shaped as outboxd's messages: their headers and properties
 * cost the broker about a third more per message, and no relay can
 * publish them faster than the broker takes them.  In turn, it is the
 * broker alone driven the way outboxd drives it: each batch confirmed
 * before the next goes out (docs/performance.md: sending ahead was slower),
 * which tells the pattern's share of the gap from the database's.
 */
static struct ceiling
measure_ceiling(const struct settings *s, long n, struct publishing how)
{
    struct ceiling res;
    queue_reset(s);
    pid_t rabbit = pid_of("beam.smp");
    double rabbit0 = cpu_ms(rabbit), self0 = cpu_ms(getpid());
    amqp_connection_state_t c = amqp_open_confirming();
    size_t body_len = how.body ? how.body : PAYLOAD_BYTES;
    char *body = malloc(body_len);
    memset(body, 'x', body_len);
    amqp_table_entry_t headers[3];
    amqp_basic_properties_t p = message_properties(how.shaped, headers);
    amqp_bytes_t b = {body_len, body};
    long sent = 0, acked = 0;
    double t0 = now_s();
    while (acked < n) {
        long limit = acked + how.window;
        if (how.in_turn)
            limit = acked == sent ? sent + how.window : sent;
        for (; sent < n && sent < limit; sent++)
            amqp_basic_publish(c, 1, amqp_cstring_bytes(EXCHANGE),
                               amqp_cstring_bytes("bench.ceiling"), how.shaped,
                               0, &p, b);
        acked = read_acked(c, acked);
    }
    res.rate = (double)n / (now_s() - t0);
    res.rabbit_ms_per_1000 = (cpu_ms(rabbit) - rabbit0) * 1000.0 / (double)n;
    res.self_ms_per_1000 = (cpu_ms(getpid()) - self0) * 1000.0 / (double)n;
    free(body);
    amqp_done(c);
    queue_reset(s);
    return res;
}

/* Runs of either kind lead with their rate (struct ceiling, struct
 * drain_result): sorted by it, the middle one is the median run. */
static int
cmp_rate(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts n runs of size bytes; the median run, the extremes' rates. */
static const void *
median_run(void *runs, size_t n, size_t size, double *low, double *high)
{
    qsort(runs, n, size, cmp_rate);
    *low = *(const double *)runs;
    *high = *(const double *)((const char *)runs + (n - 1) * size);
    return (const char *)runs + n / 2 * size;
}

/*
 * The median of CEILING_RUNS runs: a single run moves by a tenth (the
 * broker stalls now and then, more as its queue grows), and every ratio
 * the bench prints divides by it.
 */
static struct ceiling
measure_ceiling_median_n(const struct settings *s, struct publishing how,
                         long n)
{
    struct ceiling runs[CEILING_RUNS];
    double low, high;
    for (int i = 0; i < CEILING_RUNS; i++)
        runs[i] = measure_ceiling(s, n, how);
    struct ceiling res = *(const struct ceiling *)median_run(
        runs, CEILING_RUNS, sizeof(runs[0]), &low, &high);
    res.low = low;
    res.high = high;
    return res;
}

static struct ceiling
measure_ceiling_median(const struct settings *s, struct publishing how)
{
    return measure_ceiling_median_n(s, how, s->ceiling_messages);
}

static void
print_ceiling(const char *what, const struct ceiling *c)
{
    printf("broker ceiling (persistent %d B, confirms, one channel), %s: "
           "%.0f msg/s (median of %d runs, %.0f-%.0f); CPU per 1000 "
           "messages: rabbitmq %.0f ms, publisher %.0f ms\n",
           PAYLOAD_BYTES, what, c->rate, CEILING_RUNS, c->low, c->high,
           c->rabbit_ms_per_1000, c->self_ms_per_1000);
}

/* ---- the daemon ---- */

FILE *
config_open_relay(const char *path, const char *relay_keys)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s", path);
    fchmod(fileno(f), 0600);
    fprintf(f,
            "relay:\n  id: bench\n  log_level: warn\n  listen: "
            "\"127.0.0.1:%d\"\n%s"
            "brokers:\n  main:\n    url: amqp://guest:guest@127.0.0.1:5672/\n"
            "databases:\n",
            METRICS_PORT, relay_keys);
    return f;
}

FILE *
config_open(const char *path)
{
    return config_open_relay(path, "");
}

/*
 * One database entry with its outbox, pacing left at its defaults: what
 * the bench measures is what a user gets without tuning.  The target's
 * batch_size is set only for a reference drain that asks for it.
 */
static void
config_database(FILE *f, struct target to, const char *db, const char *ordering)
{
    fprintf(f,
            "  %s:\n    user: " RELAY_USER "\n    password: " RELAY_USER "\n"
            "    port: %d\n    database: %s\n",
            db, to.sv->port, db);
    if (to.wake != NULL)
        fprintf(f, "    wake: %s\n", to.wake);
    fprintf(f,
            "    outboxes:\n      - table: outbox_event\n"
            "        exchange: " EXCHANGE "\n        ordering: %s\n",
            ordering);
    if (to.batch_size > 0)
        fprintf(f, "        batch_size: %ld\n", to.batch_size);
}

static void
write_config(const char *path, struct target to, const char *ordering)
{
    FILE *f = config_open(path);
    config_database(f, to, DB_NAME, ordering);
    fclose(f);
}

pid_t
start_daemon(const struct settings *s, const char *conf)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd =
            open("/tmp/outboxd-bench.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        execl(s->outboxd, s->outboxd, "-c", conf, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Peak resident set of a live process, in KiB (VmHWM). */
long
peak_rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

void
stop_daemon(pid_t pid)
{
    int status;
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("outboxd did not exit 0 (see /tmp/outboxd-bench.log)");
}

/*
 * A page of outboxd's listener, status line and headers included
 * (HTTP/1.0: the answer ends with the connection); malloc'd, NULL when
 * nothing answers in time.
 */
char *
fetch_page(const char *path)
{
    char req[128];
    int reqlen = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(METRICS_PORT),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        write(fd, req, (size_t)reqlen) != (ssize_t)reqlen) {
        close(fd);
        return NULL;
    }
    struct strbuf page = {0};
    ssize_t k;
    do { /* read() writes past the NUL, which the end puts back */
        strbuf_reserve(&page, 65536);
        k = read(fd, page.p + page.len, page.cap - page.len - 1);
        page.len += k > 0 ? (size_t)k : 0;
    } while (k > 0);
    page.p[page.len] = '\0';
    close(fd);
    return page.p;
}

/* The sum of a metric's samples whose labels hold label. */
double
metric_sum(const char *page, const char *name, const char *label)
{
    double sum = 0;
    size_t namelen = strlen(name);
    for (const char *line = page; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        const char *labels_end = strchr(line, '}');
        if (strncmp(line, name, namelen) == 0 && line[namelen] == '{' &&
            labels_end != NULL && (end == NULL || labels_end < end) &&
            memmem(line, (size_t)(labels_end - line), label, strlen(label)))
            sum += strtod(labels_end + 1, NULL);
        line = end ? end + 1 : NULL;
    }
    return sum;
}

/* How many outboxes the binlog stream wakes now, by outboxd's count. */
double
binlog_woken(const char *page)
{
    return metric_sum(page, "outboxd_wake_source", "source=\"binlog\"");
}

/* The wake source outboxd reports for n outboxes, in words. */
static const char *
wake_source(double woken, long n, char *buf, size_t len)
{
    if (woken == (double)n || woken == 0)
        return woken > 0 ? "binlog" : "poll";
    snprintf(buf, len, "binlog for %.0f of %ld", woken, n);
    return buf;
}

/* /readyz answers 200 once every outbox has its database and broker. */
bool
daemon_ready(void)
{
    char *page = fetch_page("/readyz");
    const char *sp = page ? strchr(page, ' ') : NULL;
    bool ready = sp != NULL && atoi(sp + 1) == 200;
    free(page);
    return ready;
}

/*
 * Waits until outboxd is ready and, on the binlog server, its stream is
 * live for all n outboxes: an event inserted before would measure the
 * poll.  Past 30 s it carries on; the wake source printed tells.
 */
static void
wait_started(const struct server *sv, long n)
{
    double t0 = now_s();
    while (now_s() - t0 < 30) {
        char *page = daemon_ready() ? fetch_page("/metrics") : NULL;
        bool live = page != NULL && binlog_woken(page) >= (double)n;
        free(page);
        if (page != NULL && (live || !sv->binlog))
            return;
        sleep_s(0.1);
    }
}

_Static_assert(offsetof(struct ceiling, rate) == 0 &&
                   offsetof(struct drain_result, rate) == 0,
               "median_run reads a run's rate at its start");

/* Where the relay's time went, by its own count (docs/performance.md). */
static void
read_waits(struct drain_result *res)
{
    char *page = fetch_page("/metrics");
    if (page == NULL)
        die("outboxd's metrics did not answer on 127.0.0.1:%d", METRICS_PORT);
    res->wait_s[0] =
        metric_sum(page, "outboxd_wait_seconds_total", "on=\"broker\"");
    res->wait_s[1] =
        metric_sum(page, "outboxd_wait_seconds_total", "on=\"database\"");
    res->woken = binlog_woken(page);
    free(page);
}

/* The median run's split, from outboxd_wait_seconds_total. */
static void
print_waits(const char *which, const struct drain_result *r)
{
    printf("where the drain's time went (%s, the median run): "
           "%.2f s, outboxd waiting on the broker %.2f s (%.0f%%), on the "
           "database %.2f s (%.0f%%)\n",
           which, r->seconds, r->wait_s[0], 100.0 * r->wait_s[0] / r->seconds,
           r->wait_s[1], 100.0 * r->wait_s[1] / r->seconds);
}

static const char *const cpu_names[3] = {"mariadbd", "rabbitmq", "outboxd"};

/* Drains a backlog of n PENDING rows (after `sent` old SENT rows). */
static struct drain_result
measure_drain(const struct settings *s, struct target to, const char *ordering,
              long sent, long held)
{
    struct drain_result res;
    const char *conf = "/tmp/outboxd-bench.yaml";
    db_recreate(s, to.sv);
    queue_reset(s);
    MYSQL *m = db_connect(to.sv, DB_NAME);
    if (sent > 0)
        db_fill(m, "SENT", 0, sent, s->aggregates);
    if (held > 0) {
        /* Backing off for an hour, in aggregates of their own so that
         * ordering holds nothing of the backlog behind them. */
        db_fill(m, "RETRY", sent, held, s->aggregates);
        db_exec(m, "UPDATE outbox_event SET aggregate_type = 'Held', "
                   "retry_count = 1, next_retry_at = NOW(6) + INTERVAL 1 "
                   "HOUR WHERE status = 'RETRY'");
        db_exec(m, "COMMIT");
    }
    if (s->delayed > 0)
        db_fill_delayed(m, s->delayed);
    db_fill(m, "PENDING", sent + held, s->backlog, s->aggregates);
    db_exec(m, "ANALYZE TABLE outbox_event");
    write_config(conf, to, ordering);
    long long q0 = db_relay_statements(m);
    pid_t servers[2] = {server_pid(to.sv), pid_of("beam.smp")};
    double cpu0[3] = {cpu_ms(servers[0]), cpu_ms(servers[1]), 0};
    double t0 = now_s();
    pid_t pid = start_daemon(s, conf);
    /* A cheap probe: counting the backlog would load the server under
     * test.  Held retries stay RETRY for an hour, so they do not count. */
    const char *probe =
        s->delayed > 0
            ? "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event WHERE status "
              "IN ('PENDING','PROCESSING') AND available_at IS NULL LIMIT 1) x"
        : held > 0 ? "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event WHERE "
                     "status IN ('PENDING','PROCESSING') LIMIT 1) x"
                   : "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event WHERE "
                     "status IN ('PENDING','PROCESSING','RETRY') LIMIT 1) x";
    while (db_int(m, probe) > 0) {
        if (now_s() - t0 > 600)
            die("the drain took more than 10 minutes");
        sleep_s(0.05);
    }
    res.seconds = now_s() - t0;
    res.rate = (double)s->backlog / res.seconds;
    read_waits(&res);
    double cpu1[3] = {cpu_ms(servers[0]), cpu_ms(servers[1]), cpu_ms(pid)};
    for (int i = 0; i < 3; i++)
        res.cpu_ms_per_1000[i] =
            (cpu1[i] - cpu0[i]) * 1000.0 / (double)s->backlog;
    res.statements_per_1000 =
        (double)(db_relay_statements(m) - q0) * 1000.0 / (double)s->backlog;
    res.rss_kib = peak_rss_kib(pid);
    stop_daemon(pid);
    mysql_close(m);
    queue_reset(s);
    return res;
}

/*
 * The median of several drains, as for the ceiling: one drain moves by a
 * twentieth from run to run, enough to cross a target.  The median run's
 * CPU and statements are printed; the peak RSS is the highest.
 */
struct drain_result
measure_drain_median(const struct settings *s, struct target to,
                     const char *ordering, long sent, long held)
{
    struct drain_result runs[DRAIN_RUNS_MAX];
    size_t n = (size_t)s->drain_runs;
    long rss = 0;
    double low, high;
    for (size_t i = 0; i < n; i++) {
        runs[i] = measure_drain(s, to, ordering, sent, held);
        if (runs[i].rss_kib > rss)
            rss = runs[i].rss_kib;
    }
    struct drain_result res = *(const struct drain_result *)median_run(
        runs, n, sizeof(runs[0]), &low, &high);
    res.low = low;
    res.high = high;
    res.rss_kib = rss;
    return res;
}

/*
 * The drain beside old SENT rows or waiting RETRY rows (one of sent and
 * held), against the plain drain: neither may slow the claim.
 */
static void
drain_beside(const struct settings *s, const struct drain_result *plain,
             long sent, long held)
{
    struct drain_result r = measure_drain_median(
        s, (struct target){&no_binlog, NULL, 0}, "aggregate", sent, held);
    printf("drain with %ld %s in the table: %.0f events/s (median of %d "
           "runs, %.0f-%.0f) = %.2f of the drain without them\n",
           sent + held, sent > 0 ? "old SENT rows" : "RETRY rows waiting",
           r.rate, (int)s->drain_runs, r.low, r.high, r.rate / plain->rate);
    print_waits(sent > 0 ? "beside the SENT rows" : "beside the RETRY rows",
                &r);
}

/*
 * The headline drain against the binlog server, beside the binlog-off
 * drain of the same run: the wake must not cost throughput.  That server
 * also writes each change to its binary log, so the same server with
 * wake: poll tells the wake's share of a gap from the log's.
 */
static void
drain_with_binlog(const struct settings *s, const struct drain_result *off)
{
    struct drain_result on = measure_drain_median(
        s, (struct target){&with_binlog, NULL, 0}, "aggregate", 0, 0);
    struct drain_result poll = measure_drain_median(
        s, (struct target){&with_binlog, "poll", 0}, "aggregate", 0, 0);
    char buf[48];
    printf("drain %ld events, ordering aggregate, binlog on (port %d, wake "
           "auto, wake source %s): %.0f events/s (median of %d runs, "
           "%.0f-%.0f) = %.2f of the binlog-off drain\n",
           s->backlog, with_binlog.port,
           wake_source(on.woken, 1, buf, sizeof(buf)), on.rate,
           (int)s->drain_runs, on.low, on.high, on.rate / off->rate);
    printf("the same on the binlog server with wake: poll: %.0f events/s "
           "(%.0f-%.0f) = %.2f of the binlog-off drain; wake auto over "
           "wake poll: %.2f\n",
           poll.rate, poll.low, poll.high, poll.rate / off->rate,
           on.rate / poll.rate);
    printf("database statements per 1000 events, binlog on: %.1f\n",
           on.statements_per_1000);
    print_waits("binlog on, wake auto", &on);
}

/* ---- latency at a steady rate ---- */

/* A field of the bench's own JSON payloads. */
static long long
payload_field(const amqp_bytes_t *body, const char *key)
{
    const char *at = memmem(body->bytes, body->len, key, strlen(key));
    return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

void *
consume_latencies(void *arg)
{
    struct consumer *c = arg;
    amqp_connection_state_t conn = amqp_open();
    amqp_basic_consume(conn, 1, amqp_cstring_bytes(QUEUE), amqp_empty_bytes, 0,
                       1, 0, amqp_empty_table);
    amqp_get_rpc_reply(conn);
    while (c->received < c->expected) {
        amqp_envelope_t env;
        struct timeval tv = {30, 0};
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            break;
        long long i = payload_field(&env.message.body, "\"i\":");
        long long t = payload_field(&env.message.body, "\"t\":");
        /* a redelivery (latency already set) is not a new event */
        if (i >= 0 && i < c->expected && c->latency_us[i] == 0) {
            c->latency_us[i] = wall_us() - t;
            c->received++;
        } else if (i >= 0 && i < c->expected) {
            c->repeats++;
        }
        amqp_destroy_envelope(&env);
    }
    amqp_done(conn);
    return NULL;
}

int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Inserts n events at rate, each its own transaction, and how long each
 * took, INSERT to COMMIT's answer, into trx_us; the rate achieved. */
static double
insert_steadily(MYSQL *m, long rate, long n, int64_t *trx_us)
{
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        double due = t0 + (double)i / (double)rate;
        double wait = due - now_s();
        if (wait > 0)
            sleep_s(wait);
        int64_t t = wall_us();
        db_exec(m,
                "INSERT INTO outbox_event (event_id, aggregate_type, "
                "aggregate_id, event_type, payload) VALUES ('l-%ld', "
                "'Order', '%ld', 'OrderCreated', '{\"i\":%ld,\"t\":%lld}')",
                i, i % 1000, i, (long long)t);
        db_exec(m, "COMMIT");
        trx_us[i] = wall_us() - t;
    }
    return (double)n / (now_s() - t0);
}

/*
 * Commit to a real consumer at a steady rate, pacing at its defaults:
 * with a live binlog stream each commit wakes the outbox, polling alone
 * the backoff between events decides.  The first second's events are a
 * warm-up: the first of them finds the idle outbox at the ceiling of its
 * backoff, which would weigh on the percentiles of a short run; its
 * latency is printed apart.
 */
static void
measure_latency(const struct settings *s, const struct server *sv, long rate,
                long seconds)
{
    const char *conf = "/tmp/outboxd-bench.yaml";
    db_recreate(s, sv);
    queue_reset(s);
    write_config(conf, (struct target){sv, NULL, 0}, "aggregate");
    pid_t pid = start_daemon(s, conf);
    long warm = rate;
    struct consumer c = {.expected = warm + rate * seconds};
    c.latency_us = calloc((size_t)c.expected, sizeof(*c.latency_us));
    pthread_t th;
    pthread_create(&th, NULL, consume_latencies, &c);
    wait_started(sv, 1);
    sleep_s(1); /* let the consumer subscribe before the clock starts */
    MYSQL *m = db_connect(sv, DB_NAME);
    int64_t *trx_us = calloc((size_t)c.expected, sizeof(*trx_us));
    double achieved = insert_steadily(m, rate, c.expected, trx_us);
    pthread_join(th, NULL);
    char *page = fetch_page("/metrics");
    double woken = page ? binlog_woken(page) : 0;
    free(page);
    stop_daemon(pid);
    mysql_close(m);
    if (c.received < c.expected)
        die("latency: received %ld of %ld events", c.received, c.expected);
    int64_t *lat = c.latency_us + warm;
    long n = c.expected - warm;
    /* What the relay and the broker add once the server has answered the
     * COMMIT (0 when the wake came first). */
    int64_t *after = calloc((size_t)n, sizeof(*after));
    for (long i = 0; i < n; i++)
        after[i] = lat[i] > trx_us[warm + i] ? lat[i] - trx_us[warm + i] : 0;
    qsort(lat, (size_t)n, sizeof(int64_t), cmp_i64);
    qsort(after, (size_t)n, sizeof(int64_t), cmp_i64);
    char buf[48];
    printf("latency at %ld events/s (%.0f achieved), %s (port %d, wake "
           "source %s): p50 %.1f ms, p99 %.1f ms, max %.1f ms of %ld events "
           "after a 1 s warm-up; the first event, after idle: %.1f ms\n",
           rate, achieved, sv->name, sv->port,
           wake_source(woken, 1, buf, sizeof(buf)), lat[n / 2] / 1000.0,
           lat[n * 99 / 100] / 1000.0, lat[n - 1] / 1000.0, n,
           c.latency_us[0] / 1000.0);
    /* The clock starts at the INSERT: a transaction the server is slow to
     * take or make durable counts in the latency, and shows here. */
    qsort(trx_us + warm, (size_t)n, sizeof(int64_t), cmp_i64);
    printf("  the transactions themselves (INSERT to COMMIT's answer): p50 "
           "%.1f ms, p99 %.1f ms, max %.1f ms\n",
           trx_us[warm + n / 2] / 1000.0, trx_us[warm + n * 99 / 100] / 1000.0,
           trx_us[warm + n - 1] / 1000.0);
    printf("  from COMMIT's answer to the consumer: p50 %.1f ms, p99 %.1f ms, "
           "max %.1f ms\n",
           after[n / 2] / 1000.0, after[n * 99 / 100] / 1000.0,
           after[n - 1] / 1000.0);
    free(after);
    free(trx_us);
    free(c.latency_us);
    queue_reset(s);
}

/* Each rate, with the binlog off then on. */
static void
measure_latencies(const struct settings *s)
{
    const struct server *servers[2] = {&no_binlog, &with_binlog};
    for (int i = 0; i < 2; i++)
        measure_latency(s, servers[i], s->latency_rate, s->latency_seconds);
    for (int i = 0; i < 2; i++)
        measure_latency(s, servers[i], 10, s->slow_latency_seconds);
}

/* ---- the cost of idle outboxes ---- */

static void
idle_name(char *buf, size_t len, long i)
{
    snprintf(buf, len, DB_NAME "_idle_%ld", i);
}

/* n empty outboxes, each in a database of its own on the server. */
static void
idle_setup(const struct settings *s, const struct server *sv, const char *conf,
           long n)
{
    FILE *f = config_open(conf);
    for (long i = 1; i <= n; i++) {
        char db[64];
        idle_name(db, sizeof(db), i);
        db_create(s, sv, db);
        config_database(f, (struct target){sv, NULL, 0}, db, "aggregate");
    }
    fclose(f);
}

static void
idle_drop(const struct server *sv, long n)
{
    MYSQL *m = db_connect(sv, NULL);
    for (long i = 1; i <= n; i++) {
        char db[64];
        idle_name(db, sizeof(db), i);
        db_exec(m, "DROP DATABASE IF EXISTS %s", db);
    }
    mysql_close(m);
}

/* What the server did: the relay's statements, every client's, its CPU. */
struct server_use {
    long long relay, questions;
    double cpu_ms;
};

/* Two statements of the bench's own, the second counting itself. */
static struct server_use
server_use(MYSQL *m, pid_t server)
{
    struct server_use u;
    u.relay = db_relay_statements(m);
    u.cpu_ms = cpu_ms(server);
    u.questions = db_questions(m);
    return u;
}

/*
 * The server's use over a window.  Questions counts each read of it as it
 * runs: of the bench's own statements the window holds the closing pair.
 */
static struct server_use
use_over(MYSQL *m, pid_t server, long seconds)
{
    struct server_use a = server_use(m, server);
    sleep_s((double)seconds);
    struct server_use b = server_use(m, server);
    return (struct server_use){b.relay - a.relay, b.questions - a.questions - 2,
                               b.cpu_ms - a.cpu_ms};
}

struct idle_result {
    struct server_use alone, idle; /* before outboxd started, then idle */
    double outboxd_cpu_ms, empty_claims, woken;
};

double
empty_claims(void)
{
    char *page = fetch_page("/metrics");
    double n =
        page ? metric_sum(page, "outboxd_claims_empty_total", "outbox=") : 0;
    free(page);
    return n;
}

/*
 * The server alone over a window, then with outboxd and its empty
 * outboxes, once their backoff has reached its ceiling.  Nothing else of
 * the bench runs meanwhile; the relay's own account counts its
 * statements, apart from any other client's.
 */
static struct idle_result
measure_idle(const struct settings *s, const struct server *sv)
{
    struct idle_result r;
    const char *conf = "/tmp/outboxd-bench.yaml";
    long n = s->idle_outboxes;
    idle_setup(s, sv, conf, n);
    queue_reset(s);
    MYSQL *m = db_connect(sv, NULL);
    pid_t server = server_pid(sv);
    r.alone = use_over(m, server, s->idle_seconds);
    pid_t pid = start_daemon(s, conf);
    wait_started(sv, n);
    sleep_s((double)s->idle_settle_seconds);
    double empty0 = empty_claims(), cpu0 = cpu_ms(pid);
    r.idle = use_over(m, server, s->idle_seconds);
    r.outboxd_cpu_ms = cpu_ms(pid) - cpu0;
    r.empty_claims = empty_claims() - empty0;
    char *page = fetch_page("/metrics");
    r.woken = page ? binlog_woken(page) : 0;
    free(page);
    stop_daemon(pid);
    mysql_close(m);
    idle_drop(sv, n);
    return r;
}

/* Per idle outbox and second; the issue's targets beside them. */
static void
print_idle(const struct settings *s, const struct server *sv,
           const struct idle_result *r)
{
    double per = (double)s->idle_outboxes * (double)s->idle_seconds;
    double secs = (double)s->idle_seconds;
    char buf[48];
    printf("idle cost, %s (port %d, wake source %s), %ld empty outboxes over "
           "%ld s: %.2f statements/s per outbox (target <= %d), %.2f empty "
           "claims/s per outbox; Questions from all clients %.2f/s per "
           "outbox (%.2f/s in all before outboxd started)\n",
           sv->name, sv->port,
           wake_source(r->woken, s->idle_outboxes, buf, sizeof(buf)),
           s->idle_outboxes, s->idle_seconds, (double)r->idle.relay / per,
           sv->binlog ? 1 : 3, r->empty_claims / per,
           (double)r->idle.questions / per, (double)r->alone.questions / secs);
    printf("idle cost, %s: mariadbd CPU %.3f ms/s per outbox (%.2f ms/s in "
           "all, %.2f ms/s before outboxd started), outboxd CPU %.3f ms/s "
           "per outbox\n",
           sv->name, r->idle.cpu_ms / per, r->idle.cpu_ms / secs,
           r->alone.cpu_ms / secs, r->outboxd_cpu_ms / per);
}

static void
measure_idles(const struct settings *s)
{
    const struct server *servers[2] = {&with_binlog, &no_binlog};
    for (int i = 0; i < 2; i++) {
        struct idle_result r = measure_idle(s, servers[i]);
        print_idle(s, servers[i], &r);
    }
}

/* The two ceilings, and the broker alone in outboxd's pattern. */
static void
measure_ceilings(const struct settings *s, struct ceiling *bare,
                 struct ceiling *shaped)
{
    *bare =
        measure_ceiling_median(s, (struct publishing){false, 1000, false, 0});
    print_ceiling("bare messages", bare);
    *shaped =
        measure_ceiling_median(s, (struct publishing){true, 1000, false, 0});
    print_ceiling(
        "shaped as outboxd's (docs/contract.md section 7 properties, headers, "
        "mandatory)",
        shaped);
    struct ceiling turn = measure_ceiling_median(
        s, (struct publishing){true, RELAY_BATCH, true, 0});
    printf("broker alone in outboxd's pattern (shaped, batches of %d each "
           "confirmed before the next): %.0f msg/s (%.0f-%.0f) = %.2f of "
           "the shaped ceiling; CPU per 1000 messages: rabbitmq %.0f ms\n",
           RELAY_BATCH, turn.rate, turn.low, turn.high,
           turn.rate / shaped->rate, turn.rabbit_ms_per_1000);
}

long
env_long(const char *name, long def)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : def;
}

/* ---- payload sizes: peak RSS and byte rate (docs/performance.md) ---- */

/* The payload sizes of the bytes figures and their backlogs, in rows. */
static const struct {
    size_t bytes;
    long rows;
    const char *name;
} byte_sizes[] = {
    {4096, 20000, "4 KiB"},
    {65536, 3000, "64 KiB"},
    {1048576, 300, "1 MiB"},
};
#define NBYTE_SIZES (sizeof(byte_sizes) / sizeof(*byte_sizes))

/* Inserts n rows of JSON payloads of exactly size bytes, statements of
 * about 8 MiB (max_allowed_packet is 16 MiB). */
static void
db_fill_sized(MYSQL *m, long n, size_t size, long aggregates)
{
    long per = (long)(8 * 1048576 / (size + 200));
    per = per < 1 ? 1 : per;
    struct strbuf sql = {0};
    char *pad = xmalloc(size + 1);
    strbuf_reserve(&sql, (size_t)per * (size + 200) + 1024);
    memset(pad, 'x', size);
    for (long start = 0; start < n; start += per) {
        long end = start + per < n ? start + per : n;
        strbuf_reset(&sql);
        strbuf_adds(&sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                          "aggregate_id, event_type, payload) VALUES ");
        for (long i = start; i < end; i++) {
            char head[64];
            int h = snprintf(head, sizeof(head), "{\"seq\":%ld,\"pad\":\"", i);
            strbuf_addf(&sql,
                        "%s('s-%ld','Order','%ld','OrderCreated','"
                        "%s%.*s\"}')",
                        i > start ? "," : "", i, i % aggregates, head,
                        (int)(size - (size_t)h - 2), pad);
        }
        db_exec(m, "%s", sql.p);
        db_exec(m, "COMMIT");
    }
    free(pad);
    strbuf_free(&sql);
}

struct sized_drain {
    double rate; /* events/s */
    double seconds;
    long rss_kib;
    double wait_s[2]; /* outboxd waiting on the broker, the database */
    double mariadb_ms_per_1000; /* mariadbd's CPU: steadier than the rate */
    double rabbit_ms_per_1000, outboxd_ms_per_1000;
};

/* One drain of rows of one size at default settings (batch_bytes too). */
static struct sized_drain
measure_sized_drain(const struct settings *s, size_t size, long rows)
{
    struct sized_drain res;
    const char *conf = "/tmp/outboxd-bench.yaml";
    db_recreate(s, &no_binlog);
    queue_reset(s);
    MYSQL *m = db_connect(&no_binlog, DB_NAME);
    db_fill_sized(m, rows, size, s->aggregates);
    db_exec(m, "ANALYZE TABLE outbox_event");
    write_config(conf, (struct target){&no_binlog, NULL, 0}, "aggregate");
    pid_t server = server_pid(&no_binlog), rabbit = pid_of("beam.smp");
    double start = now_s();
    pid_t pid = start_daemon(s, conf);
    /* From the first claim, as the ceiling counts from its first publish:
     * the daemon's start is not the drain's. */
    while (db_int(m, "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event "
                     "WHERE status <> 'PENDING' LIMIT 1) x") == 0) {
        if (now_s() - start > 60)
            die("no row claimed within a minute");
        sleep_s(0.002);
    }
    double t0 = now_s();
    double cpu0[3] = {cpu_ms(server), cpu_ms(rabbit), cpu_ms(pid)};
    while (db_int(m, "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_event "
                     "WHERE status IN ('PENDING','PROCESSING','RETRY') "
                     "LIMIT 1) x") > 0) {
        if (now_s() - t0 > 600)
            die("the drain took more than 10 minutes");
        sleep_s(0.01);
    }
    res.seconds = now_s() - t0;
    res.rate = (double)rows / res.seconds;
    double per = 1000.0 / (double)rows;
    res.mariadb_ms_per_1000 = (cpu_ms(server) - cpu0[0]) * per;
    res.rabbit_ms_per_1000 = (cpu_ms(rabbit) - cpu0[1]) * per;
    res.outboxd_ms_per_1000 = (cpu_ms(pid) - cpu0[2]) * per;
    struct drain_result waits;
    read_waits(&waits);
    memcpy(res.wait_s, waits.wait_s, sizeof(res.wait_s));
    res.rss_kib = peak_rss_kib(pid);
    stop_daemon(pid);
    if (db_int(m, "SELECT COUNT(*) FROM outbox_event WHERE status = 'DEAD'"))
        die("rows of %zu bytes went DEAD (see /tmp/outboxd-bench.log)", size);
    mysql_close(m);
    queue_reset(s);
    return res;
}

/*
 * The least any relay does with these rows: read them from the table in
 * outboxd's batches (a streamed SELECT of 256 by id, 16 MiB of 64 KiB
 * payloads) and publish each batch with confirms before reading the
 * next, with no lease and no status written.  Beside the broker's own
 * byte rate it tells what reading the rows costs this machine, which no
 * relay avoids; outboxd overlaps its reads with publishing, so it may
 * pass this.
 */
struct table_fed {
    double rate; /* msg/s */
    double mariadb_ms_per_1000, rabbit_ms_per_1000, self_ms_per_1000;
};

static struct table_fed
measure_table_fed(const struct settings *s, size_t size, long rows)
{
    struct table_fed res;
    db_recreate(s, &no_binlog);
    queue_reset(s);
    MYSQL *m = db_connect(&no_binlog, DB_NAME);
    db_fill_sized(m, rows, size, s->aggregates);
    db_exec(m, "ANALYZE TABLE outbox_event");
    pid_t server = server_pid(&no_binlog), rabbit = pid_of("beam.smp");
    amqp_connection_state_t c = amqp_open_confirming();
    amqp_table_entry_t headers[3];
    amqp_basic_properties_t p = message_properties(true, headers);
    double cpu0[3] = {cpu_ms(server), cpu_ms(rabbit), cpu_ms(getpid())};
    double t0 = now_s();
    long sent = 0, acked = 0, last_id = 0;
    while (sent < rows) {
        char sql[160];
        snprintf(sql, sizeof(sql),
                 "SELECT id, payload FROM outbox_event WHERE id > %ld "
                 "ORDER BY id LIMIT 256",
                 last_id);
        if (mysql_query(m, sql) != 0)
            die("reading the rows: %s", mysql_error(m));
        MYSQL_RES *r = mysql_use_result(m);
        MYSQL_ROW row;
        long before = sent;
        while (r != NULL && (row = mysql_fetch_row(r)) != NULL) {
            unsigned long *len = mysql_fetch_lengths(r);
            last_id = atol(row[0]);
            amqp_bytes_t body = {len[1], row[1]};
            if (amqp_basic_publish(c, 1, amqp_cstring_bytes(EXCHANGE),
                                   amqp_cstring_bytes("bench.fed"), 1, 0, &p,
                                   body) < 0)
                die("lost the broker while publishing rows of the table");
            sent++;
        }
        mysql_free_result(r);
        if (sent == before)
            die("the table holds %ld rows, not %ld", sent, rows);
        while (acked < sent)
            acked = read_acked(c, acked);
    }
    double secs = now_s() - t0, per = 1000.0 / (double)rows;
    res.rate = (double)rows / secs;
    res.mariadb_ms_per_1000 = (cpu_ms(server) - cpu0[0]) * per;
    res.rabbit_ms_per_1000 = (cpu_ms(rabbit) - cpu0[1]) * per;
    res.self_ms_per_1000 = (cpu_ms(getpid()) - cpu0[2]) * per;
    amqp_done(c);
    mysql_close(m);
    queue_reset(s);
    return res;
}

/* Every thread of a process onto the given CPUs; false when refused
 * (CAP_SYS_NICE: the servers run as other users). */
static bool
pin_process(pid_t pid, const cpu_set_t *cpus)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    bool ok = true;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' &&
            sched_setaffinity(atoi(e->d_name), sizeof(*cpus), cpus) != 0)
            ok = false;
    closedir(d);
    return ok;
}

/*
 * apart: the broker on the last CPU, the database server and this
 * process (outboxd is its child) on the others, as when the database
 * and the broker run on hosts of their own; !apart: all CPUs for all
 * again.  false: fewer than two CPUs, or not allowed.
 */
static bool pin_apart(bool apart);

/* A bench that dies while pinned leaves the servers as it found them. */
static void
unpin_at_exit(void)
{
    pin_apart(false);
}

static bool
pin_apart(bool apart)
{
    static bool armed;
    if (apart && !armed)
        armed = atexit(unpin_at_exit) == 0;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 2)
        return false;
    cpu_set_t all, broker, rest;
    CPU_ZERO(&all);
    CPU_ZERO(&broker);
    CPU_ZERO(&rest);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++) {
        CPU_SET(i, &all);
        CPU_SET(i, i == n - 1 ? &broker : &rest);
    }
    bool ok = pin_process(pid_of("beam.smp"), apart ? &broker : &all);
    ok = pin_process(server_pid(&no_binlog), apart ? &rest : &all) && ok;
    return sched_setaffinity(0, sizeof(all), apart ? &rest : &all) == 0 && ok;
}

/* What the 64 KiB drain is set against, measured in this run. */
struct byte_refs {
    struct ceiling c64;   /* the broker's byte rate for such messages */
    struct ceiling turn;  /* the broker alone in outboxd's pattern */
    struct table_fed fed; /* the least a relay does, from the table */
    /* The broker's byte rate: the faster of its two patterns, as with
     * messages this large a window of 1,000 (64 MiB unconfirmed) can
     * be the slower one. */
    double best;
};

static struct byte_refs
measure_byte_refs(const struct settings *s, const char *where)
{
    struct byte_refs r;
    long n64 = env_long("BENCH_CEILING_64K_MESSAGES", 3000);
    r.c64 = measure_ceiling_median_n(
        s, (struct publishing){true, 1000, false, 65536}, n64);
    printf("%sbroker ceiling, 64 KiB messages shaped as outboxd's: %.0f "
           "msg/s = %.1f MiB/s (median of %d runs of %ld, %.0f-%.0f msg/s); "
           "CPU per 1000: rabbitmq %.0f ms, publisher %.0f ms\n",
           where, r.c64.rate, r.c64.rate / 16.0, CEILING_RUNS, n64, r.c64.low,
           r.c64.high, r.c64.rabbit_ms_per_1000, r.c64.self_ms_per_1000);
    /* outboxd's pattern: batches of batch_bytes (16 MiB) each confirmed
     * before the next, which tells the pattern's share of the gap. */
    r.turn = measure_ceiling_median_n(
        s, (struct publishing){true, 256, true, 65536}, n64);
    printf("%sthe broker alone in outboxd's pattern, 64 KiB messages in "
           "batches of 256: %.0f msg/s = %.2f of that ceiling\n",
           where, r.turn.rate, r.turn.rate / r.c64.rate);
    r.best = r.turn.rate > r.c64.rate ? r.turn.rate : r.c64.rate;
    r.fed = measure_table_fed(s, 65536, 3000);
    printf("%sthe broker fed from the table, 64 KiB rows read 256 at a "
           "time, each batch confirmed before the next, no status written: "
           "%.0f msg/s = %.2f of the broker's byte rate (the faster of the "
           "two above); CPU per 1000: mariadbd %.0f ms, rabbitmq %.0f ms, "
           "reader %.0f ms\n",
           where, r.fed.rate, r.fed.rate / r.best, r.fed.mariadb_ms_per_1000,
           r.fed.rabbit_ms_per_1000, r.fed.self_ms_per_1000);
    return r;
}

/* refs: set the drain against them (the 64 KiB rows). */
static void
print_sized_drain(const char *where, size_t i, const struct sized_drain *d,
                  const struct byte_refs *refs)
{
    size_t size = byte_sizes[i].bytes;
    double mib = d->rate * (double)size / 1048576.0;
    printf("%sdrain %ld rows of %s, default settings: %.0f events/s = "
           "%.1f MiB/s in %.1f s; peak RSS %.1f MiB",
           where, byte_sizes[i].rows, byte_sizes[i].name, d->rate, mib,
           d->seconds, d->rss_kib / 1024.0);
    if (refs != NULL)
        printf("; %.2f of the broker's 64 KiB byte rate, %.2f of the "
               "table-fed rate",
               d->rate / refs->best, d->rate / refs->fed.rate);
    printf("; waiting on the broker %.0f%%, the database %.0f%%; CPU per "
           "1000: mariadbd %.0f ms, rabbitmq %.0f ms, outboxd %.0f ms\n",
           100.0 * d->wait_s[0] / d->seconds, 100.0 * d->wait_s[1] / d->seconds,
           d->mariadb_ms_per_1000, d->rabbit_ms_per_1000,
           d->outboxd_ms_per_1000);
}

/*
 * docs/contract.md section 1.6: peak RSS and drain rate by payload size,
 * at default settings, and for 64 KiB the broker's own byte rate for
 * such messages (shaped as outboxd's, confirms, one channel), measured
 * in this run.  Then the 64 KiB figures again with the broker on a CPU
 * of its own: on two cores the database's work for each row takes CPU
 * the broker's ceiling had to itself (docs/performance.md).
 */
static void
measure_bytes(const struct settings *s)
{
    struct byte_refs refs = measure_byte_refs(s, "");
    for (size_t i = 0; i < NBYTE_SIZES; i++) {
        struct sized_drain d =
            measure_sized_drain(s, byte_sizes[i].bytes, byte_sizes[i].rows);
        print_sized_drain("", i, &d,
                          byte_sizes[i].bytes == 65536 ? &refs : NULL);
    }
    if (!pin_apart(true)) {
        pin_apart(false);
        printf("(the broker on a CPU of its own: skipped, one CPU or not "
               "allowed to pin the servers)\n");
        return;
    }
    const char *where = "broker on a CPU of its own: ";
    refs = measure_byte_refs(s, where);
    for (size_t i = 0; i < NBYTE_SIZES; i++) {
        if (byte_sizes[i].bytes != 65536)
            continue;
        struct sized_drain d =
            measure_sized_drain(s, byte_sizes[i].bytes, byte_sizes[i].rows);
        print_sized_drain(where, i, &d, &refs);
    }
    pin_apart(false);
}

/*
 * BENCH_ONLY=delayed: the 100,000-event drain without and with
 * BENCH_DELAYED_ROWS (default 1,000,000) rows delayed for a day at lower
 * ids, taken in turn twice (A B A B), since the machine drifts between
 * runs: the ratio of each pair and their range.  A claim that read the
 * delayed rows would slow with their number.
 */
static void
measure_delayed(const struct settings *s)
{
    struct settings with = *s;
    with.delayed = env_long("BENCH_DELAYED_ROWS", 1000000);
    double low = 1e9, high = 0;
    for (int pair = 0; pair < 2; pair++) {
        struct target off = {&no_binlog, NULL, 0};
        struct drain_result a = measure_drain(s, off, "aggregate", 0, 0);
        struct drain_result b = measure_drain(&with, off, "aggregate", 0, 0);
        double ratio = b.rate / a.rate;
        low = ratio < low ? ratio : low;
        high = ratio > high ? ratio : high;
        printf("drain %ld events: %.0f events/s alone, %.0f beside %ld "
               "delayed rows = %.2f (statements per 1000 events %.1f / "
               "%.1f, mariadbd CPU %.0f / %.0f ms)\n",
               s->backlog, a.rate, b.rate, with.delayed, ratio,
               a.statements_per_1000, b.statements_per_1000,
               a.cpu_ms_per_1000[0], b.cpu_ms_per_1000[0]);
    }
    printf("drain beside %ld delayed rows over the drain without them: "
           "%.2f-%.2f (two pairs, A B A B)\n",
           with.delayed, low, high);
}

static void
measure_drains_only(const struct settings *s)
{
    static const char *const orderings[] = {"aggregate", "none"};
    for (int i = 0; i < 2; i++) {
        struct drain_result r = measure_drain_median(
            s, (struct target){&no_binlog, NULL, 0}, orderings[i], 0, 0);
        printf("drain %ld events, ordering %s: %.0f events/s (median of %d "
               "runs, %.0f-%.0f); peak RSS %.1f MiB\n",
               s->backlog, orderings[i], r.rate, (int)s->drain_runs, r.low,
               r.high, r.rss_kib / 1024.0);
        printf("statements per 1000 events: %.1f; CPU per 1000 events: "
               "mariadbd %.0f ms, outboxd %.0f ms\n",
               r.statements_per_1000, r.cpu_ms_per_1000[0],
               r.cpu_ms_per_1000[2]);
        print_waits(orderings[i], &r);
    }
}

int
main(void)
{
    struct settings s = {
        .outboxd = getenv("OUTBOXD_BIN"),
        .src = getenv("OUTBOXD_SRC"),
        .backlog = env_long("BENCH_BACKLOG", 100000),
        .aggregates = env_long("BENCH_AGGREGATES", 1000),
        .ceiling_messages = env_long("BENCH_CEILING_MESSAGES", 100000),
        .drain_runs = env_long("BENCH_DRAIN_RUNS", 3),
        .latency_rate = 1000,
        .latency_seconds = env_long("BENCH_LATENCY_SECONDS", 10),
        /* 200 events at 10/s, enough for a p99 */
        .slow_latency_seconds = env_long("BENCH_SLOW_LATENCY_SECONDS", 20),
        .idle_outboxes = env_long("BENCH_IDLE_OUTBOXES", 10),
        .idle_settle_seconds = env_long("BENCH_IDLE_SETTLE_SECONDS", 15),
        .idle_seconds = env_long("BENCH_IDLE_SECONDS", 30),
        .queue_mode =
            getenv("BENCH_QUEUE_MODE") ? getenv("BENCH_QUEUE_MODE") : "",
        .cost_seconds = env_long("BENCH_COST_SECONDS", 10),
        .cost_settle_seconds = env_long("BENCH_COST_SETTLE_SECONDS", 3),
    };
    if (!s.outboxd || !s.src)
        die("run me through `make bench` (OUTBOXD_BIN, OUTBOXD_SRC)");
    if (s.aggregates < 1 || s.backlog < 1)
        die("BENCH_AGGREGATES and BENCH_BACKLOG must be at least 1");
    if (s.latency_seconds < 1 || s.slow_latency_seconds < 1 ||
        s.idle_outboxes < 1 || s.idle_seconds < 1 || s.idle_settle_seconds < 0)
        die("BENCH_LATENCY_SECONDS, BENCH_SLOW_LATENCY_SECONDS, "
            "BENCH_IDLE_OUTBOXES and BENCH_IDLE_SECONDS must be at least 1, "
            "BENCH_IDLE_SETTLE_SECONDS at least 0");
    /* Odd: the median is then a run, not the faster of the middle two. */
    if (s.drain_runs < 1 || s.drain_runs > DRAIN_RUNS_MAX ||
        s.drain_runs % 2 == 0)
        die("BENCH_DRAIN_RUNS must be an odd number from 1 to %d",
            DRAIN_RUNS_MAX);
    if (strcmp(s.queue_mode, "") != 0 && strcmp(s.queue_mode, "lazy") != 0 &&
        strcmp(s.queue_mode, "default") != 0)
        die("BENCH_QUEUE_MODE must be lazy or default");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (s.queue_mode[0] != '\0')
        printf("bench queue declared with x-queue-mode %s\n", s.queue_mode);
    /* BENCH_ONLY=wake: the latency and idle figures alone, for work on
     * the pacing, where the drains would only add minutes. */
    const char *only = getenv("BENCH_ONLY");
    if (only != NULL && strcmp(only, "wake") != 0 &&
        strcmp(only, "bytes") != 0 && strcmp(only, "drain") != 0 &&
        strcmp(only, "delayed") != 0 && strcmp(only, "tenants") != 0 &&
        strcmp(only, "cost") != 0)
        die("BENCH_ONLY must be wake, bytes, drain, delayed, tenants or cost");
    /* BENCH_ONLY=cost: the relay's cost per event on the primary beside
     * its producer's (bench_cost.c). */
    if (only != NULL && strcmp(only, "cost") == 0) {
        measure_cost(&s);
        return 0;
    }
    /* BENCH_ONLY=tenants: one outboxd over many tenant schemas
     * (bench_tenants.c). */
    if (only != NULL && strcmp(only, "tenants") == 0) {
        measure_tenants(&s);
        return 0;
    }
    if (only != NULL && strcmp(only, "delayed") == 0) {
        measure_delayed(&s);
        return 0;
    }
    /* BENCH_ONLY=bytes: peak RSS and byte rate by payload size alone. */
    if (only != NULL && strcmp(only, "bytes") == 0) {
        measure_bytes(&s);
        return 0;
    }
    /* BENCH_ONLY=drain: the two drains alone, for an A/B of two builds
     * taken in turn (OUTBOXD_BIN), where ceilings would only add time. */
    if (only != NULL && strcmp(only, "drain") == 0) {
        measure_drains_only(&s);
        return 0;
    }
    if (only != NULL) {
        measure_latencies(&s);
        measure_idles(&s);
        return 0;
    }
    struct ceiling bare, shaped;
    measure_ceilings(&s, &bare, &shaped);
    double ceiling = shaped.rate;
    struct target off = {&no_binlog, NULL, 0};
    struct drain_result agg = measure_drain_median(&s, off, "aggregate", 0, 0);
    printf("drain %ld events, %ld aggregates, ordering aggregate: %.0f "
           "events/s (median of %d runs, %.0f-%.0f) = %.2f of the shaped "
           "ceiling (%.2f of the bare one)\n",
           s.backlog, s.aggregates, agg.rate, (int)s.drain_runs, agg.low,
           agg.high, agg.rate / ceiling, agg.rate / bare.rate);
    printf("database statements per 1000 events: %.1f\n",
           agg.statements_per_1000);
    printf("CPU per 1000 events (ordering aggregate):");
    for (int i = 0; i < 3; i++)
        printf(" %s %.0f ms%s", cpu_names[i], agg.cpu_ms_per_1000[i],
               i < 2 ? "," : "\n");
    print_waits("ordering aggregate", &agg);
    printf("peak RSS of outboxd (%ld-row backlog): %.1f MiB\n", s.backlog,
           agg.rss_kib / 1024.0);
    struct drain_result none = measure_drain_median(&s, off, "none", 0, 0);
    printf("drain %ld events, ordering none: %.0f events/s (median of %d "
           "runs, %.0f-%.0f) = %.2f of the shaped ceiling (%.2f of the bare "
           "one)\n",
           s.backlog, none.rate, (int)s.drain_runs, none.low, none.high,
           none.rate / ceiling, none.rate / bare.rate);
    print_waits("ordering none", &none);
    drain_with_binlog(&s, &agg);
    long sent_rows = env_long("BENCH_SENT_ROWS", 0);
    if (sent_rows > 0)
        drain_beside(&s, &agg, sent_rows, 0);
    long retry_rows = env_long("BENCH_RETRY_ROWS", 0);
    if (retry_rows > 0)
        drain_beside(&s, &agg, 0, retry_rows);
    if (env_long("BENCH_DELAYED_ROWS", 0) > 0)
        measure_delayed(&s);
    measure_bytes(&s);
    measure_latencies(&s);
    measure_idles(&s);
    measure_cost(&s);
    measure_tenants(&s);
    return 0;
}
