/*
 * bench_tenants: BENCH_ONLY=tenants (and the end of `make bench`).  One
 * outboxd over BENCH_TENANTS schemas tenant_0001.. on the binlog server,
 * each with sql/outbox.sql's table: its threads, connections and memory,
 * the idle cost per tenant, one event per tenant commit to consumer, and
 * a drain across all tenants as a ratio to one outbox's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

/* The relay's own account: its statements and connections are told
 * apart from every other client's by it. */
#define TENANT_USER "outboxd_tenants"
#define TENANT_TABLE "outbox_event"
#define TENANT_CONF "/tmp/outboxd-bench-tenants.yaml"
/* Tenants to a multi-statement query while setting up. */
#define SETUP_CHUNK 25
#define UNFINISHED "status IN ('PENDING','PROCESSING','RETRY')"

struct tenants {
    const struct settings *s;
    const struct server *sv;
    long n;
    bool pattern;    /* one database_like entry, else one entry each */
    long events;     /* per tenant, for the drain */
    long aggregates; /* per tenant, for the drain */
    long fast_rate;  /* events/s of the run with one event in each */
    long slow_rate;  /* events/s of the run over every slow_stride-th */
    long slow_stride;
    long ready_s; /* the deadline for every tenant to be connected */
    /* The idle window: a minute holds each tenant's retention run and
     * its quiet recount once. */
    long idle_s;
    long workers;    /* relay.workers; 0: left out (outboxd's default) */
    bool lean;       /* the outboxes' lean key (outboxd's default: on) */
    bool drain_only; /* BENCH_TENANTS_DRAIN_ONLY: for an A/B of drains */
};

static void
tenant_name(char *buf, size_t len, long i)
{
    snprintf(buf, len, "tenant_%04ld", i);
}

/* ---- the schemas ---- */

/* Runs the statements of sql, reading every result; dies on an error. */
static void
db_exec_multi(MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) != 0)
        die("SQL: %s: %.200s", mysql_error(m), sql);
    int rc;
    do {
        MYSQL_RES *r = mysql_store_result(m);
        if (r != NULL)
            mysql_free_result(r);
        else if (mysql_field_count(m) != 0)
            die("SQL: %s", mysql_error(m));
    } while ((rc = mysql_next_result(m)) == 0);
    if (rc > 0)
        die("SQL: %s (a statement of %.200s)", mysql_error(m), sql);
}

static MYSQL *
db_connect_multi(const struct server *sv)
{
    MYSQL *m = db_connect(sv, NULL);
    if (mysql_set_server_option(m, MYSQL_OPTION_MULTI_STATEMENTS_ON) != 0)
        die("multi-statements: %s", mysql_error(m));
    /* Set-up and clean-up stay out of the binary log, which other
     * clients' binlog streams read; the events go into it. */
    db_exec(m, "SET SESSION sql_log_bin = 0");
    return m;
}

/* sql/outbox.sql, whole: the server's parser reads its comments. */
static char *
outbox_ddl(const struct settings *s)
{
    char *path = xasprintf("%s/sql/outbox.sql", s->src);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        die("cannot read %s", path);
    struct strbuf b = {0};
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL)
        strbuf_adds(&b, line);
    fclose(f);
    free(path);
    return b.p;
}

/* The account, its wake privileges, and userstat for its count. */
static void
tenants_account(MYSQL *m)
{
    db_exec_multi(
        m, "DROP USER IF EXISTS '" TENANT_USER "'@'localhost', '" TENANT_USER
           "'@'127.0.0.1';"
           "CREATE USER '" TENANT_USER
           "'@'localhost' IDENTIFIED BY '" TENANT_USER "';"
           "CREATE USER '" TENANT_USER
           "'@'127.0.0.1' IDENTIFIED BY '" TENANT_USER "';"
           "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" TENANT_USER
           "'@'localhost', '" TENANT_USER "'@'127.0.0.1';"
           "SET GLOBAL userstat = 1");
}

/* Tenants first..last: a fresh schema each, the table, and
 * sql/grants.sql's privileges on it for the relay's account. */
static void
tenants_create_chunk(MYSQL *m, const char *ddl, long first, long last)
{
    struct strbuf sql = {0};
    for (long i = first; i <= last; i++) {
        char db[32];
        tenant_name(db, sizeof(db), i);
        strbuf_addf(&sql,
                    "DROP DATABASE IF EXISTS %s; CREATE DATABASE %s; USE %s;\n"
                    "%s\n"
                    "GRANT SELECT, UPDATE, DELETE ON %s." TENANT_TABLE
                    " TO '" TENANT_USER "'@'localhost', '" TENANT_USER
                    "'@'127.0.0.1';\n",
                    db, db, db, ddl, db);
    }
    db_exec_multi(m, sql.p);
    strbuf_free(&sql);
}

