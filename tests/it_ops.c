/*
 * it_ops: the operator's side against the real servers: /metrics that
 * promtool accepts and whose counters follow a drain, /readyz following
 * the broker, /healthz answering while the broker is frozen, SIGHUP
 * reloads (applied, refused, broken), and the systemd notify protocol.
 */
#define _GNU_SOURCE
#include "itest.h"
#include "itproxy.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_ops_suite(void);

/* ---- a tiny HTTP client: one GET, HTTP/1.0, the server closes ---- */

struct reply {
    int status; /* -1: no answer */
    char *body;
    uint64_t ms; /* from connect to the last byte */
};

static int
connect_local(unsigned port, int timeout_ms)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads until the server closes or the deadline passes. */
static size_t
read_all(int fd, char **buf, uint64_t deadline)
{
    size_t len = 0, cap = 16384;
    *buf = malloc(cap);
    for (;;) {
        int left = (int)(deadline > it_now_ms() ? deadline - it_now_ms() : 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left == 0 || poll(&p, 1, left) != 1)
            break;
        if (len + 4096 > cap)
            *buf = realloc(*buf, cap *= 2);
        ssize_t n = read(fd, *buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    (*buf)[len] = '\0';
    return len;
}

static struct reply
http_get(unsigned port, const char *path, int timeout_ms)
{
    struct reply r = {.status = -1};
    uint64_t t0 = it_now_ms();
    int fd = connect_local(port, timeout_ms);
    if (fd < 0)
        return r;
    char req[256], *raw;
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return r;
    }
    read_all(fd, &raw, t0 + (uint64_t)timeout_ms);
    close(fd);
    r.ms = it_now_ms() - t0;
    char *sep = strstr(raw, "\r\n\r\n");
    if (sscanf(raw, "HTTP/1.%*d %d", &r.status) != 1 || sep == NULL)
        r.status = -1;
    r.body = strdup(sep ? sep + 4 : "");
    free(raw);
    return r;
}

static int
http_status(unsigned port, const char *path)
{
    struct reply r = http_get(port, path, 2000);
    free(r.body);
    return r.status;
}

/* The value of one sample line "name{labels} value"; -1 if absent. */
static double
metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* ---- fixture ---- */

/* The shared fixture, its HTTP endpoints on, with the outbox's labels
 * and what a test may change of the broker. */
struct ops_fx {
    struct it_fx it;
    char series[160];
    char broker_url[128];        /* IT_AMQP_URL unless a test moves it */
    const char *confirm_timeout; /* "10s" */
};

/* Daemons of failed tests would outlive them: the runner kills them. */
static const char *
registry_path(void)
{
    return getenv("IT_OPS_DAEMONS");
}

static void
fx_write_config(struct ops_fx *f, const char *relay_extra,
                const char *outbox_extra)
{
    it_write_file(f->it.conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: info\n"
                  "  listen: \"127.0.0.1:%u\"\n"
                  "  shutdown_timeout: 10s\n"
                  "%s"
                  "brokers:\n"
                  "  main:\n"
                  "    url: %s\n"
                  "    heartbeat: 10s\n"
                  "    confirm_timeout: %s\n"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        exchange: \"%s\"\n"
                  "        poll_interval: 50ms\n"
                  "%s",
                  f->it.name, f->it.port, relay_extra ? relay_extra : "",
                  f->broker_url, f->confirm_timeout, f->it.db, IT_DB_USER,
                  IT_DB_PASSWORD, f->it.db, f->it.ex,
                  outbox_extra ? outbox_extra : "");
}

static void
fx_open(struct ops_fx *f, const char *outbox_extra)
{
    memset(f, 0, sizeof(*f));
    it_fx_open(&f->it, "it_ops", "sql/outbox.sql");
    snprintf(f->series, sizeof(f->series), "{outbox=\"%s.outbox_event\"}",
             f->it.db);
    f->it.port = it_free_port();
    snprintf(f->broker_url, sizeof(f->broker_url), "%s", IT_AMQP_URL);
    f->confirm_timeout = "10s";
    f->it.consumer = it_consumer_new(f->it.ex, "#");
    fx_write_config(f, NULL, outbox_extra);
}

static void
fx_start(struct ops_fx *f)
{
    it_fx_start(&f->it);
    FILE *reg = registry_path() ? fopen(registry_path(), "a") : NULL;
    if (reg != NULL) {
        fprintf(reg, "%d\n", (int)f->it.d.pid);
        fclose(reg);
    }
}

/* One series ("name{labels}") from a fresh scrape; -1 if absent. */
static double
fx_scrape(struct ops_fx *f, const char *series)
{
    struct reply r = http_get(f->it.port, "/metrics", 2000);
    double v = r.status == 200 ? metric(r.body, series) : -1;
    free(r.body);
    return v;
}

/* One sample of this outbox's family name. */
static double
fx_metric(struct ops_fx *f, const char *name)
{
    char series[256];
    snprintf(series, sizeof(series), "%s%s", name, f->series);
    return fx_scrape(f, series);
}

/* The sample of this outbox's family name whose label has value. */
static double
fx_labeled(struct ops_fx *f, const char *name, const char *label,
           const char *value)
{
    char series[256];
    snprintf(series, sizeof(series), "%s{outbox=\"%s.outbox_event\",%s=\"%s\"}",
             name, f->it.db, label, value);
    return fx_scrape(f, series);
}

static double
fx_rows(struct ops_fx *f, const char *status)
{
    return fx_labeled(f, "outboxd_rows", "status", status);
}

static bool
log_has(struct ops_fx *f, const char *needle)
{
    FILE *fp = fopen(f->it.d.log_path, "r");
    char line[4096];
    bool found = false;
    while (fp && !found && fgets(line, sizeof(line), fp))
        found = strstr(line, needle) != NULL;
    if (fp)
        fclose(fp);
    return found;
}

static void
fx_wait_ready(struct ops_fx *f)
{
    if (!IT_WAIT(30000, http_status(f->it.port, "/readyz") == 200)) {
        it_daemon_dump_log(&f->it.d);
        ck_abort_msg("/readyz did not turn 200");
    }
}

/*
 * Receives until n distinct events of prefix arrived, then for as long
 * as more come within linger_ms (0: not at all); the messages received in
 * all, duplicates counted.  Fails on a stray id or fewer than n.
 */
static int
receive_counted(struct ops_fx *f, const char *prefix, int n, int timeout_ms,
                int linger_ms)
{
    char *seen = calloc((size_t)n, 1);
    int distinct = 0, total = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    size_t plen = strlen(prefix);
    while (distinct < n || linger_ms > 0) {
        int wait = distinct < n ? 500 : linger_ms;
        if (it_consumer_next(f->it.consumer, &m, wait) == 0) {
            if (distinct == n || it_now_ms() > deadline)
                break;
            continue;
        }
        if (strncmp(m.message_id, prefix, plen) == 0 &&
            m.message_id[plen] == '-') {
            long i = strtol(m.message_id + plen + 1, NULL, 10);
            ck_assert_msg(i >= 0 && i < n, "stray %s", m.message_id);
            distinct += !seen[i];
            seen[i] = 1;
            total++;
        }
        it_message_free(&m);
    }
    free(seen);
    ck_assert_int_eq(distinct, n);
    return total;
}

/* Receives until n distinct events arrived; fails on a duplicate. */
static void
receive_exactly(struct ops_fx *f, const char *prefix, int n, int timeout_ms)
{
    int total = receive_counted(f, prefix, n, timeout_ms, 0);
    ck_assert_msg(total == n, "%d messages for %d events %s-*: duplicates",
                  total, n, prefix);
}

/* ---- /metrics ---- */

static void
check_promtool(struct ops_fx *f)
{
    char path[300];
    struct reply r = http_get(f->it.port, "/metrics", 2000);
    ck_assert_int_eq(r.status, 200);
    snprintf(path, sizeof(path), "/tmp/%s.metrics", f->it.name);
    it_write_file(path, "%s", r.body);
    int rc = it_sh("promtool check metrics < '%s'", path);
    if (rc != 0)
        fprintf(stderr, "%s", r.body);
    ck_assert_msg(rc == 0, "promtool check metrics failed (%d)", rc);
    unlink(path);
    free(r.body);
}

/* The metric names conf/outboxd-alerts.yml uses, each in the scrape:
 * an alert on a name outboxd does not export would never fire. */
static void
check_alert_names(struct ops_fx *f)
{
    FILE *fp = fopen(it_src_path("conf/outboxd-alerts.yml"), "r");
    ck_assert_ptr_nonnull(fp);
    struct reply r = http_get(f->it.port, "/metrics", 2000);
    ck_assert_int_eq(r.status, 200);
    char line[1024], name[128], labeled[160], bare[160];
    int names = 0;
    while (fgets(line, sizeof(line), fp)) {
        for (const char *p = line; (p = strstr(p, "outboxd_")) != NULL;) {
            size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
            snprintf(name, sizeof(name), "%.*s", (int)n, p);
            snprintf(labeled, sizeof(labeled), "\n%s{", name);
            snprintf(bare, sizeof(bare), "\n%s ", name);
            ck_assert_msg(strstr(r.body, labeled) || strstr(r.body, bare),
                          "conf/outboxd-alerts.yml uses %s, not in /metrics",
                          name);
            names++;
            p += n;
        }
    }
    fclose(fp);
    free(r.body);
    ck_assert_int_gt(names, 7);
}

/* The dashboard against this scrape: every metric, label and label
 * value its panels select is one outboxd serves (a panel on a name it
 * does not export would stay empty). */
static void
check_dashboard(struct ops_fx *f)
{
    char path[300];
    struct reply r = http_get(f->it.port, "/metrics", 2000);
    ck_assert_int_eq(r.status, 200);
    snprintf(path, sizeof(path), "/tmp/%s.dashboard.metrics", f->it.name);
    it_write_file(path, "%s", r.body);
    /* The script finds conf/outboxd-dashboard.json beside itself. */
    int rc = it_sh("python3 '%s' --metrics '%s'",
                   it_src_path("scripts/dashboard-check.py"), path);
    ck_assert_msg(rc == 0, "scripts/dashboard-check.py failed (%d) on %s", rc,
                  path);
    unlink(path);
    free(r.body);
}

START_TEST(test_metrics_follow_drain)
{
    struct ops_fx f;
    fx_open(&f, NULL);
    fx_start(&f);
    fx_wait_ready(&f);
    ck_assert_int_eq(http_status(f.it.port, "/healthz"), 200);
    ck_assert_int_eq(http_status(f.it.port, "/nope"), 404);
    ck_assert(fx_metric(&f, "outboxd_events_published_total") == 0);

    it_db_insert_events(f.it.sql, "outbox_event", "a", 1000, 50, 128);
    ck_assert(IT_WAIT(60000,
                      fx_metric(&f, "outboxd_events_published_total") == 1000));
    it_db_insert_events(f.it.sql, "outbox_event", "b", 2000, 50, 128);
    ck_assert(IT_WAIT(60000,
                      fx_metric(&f, "outboxd_events_published_total") == 3000));
    receive_exactly(&f, "a", 1000, 30000);
    receive_exactly(&f, "b", 2000, 30000);
    ck_assert(fx_metric(&f, "outboxd_commit_to_confirm_seconds_count") == 3000);
    ck_assert(fx_metric(&f, "outboxd_batch_duration_seconds_count") >= 2);
    ck_assert(fx_metric(&f, "outboxd_events_failed_total") == 0);
    ck_assert(fx_metric(&f, "outboxd_database_connected") == 1);
    ck_assert(fx_metric(&f, "outboxd_broker_connected") == 1);
    ck_assert(fx_metric(&f, "outboxd_broker_blocked") == 0);

    /* The gauges count the table every 5 s.  A PENDING event held back
     * by a RETRY one of its aggregate due in an hour stays pending. */
    it_db_exec(f.it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, "
               "retry_count, next_retry_at, created_at) VALUES "
               "('held-0', 'Order', 'held', 'T', '{}', 'RETRY', 1, "
               "NOW(6) + INTERVAL 1 HOUR, NOW(6) - INTERVAL 3 MINUTE),"
               "('held-1', 'Order', 'held', 'T', '{}', 'PENDING', 0, "
               "NULL, NOW(6) - INTERVAL 2 MINUTE),"
               "('dead-0', 'Order', 'dead', 'T', '{}', 'DEAD', 11, "
               "NULL, NOW(6))");
    ck_assert(IT_WAIT(15000, fx_rows(&f, "DEAD") == 1 &&
                                 fx_rows(&f, "RETRY") == 1 &&
                                 fx_rows(&f, "PENDING") == 1));
    ck_assert(fx_rows(&f, "PROCESSING") == 0);
    ck_assert(fx_rows(&f, "SENT") == -1); /* never counted: see stats_sql */
    double age = fx_metric(&f, "outboxd_oldest_pending_age_seconds");
    ck_assert_msg(age >= 119 && age < 600, "oldest pending age %f", age);
    check_promtool(&f);
    check_alert_names(&f);
    check_dashboard(&f);
    ck_assert(it_daemon_signal_wait(&f.it.d, SIGTERM, 10000));
    ck_assert(WIFEXITED(f.it.d.status) && WEXITSTATUS(f.it.d.status) == 0);
    it_fx_close(&f.it);
}
END_TEST

/*
 * The broker's replies held back until a wave gives up on its confirms
 * (confirm_timeout), on a connection that another outbox of the thread
 * shares: its confirms come late, after the rows went to RETRY; /metrics
 * counts them, and the rows go out again: nothing is lost.  That the
 * wave's channel alone closes is it_publisher's test_shared_late_confirms.
 */
START_TEST(test_late_confirms_counted)
{
    enum { N = 20 };
    struct ops_fx f;
    struct it_proxy px;
    fx_open(&f, NULL);
    it_db_exec(f.it.sql, "CREATE TABLE outbox_idle LIKE outbox_event");
    it_proxy_start(&px, 5672);
    snprintf(f.broker_url, sizeof(f.broker_url),
             "amqp://guest:guest@127.0.0.1:%u/", px.port);
    f.confirm_timeout = "1s";
    fx_write_config(&f, "  workers: 1\n",
                    "        batch_size: 40\n"
                    "      - table: outbox_idle\n");
    fx_start(&f);
    fx_wait_ready(&f);
    /* One event first: the exchange checked and a channel open, so the
     * next wave publishes before it waits for anything. */
    it_db_insert_events(f.it.sql, "outbox_event", "first", 1, 1, 64);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 1));
    px.stall_replies = true;
    it_db_insert_events(f.it.sql, "outbox_event", "late", N, N, 64);
    /* The wave gives up: its channel closes, the connection stays for
     * the other outbox, and the confirms come once replies flow again. */
    if (!IT_WAIT(30000, log_has(&f, "no confirm within 1s"))) {
        it_daemon_dump_log(&f.it.d);
        ck_abort_msg("the wave never gave up");
    }
    ck_assert(fx_metric(&f, "outboxd_confirms_late_total") == 0);
    px.stall_replies = false;
    ck_assert(
        IT_WAIT(30000, fx_metric(&f, "outboxd_confirms_late_total") >= 1));
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == N + 1));
    /* Its rows went to RETRY, and out again: each twice. */
    ck_assert(fx_metric(&f, "outboxd_events_retried_total") >= N);
    ck_assert_int_ge(receive_counted(&f, "late", N, 30000, 1000), 2 * N);
    ck_assert(it_daemon_signal_wait(&f.it.d, SIGTERM, 10000));
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

