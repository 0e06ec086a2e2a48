/*
 * it_faults: what outboxd does when things break, against the real
 * servers: broker refusals with backoff and dead letters, a chaos drain
 * with relay kills and server restarts, fencing of a stalled relay, a
 * row that kills the relay, a blackholed and a blocked broker, the
 * database lost at finalize, and the bad rows of docs/contract.md section 9.
 *
 * Tests that break a shared server restore it themselves, and start a
 * guard first: a process outside the test's process group that restores
 * the server if the test dies (a failed assertion exits it, a timeout
 * kills it).  Daemons die with the test (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include "itest.h"
#include "itproxy.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <fcntl.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

Suite *it_faults_suite(void);

/* The shared fixture with two relays over its outbox, a and b. */
struct faults_fx {
    struct it_fx it;
    struct it_fx_relay r[2];
};

/* ---- fixture ---- */

/*
 * One config per relay: broker_keys and outbox_keys are lines appended
 * to the broker's and the outbox's keys (without indentation: each line
 * is indented here).
 */
static void
write_conf(struct faults_fx *f, int i, const char *broker_keys,
           const char *outbox_keys, const char *shutdown_timeout)
{
    char broker[1024] = "", outbox[1024] = "";
    const char *src[2] = {broker_keys ? broker_keys : "",
                          outbox_keys ? outbox_keys : ""};
    char *dst[2] = {broker, outbox};
    const char *indent[2] = {"    ", "        "};
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        for (const char *s = src[k]; *s != '\0';) {
            const char *nl = strchr(s, '\n');
            size_t n = nl ? (size_t)(nl - s) : strlen(s);
            len += (size_t)snprintf(dst[k] + len, 1024 - len, "%s%.*s\n",
                                    indent[k], (int)n, s);
            s += n + (nl != NULL);
        }
    }
    it_write_file(f->r[i].conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"\"\n"
                  "  shutdown_timeout: %s\n"
                  "brokers:\n"
                  "  main:\n"
                  "%s"
                  "    heartbeat: 10s\n"
                  "%s"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    port: 3306\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        broker: main\n"
                  "        exchange: \"%s\"\n"
                  "%s",
                  f->r[i].id, shutdown_timeout ? shutdown_timeout : "10s",
                  strstr(broker, "urls:") ? "" : "    url: " IT_AMQP_URL "\n",
                  broker, f->it.db, IT_DB_USER, IT_DB_PASSWORD, f->it.db,
                  f->it.ex, outbox);
}

static void
fx_open(struct faults_fx *f, const char *binding, const char *broker_keys,
        const char *outbox_keys, const char *shutdown_timeout)
{
    memset(f, 0, sizeof(*f));
    it_fx_open(&f->it, "it_faults", "sql/outbox.sql");
    f->it.consumer = it_consumer_new(f->it.ex, binding);
    for (int i = 0; i < 2; i++) {
        it_fx_relay_name(&f->it, &f->r[i], i == 0 ? "-a" : "-b");
        write_conf(f, i, broker_keys, outbox_keys, shutdown_timeout);
    }
}

/* Like it_daemon_start, but the daemon dies with the test process. */
static void
daemon_start(struct faults_fx *f, int i)
{
    struct it_daemon *d = &f->r[i].d;
    const char *bin = getenv("OUTBOXD_BIN");
    ck_assert_msg(bin != NULL, "OUTBOXD_BIN is not set (run via make)");
    char path[sizeof(d->log_path)];
    snprintf(path, sizeof(path), "/tmp/%s.log", f->r[i].id);
    memset(d, 0, sizeof(*d));
    memcpy(d->log_path, path, sizeof(path));
    pid_t parent = getpid();
    fflush(NULL);
    d->pid = fork();
    ck_assert_int_ge(d->pid, 0);
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
        }
        execl(bin, bin, "-c", f->r[i].conf, (char *)NULL);
        _exit(127);
    }
}

static void
daemon_kill9(struct faults_fx *f, int i)
{
    ck_assert_msg(it_daemon_signal_wait(&f->r[i].d, SIGKILL, 5000),
                  "outboxd did not die");
}

/* SIGTERM, and the exit must be 0 within limit_ms; returns the time. */
static uint64_t
daemon_term(struct faults_fx *f, int i, int limit_ms)
{
    uint64_t t0 = it_now_ms();
    if (!it_daemon_signal_wait(&f->r[i].d, SIGTERM, limit_ms)) {
        it_daemon_dump_log(&f->r[i].d);
        ck_abort_msg("outboxd did not exit within %d ms of SIGTERM", limit_ms);
    }
    int st = f->r[i].d.status;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "outboxd exited with status 0x%x", st);
    return it_now_ms() - t0;
}

static void
fx_close(struct faults_fx *f)
{
    for (int i = 0; i < 2; i++) {
        if (f->r[i].d.pid > 0 && !f->r[i].d.reaped) {
            kill(f->r[i].d.pid, SIGCONT);
            daemon_kill9(f, i);
        }
        if (f->r[i].d.pid > 0 && getenv("IT_KEEP_LOGS") == NULL)
            unlink(f->r[i].d.log_path);
        unlink(f->r[i].conf);
    }
    it_fx_close(&f->it);
    it_exchange_delete(f->it.ex);
}

static void
dump_logs(struct faults_fx *f)
{
    for (int i = 0; i < 2; i++)
        if (f->r[i].d.pid > 0)
            it_daemon_dump_log(&f->r[i].d);
}

/* Occurrences of needle in daemon i's log. */
static int
log_count(struct faults_fx *f, int i, const char *needle)
{
    return it_sh("exit $(grep -c -F -- '%s' '%s')", needle, f->r[i].d.log_path);
}

/* Sum of the N in every "<prefix> N" of daemon i's log. */
static long
log_sum(struct faults_fx *f, int i, const char *prefix)
{
    FILE *fp = fopen(f->r[i].d.log_path, "r");
    ck_assert_ptr_nonnull(fp);
    char line[4096];
    long sum = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *p = strstr(line, prefix);
        if (p != NULL)
            sum += strtol(p + strlen(prefix), NULL, 10);
    }
    fclose(fp);
    return sum;
}

/* ---- guard: restores shared servers if the test dies ---- */

#define SERVERS_START "bash '%s' start >/dev/null 2>&1"

struct guard {
    pid_t pid;
    char cmd[1024];
};

static void guard_start(struct guard *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
guard_start(struct guard *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->cmd, sizeof(g->cmd), fmt, ap);
    va_end(ap);
    pid_t parent = getpid();
    fflush(NULL);
    g->pid = fork();
    ck_assert_int_ge(g->pid, 0);
    if (g->pid > 0)
        return;
    /* Out of the test's process group: a timeout kill does not reach it. */
    setsid();
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    while (getppid() == parent)
        usleep(100 * 1000);
    fprintf(stderr, "it_faults guard: the test died, restoring: %s\n", g->cmd);
    execl("/bin/sh", "sh", "-c", g->cmd, (char *)NULL);
    _exit(127);
}

/* The test restores, and the guard is no longer needed. */
static void
guard_end(struct guard *g)
{
    if (g->pid <= 0)
        return;
    kill(g->pid, SIGKILL);
    waitpid(g->pid, NULL, 0);
    g->pid = 0;
    it_sh("%s", g->cmd);
}

/* ---- servers ---- */