static double
tenants_create(const struct tenants *t)
{
    double t0 = now_s();
    MYSQL *m = db_connect_multi(t->sv);
    char *ddl = outbox_ddl(t->s);
    tenants_account(m);
    for (long i = 1; i <= t->n; i += SETUP_CHUNK) {
        long last = i + SETUP_CHUNK - 1;
        tenants_create_chunk(m, ddl, i, last < t->n ? last : t->n);
    }
    free(ddl);
    mysql_close(m);
    return now_s() - t0;
}

/* Runs sql's statements, ignoring what fails: for the clean-up, which
 * also runs when the bench dies. */
static void
db_try_multi(MYSQL *m, const char *sql)
{
    if (mysql_query(m, sql) != 0)
        return;
    do {
        MYSQL_RES *r = mysql_store_result(m);
        if (r != NULL)
            mysql_free_result(r);
    } while (mysql_next_result(m) == 0);
}

/* The tenants and their account dropped, as far as the server lets. */
static void
tenants_drop(const struct tenants *t)
{
    MYSQL *m = mysql_init(NULL);
    if (!mysql_real_connect(m, "127.0.0.1", "outboxd", "outboxd", NULL,
                            (unsigned)t->sv->port, NULL,
                            CLIENT_MULTI_STATEMENTS)) {
        fprintf(stderr, "bench: tenants left behind: %s\n", mysql_error(m));
        mysql_close(m);
        return;
    }
    struct strbuf sql = {0};
    strbuf_adds(&sql, "SET SESSION sql_log_bin = 0;");
    for (long i = 1; i <= t->n; i++) {
        strbuf_addf(&sql, "DROP DATABASE IF EXISTS tenant_%04ld;", i);
        if (i % SETUP_CHUNK == 0 || i == t->n) {
            db_try_multi(m, sql.p);
            strbuf_reset(&sql);
        }
    }
    db_try_multi(m, "DROP USER IF EXISTS '" TENANT_USER
                    "'@'localhost', '" TENANT_USER "'@'127.0.0.1'");
    strbuf_free(&sql);
    mysql_close(m);
}

/* What a bench that dies leaves: its outboxd, its tenants. */
static const struct tenants *cleanup_tenants;
static pid_t cleanup_pid;

static void
tenants_cleanup(void)
{
    if (cleanup_pid > 0) {
        kill(cleanup_pid, SIGKILL);
        waitpid(cleanup_pid, NULL, 0);
    }
    if (cleanup_tenants != NULL)
        tenants_drop(cleanup_tenants);
    unlink(TENANT_CONF);
}

/* ---- the config ---- */

static void
config_entry(FILE *f, const struct tenants *t, const char *name,
             const char *key, const char *db)
{
    fprintf(f,
            "  %s:\n    user: " TENANT_USER "\n    password: " TENANT_USER "\n"
            "    port: %d\n    %s: \"%s\"\n"
            "    outboxes:\n      - table: " TENANT_TABLE "\n"
            "        exchange: " EXCHANGE "\n        ordering: aggregate\n"
            "        lean: %s\n",
            name, t->sv->port, key, db, t->lean ? "true" : "false");
}

/* Explicit: one database entry per tenant, as outboxd has always read
 * them.  Pattern: one entry that finds them all (database_like). */
static void
tenants_config(const struct tenants *t)
{
    char relay_keys[64] = "";
    if (t->workers > 0)
        snprintf(relay_keys, sizeof(relay_keys), "  workers: %ld\n",
                 t->workers);
    FILE *f = config_open_relay(TENANT_CONF, relay_keys);
    if (t->pattern)
        config_entry(f, t, "tenants", "database_like", "tenant_%");
    for (long i = 1; !t->pattern && i <= t->n; i++) {
        char db[32];
        tenant_name(db, sizeof(db), i);
        config_entry(f, t, db, "database", db);
    }
    fclose(f);
}

/* ---- what the process holds ---- */

/* A "Key: value" line of /proc/PID/status (kB for the Vm lines). */
static long
proc_status(pid_t pid, const char *key)
{
    char path[64], line[256];
    long v = -1;
    size_t klen = strlen(key);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = atol(line + klen + 1);
            break;
        }
    fclose(f);
    return v;
}