/* A listen address somebody holds: logged, exit 1, nothing claimed. */
START_TEST(test_listen_in_use_is_fatal)
{
    struct ops_fx f;
    fx_open(&f, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(f.it.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    it_db_insert_events(f.it.sql, "outbox_event", "busy", 10, 10, 64);
    fx_start(&f);
    ck_assert(IT_WAIT(10000, !it_daemon_alive(&f.it.d)));
    ck_assert(WIFEXITED(f.it.d.status) && WEXITSTATUS(f.it.d.status) == 1);
    ck_assert(log_has(&f, "Address already in use"));
    ck_assert_int_eq(it_db_count_status(f.it.sql, "PENDING"), 10);
    close(fd);
    it_fx_close(&f.it);
}
END_TEST

/* ---- broker faults: /readyz and /healthz ---- */

/* Polls path until it answers want; its body, or NULL at the timeout. */
static char *
wait_for_status(unsigned port, const char *path, int want, int timeout_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct reply r = http_get(port, path, 2000);
        if (r.status == want)
            return r.body;
        free(r.body);
        if (it_now_ms() >= deadline)
            return NULL;
        it_sleep_ms(100);
    }
}

static bool
rabbit_up(void)
{
    return it_sh("rabbitmqctl -q await_startup >/dev/null 2>&1") == 0;
}

/* The Erlang VM's pid, from the pid file tests/servers.sh gives it. */
static pid_t
beam_pid(void)
{
    char comm[64] = "", path[64];
    long pid = 0;
    FILE *fp = fopen("/run/rabbitmq/pid", "r");
    if (fp == NULL || fscanf(fp, "%ld", &pid) != 1)
        pid = 0;
    if (fp)
        fclose(fp);
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    fp = pid > 0 ? fopen(path, "r") : NULL;
    if (fp && fgets(comm, sizeof(comm), fp) == NULL)
        comm[0] = '\0';
    if (fp)
        fclose(fp);
    if (strncmp(comm, "beam.smp", 8) == 0)
        return (pid_t)pid;
    fp = popen("pidof -s beam.smp", "r");
    if (fp == NULL || fscanf(fp, "%ld", &pid) != 1)
        pid = 0;
    if (fp)
        pclose(fp);
    return (pid_t)pid;
}

START_TEST(test_readyz_follows_broker)
{
    struct ops_fx f;
    fx_open(&f, NULL);
    fx_start(&f);
    fx_wait_ready(&f);
    ck_assert_int_eq(it_sh("rabbitmqctl -q stop_app"), 0);
    char *body = wait_for_status(f.it.port, "/readyz", 503, 30000);
    ck_assert_msg(body != NULL, "/readyz stayed 200 with the broker stopped");
    ck_assert_msg(strstr(body, "broker not connected") && strstr(body, f.it.db),
                  "body: %s", body);
    free(body);
    ck_assert(fx_metric(&f, "outboxd_broker_connected") == 0);
    ck_assert(fx_metric(&f, "outboxd_database_connected") == 1);
    ck_assert_int_eq(http_status(f.it.port, "/healthz"), 200);
    ck_assert_int_eq(it_sh("rabbitmqctl -q start_app"), 0);
    ck_assert(IT_WAIT(60000, rabbit_up()));
    fx_wait_ready(&f);
    ck_assert(fx_metric(&f, "outboxd_broker_connected") == 1);
    it_fx_close(&f.it);
}
END_TEST

/* Health and metrics come from the main loop, never from a worker
 * stuck waiting on a broker that does not answer. */
START_TEST(test_healthz_while_broker_frozen)
{
    enum { N = 20000 };
    struct ops_fx f;
    fx_open(&f, "        batch_size: 1000\n");
    it_db_insert_events(f.it.sql, "outbox_event", "frz", N, 200, 256);
    fx_start(&f);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.it.sql, "SENT") >= 1000));
    pid_t beam = beam_pid();
    ck_assert_int_gt(beam, 0);
    ck_assert_int_eq(kill(beam, SIGSTOP), 0);
    uint64_t worst = 0, until = it_now_ms() + 3000;
    const char *paths[] = {"/healthz", "/metrics", "/readyz"};
    for (int i = 0; it_now_ms() < until; i++) {
        struct reply r = http_get(f.it.port, paths[i % 3], 2000);
        bool ok = r.status == 200 || (i % 3 == 2 && r.status == 503);
        free(r.body);
        if (!ok || r.ms > worst)
            worst = ok ? r.ms : 9999;
        it_sleep_ms(100);
    }
    long long sent = it_db_count_status(f.it.sql, "SENT");
    kill(beam, SIGCONT);
    fprintf(stderr, "broker frozen: slowest HTTP answer %llu ms\n",
            (unsigned long long)worst);
    /* rows were left: the worker was stuck on the broker meanwhile */
    ck_assert_msg(sent < N, "the drain ended before the broker froze");
    ck_assert_msg(worst < 100, "slowest answer while frozen: %llu ms",
                  (unsigned long long)worst);
    /* and the drain finishes once the broker thaws */
    ck_assert(IT_WAIT(120000, it_db_count_status(f.it.sql, "SENT") == N));
    it_fx_close(&f.it);
}
END_TEST