static bool
rabbit_answers(void)
{
    return it_sh("timeout 10 amqp-delete-queue -u "
                 "amqp://guest:guest@127.0.0.1:5672 -q outboxd.servers.probe "
                 ">/dev/null 2>&1") == 0;
}

/* The RabbitMQ node's OS process (beam.smp). */
static pid_t
beam_pid(void)
{
    char *out = NULL;
    size_t cap = 0;
    FILE *p = popen("rabbitmqctl -q eval 'os:getpid().' 2>/dev/null", "r");
    ck_assert_ptr_nonnull(p);
    ssize_t n = getline(&out, &cap, p);
    pclose(p);
    pid_t pid = n > 0 ? (pid_t)strtol(out + (out[0] == '"'), NULL, 10) : 0;
    free(out);
    ck_assert_msg(pid > 0, "cannot find the RabbitMQ node's pid");
    char comm[64] = "";
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    FILE *c = fopen(path, "r");
    if (c != NULL) {
        if (fgets(comm, sizeof(comm), c) == NULL)
            comm[0] = '\0';
        fclose(c);
    }
    ck_assert_msg(strncmp(comm, "beam.smp", 8) == 0, "pid %d is %s", (int)pid,
                  comm);
    return pid;
}

/* One line of `rabbitmqctl eval`, trimmed. */
static void
rabbit_eval(const char *expr, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rabbitmqctl -q eval '%s' 2>/dev/null", expr);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    if (fgets(out, (int)len, p) == NULL)
        out[0] = '\0';
    pclose(p);
    out[strcspn(out, "\r\n")] = '\0';
}