/* The inodes of pid's sockets, from its descriptors. */
static long
proc_socket_inodes(pid_t pid, unsigned long *inodes, long max)
{
    char path[64], link[64];
    long n = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL && n < max) {
        char fd[320];
        snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
        ssize_t k = readlink(fd, link, sizeof(link) - 1);
        link[k > 0 ? k : 0] = '\0';
        if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1)
            n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static bool
has_inode(const unsigned long *inodes, long n, unsigned long inode)
{
    for (long i = 0; i < n; i++)
        if (inodes[i] == inode)
            return true;
    return false;
}

/* Established TCP connections of pid to remote port, by the kernel's
 * tables: whatever names outboxd gives them.  Their local ports into
 * local (up to max). */
struct sockets {
    long n;
    int local[8192];
};

static void
proc_connections(pid_t pid, int port, struct sockets *out)
{
    static unsigned long inodes[16384];
    long ninodes = proc_socket_inodes(pid, inodes, 16384);
    static const char *const tables[] = {"tcp", "tcp6"};
    out->n = 0;
    for (int t = 0; t < 2; t++) {
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, tables[t]);
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            unsigned lport, rport, state;
            unsigned long inode;
            if (sscanf(line,
                       " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x %*s %*s "
                       "%*s %*d %*d %lu",
                       &lport, &rport, &state, &inode) != 4)
                continue;
            if (rport == (unsigned)port && state == 1 /* ESTABLISHED */ &&
                has_inode(inodes, ninodes, inode) && out->n < 8192)
                out->local[out->n++] = (int)lport;
        }
        if (f != NULL)
            fclose(f);
    }
}

/* Channels RabbitMQ counts on the connections from those local ports;
 * -1 when rabbitmqctl cannot tell. */
static long
broker_channels(const struct sockets *amqp, long *matched)
{
    FILE *p = popen("rabbitmqctl -q list_connections --no-table-headers "
                    "peer_port channels 2>/dev/null",
                    "r");
    char line[128];
    long channels = 0;
    *matched = 0;
    while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
        int port;
        long ch;
        if (sscanf(line, "%d %ld", &port, &ch) != 2)
            continue;
        for (long i = 0; i < amqp->n; i++)
            if (amqp->local[i] == port) {
                channels += ch;
                (*matched)++;
            }
    }
    return p != NULL && pclose(p) == 0 ? channels : -1;
}

static long long
relay_sessions(MYSQL *m, bool dumps)
{
    return db_int(m, dumps ? "SELECT COUNT(*) FROM information_schema."
                             "PROCESSLIST WHERE USER = '" TENANT_USER
                             "' AND COMMAND LIKE 'Binlog Dump%'"
                           : "SELECT COUNT(*) FROM information_schema."
                             "PROCESSLIST WHERE USER = '" TENANT_USER "'");
}

/* ---- the phases ---- */

/* The value of an unlabelled sample ("name value"); -1 if absent. */
static double
metric_plain(const char *page, const char *name)
{
    size_t len = strlen(name);
    for (const char *line = page; line != NULL && *line != '\0';) {
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    return -1;
}

/*
 * Until /readyz answers 200 and the binlog stream wakes every tenant's
 * outbox: only then is each connected, and an event would be woken.
 * The seconds it took.
 */
static double
wait_tenants_ready(const struct tenants *t, pid_t pid)
{
    double t0 = now_s();
    for (;;) {
        bool ready = daemon_ready();
        char *page = fetch_page("/metrics");
        /* a group's wake_source counts its members (docs/operations.md) */
        double woken = page ? binlog_woken(page) : 0;
        double running =
            page ? metric_plain(page, "outboxd_outboxes_running") : -1;
        free(page);
        if (ready && woken >= (double)t->n)
            return now_s() - t0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            cleanup_pid = 0; /* reaped: nothing left to kill */
            die("outboxd exited before its tenants were ready (see "
                "/tmp/outboxd-bench.log)");
        }
        if (now_s() - t0 > (double)t->ready_s)
            die("%ld s after start outboxd was %sready, relayed %.0f "
                "outboxes (outboxd_outboxes_running) and its binlog stream "
                "woke %.0f of %ld tenants (see /tmp/outboxd-bench.log)",
                t->ready_s, ready ? "" : "not ", running, woken, t->n);
        sleep_s(0.2);
    }
}

static const char *
style_name(const struct tenants *t)
{
    return t->pattern ? "pattern" : "explicit";
}