/* Seconds the relay waited on one server, from a fresh scrape. */
static double
fx_wait(struct ops_fx *f, const char *on)
{
    return fx_labeled(f, "outboxd_wait_seconds_total", "on", on);
}

/*
 * outboxd_wait_seconds_total names the server that holds the relay up,
 * while it does: a table locked by another session holds up the claims
 * (database), a frozen broker the confirms (broker).  Each hold lasts
 * until the scrapes show a second and a half of it.
 */
START_TEST(test_wait_names_the_pace)
{
    enum { N = 20000 };
    struct ops_fx f;
    fx_open(&f, "        batch_size: 1000\n");
    fx_start(&f);
    fx_wait_ready(&f);
    double db0 = fx_wait(&f, "database"), br0 = fx_wait(&f, "broker");
    ck_assert(db0 >= 0 && br0 >= 0);
    it_db_exec(f.it.sql, "LOCK TABLES outbox_event WRITE");
    bool held = IT_WAIT(10000, fx_wait(&f, "database") - db0 >= 1.5);
    double br1 = fx_wait(&f, "broker");
    it_db_exec(f.it.sql, "UNLOCK TABLES");
    ck_assert_msg(held, "database wait %.3f s with the table locked",
                  fx_wait(&f, "database") - db0);
    ck_assert_msg(br1 - br0 < 0.1, "broker wait %.3f s", br1 - br0);

    it_db_insert_events(f.it.sql, "outbox_event", "pace", N, 200, 256);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.it.sql, "SENT") >= 1000));
    pid_t beam = beam_pid();
    ck_assert_int_gt(beam, 0);
    double db1 = fx_wait(&f, "database");
    br1 = fx_wait(&f, "broker");
    kill(beam, SIGSTOP);
    held = IT_WAIT(10000, fx_wait(&f, "broker") - br1 >= 1.5);
    double db2 = fx_wait(&f, "database");
    kill(beam, SIGCONT); /* before any assertion: the broker is shared */
    ck_assert_msg(held, "broker wait %.3f s with the broker frozen",
                  fx_wait(&f, "broker") - br1);
    ck_assert_msg(db2 - db1 < 0.5, "database wait %.3f s", db2 - db1);
    ck_assert(IT_WAIT(120000, it_db_count_status(f.it.sql, "SENT") == N));
    receive_exactly(&f, "pace", N, 60000);
    it_fx_close(&f.it);
}
END_TEST