static amqp_connection_state_t
amqp_connect_or_die(void)
{
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    struct timeval tv = {5, 0};
    ck_assert_int_eq(amqp_socket_open_noblock(sock, "127.0.0.1", 5672, &tv),
                     AMQP_STATUS_OK);
    amqp_rpc_reply_t r = amqp_login(conn, "/", 0, 131072, 0,
                                    AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    ck_assert_int_eq(r.reply_type, AMQP_RESPONSE_NORMAL);
    amqp_channel_open(conn, 1);
    ck_assert_int_eq(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
    return conn;
}

static void
amqp_done(amqp_connection_state_t conn)
{
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

static void
queue_delete(const char *queue)
{
    amqp_connection_state_t conn = amqp_connect_or_die();
    amqp_queue_delete(conn, 1, amqp_cstring_bytes(queue), 0, 0);
    amqp_get_rpc_reply(conn);
    amqp_done(conn);
}

/* ---- database ---- */

static char *
row_field(struct faults_fx *f, const char *event_id, const char *column)
{
    return it_db_str(f->it.sql,
                     "SELECT %s FROM outbox_event WHERE event_id = '%s'",
                     column, event_id);
}

/*
 * Inserts events [start, start + n): event_id "<prefix>-<i>", aggregate
 * "<prefix>-<i % aggs>", a JSON payload of about 200 bytes.
 */
static void
insert_range(MYSQL *db, const char *prefix, int start, int n, int aggs)
{
    size_t cap = (size_t)n * 400 + 256;
    char *sql = malloc(cap);
    size_t len = (size_t)snprintf(
        sql, cap,
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, "
        "event_type, payload) VALUES ");
    for (int i = start; i < start + n; i++)
        len += (size_t)snprintf(
            sql + len, cap - len,
            "%s('%s-%d','Order','%s-%d','OrderCreated','{\"seq\":%d,\"pad\":"
            "\"%0160d\"}')",
            i > start ? "," : "", prefix, i, prefix, i % aggs, i, 0);
    it_db_exec(db, "%s", sql);
    it_db_exec(db, "COMMIT");
    free(sql);
}

/* ---- receiving ---- */

/* N of "<prefix>-<N>", or -1 for anything else ("missing-1" is not
 * "ok-1"). */
static long
prefixed_number(const char *s, const char *prefix)
{
    size_t len = strlen(prefix);
    if (s == NULL || strncmp(s, prefix, len) != 0 || s[len] != '-' ||
        s[len + 1] < '0' || s[len + 1] > '9')
        return -1;
    char *end;
    long n = strtol(s + len + 1, &end, 10);
    return *end == '\0' ? n : -1;
}

#define TALLY_RECENT 48

/* One message as it arrived: its aggregate, outbox id and copy number. */
struct arrival {
    long agg;
    long long id;
    int copy;
};

/* What a consumer saw of events "<prefix>-<i>", i < n. */
struct tally {
    const char *prefix;
    int n, aggs;
    int *copies;
    long long *last; /* per aggregate: the highest outbox id seen */
    long distinct, total;
    struct arrival recent[TALLY_RECENT]; /* printed when the order breaks */
};

/* Oldest first: aggregate, outbox id and which copy of the event. */
static void
tally_print_recent(const struct tally *t)
{
    long n = t->total < TALLY_RECENT ? t->total : TALLY_RECENT;
    fprintf(stderr, "the last %ld arrivals (aggregate:id#copy):", n);
    for (long k = t->total - n; k < t->total; k++) {
        const struct arrival *r = &t->recent[k % TALLY_RECENT];
        fprintf(stderr, " %ld:%lld#%d", r->agg, r->id, r->copy);
    }
    fprintf(stderr, "\n");
}

static void
tally_init(struct tally *t, const char *prefix, int n, int aggs)
{
    memset(t, 0, sizeof(*t));
    t->prefix = prefix;
    t->n = n;
    t->aggs = aggs;
    t->copies = calloc((size_t)n, sizeof(*t->copies));
    t->last = calloc((size_t)aggs, sizeof(*t->last));
}

static void
tally_free(struct tally *t)
{
    free(t->copies);
    free(t->last);
}

/*
 * Counts one message and checks docs/contract.md guarantee 1.3: per aggregate
 * the ids never go down; a duplicate may repeat the latest event, never an
 * earlier one.
 */
static void
tally_add(struct tally *t, const struct it_message *m)
{
    long i = prefixed_number(m->message_id, t->prefix);
    ck_assert_msg(i >= 0 && i < t->n, "unexpected message %s", m->message_id);
    long agg = prefixed_number(m->h_aggregate_id, t->prefix);
    ck_assert_msg(agg >= 0 && agg < t->aggs, "aggregate %s", m->h_aggregate_id);
    t->recent[t->total % TALLY_RECENT].agg = agg;
    t->recent[t->total % TALLY_RECENT].id = m->h_outbox_id;
    t->recent[t->total % TALLY_RECENT].copy = t->copies[i] + 1;
    t->total++;
    if (m->h_outbox_id < t->last[agg])
        tally_print_recent(t);
    ck_assert_msg(m->h_outbox_id >= t->last[agg],
                  "aggregate %ld went back from id %lld to %lld (%s)", agg,
                  t->last[agg], m->h_outbox_id, m->message_id);
    t->last[agg] = m->h_outbox_id;
    if (t->copies[i]++ == 0)
        t->distinct++;
}

/* Receives until every event arrived (or timeout), then until idle. */
static void
receive_all(struct it_consumer *c, struct tally *t, int timeout_ms, int idle_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (t->distinct < t->n && it_now_ms() < deadline) {
        if (it_consumer_next(c, &m, 500) == 0)
            continue;
        tally_add(t, &m);
        it_message_free(&m);
    }
    while (idle_ms > 0 && it_consumer_next(c, &m, idle_ms) == 1) {
        tally_add(t, &m);
        it_message_free(&m);
    }
}

/* ---- 1. broker refusals: backoff, dead letters, a late exchange ---- */

struct watched {
    const char *event_id;
    unsigned last_count;
    long long delay_ms[8]; /* next_retry_at - now, seen at retry_count k */
    char *first_error;     /* last_error the first time it was RETRY */
};

/* Samples each watched row: a new retry_count records its backoff. */
static void
sample_rows(struct faults_fx *f, struct watched *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *q;
        q = xasprintf("SELECT retry_count, status, TIMESTAMPDIFF(MICROSECOND, "
                      "NOW(6), next_retry_at), last_error FROM outbox_event "
                      "WHERE event_id = '%s'",
                      w[i].event_id);
        ck_assert_int_eq(mysql_query(f->it.sql, q), 0);
        free(q);
        MYSQL_RES *res = mysql_store_result(f->it.sql);
        MYSQL_ROW r = mysql_fetch_row(res);
        ck_assert_ptr_nonnull(r);
        unsigned count = (unsigned)strtoul(r[0], NULL, 10);
        if (count != w[i].last_count && strcmp(r[1], "RETRY") == 0 &&
            count < 8) {
            w[i].last_count = count;
            w[i].delay_ms[count] = r[2] ? strtoll(r[2], NULL, 10) / 1000 : -1;
            if (w[i].first_error == NULL && r[3] != NULL)
                w[i].first_error = strdup(r[3]);
        }
        mysql_free_result(res);
    }
    it_db_exec(f->it.sql, "COMMIT");
}

/*
 * Backoff of attempt k (retry_count k after it): initial * 2^(k-1),
 * capped at max, jittered to 50-100 %.  Sampling lags a few ms.
 */
static void
check_backoff(const struct watched *w, unsigned dead_at, long long initial,
              long long max)
{
    for (unsigned k = 1; k < dead_at; k++) {
        long long base = initial << (k - 1);
        if (base > max)
            base = max;
        long long d = w->delay_ms[k];
        fprintf(stderr, "backoff %s: attempt %u waits %lld ms (%lld-%lld)\n",
                w->event_id, k, d, base / 2, base);
        ck_assert_msg(d >= base / 2 - 80 && d <= base + 10,
                      "%s: attempt %u waits %lld ms, want %lld-%lld",
                      w->event_id, k, d, base / 2, base);
    }
    /* doubling: attempt 3 waits longer than attempt 1, whatever the jitter */
    ck_assert_int_gt(w->delay_ms[3], w->delay_ms[1]);
}

START_TEST(test_refusals_backoff_dead)
{
    struct faults_fx f;
    char missing[128], never[128], nackq[128];
    /* the first url refuses connections: the second one must be used */
    fx_open(&f, "Order.#",
            "urls: [\"amqp://guest:guest@127.0.0.1:1/\", \"" IT_AMQP_URL "\"]",
            "exchange_column: target_exchange\n"
            "max_retries: 4\n"
            "poll_interval: 20ms\n"
            "backoff: { initial: 200ms, max: 800ms }",
            NULL);
    snprintf(missing, sizeof(missing), "ex_missing_%s", f.it.name);
    snprintf(never, sizeof(never), "ex_never_%s", f.it.name);
    snprintf(nackq, sizeof(nackq), "q_nack_%s", f.it.name);
    it_nacking_queue_declare(nackq, f.it.ex, "Nack.#");
    it_db_exec(f.it.sql, "ALTER TABLE outbox_event ADD COLUMN target_exchange "
                         "VARCHAR(255) NULL");
    it_db_exec(f.it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, target_exchange) VALUES "
               "('noroute-1', 'Ghost', 'g-1', 'Boo', '{}', NULL), "
               "('nack-1', 'Nack', 'n-1', 'Refused', '{}', NULL), "
               "('missing-1', 'Order', 'm-1', 'OrderLate', '{}', '%s'), "
               "('missing-2', 'Order', 'm-1', 'OrderLater', '{}', '%s'), "
               "('never-1', 'Order', 'v-1', 'OrderNever', '{}', '%s')",
               missing, missing, never);
    insert_range(f.it.sql, "ok", 0, 50, 5);
    daemon_start(&f, 0);

    struct watched w[3] = {{.event_id = "noroute-1"},
                           {.event_id = "nack-1"},
                           {.event_id = "missing-1"}};
    struct it_consumer *late = NULL;
    uint64_t deadline = it_now_ms() + 30000;
    while (it_now_ms() < deadline) {
        sample_rows(&f, w, 3);
        /* the exchange appears once missing-1 has failed twice */
        if (late == NULL && w[2].last_count >= 2)
            late = it_consumer_new(missing, "#");
        if (late != NULL && it_db_count_status(f.it.sql, "DEAD") == 3 &&
            it_db_count_status(f.it.sql, "SENT") == 52)
            break;
        it_sleep_ms(3);
    }
    if (it_db_count_status(f.it.sql, "SENT") != 52)
        dump_logs(&f);
    ck_assert_ptr_nonnull(late);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "DEAD"), 3);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "SENT"), 52);

    /* unroutable: NO_ROUTE with exchange and key, five attempts, DEAD */
    char *err = row_field(&f, "noroute-1", "last_error");
    ck_assert_msg(err && strstr(err, "NO_ROUTE") && strstr(err, f.it.ex) &&
                      strstr(err, "Ghost.Boo"),
                  "noroute-1: %s", err ? err : "(null)");
    free(err);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT retry_count FROM outbox_event "
                                         "WHERE event_id = 'noroute-1'"),
                     5);
    check_backoff(&w[0], 5, 200, 800);
    /* nacked by the queue's reject-publish overflow */
    err = row_field(&f, "nack-1", "last_error");
    ck_assert_msg(err && strstr(err, "nack"), "nack-1: %s",
                  err ? err : "(null)");
    free(err);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT retry_count FROM outbox_event "
                                         "WHERE event_id = 'nack-1'"),
                     5);
    check_backoff(&w[1], 5, 200, 800);
    /* exchange missing: 404 in last_error while it was RETRY, then SENT */
    ck_assert_msg(w[2].first_error && strstr(w[2].first_error, "404") &&
                      strstr(w[2].first_error, missing),
                  "missing-1 while RETRY: %s",
                  w[2].first_error ? w[2].first_error : "(null)");
    err = row_field(&f, "missing-1", "status");
    ck_assert_str_eq(err, "SENT");
    free(err);
    /* and where none ever appears, DEAD with the broker's 404 */
    err = row_field(&f, "never-1", "CONCAT(retry_count, ' ', last_error)");
    ck_assert_msg(err && strncmp(err, "5 ", 2) == 0 && strstr(err, "404") &&
                      strstr(err, never),
                  "never-1: %s", err ? err : "(null)");
    free(err);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(late, &m, 10000), 1);
    ck_assert_str_eq(m.message_id, "missing-1");
    it_message_free(&m);
    ck_assert_int_eq(it_consumer_next(late, &m, 10000), 1);
    ck_assert_str_eq(m.message_id, "missing-2");
    it_message_free(&m);
    /* the good events all arrived, and only they did */
    struct tally t;
    tally_init(&t, "ok", 50, 5);
    receive_all(f.it.consumer, &t, 20000, 300);
    ck_assert_int_eq(t.distinct, 50);
    ck_assert_int_eq(t.total, 50);
    ck_assert_int_eq(log_count(&f, 0,
                               "broker connected: amqp://guest:***@"
                               "127.0.0.1:5672"),
                     1);
    tally_free(&t);
    for (int i = 0; i < 3; i++)
        free(w[i].first_error);
    it_consumer_free(late);
    it_exchange_delete(missing);
    queue_delete(nackq);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 2. chaos: relay kills, broker and database restarts ---- */