static void
print_connected(const struct tenants *t, pid_t pid, double ready_s)
{
    static struct sockets amqp, db;
    proc_connections(pid, 5672, &amqp);
    proc_connections(pid, t->sv->port, &db);
    long matched, channels = broker_channels(&amqp, &matched);
    MYSQL *m = db_connect(t->sv, NULL);
    long long sessions = relay_sessions(m, false);
    long long dumps = relay_sessions(m, true);
    mysql_close(m);
    printf("tenants, %s config, %ld schemas on %s (port %d): every outbox "
           "ready and woken by the binlog %.1f s after start; outboxd "
           "threads %ld; AMQP connections %ld (%ld of them seen by "
           "rabbitmqctl, with %ld channels); database connections %ld by "
           "the process, %lld sessions of the relay's user (%lld of them "
           "binlog dumps); RSS after connect %.1f MiB\n",
           style_name(t), t->n, t->sv->name, t->sv->port, ready_s,
           proc_status(pid, "Threads"), amqp.n, matched, channels, db.n,
           sessions, dumps, proc_status(pid, "VmRSS") / 1024.0);
}

/*
 * The idle cost, as the idle bench measures it: once the backoff has
 * reached its ceiling, the relay's statements over a window by its own
 * account's count, and every client's Questions (other helpers' tests
 * on the shared servers included) less the bench's own reads.
 */
static void
measure_tenants_idle(const struct tenants *t, pid_t pid)
{
    const struct settings *s = t->s;
    sleep_s((double)s->idle_settle_seconds);
    MYSQL *m = db_connect(t->sv, NULL);
    pid_t server = server_pid(t->sv);
    double empty0 = empty_claims(), cpu0[2] = {cpu_ms(server), cpu_ms(pid)};
    long long relay0 = db_user_statements(m, TENANT_USER);
    long long q0 = db_questions(m);
    sleep_s((double)t->idle_s);
    long long relay = db_user_statements(m, TENANT_USER) - relay0;
    long long q = db_questions(m) - q0 - 2; /* the closing pair */
    double cpu[2] = {cpu_ms(server) - cpu0[0], cpu_ms(pid) - cpu0[1]};
    double empty = empty_claims() - empty0;
    mysql_close(m);
    double per = (double)t->n * (double)t->idle_s;
    printf("idle cost, tenants, %s config, %ld tenants over %ld s (after "
           "%ld s to settle): %.3f statements/s per tenant by the relay's "
           "user (%.1f/s in all), %.3f empty claims/s per tenant; Questions "
           "from all clients %.3f/s per tenant; mariadbd CPU %.3f ms/s per "
           "tenant, outboxd CPU %.3f ms/s per tenant\n",
           style_name(t), t->n, t->idle_s, s->idle_settle_seconds,
           (double)relay / per, (double)relay / (double)t->idle_s, empty / per,
           (double)q / per, cpu[0] / per, cpu[1] / per);
}

/*
 * A run of the latency: n events at rate, the k-th into tenant
 * first + k * stride, each its own transaction (the wake targets count
 * from its commit).  The events of one run are named by its tag.
 */
struct latency_run {
    const char *tag;
    long rate, n, stride;
};

/* Sessions that insert a latency run's events side by side: one
 * session's INSERTs into a thousand cold tables reach 150-350/s on
 * this machine, short of the 1,000/s the targets name. */
#define INSERT_SESSIONS 4

/* One inserting session: the run's events k = first, first +
 * INSERT_SESSIONS, ..., each at its place in the run's even pace. */
struct inserter {
    const struct latency_run *run;
    const struct tenants *t;
    long first;
    double t0;
    int64_t *trx_us;
};

static void *
insert_share(void *arg)
{
    struct inserter *in = arg;
    const struct latency_run *run = in->run;
    MYSQL *m = db_connect(in->t->sv, NULL);
    for (long k = in->first; k < run->n; k += INSERT_SESSIONS) {
        double wait = in->t0 + (double)k / (double)run->rate - now_s();
        if (wait > 0)
            sleep_s(wait);
        char db[32];
        tenant_name(db, sizeof(db), 1 + k * run->stride);
        int64_t sent = wall_us();
        db_exec(m,
                "INSERT INTO %s." TENANT_TABLE " (event_id, aggregate_type, "
                "aggregate_id, event_type, payload) VALUES ('%s-%ld', "
                "'Tenant', '%s-%ld', 'OrderCreated', '{\"i\":%ld,\"t\":%lld}')",
                db, run->tag, k, run->tag, k, k, (long long)sent);
        in->trx_us[k] = wall_us() - sent;
    }
    mysql_close(m);
    return NULL;
}

/* The run's INSERTs, evenly paced over INSERT_SESSIONS sessions; how
 * long each one's answer (its commit) took into trx_us; the rate
 * achieved. */