/* ---- SIGHUP ---- */

static double
batches(struct ops_fx *f)
{
    return fx_metric(f, "outboxd_batches_total");
}

START_TEST(test_sighup_applies_batch_size)
{
    struct ops_fx f;
    fx_open(&f, "        batch_size: 1000\n");
    fx_start(&f);
    fx_wait_ready(&f);
    /* 200 rows in one INSERT: one claim takes them all */
    it_db_insert_events(f.it.sql, "outbox_event", "big", 200, 200, 64);
    ck_assert(
        IT_WAIT(30000, fx_metric(&f, "outboxd_events_published_total") == 200));
    double b0 = batches(&f);
    ck_assert_msg(b0 >= 1 && b0 <= 3, "%f batches for 200 rows", b0);

    fx_write_config(&f, NULL, "        batch_size: 10\n");
    kill(f.it.d.pid, SIGHUP);
    ck_assert(IT_WAIT(10000, log_has(&f, "batch_size: 1000 -> 10")));
    it_db_insert_events(f.it.sql, "outbox_event", "small", 200, 200, 64);
    ck_assert(
        IT_WAIT(30000, fx_metric(&f, "outboxd_events_published_total") == 400));
    double b1 = batches(&f) - b0;
    ck_assert_msg(b1 >= 20, "%f batches for 200 rows at batch_size 10", b1);

    /* a reload in the middle of a drain loses and repeats nothing */
    it_db_insert_events(f.it.sql, "outbox_event", "mid", 3000, 300, 64);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") >= 600));
    fx_write_config(&f, NULL, "        batch_size: 500\n");
    kill(f.it.d.pid, SIGHUP);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.it.sql, "SENT") == 3400));
    ck_assert(log_has(&f, "batch_size: 10 -> 500"));
    receive_exactly(&f, "big", 200, 30000);
    receive_exactly(&f, "small", 200, 30000);
    receive_exactly(&f, "mid", 3000, 30000);
    ck_assert(fx_metric(&f, "outboxd_events_published_total") == 3400);
    it_fx_close(&f.it);
}
END_TEST