static void
restart_rabbitmq(void)
{
    uint64_t t0 = it_now_ms();
    ck_assert_int_eq(it_sh("rabbitmqctl -q stop_app >/dev/null"), 0);
    it_sleep_ms(1000);
    ck_assert_int_eq(it_sh("rabbitmqctl -q start_app >/dev/null"), 0);
    ck_assert(IT_WAIT(60000, rabbit_answers()));
    fprintf(stderr, "chaos: RabbitMQ restarted in %llu ms\n",
            (unsigned long long)(it_now_ms() - t0));
}

static void
restart_mariadb(struct faults_fx *f)
{
    uint64_t t0 = it_now_ms();
    mysql_close(f->it.sql);
    ck_assert_int_eq(it_sh("bash '%s' restart-mariadb >/dev/null",
                           it_src_path("tests/servers.sh")),
                     0);
    f->it.sql = it_db_connect(f->it.db);
    fprintf(stderr, "chaos: MariaDB restarted in %llu ms\n",
            (unsigned long long)(it_now_ms() - t0));
}

START_TEST(test_chaos_drain)
{
    /* after each chunk's insert, mid-drain: k = SIGKILL and restart of
     * the relay, r = RabbitMQ restart, m = MariaDB restart, - = nothing */
    static const char plan[] = "kk-krkmk-k";
    enum { N = 20000, AGGS = 50, CHUNKS = sizeof(plan) - 1 };
    struct faults_fx f;
    struct guard g;
    fx_open(&f, "#", "confirm_timeout: 5s\nconnect_timeout: 2s",
            "batch_size: 200\nlease: 2s\npoll_interval: 50ms", NULL);
    char queue[128];
    snprintf(queue, sizeof(queue), "%s", it_consumer_queue(f.it.consumer));
    /* nobody consumes during the chaos: the durable queue keeps it all */
    it_consumer_close(f.it.consumer);
    f.it.consumer = NULL;
    guard_start(&g, SERVERS_START, it_src_path("tests/servers.sh"));
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srandom(seed);
    fprintf(stderr, "chaos: seed %u\n", seed);
    uint64_t t0 = it_now_ms();
    daemon_start(&f, 0);
    int kills = 0;
    for (int c = 0; c < CHUNKS; c++) {
        insert_range(f.it.sql, "chaos", c * (N / CHUNKS), N / CHUNKS, AGGS);
        /* the relay drains about 5,000 events a second: strike mid-way */
        it_sleep_ms(20 + (unsigned)(random() % 200));
        switch (plan[c]) {
        case 'k':
            daemon_kill9(&f, 0);
            kills++;
            daemon_start(&f, 0);
            break;
        case 'r':
            restart_rabbitmq();
            break;
        case 'm':
            restart_mariadb(&f);
            break;
        }
    }
    if (!IT_WAIT(180000, it_db_count_status(f.it.sql, "SENT") == N)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d SENT, %lld DEAD",
                     it_db_count_status(f.it.sql, "SENT"), N,
                     it_db_count_status(f.it.sql, "DEAD"));
    }
    uint64_t drained = it_now_ms() - t0;
    guard_end(&g);
    f.it.consumer = it_consumer_attach(queue);
    struct tally t;
    tally_init(&t, "chaos", N, AGGS);
    receive_all(f.it.consumer, &t, 120000, 2000);
    for (int i = 0; i < N && t.distinct < N; i++)
        ck_assert_msg(t.copies[i] > 0, "event chaos-%d never arrived", i);
    long dups = t.total - t.distinct;
    fprintf(stderr,
            "chaos: %d events drained in %llu ms through %d kills, a "
            "RabbitMQ and a MariaDB restart: %ld duplicates (%.1f per "
            "kill)\n",
            N, (unsigned long long)drained, kills, dups, (double)dups / kills);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "DEAD"), 0);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event "
                                         "WHERE locked_by IS NOT NULL OR "
                                         "sent_at IS NULL"),
                     0);
    tally_free(&t);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 3. fencing: a relay stalled past its lease ---- */

/* A count, or -1 when the server would not answer it (a lock clash with
 * the relay caught mid-statement): the caller tries another moment. */
static long long
try_db_int(MYSQL *db, const char *sql)
{
    if (mysql_query(db, sql) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    long long n = row && row[0] ? atoll(row[0]) : -1;
    if (res)
        mysql_free_result(res);
    return n;
}

/*
 * Statements of other sessions running on this test's database.  A relay
 * stopped just after sending one (a claim's COMMIT, say) still has it
 * run by the server: until that is done, what the relay holds can change.
 */
static long long
others_running(struct faults_fx *f)
{
    /* The relays log in as the test does; their sessions have no
     * default schema. */
    return it_db_int(f->it.sql,
                     "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                     "WHERE USER = '%s' AND ID <> CONNECTION_ID() AND "
                     "COMMAND <> 'Sleep' AND COMMAND NOT LIKE 'Binlog Dump%%'",
                     IT_DB_USER);
}

/*
 * Rows relay i holds under a committed claim that no open transaction
 * of it locks: stopped there, it can neither finalize nor hold them.
 * -1 when a statement of the relay's was still running after the counts
 * (the caller waits for the one before them to end).
 */
static long long
held_unlocked(struct faults_fx *f, int i)
{
    long long held = it_db_int(f->it.sql,
                               "SELECT COUNT(*) FROM outbox_event WHERE "
                               "status = 'PROCESSING' AND locked_by LIKE "
                               "'%s/%%'",
                               f->r[i].id);
    long long free_rows = it_db_int(
        f->it.sql,
        "SELECT COUNT(*) FROM (SELECT id FROM outbox_event WHERE status = "
        "'PROCESSING' AND locked_by LIKE '%s/%%' FOR UPDATE SKIP LOCKED) x",
        f->r[i].id);
    /* and no claim of it (the one it makes ahead, say) is open either */
    long long unfinished =
        it_db_int(f->it.sql, "SELECT COUNT(*) FROM outbox_event WHERE "
                             "status <> 'SENT'");
    long long lockable = try_db_int(
        f->it.sql, "SELECT COUNT(*) FROM (SELECT id FROM outbox_event WHERE "
                   "status <> 'SENT' FOR UPDATE SKIP LOCKED) x");
    it_db_exec(f->it.sql, "ROLLBACK");
    if (others_running(f) > 0)
        return -1;
    return held == free_rows && unfinished == lockable ? held : -1;
}

/*
 * Keeps relay a in work while the test tries to catch it: a relay that
 * drains the backlog between two tries is never caught holding a claim.
 * Each event is its own aggregate, like the first ones; *total counts.
 */
static void
keep_backlog(struct faults_fx *f, int *total)
{
    enum { LOW = 1000, MORE = 2000 };
    if (it_db_int(f->it.sql, "SELECT COUNT(*) FROM outbox_event WHERE "
                             "status <> 'SENT'") >= LOW)
        return;
    insert_range(f->it.sql, "fence", *total, MORE, *total + MORE);
    *total += MORE;
}

/*
 * Stops relay a at a moment it holds committed claims and nothing more,
 * and lists their rows in the temporary table `held`; returns how many.
 * Two looks that agree, with the table made between them.
 */
static long long
stop_holding(struct faults_fx *f, int *total)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        keep_backlog(f, total);
        ck_assert(IT_WAIT(20000, it_db_int(f->it.sql,
                                           "SELECT COUNT(*) FROM outbox_event "
                                           "WHERE status = 'PROCESSING'") > 0));
        kill(f->r[0].d.pid, SIGSTOP);
        /* the statement it sent last still runs: let the server end it */
        ck_assert(IT_WAIT(5000, others_running(f) == 0));
        long long held = held_unlocked(f, 0);
        if (held > 0) {
            it_db_exec(f->it.sql,
                       "CREATE TEMPORARY TABLE held AS SELECT id FROM "
                       "outbox_event WHERE status = 'PROCESSING'");
            if (it_db_int(f->it.sql, "SELECT COUNT(*) FROM held") == held &&
                held_unlocked(f, 0) == held) {
                fprintf(stderr, "fencing: relay a stopped at attempt %d\n",
                        attempt + 1);
                return held;
            }
            it_db_exec(f->it.sql, "DROP TEMPORARY TABLE held");
        }
        kill(f->r[0].d.pid, SIGCONT);
        it_sleep_ms((unsigned)(random() % 40));
    }
    ck_abort_msg("could not stop relay a holding a claim");
    return -1;
}