static double
insert_paced(const struct latency_run *run, const struct tenants *t,
             int64_t *trx_us)
{
    pthread_t th[INSERT_SESSIONS];
    struct inserter in[INSERT_SESSIONS];
    double t0 = now_s() + 0.05; /* every session connected by then */
    for (long j = 0; j < INSERT_SESSIONS; j++) {
        in[j] = (struct inserter){run, t, j, t0, trx_us};
        pthread_create(&th[j], NULL, insert_share, &in[j]);
    }
    for (long j = 0; j < INSERT_SESSIONS; j++)
        pthread_join(th[j], NULL);
    return (double)run->n / (now_s() - t0);
}

/* p50 / p99 / max of n latencies in ms, sorting them. */
static void
print_quantiles(const char *what, int64_t *us, long n)
{
    qsort(us, (size_t)n, sizeof(*us), cmp_i64);
    printf("%s: p50 %.1f ms, p99 %.1f ms, max %.1f ms", what,
           us[n / 2] / 1000.0, us[n * 99 / 100] / 1000.0, us[n - 1] / 1000.0);
}

/* CPU of mariadbd, RabbitMQ and outboxd (0 where not given), in ms. */
static void
cpu_now(const pid_t pids[3], double ms[3])
{
    for (int i = 0; i < 3; i++)
        ms[i] = pids[i] > 0 ? cpu_ms(pids[i]) : 0;
}

/* Each process's CPU since before, per event of the run. */
static void
print_cpu_per_event(const pid_t pids[3], const double before[3], long n)
{
    double after[3];
    cpu_now(pids, after);
    printf("; CPU per event: mariadbd %.2f ms, RabbitMQ %.2f ms",
           (after[0] - before[0]) / (double)n,
           (after[1] - before[1]) / (double)n);
    if (pids[2] > 0)
        printf(", outboxd %.2f ms", (after[2] - before[2]) / (double)n);
}

/* What the relay's own sessions and its binlog dump cost mariadbd (its
 * threads' time, from /proc), apart from the producers' sessions and
 * the server's background in the process's figure. */
static void
print_relay_threads(const struct sessions *a, const struct sessions *b, long n)
{
    double used[SESSION_KINDS];
    sessions_used(a, b, used);
    printf(" (the relay's sessions %.2f ms, its binlog dump %.2f ms)",
           used[SESSION_RELAY] / (double)n, used[SESSION_DUMP] / (double)n);
}

/*
 * The fast run's INSERTs with no relay running, before outboxd starts:
 * what the producer alone achieves and costs on this machine, so that
 * the relayed run's shortfall is read against it.  Its rows are deleted
 * after, unpublished.
 */
static void
measure_tenants_producer_alone(const struct tenants *t)
{
    struct latency_run alone = {"ta", t->fast_rate, t->n, 1};
    int64_t *trx = xcalloc((size_t)alone.n, sizeof(*trx));
    pid_t pids[3] = {server_pid(t->sv), pid_of("beam.smp"), 0};
    double cpu0[3];
    cpu_now(pids, cpu0);
    double rate = insert_paced(&alone, t, trx);
    printf("latency, tenants, producer alone (no relay), %ld events/s "
           "asked, %.0f achieved",
           alone.rate, rate);
    print_cpu_per_event(pids, cpu0, alone.n);
    print_quantiles("; the INSERTs themselves", trx, alone.n);
    printf("\n");
    MYSQL *m = db_connect(t->sv, NULL);
    for (long i = 1; i <= t->n; i++) {
        char db[32];
        tenant_name(db, sizeof(db), i);
        db_exec(m,
                "DELETE FROM %s." TENANT_TABLE " WHERE event_id LIKE 'ta-%%'",
                db);
    }
    mysql_close(m);
    free(trx);
}