START_TEST(test_sighup_refused_and_broken)
{
    struct ops_fx f;
    fx_open(&f, NULL);
    fx_start(&f);
    fx_wait_ready(&f);
    unsigned old_port = f.it.port;
    f.it.port = it_free_port();
    fx_write_config(&f, "  log_format: json\n", "        max_retries: 4\n");
    f.it.port = old_port;
    kill(f.it.d.pid, SIGHUP);
    ck_assert(IT_WAIT(10000, log_has(&f, "configuration reloaded")));
    ck_assert(log_has(&f, "relay.listen: cannot change without a restart"));
    ck_assert(log_has(&f, "max_retries: 10 -> 4"));
    /* log_format applied: the lines after the reload are JSON */
    ck_assert(log_has(&f, "{\"ts\":"));
    ck_assert_int_eq(http_status(f.it.port, "/healthz"), 200);

    it_write_file(f.it.conf, "relay:\n  listen: [unclosed\n");
    kill(f.it.d.pid, SIGHUP);
    ck_assert(IT_WAIT(10000, log_has(&f, "still running the previous "
                                         "configuration")));
    ck_assert(log_has(&f, f.it.conf));
    ck_assert(fx_scrape(&f, "outboxd_config_last_reload_successful") == 0);
    ck_assert(
        fx_scrape(&f, "outboxd_config_reloads_total{result=\"failure\"}") == 1);
    ck_assert(it_daemon_alive(&f.it.d));
    it_db_insert_events(f.it.sql, "outbox_event", "after", 100, 10, 64);
    receive_exactly(&f, "after", 100, 30000);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 100));
    ck_assert(it_daemon_signal_wait(&f.it.d, SIGTERM, 10000));
    ck_assert(WIFEXITED(f.it.d.status) && WEXITSTATUS(f.it.d.status) == 0);
    it_fx_close(&f.it);
}
END_TEST