START_TEST(test_fencing_stalled_relay)
{
    struct faults_fx f;
    int n = 4000; /* more when relay a drains them before it is caught */
    fx_open(&f, "#", NULL, "lease: 2s\nbatch_size: 500\npoll_interval: 50ms",
            NULL);
    it_db_insert_events(f.it.sql, "outbox_event", "fence", n, n, 256);
    it_db_exec(f.it.sql, "COMMIT");
    daemon_start(&f, 0);
    long long held = stop_holding(&f, &n);
    /* relay b takes over after the lease, a stays stopped */
    daemon_start(&f, 1);
    if (!IT_WAIT(60000, it_db_count_status(f.it.sql, "SENT") == n)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d SENT", it_db_count_status(f.it.sql, "SENT"),
                     n);
    }
    const char *state =
        "SELECT CONCAT(COUNT(*), '/', SUM(status = 'SENT'), '/', "
        "SUM(locked_by IS NULL), '/', SUM(retry_count), '/', "
        "MAX(sent_at), '/', SUM(UNIX_TIMESTAMP(sent_at))) FROM outbox_event "
        "WHERE id IN (SELECT id FROM held)";
    char *before = it_db_str(f.it.sql, "%s", state);
    it_db_exec(f.it.sql, "COMMIT");
    /* a wakes up holding a batch whose lease b took: it records nothing */
    kill(f.r[0].d.pid, SIGCONT);
    if (!IT_WAIT(20000, log_count(&f, 0, "lost the lease on") > 0)) {
        dump_logs(&f);
        ck_abort_msg("relay a never noticed it lost its lease");
    }
    it_sleep_ms(500);
    char *after = it_db_str(f.it.sql, "%s", state);
    fprintf(stderr,
            "fencing: %lld events held by the stopped relay; "
            "count/sent/unlocked/attempts/last/sum: %s\n",
            held, after);
    ck_assert_str_eq(before, after);
    /* each held row was reclaimed once: one attempt counted */
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT SUM(retry_count) FROM "
                                         "outbox_event WHERE id IN (SELECT id "
                                         "FROM held)"),
                     held);
    ck_assert_int_eq(log_sum(&f, 0, "lost the lease on "), held);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "SENT"), n);
    struct tally t;
    tally_init(&t, "fence", n, n);
    receive_all(f.it.consumer, &t, 30000, 300);
    ck_assert_int_eq(t.distinct, n);
    fprintf(stderr, "fencing: %ld duplicates\n", t.total - t.distinct);
    tally_free(&t);
    free(before);
    free(after);
    daemon_term(&f, 0, 10000);
    daemon_term(&f, 1, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 4. a row that kills the relay every time ---- */

START_TEST(test_poison_row_kills_relay)
{
    enum { N = 300, AGGS = 30 };
    struct faults_fx f;
    fx_open(&f, "#", NULL,
            "lease: 1s\nmax_retries: 3\nbatch_size: 100\npoll_interval: 20ms",
            NULL);
    insert_range(f.it.sql, "good", 0, N / 2, AGGS);
    /* a large body keeps the poison row in flight long enough to see it */
    it_db_exec(f.it.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                         "aggregate_id, event_type, payload) VALUES ('poison', "
                         "'Poison', 'p-1', 'Crash', CONCAT('{\"pad\":\"', "
                         "REPEAT('x', 4000000), '\"}'))");
    insert_range(f.it.sql, "good", N / 2, N / 2, AGGS);
    daemon_start(&f, 0);
    /*
     * The watcher: whenever the poison row is under a new claim, lock it
     * (the relay can then never record it) and kill the relay.  FOR
     * UPDATE waits out the claim's own transaction, so a claim is seen
     * as soon as it commits.
     */
    int kills = 0;
    char *last_token = NULL;
    uint64_t deadline = it_now_ms() + 60000;
    for (;;) {
        ck_assert_msg(it_now_ms() < deadline, "poison row not DEAD in time");
        it_db_exec(f.it.sql, "START TRANSACTION");
        char *status = it_db_str(f.it.sql, "SELECT CONCAT(status, ' ', "
                                           "COALESCE(locked_by, '')) FROM "
                                           "outbox_event WHERE event_id = "
                                           "'poison' FOR UPDATE");
        bool claimed = strncmp(status, "PROCESSING ", 11) == 0 &&
                       (last_token == NULL || strcmp(status, last_token) != 0);
        if (claimed) {
            daemon_kill9(&f, 0);
            kills++;
            free(last_token);
            last_token = strdup(status);
        }
        it_db_exec(f.it.sql, "ROLLBACK");
        bool dead = strncmp(status, "DEAD", 4) == 0;
        ck_assert_msg(strncmp(status, "SENT", 4) != 0,
                      "the poison row was SENT: the watcher missed a claim");
        free(status);
        if (dead)
            break;
        if (claimed)
            daemon_start(&f, 0);
        it_sleep_ms(1);
    }
    free(last_token);
    char *err = row_field(&f, "poison", "last_error");
    fprintf(stderr, "poison: DEAD after %d kills: %s\n", kills, err);
    ck_assert_msg(err && strstr(err, "lease expired"), "%s",
                  err ? err : "(null)");
    free(err);
    ck_assert_int_eq(kills, 4);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT retry_count FROM outbox_event "
                                         "WHERE event_id = 'poison'"),
                     4);
    if (!IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == N)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d good events SENT, %lld DEAD",
                     it_db_count_status(f.it.sql, "SENT"), N,
                     it_db_count_status(f.it.sql, "DEAD"));
    }
    /* the good rows claimed beside it paid at most the first crash */
    ck_assert_int_le(it_db_int(f.it.sql, "SELECT MAX(retry_count) FROM "
                                         "outbox_event WHERE status = 'SENT'"),
                     1);
    struct it_message m;
    struct tally t;
    tally_init(&t, "good", N, AGGS);
    uint64_t until = it_now_ms() + 30000;
    while (t.distinct < N && it_now_ms() < until) {
        if (it_consumer_next(f.it.consumer, &m, 500) == 0)
            continue;
        if (strcmp(m.message_id, "poison") != 0)
            tally_add(&t, &m);
        it_message_free(&m);
    }
    ck_assert_int_eq(t.distinct, N);
    tally_free(&t);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 5. the broker blackholed: SIGSTOP of the RabbitMQ node ---- */