/* Commit to the bench's consumer, one event per idle tenant of the run. */
static void
measure_tenants_latency(const struct tenants *t, const struct latency_run *run,
                        pid_t relay)
{
    long n = run->n;
    struct consumer c = {.expected = n};
    c.latency_us = xcalloc((size_t)n, sizeof(*c.latency_us));
    pthread_t th;
    pthread_create(&th, NULL, consume_latencies, &c);
    sleep_s(1); /* let the consumer subscribe before the clock starts */
    int64_t *trx = xcalloc((size_t)n, sizeof(*trx));
    int64_t *after = xcalloc((size_t)n, sizeof(*after));
    pid_t pids[3] = {server_pid(t->sv), pid_of("beam.smp"), relay};
    double cpu0[3];
    MYSQL *m = db_connect(t->sv, NULL);
    struct sessions sa, sb;
    sessions_read(m, pids[0], NULL, TENANT_USER, &sa);
    cpu_now(pids, cpu0);
    double rate = insert_paced(run, t, trx);
    pthread_join(th, NULL);
    sessions_read(m, pids[0], NULL, TENANT_USER, &sb);
    mysql_close(m);
    if (c.received < c.expected)
        die("tenants latency: received %ld of %ld events", c.received,
            c.expected);
    for (long i = 0; i < n; i++)
        after[i] = c.latency_us[i] - trx[i];
    printf("latency, tenants, %s config, %ld events/s asked, %.0f achieved: "
           "one event committed in each of %ld idle tenants",
           style_name(t), run->rate, rate, n);
    if (run->stride > 1)
        printf(" (every %ldth of %ld)", run->stride, t->n);
    printf(", all delivered to the consumer; ");
    print_quantiles("from COMMIT's answer to the consumer", after, n);
    print_quantiles("; from the INSERT (autocommit)", c.latency_us, n);
    print_quantiles("; the INSERTs themselves", trx, n);
    print_cpu_per_event(pids, cpu0, n);
    print_relay_threads(&sa, &sb, n);
    printf("\n");
    free(c.latency_us);
    free(trx);
    free(after);
}

/* The wake targets' two rates: every tenant at the fast one, a sample
 * of them at the slow one (a thousand events at 10/s would take 100 s). */
static void
measure_tenants_latencies(const struct tenants *t, pid_t relay)
{
    struct latency_run fast = {"tl", t->fast_rate, t->n, 1};
    struct latency_run slow = {"ts", t->slow_rate,
                               (t->n + t->slow_stride - 1) / t->slow_stride,
                               t->slow_stride};
    measure_tenants_latency(t, &fast, relay);
    measure_tenants_latency(t, &slow, relay);
}

/* events rows into each tenant, a statement each, over its aggregates. */
static void
fill_tenants(const struct tenants *t)
{
    MYSQL *m = db_connect(t->sv, NULL);
    struct strbuf sql = {0};
    for (long i = 1; i <= t->n; i++) {
        strbuf_reset(&sql);
        strbuf_addf(
            &sql,
            "INSERT INTO tenant_%04ld." TENANT_TABLE " (event_id, "
            "aggregate_type, aggregate_id, event_type, payload) VALUES ",
            i);
        for (long e = 0; e < t->events; e++)
            strbuf_addf(&sql,
                        "%s('td-%ld','Tenant','%ld','OrderCreated','{\"seq\":"
                        "%ld,\"pad\":\"%0200d\"}')",
                        e > 0 ? "," : "", e, e % t->aggregates, e, 0);
        db_exec(m, "%s", sql.p);
    }
    strbuf_free(&sql);
    mysql_close(m);
}

/* One statement telling whether any tenant has a row left to send. */
static char *
unfinished_probe(const struct tenants *t)
{
    struct strbuf sql = {0};
    strbuf_adds(&sql, "SELECT COUNT(*) FROM (");
    for (long i = 1; i <= t->n; i++)
        strbuf_addf(&sql,
                    "%s(SELECT 1 FROM tenant_%04ld." TENANT_TABLE
                    " WHERE " UNFINISHED " LIMIT 1)",
                    i > 1 ? " UNION ALL " : "", i);
    strbuf_adds(&sql, ") x");
    return sql.p;
}

/* Messages ready in the bench queue. */
static long
queue_depth(amqp_connection_state_t c)
{
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        c, 1, amqp_cstring_bytes(QUEUE), 1, 0, 0, 0, amqp_empty_table);
    if (ok == NULL)
        die("the bench queue is gone");
    return (long)ok->message_count;
}

struct tenant_drain {
    double seconds;
    double first_s;       /* from the start to the first message queued */
    double queued_s;      /* to the last one queued */
    double cpu_ms[3];     /* mariadbd, RabbitMQ, outboxd, over the drain */
    long long statements; /* the relay's, over the drain */
    long queued;
    long rss_kib;
    long threads;
};

/*
 * From outboxd's start to every tenant's rows SENT, the criterion of the
 * one-outbox drain.  The queue's depth is watched first, as it is cheap;
 * then the tenants' tables, in one statement that takes about a quarter
 * of a second at 1,000 tenants: the end is known to that.
 */