/* ---- systemd ---- */

/* The next datagram that contains want, within timeout_ms. */
static bool
notify_expect(int fd, const char *want, int timeout_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    char buf[1024];
    while (it_now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - it_now_ms())) != 1)
            break;
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (strstr(buf, want) != NULL)
            return true;
    }
    return false;
}

START_TEST(test_notify_socket)
{
    struct ops_fx f;
    char name[108];
    fx_open(&f, NULL);
    /* systemd's own choice of address: an abstract socket */
    snprintf(name, sizeof(name), "@%s.notify", f.it.name);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, name + 1, strlen(name) - 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                                      strlen(name))),
                     0);
    setenv("NOTIFY_SOCKET", name, 1);
    setenv("WATCHDOG_USEC", "300000", 1);
    fx_start(&f);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    ck_assert(notify_expect(fd, "READY=1", 10000));
    for (int i = 0; i < 3; i++)
        ck_assert(notify_expect(fd, "WATCHDOG=1", 1000));
    ck_assert(notify_expect(fd, "STATUS=relaying 1 outbox", 15000));
    kill(f.it.d.pid, SIGHUP);
    ck_assert(notify_expect(fd, "RELOADING=1", 5000));
    ck_assert(notify_expect(fd, "READY=1", 5000));
    kill(f.it.d.pid, SIGTERM);
    ck_assert(notify_expect(fd, "STOPPING=1", 5000));
    ck_assert(IT_WAIT(10000, !it_daemon_alive(&f.it.d)));
    ck_assert(WIFEXITED(f.it.d.status) && WEXITSTATUS(f.it.d.status) == 0);
    close(fd);
    it_fx_close(&f.it);
}
END_TEST