/* Rows a relay's batch holds: PROCESSING under a lease, or PENDING and
 * locked by a lean batch's open transaction (what a locking read that
 * skips locked rows does not see). */
static long long
rows_in_flight(struct faults_fx *f)
{
    it_db_exec(f->it.sql, "START TRANSACTION");
    long long free_pending = it_db_int(
        f->it.sql, "SELECT COUNT(*) FROM (SELECT id FROM outbox_event "
                   "WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED) x");
    it_db_exec(f->it.sql, "ROLLBACK");
    return it_db_count_status(f->it.sql, "PROCESSING") +
           it_db_count_status(f->it.sql, "PENDING") - free_pending;
}

START_TEST(test_broker_blackholed)
{
    enum { N = 1500 };
    struct faults_fx f;
    struct guard g;
    fx_open(&f, "#", "confirm_timeout: 20s\nconnect_timeout: 2s",
            "lease: 30s\npoll_interval: 50ms", "4s");
    pid_t beam = beam_pid();
    guard_start(&g, "kill -CONT %d; " SERVERS_START, (int)beam,
                it_src_path("tests/servers.sh"));
    insert_range(f.it.sql, "hole", 0, 500, 50);
    daemon_start(&f, 0);
    ck_assert(IT_WAIT(20000, it_db_count_status(f.it.sql, "SENT") == 500));
    ck_assert_int_eq(kill(beam, SIGSTOP), 0);
    insert_range(f.it.sql, "hole", 500, 500, 50);
    /* the relay publishes into the silence and waits for confirms */
    ck_assert(IT_WAIT(10000, rows_in_flight(&f) > 0));
    it_sleep_ms(1000);
    uint64_t took = daemon_term(&f, 0, 4500);
    fprintf(stderr,
            "blackhole: SIGTERM exited 0 after %llu ms "
            "(shutdown_timeout 4s)\n",
            (unsigned long long)took);
    /* it recorded what it could not publish instead of leaving a lease */
    ck_assert_int_eq(it_db_count_status(f.it.sql, "PROCESSING"), 0);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "SENT"), 500);
    /* a relay started into the silence recovers by itself once it ends */
    daemon_start(&f, 0);
    insert_range(f.it.sql, "hole", 1000, 500, 50);
    it_sleep_ms(3000);
    ck_assert(it_daemon_alive(&f.r[0].d));
    ck_assert_int_eq(kill(beam, SIGCONT), 0);
    guard_end(&g);
    if (!IT_WAIT(60000, it_db_count_status(f.it.sql, "SENT") == N)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d SENT", it_db_count_status(f.it.sql, "SENT"),
                     N);
    }
    struct tally t;
    tally_init(&t, "hole", N, 50);
    receive_all(f.it.consumer, &t, 30000, 300);
    ck_assert_int_eq(t.distinct, N);
    fprintf(stderr, "blackhole: %ld duplicates\n", t.total - t.distinct);
    tally_free(&t);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 6. the broker blocks publishing (memory alarm) ---- */

START_TEST(test_broker_blocked)
{
    enum { N = 400 };
    struct faults_fx f;
    struct guard g;
    char watermark[64];
    fx_open(&f, "#", "confirm_timeout: 2s",
            "lease: 10s\npoll_interval: 50ms\nmax_retries: 1", NULL);
    rabbit_eval("vm_memory_monitor:get_vm_memory_high_watermark().", watermark,
                sizeof(watermark));
    ck_assert_msg(strtod(watermark, NULL) > 0, "watermark %s", watermark);
    guard_start(&g, "rabbitmqctl -q set_vm_memory_high_watermark %s",
                watermark);
    insert_range(f.it.sql, "blk", 0, 100, 20);
    daemon_start(&f, 0);
    ck_assert(IT_WAIT(20000, it_db_count_status(f.it.sql, "SENT") == 100));
    /* a watermark of 0 raises the memory alarm at once */
    ck_assert_int_eq(it_sh("rabbitmqctl -q set_vm_memory_high_watermark 0"), 0);
    insert_range(f.it.sql, "blk", 100, N - 100, 20);
    ck_assert(
        IT_WAIT(10000, log_count(&f, 0, "broker blocked publishing") > 0));
    /* several confirm timeouts later: no attempt burnt, nothing claimed */
    it_sleep_ms(5000);
    long long retries = it_db_int(f.it.sql, "SELECT COALESCE(SUM(retry_count), "
                                            "0) FROM outbox_event");
    long long processing = it_db_count_status(f.it.sql, "PROCESSING");
    long long sent = it_db_count_status(f.it.sql, "SENT");
    guard_end(&g);
    if (retries != 0 || processing != 0)
        dump_logs(&f);
    ck_assert_int_eq(retries, 0);
    ck_assert_int_eq(processing, 0);
    ck_assert_int_eq(sent, 100);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "RETRY") +
                         it_db_count_status(f.it.sql, "DEAD"),
                     0);
    /* the alarm cleared: everything flows */
    if (!IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == N)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d SENT", it_db_count_status(f.it.sql, "SENT"),
                     N);
    }
    struct tally t;
    tally_init(&t, "blk", N, 20);
    receive_all(f.it.consumer, &t, 30000, 300);
    ck_assert_int_eq(t.distinct, N);
    tally_free(&t);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* ---- 7. the database lost after the confirms, before the marks ---- */

/*
 * The relay's broker path runs through px, the broker's replies held
 * back while the test locks the batch: the relay claims and publishes,
 * and nothing it claimed can be confirmed, so recorded, before the lock
 * is in.  A batch in flight for the lock to catch was a race the relay
 * could win (large bodies confirmed between two looks at the table).
 * Leased claims (lean: false): a lean batch's rows are locked by the
 * relay's own transaction, which no other session can take from it.
 */
static void
fx_open_held(struct faults_fx *f, struct it_proxy *px, const char *outbox_keys)
{
    char urls[128];
    it_proxy_start(px, 5672);
    snprintf(urls, sizeof(urls), "urls: [\"amqp://guest:guest@127.0.0.1:%u/\"]",
             px->port);
    char *keys = xasprintf("%s\nlean: false", outbox_keys);
    fx_open(f, "#", urls, keys, NULL);
    free(keys);
    daemon_start(f, 0);
    ck_assert(IT_WAIT(20000, log_count(f, 0, "broker connected") > 0));
    px->stall_replies = true;
}

/*
 * Locks the rows the relay claimed, as soon as they are committed, lets
 * the broker's replies through, and returns the relay's session once its
 * finalize waits for the lock (NULL if it never did).
 */