static struct tenant_drain
drain_tenants(const struct tenants *t)
{
    struct tenant_drain d;
    long total = t->n * t->events;
    char *probe = unfinished_probe(t);
    MYSQL *m = db_connect(t->sv, NULL);
    amqp_connection_state_t c = amqp_open();
    pid_t servers[2] = {server_pid(t->sv), pid_of("beam.smp")};
    double cpu0[2] = {cpu_ms(servers[0]), cpu_ms(servers[1])};
    long long q0 = db_user_statements(m, TENANT_USER);
    double t0 = now_s();
    pid_t pid = cleanup_pid = start_daemon(t->s, TENANT_CONF);
    d.first_s = 0;
    for (long depth; (depth = queue_depth(c)) < total;) {
        if (depth > 0 && d.first_s == 0)
            d.first_s = now_s() - t0;
        if (now_s() - t0 > 600)
            die("the tenants' drain took more than 10 minutes");
        sleep_s(0.05);
    }
    d.queued_s = now_s() - t0;
    while (db_int(m, probe) > 0) {
        if (now_s() - t0 > 600)
            die("the tenants' drain took more than 10 minutes");
        sleep_s(0.05);
    }
    d.seconds = now_s() - t0;
    d.cpu_ms[0] = cpu_ms(servers[0]) - cpu0[0];
    d.cpu_ms[1] = cpu_ms(servers[1]) - cpu0[1];
    d.cpu_ms[2] = cpu_ms(pid);
    d.statements = db_user_statements(m, TENANT_USER) - q0;
    d.queued = queue_depth(c);
    amqp_done(c);
    d.rss_kib = peak_rss_kib(pid);
    d.threads = proc_status(pid, "Threads");
    stop_daemon(pid);
    cleanup_pid = 0;
    mysql_close(m);
    free(probe);
    return d;
}

/*
 * The drain of a backlog across the tenants, then one outbox's of as
 * many events on the same server, twice: at its default batch_size, and
 * claiming as many rows at a time as each tenant holds, which tells what
 * the tenants' smaller claims cost from what the tenants cost otherwise.
 */
static long
measure_tenants_drain(const struct tenants *t)
{
    long total = t->n * t->events;
    queue_reset(t->s);
    fill_tenants(t);
    struct tenant_drain d = drain_tenants(t);
    struct settings one = *t->s;
    one.backlog = total;
    struct drain_result r = measure_drain_median(
        &one, (struct target){t->sv, NULL, 0}, "aggregate", 0, 0);
    struct drain_result small = measure_drain_median(
        &one, (struct target){t->sv, NULL, t->events}, "aggregate", 0, 0);
    double rate = (double)total / d.seconds;
    printf("drain, tenants, %s config: %ld events in each of %ld tenants "
           "(%ld in all, %ld aggregates each) inserted while outboxd was "
           "stopped: %.2f s from its start to all SENT = %.0f events/s = "
           "%.2f of one outbox draining %ld events on the same server "
           "(%.0f events/s, median of %ld, %.0f-%.0f); %ld messages "
           "queued; %ld threads at the end; the first message queued "
           "%.2f s after the start, the last %.2f s\n",
           style_name(t), t->events, t->n, total, t->aggregates, d.seconds,
           rate, rate / r.rate, total, r.rate, one.drain_runs, r.low, r.high,
           d.queued, d.threads, d.first_s, d.queued_s);
    printf("drain, tenants against one outbox claiming %ld rows at a time "
           "as each tenant does (batch_size %ld): %.2f of it (%.0f "
           "events/s, median of %ld, %.0f-%.0f)\n",
           t->events, t->events, rate / small.rate, small.rate, one.drain_runs,
           small.low, small.high);
    double k = 1000.0 / (double)total;
    printf("drain, tenants against one outbox (its median run), per 1,000 "
           "events: the relay's statements %.0f against %.0f (%.0f at "
           "batch_size %ld); CPU ms mariadbd %.0f against %.0f, RabbitMQ "
           "%.0f against %.0f, outboxd %.0f against %.0f\n",
           (double)d.statements * k, r.statements_per_1000,
           small.statements_per_1000, t->events, d.cpu_ms[0] * k,
           r.cpu_ms_per_1000[0], d.cpu_ms[1] * k, r.cpu_ms_per_1000[1],
           d.cpu_ms[2] * k, r.cpu_ms_per_1000[2]);
    if (d.queued < total)
        die("the tenants' drain left %ld of %ld events unqueued",
            total - d.queued, total);
    return d.rss_kib;
}

/* Explicit entries take a session each: a clear word before the wait
 * for connections the server will refuse. */