/* ---- suite ---- */

static char registry[128];

/* Runs in the runner: restores what a failed test may have left. */
static void
ops_setup(void)
{
    snprintf(registry, sizeof(registry), "/tmp/it_ops_daemons_%d",
             (int)getpid());
    unlink(registry);
    setenv("IT_OPS_DAEMONS", registry, 1);
}

static void
ops_teardown(void)
{
    char path[64], comm[64];
    long pid;
    FILE *reg = fopen(registry, "r");
    while (reg && fscanf(reg, "%ld", &pid) == 1) {
        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        FILE *fp = fopen(path, "r");
        if (fp && fgets(comm, sizeof(comm), fp) &&
            strncmp(comm, "outboxd", 7) == 0)
            kill((pid_t)pid, SIGKILL);
        if (fp)
            fclose(fp);
    }
    if (reg)
        fclose(reg);
    unlink(registry);
}

static void
broker_restore(void)
{
    pid_t beam = beam_pid();
    if (beam > 0)
        kill(beam, SIGCONT);
    if (!rabbit_up())
        it_sh("rabbitmqctl -q start_app >/dev/null 2>&1");
    ops_teardown();
}

/*
 * What outboxd args wrote to stderr with JOURNAL_STREAM naming that file,
 * as systemd names the journal's stream; its exit status must be want.
 */