static char *
lock_claimed_rows(struct faults_fx *f, struct it_proxy *px, long long *locked)
{
    uint64_t deadline = it_now_ms() + 20000;
    while (it_db_count_status(f->it.sql, "PROCESSING") == 0 &&
           it_now_ms() < deadline)
        it_sleep_ms(1);
    it_db_exec(f->it.sql, "START TRANSACTION");
    *locked = it_db_int(f->it.sql, "SELECT COUNT(*) FROM (SELECT id FROM "
                                   "outbox_event WHERE status = 'PROCESSING' "
                                   "FOR UPDATE) x");
    px->stall_replies = false;
    ck_assert_msg(*locked > 0, "no claimed batch to lock");
    /* The relay's session has no default schema: its statement names
     * the table by schema. */
    char *session = NULL;
    bool waiting = IT_WAIT(
        20000, (free(session),
                session = it_db_str(f->it.sql,
                                    "SELECT ID FROM information_schema."
                                    "PROCESSLIST WHERE ID <> CONNECTION_ID() "
                                    "AND INFO LIKE 'UPDATE `%s`%%SENT%%'",
                                    f->it.db)) != NULL);
    if (!waiting) {
        dump_logs(f);
        it_sh("mariadb -h127.0.0.1 -u%s -p%s -e 'SHOW FULL PROCESSLIST' >&2",
              IT_DB_USER, IT_DB_PASSWORD);
    }
    ck_assert_msg(waiting, "the relay never tried to record the batch");
    return session;
}

START_TEST(test_db_lost_at_finalize)
{
    /* One batch: a relay's first claim asks for 32 rows at most, until it
     * has seen how large they are (store_claim.c, claim_window). */
    enum { N = 32 };
    struct faults_fx f;
    struct it_proxy px;
    fx_open_held(&f, &px, "lease: 2s\nbatch_size: 40\npoll_interval: 20ms");
    it_db_insert_events(f.it.sql, "outbox_event", "lost", N, N, 200000);
    it_db_exec(f.it.sql, "COMMIT");
    long long locked;
    char *session = lock_claimed_rows(&f, &px, &locked);
    /* the database goes away for that session: error 2013 */
    it_db_exec(f.it.sql, "KILL CONNECTION %s", session);
    free(session);
    it_db_exec(f.it.sql, "ROLLBACK");
    if (!IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == N)) {
        dump_logs(&f);
        ck_abort_msg("%lld of %d SENT", it_db_count_status(f.it.sql, "SENT"),
                     N);
    }
    ck_assert_int_ge(log_count(&f, 0, "could not record the outcome"), 1);
    struct tally t;
    tally_init(&t, "lost", N, N);
    receive_all(f.it.consumer, &t, 20000, 500);
    ck_assert_int_eq(t.distinct, N);
    /* the confirmed but unrecorded events went out again after the lease */
    fprintf(stderr, "db lost at finalize: %lld locked, %ld duplicates\n",
            locked, t.total - t.distinct);
    ck_assert_int_ge(t.total - t.distinct, locked);
    tally_free(&t);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
    it_proxy_stop(&px);
}
END_TEST

/*
 * Every one of the n events "<prefix>-<i>" SENT with no attempt failed,
 * and consumed exactly once: nothing went out again after a lease.
 */
static void
assert_all_sent_once(struct faults_fx *f, const char *prefix, int n)
{
    if (!IT_WAIT(30000, it_db_count_status(f->it.sql, "SENT") == n)) {
        dump_logs(f);
        ck_abort_msg("%lld of %d SENT", it_db_count_status(f->it.sql, "SENT"),
                     n);
    }
    ck_assert_int_eq(it_db_int(f->it.sql, "SELECT MAX(retry_count) FROM "
                                          "outbox_event"),
                     0);
    struct tally t;
    tally_init(&t, prefix, n, n);
    receive_all(f->it.consumer, &t, 20000, 500);
    ck_assert_int_eq(t.distinct, n);
    ck_assert_int_eq(t.total, n);
    tally_free(&t);
}

/* A lock wait timeout (1205) at finalize is retried: no loss, no dup. */
START_TEST(test_lock_wait_at_finalize)
{
    enum { N = 32 }; /* one batch, as above */
    struct faults_fx f;
    struct it_proxy px;
    fx_open_held(&f, &px, "batch_size: 40\npoll_interval: 20ms");
    it_db_insert_events(f.it.sql, "outbox_event", "wait", N, N, 200000);
    it_db_exec(f.it.sql, "COMMIT");
    long long locked;
    char *session = lock_claimed_rows(&f, &px, &locked);
    /* the relay's session waits 1 s for a row lock: hold it longer, so
     * that its record fails and a later cycle's is the one that lands */
    it_sleep_ms(3000);
    it_db_exec(f.it.sql, "ROLLBACK");
    free(session);
    assert_all_sent_once(&f, "wait", N); /* recorded on the retry: no dup */
    ck_assert_int_eq(log_count(&f, 0, "could not record"), 0);
    /* and it was a retry: the record met the lock wait (1205) and waited
     * for the next cycle, rather than waiting out the lock itself */
    ck_assert_int_ge(log_count(&f, 0, "Lock wait timeout exceeded"), 1);
    ck_assert_int_ge(log_count(&f, 0, "waits for the next cycle"), 1);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
    it_proxy_stop(&px);
}
END_TEST

/*
 * A column dropped while the relay records one batch and publishes the
 * next: the claim ahead fails on it, and the batch in flight is still
 * recorded, not sent again after its lease.  The drop waits for the
 * metadata lock behind the held record; the claim ahead waits behind
 * the drop.
 */