static void
check_room(const struct tenants *t)
{
    if (t->pattern)
        return;
    MYSQL *m = db_connect(t->sv, NULL);
    long long max = db_int(m, "SELECT @@max_connections");
    long long used =
        db_int(m, "SELECT COUNT(*) FROM information_schema.PROCESSLIST");
    mysql_close(m);
    if (t->n + 1 > max - used)
        die("%ld explicit tenants take %ld database sessions (one each and "
            "the binlog stream's); the server on port %d has %lld free of "
            "its max_connections %lld: set BENCH_TENANTS_CONFIG=pattern or "
            "fewer BENCH_TENANTS",
            t->n, t->n + 1, t->sv->port, max - used, max);
}

static struct tenants
tenants_settings(const struct settings *s)
{
    const char *style = getenv("BENCH_TENANTS_CONFIG");
    struct tenants t = {
        .s = s,
        .sv = &with_binlog, /* the wake needs its binary log */
        .n = env_long("BENCH_TENANTS", 1000),
        .pattern = style == NULL || strcmp(style, "explicit") != 0,
        .events = env_long("BENCH_TENANTS_EVENTS", 100),
        .fast_rate = env_long("BENCH_TENANTS_FAST_RATE", 1000),
        .slow_rate = env_long("BENCH_TENANTS_SLOW_RATE", 10),
        .slow_stride = env_long("BENCH_TENANTS_SLOW_STRIDE", 5),
        .ready_s = env_long("BENCH_TENANTS_READY_SECONDS", 300),
        .idle_s = env_long("BENCH_TENANTS_IDLE_SECONDS", 60),
        .workers = env_long("BENCH_TENANTS_WORKERS", 0),
        .drain_only = env_long("BENCH_TENANTS_DRAIN_ONLY", 0) != 0,
        .lean = env_long("BENCH_TENANTS_LEAN", 1) != 0,
    };
    t.aggregates = env_long("BENCH_TENANTS_AGGREGATES", t.events);
    if (style != NULL && *style != '\0' && strcmp(style, "pattern") != 0 &&
        strcmp(style, "explicit") != 0)
        die("BENCH_TENANTS_CONFIG must be explicit or pattern");
    if (t.n < 1 || t.n > 9999 || t.events < 1 || t.aggregates < 1 ||
        t.fast_rate < 1 || t.slow_rate < 1 || t.slow_stride < 1 ||
        t.ready_s < 1 || t.idle_s < 1 || t.workers < 0)
        die("BENCH_TENANTS must be 1 to 9999; BENCH_TENANTS_EVENTS, "
            "BENCH_TENANTS_AGGREGATES, BENCH_TENANTS_FAST_RATE, "
            "BENCH_TENANTS_SLOW_RATE, BENCH_TENANTS_SLOW_STRIDE, "
            "BENCH_TENANTS_READY_SECONDS and BENCH_TENANTS_IDLE_SECONDS at "
            "least 1, BENCH_TENANTS_WORKERS "
            "at least 0");
    return t;
}

/* Connected, idle, one event each, stopped: the peak RSS so far. */
static long
measure_tenants_connected(const struct tenants *t)
{
    queue_reset(t->s);
    measure_tenants_producer_alone(t);
    pid_t pid = cleanup_pid = start_daemon(t->s, TENANT_CONF);
    print_connected(t, pid, wait_tenants_ready(t, pid));
    measure_tenants_idle(t, pid);
    measure_tenants_latencies(t, pid);
    long rss = peak_rss_kib(pid);
    stop_daemon(pid);
    cleanup_pid = 0;
    return rss;
}

/*
 * Connected, idle, one event each, stopped; then the drain.  Peak RSS
 * is the higher of the two processes' (VmHWM at each one's end).
 */
void
measure_tenants(const struct settings *s)
{
    static struct tenants t; /* the clean-up at exit reads it */
    t = tenants_settings(s);
    check_room(&t);
    cleanup_tenants = &t;
    atexit(tenants_cleanup);
    double setup_s = tenants_create(&t);
    printf("tenants, %s config: %ld schemas with %s and their grants set up "
           "in %.1f s; relay.workers %s; lean %s\n",
           style_name(&t), t.n, TENANT_TABLE, setup_s,
           t.workers > 0 ? getenv("BENCH_TENANTS_WORKERS") : "not set",
           t.lean ? "on" : "off");
    tenants_config(&t);
    long rss = t.drain_only ? 0 : measure_tenants_connected(&t);
    long drain_rss = measure_tenants_drain(&t);
    printf("peak RSS of outboxd over %ld tenants (VmHWM): ", t.n);
    if (!t.drain_only)
        printf("%.1f MiB connected, idle and one event each; ", rss / 1024.0);
    printf("%.1f MiB through the drain\n", drain_rss / 1024.0);
    tenants_cleanup();
    cleanup_tenants = NULL;
    queue_reset(s);
}