static char *
journal_run(const char *args, int want)
{
    char out[256], name[64];
    it_unique_name(name, sizeof(name), "it_ops_journal");
    snprintf(out, sizeof(out), "/tmp/%s.err", name);
    int rc = it_sh(": >'%s' && JOURNAL_STREAM=$(stat -c %%d:%%i '%s') '%s' %s "
                   ">/dev/null 2>>'%s'",
                   out, out, getenv("OUTBOXD_BIN"), args, out);
    char *text = it_file_read(out);
    unlink(out);
    ck_assert_msg(rc == want, "outboxd %s: exit %d, not %d:\n%s", args, rc,
                  want, text);
    return text;
}

static void
assert_lines_lead(const char *text, const char *prefix, const char *has)
{
    ck_assert_msg(strstr(text, has) != NULL, "no \"%s\" in:\n%s", has, text);
    for (const char *l = text; *l != '\0'; l = strchr(l, '\n') + 1) {
        ck_assert_msg(strncmp(l, prefix, strlen(prefix)) == 0,
                      "a line without %s:\n%s", prefix, text);
        if (strchr(l, '\n') == NULL)
            break;
    }
}

/*
 * Under systemd every line outboxd writes carries its priority from the
 * first, so that `journalctl -p err` shows why a start failed: the
 * configuration's errors, a warning before logging is set up, a bad
 * option with its usage.
 */
START_TEST(test_journal_priorities)
{
    char *text = journal_run("-c /nonexistent/missing.yaml", EXIT_CONFIG);
    assert_lines_lead(text, "<3>", "<3>/nonexistent/missing.yaml: cannot open");
    free(text);
    text = journal_run("--no-such-option", EXIT_USAGE);
    assert_lines_lead(text, "<3>", "<3>usage: outboxd");
    free(text);

    char conf[256], args[300], name[64];
    it_unique_name(name, sizeof(name), "it_ops_journal");
    snprintf(conf, sizeof(conf), "/tmp/%s.yaml", name);
    it_write_file(conf, "brokers:\n  main:\n    url: amqp://127.0.0.1:5672/\n"
                        "databases:\n  d:\n    user: u\n    password: pw\n"
                        "    database: d\n    outboxes:\n      - table: t\n");
    chmod(conf, 0644);
    snprintf(args, sizeof(args), "-t -c '%s'", conf);
    text = journal_run(args, 0);
    assert_lines_lead(text, "<4>", "readable by group or others");
    free(text);
    unlink(conf);
}
END_TEST

Suite *
it_ops_suite(void)
{
    Suite *s = suite_create("it_ops");
    TCase *tc = tcase_create("operations");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, ops_setup, ops_teardown);
    tcase_add_test(tc, test_metrics_follow_drain);
    tcase_add_test(tc, test_late_confirms_counted);
    tcase_add_test(tc, test_listen_in_use_is_fatal);
    tcase_add_test(tc, test_sighup_applies_batch_size);
    tcase_add_test(tc, test_sighup_refused_and_broken);
    tcase_add_test(tc, test_notify_socket);
    suite_add_tcase(s, tc);
    TCase *faults = tcase_create("broker_faults");
    tcase_set_timeout(faults, 300);
    tcase_add_unchecked_fixture(faults, ops_setup, broker_restore);
    tcase_add_test(faults, test_readyz_follows_broker);
    tcase_add_test(faults, test_healthz_while_broker_frozen);
    tcase_add_test(faults, test_wait_names_the_pace);
    suite_add_tcase(s, faults);
    TCase *journal = tcase_create("journal");
    tcase_add_test(journal, test_journal_priorities);
    suite_add_tcase(s, journal);
    return s;
}