START_TEST(test_claim_ahead_fails_on_dropped_column)
{
    enum { N = 120 };
    struct faults_fx f;
    struct it_proxy px;
    fx_open_held(&f, &px, "lease: 5s\nbatch_size: 40\npoll_interval: 20ms");
    it_db_insert_events(f.it.sql, "outbox_event", "drop", N, N, 100000);
    it_db_exec(f.it.sql, "COMMIT");
    /* Rows alone, no gaps: the claim ahead must not wait for the test. */
    it_db_exec(f.it.sql,
               "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    long long locked;
    free(lock_claimed_rows(&f, &px, &locked));
    it_sh("mariadb -h127.0.0.1 -u%s -p%s %s -e 'ALTER TABLE outbox_event "
          "DROP COLUMN trace_id' >/dev/null 2>&1 &",
          IT_DB_USER, IT_DB_PASSWORD, f.it.db);
    ck_assert(
        IT_WAIT(10000, it_db_int(f.it.sql,
                                 "SELECT COUNT(*) FROM information_schema."
                                 "PROCESSLIST WHERE DB = '%s' AND INFO LIKE "
                                 "'ALTER TABLE outbox_event%%' AND STATE "
                                 "LIKE '%%metadata lock%%'",
                                 f.it.db) == 1));
    it_db_exec(f.it.sql, "ROLLBACK");
    assert_all_sent_once(&f, "drop", N);
    /* the claim ahead's error, reported as it was */
    ck_assert_int_ge(log_count(&f, 0, "Unknown column"), 1);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
    it_proxy_stop(&px);
}
END_TEST

/* ---- 8. bad rows (docs/contract.md section 9) among good ones ---- */

struct expect {
    const char *event_id;
    const char *status;
    const char *error; /* in last_error, for DEAD rows */
};

static void
insert_bad_rows(struct faults_fx *f)
{
    /* 'good' rows around each bad one, bad ones mid-wave */
    insert_range(f->it.sql, "good", 0, 100, 100);
    it_db_exec(
        f->it.sql,
        "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, "
        "event_type, payload) VALUES "
        "('null-payload', 'Bad', 'b-1', 'T', NULL), "
        "('empty-payload', 'Bad', 'b-2', 'T', ''), "
        "('not-json', 'Bad', 'b-3', 'T', 'not json {'), "
        "('binary', 'Bad', 'b-4', 'T', X'00ff00c328'), "
        "(NULL, 'Bad', 'b-5', 'T', '{}'), "
        "('after-null-id', 'Bad', 'b-5', 'T', '{}'), "
        "('dup-1', 'Bad', 'b-6', 'T', '{\"first\":true}'), "
        "('dup-1', 'Bad', 'b-7', 'T', '{\"first\":false}'), "
        "('too-large', 'Bad', 'b-8', 'T', REPEAT('x', 100000)), "
        "('after-too-large', 'Bad', 'b-8', 'T', '{}')");
    insert_range(f->it.sql, "good", 100, 100, 100);
}

START_TEST(test_bad_rows)
{
    enum { N = 200 };
    struct faults_fx f;
    struct guard g;
    char limit[64];
    fx_open(&f, "#", NULL,
            "max_retries: 2\npoll_interval: 20ms\n"
            "backoff: { initial: 100ms, max: 200ms }",
            NULL);
    /* a plain index on event_id: duplicates across claims are found */
    it_db_exec(f.it.sql,
               "ALTER TABLE outbox_event MODIFY payload LONGBLOB "
               "NULL, MODIFY event_id VARCHAR(64) NULL, DROP INDEX "
               "uk_outbox_event_id, ADD INDEX idx_event_id (event_id)");
    rabbit_eval("application:get_env(rabbit, max_message_size).", limit,
                sizeof(limit));
    long orig = strtol(limit + strcspn(limit, "0123456789"), NULL, 10);
    ck_assert_msg(orig > 0, "max_message_size: %s", limit);
    guard_start(&g,
                "rabbitmqctl -q eval 'application:set_env(rabbit, "
                "max_message_size, %ld).' >/dev/null",
                orig);
    ck_assert_int_eq(it_sh("rabbitmqctl -q eval 'application:set_env(rabbit, "
                           "max_message_size, 65536).' >/dev/null"),
                     0);
    insert_bad_rows(&f);
    daemon_start(&f, 0);
    static const struct expect want[] = {
        {"null-payload", "SENT", NULL},  {"empty-payload", "SENT", NULL},
        {"not-json", "SENT", NULL},      {"binary", "SENT", NULL},
        {"after-null-id", "SENT", NULL}, {"after-too-large", "SENT", NULL},
        {"too-large", "DEAD", "65536"},
    };
    bool done = IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == N + 7 &&
                                   it_db_count_status(f.it.sql, "DEAD") == 3);
    guard_end(&g);
    /* the first dup-1 is long SENT: a third one, in a later claim */
    it_db_exec(f.it.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                         "aggregate_id, event_type, payload) VALUES ('dup-1', "
                         "'Bad', 'b-9', 'T', '{\"first\":false}')");
    it_db_exec(f.it.sql, "COMMIT");
    done = done && IT_WAIT(10000, it_db_count_status(f.it.sql, "DEAD") == 4);
    if (!done)
        dump_logs(&f);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "SENT"), N + 7);
    ck_assert_int_eq(it_db_count_status(f.it.sql, "DEAD"), 4);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char *st = row_field(&f, want[i].event_id,
                             "CONCAT(status, ' ', COALESCE(last_error, ''))");
        ck_assert_msg(
            st && strncmp(st, want[i].status, strlen(want[i].status)) == 0 &&
                (!want[i].error || strstr(st, want[i].error)),
            "%s: %s", want[i].event_id, st ? st : "(null)");
        free(st);
    }
    char *e = it_db_str(f.it.sql, "SELECT last_error FROM outbox_event WHERE "
                                  "event_id IS NULL AND status = 'DEAD'");
    ck_assert_msg(e && strstr(e, "NULL"), "NULL event_id: %s",
                  e ? e : "(null)");
    free(e);
    for (int k = 7; k <= 9; k += 2) {
        e = it_db_str(f.it.sql,
                      "SELECT CONCAT(status, ' ', last_error) FROM "
                      "outbox_event WHERE event_id = 'dup-1' AND "
                      "aggregate_id = 'b-%d'",
                      k);
        ck_assert_msg(e && strncmp(e, "DEAD", 4) == 0 && strstr(e, "duplicate"),
                      "dup-1 of b-%d: %s", k, e ? e : "(null)");
        free(e);
    }
    e = row_field(&f, "too-large", "last_error");
    fprintf(stderr, "bad rows: too-large: %s\n", e);
    free(e);
    /* good rows lost no attempt to the one the broker refused */
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event "
                                         "WHERE event_id LIKE 'good-%%' AND "
                                         "retry_count > 0"),
                     0);
    /* what the consumer got: every good one, the odd bodies as bytes */
    struct it_message m;
    int good = 0, got_dup = 0;
    char seen_good[N] = {0};
    while (it_consumer_next(f.it.consumer, &m, 1000) == 1) {
        const char *id = m.message_id;
        if (strncmp(id, "good-", 5) == 0) {
            long i = prefixed_number(id, "good");
            ck_assert(i >= 0 && i < N);
            good += !seen_good[i];
            seen_good[i] = 1;
        } else if (strcmp(id, "null-payload") == 0 ||
                   strcmp(id, "empty-payload") == 0) {
            ck_assert_int_eq(m.body_len, 0);
        } else if (strcmp(id, "not-json") == 0) {
            ck_assert_int_eq(m.body_len, 10);
            ck_assert(memcmp(m.body, "not json {", 10) == 0);
        } else if (strcmp(id, "binary") == 0) {
            ck_assert_int_eq(m.body_len, 5);
            ck_assert(memcmp(m.body, "\x00\xff\x00\xc3\x28", 5) == 0);
        } else if (strcmp(id, "dup-1") == 0) {
            ck_assert_str_eq(m.body, "{\"first\":true}");
            got_dup++;
        } else {
            ck_assert_msg(strcmp(id, "after-null-id") == 0 ||
                              strcmp(id, "after-too-large") == 0,
                          "unexpected message %s", id);
        }
        it_message_free(&m);
    }
    ck_assert_int_eq(good, N);
    ck_assert_int_ge(got_dup, 1);
    daemon_term(&f, 0, 10000);
    fx_close(&f);
}
END_TEST

/* One case per test, so that CK_RUN_CASE picks one; timeouts are per
 * test and generous: a shared 2-core machine drifts. */
static void
add_case(Suite *s, const char *name, const TTest *test, int timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

Suite *
it_faults_suite(void)
{
    Suite *s = suite_create("it_faults");
    add_case(s, "refusals", test_refusals_backoff_dead, 90);
    add_case(s, "bad_rows", test_bad_rows, 90);
    add_case(s, "poison", test_poison_row_kills_relay, 120);
    add_case(s, "fencing", test_fencing_stalled_relay, 120);
    add_case(s, "db_lost", test_db_lost_at_finalize, 90);
    add_case(s, "lock_wait", test_lock_wait_at_finalize, 90);
    add_case(s, "dropped_column", test_claim_ahead_fails_on_dropped_column, 90);
    add_case(s, "blocked", test_broker_blocked, 90);
    add_case(s, "blackhole", test_broker_blackholed, 120);
    add_case(s, "chaos", test_chaos_drain, 300);
    return s;
}
