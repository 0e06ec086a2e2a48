/*
 * it_tenants: one outboxd over 200 tenant schemas on the binlog server,
 * found by one database_like entry: every tenant delivered in order, a
 * broken tenant reported while the others go on, a tenant created while
 * running picked up, a SIGKILL mid-drain losing nothing, the server out
 * of reach (discovery failing) dropping no tenant.
 *
 * OUTBOXD_TENANTS_PATTERN=explicit: the same tests over one database
 * entry per tenant instead of the pattern, which checks the fixture
 * (IT_TENANTS tenants, 200 by default).
 */
#define _GNU_SOURCE
#include "itest.h"
#include "itproxy.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_tenants_suite(void);

#define TENANTS_DEFAULT 200
/* Every wait: 200 outboxes on a loaded 2-core machine. */
#define SLOW_MS 180000
#define TABLE "outbox_event"
#define UNFINISHED "status IN ('PENDING','PROCESSING','RETRY')"

struct tfx {
    char name[64], ex[96], conf[256], prefix[80];
    char user[64], password[64];
    int n;     /* tenants at the start; added ones come after */
    int added; /* tenants created while running */
    bool pattern;
    unsigned http_port;
    unsigned db_port; /* the binlog server, or a proxy in front of it */
    MYSQL *sql;       /* admin session, multi-statements on */
    struct it_consumer *consumer;
    struct it_daemon d;
};

/* Fails the test with the daemon's log when expr does not come true. */
#define TFX_WAIT(f, ms, expr, ...)                                             \
    do {                                                                       \
        if (!IT_WAIT(ms, expr)) {                                              \
            it_daemon_dump_log(&(f)->d);                                       \
            ck_abort_msg(__VA_ARGS__);                                         \
        }                                                                      \
    } while (0)

static void
tenant_db(const struct tfx *f, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s%04d", f->prefix, i);
}

/* ---- SQL ---- */

/* Runs the statements of sql, reading every result. */
static void
exec_multi(MYSQL *db, const char *sql)
{
    ck_assert_msg(mysql_query(db, sql) == 0, "SQL failed: %s: %.300s",
                  mysql_error(db), sql);
    int rc;
    do {
        MYSQL_RES *r = mysql_store_result(db);
        if (r != NULL)
            mysql_free_result(r);
        ck_assert_msg(r != NULL || mysql_field_count(db) == 0, "SQL: %s",
                      mysql_error(db));
    } while ((rc = mysql_next_result(db)) == 0);
    ck_assert_msg(rc < 0, "SQL failed: %s: in %.300s", mysql_error(db), sql);
}

/* The relay's account: sql/grants.sql's privileges, on each tenant's
 * table as it is made, and the binlog stream's. */
static void
create_account(struct tfx *f)
{
    char *sql = xasprintf(
        "CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s';"
        "CREATE USER '%s'@'localhost' IDENTIFIED BY '%s';"
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '%s'@'127.0.0.1', "
        "'%s'@'localhost'",
        f->user, f->password, f->user, f->password, f->user, f->user);
    exec_multi(f->sql, sql);
    free(sql);
}

/* Tenants first..last: schema, sql/outbox.sql's table, grants, in one
 * round trip. */
static void
create_tenants(struct tfx *f, int first, int last)
{
    char *ddl = it_file_read(it_src_path("sql/outbox.sql"));
    ck_assert_msg(strstr(ddl, "CREATE TABLE") != NULL, "no sql/outbox.sql");
    size_t cap = (size_t)(last - first + 1) * (strlen(ddl) + 512) + 1, len = 0;
    char *sql = malloc(cap);
    for (int i = first; i <= last; i++) {
        char db[96];
        tenant_db(f, i, db, sizeof(db));
        len += (size_t)snprintf(
            sql + len, cap - len,
            "CREATE DATABASE `%s`; USE `%s`;\n%s\nGRANT SELECT, UPDATE, "
            "DELETE ON `%s`.`" TABLE
            "` TO '%s'@'127.0.0.1', '%s'@'localhost';\n",
            db, db, ddl, db, f->user, f->user);
    }
    exec_multi(f->sql, sql);
    free(sql);
    free(ddl);
}

/*
 * In round trips of 25 tenants: one each would be 200, one for all could
 * pass max_allowed_packet.  Kept out of the binary log, which other
 * tests' streams read; the events and a tenant made later go into it.
 */
static void
create_all(struct tfx *f)
{
    uint64_t t0 = it_now_ms();
    it_db_exec(f->sql, "SET SESSION sql_log_bin = 0");
    for (int i = 1; i <= f->n; i += 25)
        create_tenants(f, i, i + 24 < f->n ? i + 24 : f->n);
    it_db_exec(f->sql, "SET SESSION sql_log_bin = 1");
    fprintf(stderr, "it_tenants: %d schemas created in %llu ms\n", f->n,
            (unsigned long long)(it_now_ms() - t0));
}

static void
drop_all(struct tfx *f)
{
    size_t cap = (size_t)(f->n + f->added + 1) * 128 + 256, len = 0;
    char *sql = malloc(cap), db[96];
    for (int i = 1; i <= f->n + f->added; i++) {
        tenant_db(f, i, db, sizeof(db));
        len += (size_t)snprintf(sql + len, cap - len,
                                "DROP DATABASE IF EXISTS `%s`;", db);
    }
    snprintf(sql + len, cap - len,
             "DROP USER IF EXISTS '%s'@'127.0.0.1', '%s'@'localhost'", f->user,
             f->user);
    exec_multi(f->sql, sql);
    free(sql);
}

/*
 * The schemas of earlier tests whose process is gone: a failed test ends
 * its process before its teardown, and would leave its tenants behind
 * on the shared server.
 */
static void
sweep_stale(struct tfx *f)
{
    ck_assert(mysql_query(f->sql, "SELECT SCHEMA_NAME FROM information_schema."
                                  "SCHEMATA WHERE SCHEMA_NAME LIKE "
                                  "'it\\_tn\\_%'") == 0);
    MYSQL_RES *res = mysql_store_result(f->sql);
    ck_assert_ptr_nonnull(res);
    MYSQL_ROW row;
    int stale = 0;
    while ((row = mysql_fetch_row(res)) != NULL) {
        int pid;
        if (sscanf(row[0], "it_tn_%d_", &pid) != 1 || pid <= 0 ||
            kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        MYSQL *db = it_db_connect_port(IT_DB_BINLOG_PORT, NULL);
        it_db_exec(db, "DROP DATABASE IF EXISTS `%s`", row[0]);
        mysql_close(db);
        stale++;
    }
    mysql_free_result(res);
    if (stale > 0)
        fprintf(stderr, "it_tenants: dropped %d schemas of tests gone\n",
                stale);
}

/* Rows not yet SENT or DEAD in tenants first..last, in one statement. */
static long long
unfinished(struct tfx *f, int first, int last)
{
    size_t cap = (size_t)(last - first + 1) * 192 + 64, len = 0;
    char *sql = malloc(cap), db[96];
    len += (size_t)snprintf(sql, cap, "SELECT SUM(c) FROM (");
    for (int i = first; i <= last; i++) {
        tenant_db(f, i, db, sizeof(db));
        len += (size_t)snprintf(sql + len, cap - len,
                                "%sSELECT COUNT(*) c FROM `%s`.`" TABLE
                                "` WHERE " UNFINISHED,
                                i > first ? " UNION ALL " : "", db);
    }
    snprintf(sql + len, cap - len, ") x");
    long long n = it_db_int(f->sql, "%s", sql);
    free(sql);
    return n;
}

/* per events into each of tenants first..last, over aggs aggregates:
 * event_id "<tag><tenant>-<seq>", aggregate_id "<tag><tenant>-<seq %
 * aggs>", one statement a tenant. */
static void
insert_events(struct tfx *f, char tag, int first, int last, int per, int aggs)
{
    for (int i = first; i <= last; i++) {
        char db[96], table[128], prefix[16];
        tenant_db(f, i, db, sizeof(db));
        snprintf(table, sizeof(table), "`%s`.`" TABLE "`", db);
        snprintf(prefix, sizeof(prefix), "%c%04d", tag, i);
        it_db_insert_events(f->sql, table, prefix, per, aggs, 64);
    }
}

/* ---- the daemon ---- */

static void
config_entry(FILE *out, struct tfx *f, const char *entry, const char *key,
             const char *value)
{
    fprintf(out,
            "  %s:\n"
            "    host: 127.0.0.1\n"
            "    port: %u\n"
            "    user: %s\n"
            "    password: %s\n"
            "    %s: \"%s\"\n"
            "    outboxes:\n"
            "      - table: " TABLE "\n"
            "        broker: main\n"
            "        exchange: \"%s\"\n"
            /* a SIGKILL's leases expire soon */
            "        lease: 5s\n",
            entry, f->db_port, f->user, f->password, key, value, f->ex);
    /* a tenant made while running is found within seconds */
    if (f->pattern)
        fprintf(out, "    discover_interval: 2s\n");
}

/* One database_like entry for the tenants, or one entry each. */
static void
write_config(struct tfx *f)
{
    FILE *out = fopen(f->conf, "w");
    ck_assert_msg(out != NULL, "cannot write %s", f->conf);
    fchmod(fileno(out), 0600);
    fprintf(out,
            "relay:\n"
            "  id: %s\n"
            "  log_level: info\n"
            "  listen: \"127.0.0.1:%u\"\n"
            "  shutdown_timeout: 10s\n"
            "brokers:\n"
            "  main:\n"
            "    url: %s\n"
            "    confirm_timeout: 10s\n"
            "databases:\n",
            f->name, f->http_port, IT_AMQP_URL);
    char like[192], db[96];
    size_t n = 0;
    /* '_' as "\\_" in YAML's double quotes: LIKE's '_' for itself alone */
    for (const char *p = f->prefix; *p != '\0' && n + 4 < sizeof(like); p++) {
        if (*p == '_') {
            like[n++] = '\\';
            like[n++] = '\\';
        }
        like[n++] = *p;
    }
    like[n++] = '%';
    like[n] = '\0';
    if (f->pattern)
        config_entry(out, f, "tenants", "database_like", like);
    for (int i = 1; !f->pattern && i <= f->n; i++) {
        tenant_db(f, i, db, sizeof(db));
        config_entry(out, f, db, "database", db);
    }
    fclose(out);
}

static void
tfx_open(struct tfx *f)
{
    memset(f, 0, sizeof(*f));
    const char *style = getenv("OUTBOXD_TENANTS_PATTERN");
    const char *count = getenv("IT_TENANTS");
    f->pattern = style == NULL || strcmp(style, "explicit") != 0;
    f->n = count != NULL && atoi(count) > 0 ? atoi(count) : TENANTS_DEFAULT;
    it_unique_name(f->name, sizeof(f->name), "it_tn");
    snprintf(f->prefix, sizeof(f->prefix), "%s_t", f->name);
    snprintf(f->ex, sizeof(f->ex), "ex_%s", f->name);
    snprintf(f->conf, sizeof(f->conf), "/tmp/%s.yaml", f->name);
    /* One account for all the tenants, unique to the test. */
    it_db_relay_account(f->name, f->user, sizeof(f->user), f->password,
                        sizeof(f->password));
    f->http_port = it_free_port();
    f->db_port = IT_DB_BINLOG_PORT;
    f->sql = it_db_connect_port(IT_DB_BINLOG_PORT, NULL);
    ck_assert(
        mysql_set_server_option(f->sql, MYSQL_OPTION_MULTI_STATEMENTS_ON) == 0);
    sweep_stale(f);
    create_account(f);
    create_all(f);
    f->consumer = it_consumer_new(f->ex, "#");
    write_config(f);
}

static void
tfx_start(struct tfx *f)
{
    it_daemon_start(&f->d, f->conf, f->name);
}

static void
tfx_close(struct tfx *f)
{
    if (f->d.pid > 0 && !it_daemon_signal_wait(&f->d, SIGKILL, 5000))
        ck_abort_msg("outboxd did not die");
    it_consumer_free(f->consumer);
    it_exchange_delete(f->ex);
    drop_all(f);
    mysql_close(f->sql);
    unlink(f->conf);
}

/* Lines of the daemon's log holding both a and b. */
static int
log_lines(struct tfx *f, const char *a, const char *b)
{
    char *text = it_file_read(f->d.log_path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        n += strstr(line, a) != NULL && strstr(line, b) != NULL;
    free(text);
    return n;
}

/* ---- what the consumer received ---- */

/* The events of one tag, by tenant and number: which came, and the
 * last number of each aggregate, which must only grow. */
struct tally {
    char tag;
    int tenants, per, aggs;
    unsigned char *seen;
    int *last;
    long got, dups, foreign;
    char disorder[256];
    char again[64], stray[64]; /* the first duplicate, the first stray */
};

static void
tally_init(struct tally *t, char tag, int tenants, int per, int aggs)
{
    memset(t, 0, sizeof(*t));
    t->tag = tag;
    t->tenants = tenants;
    t->per = per;
    t->aggs = aggs;
    t->seen = calloc((size_t)(tenants + 1) * (size_t)per, 1);
    t->last = malloc((size_t)(tenants + 1) * (size_t)aggs * sizeof(int));
    for (int i = 0; i < (tenants + 1) * aggs; i++)
        t->last[i] = -1;
}

static void
tally_free(struct tally *t)
{
    free(t->seen);
    free(t->last);
}

/*
 * One message: new, a redelivery, or not of this tally.  Every arrival,
 * a redelivery too, is checked against the aggregate's latest: an event
 * never arrives after a later one of its aggregate (docs/contract.md
 * section 1.3).
 */
static void
tally_take(struct tally *t, const struct it_message *m)
{
    char tag;
    int tenant, seq;
    if (m->message_id == NULL ||
        sscanf(m->message_id, "%c%4d-%d", &tag, &tenant, &seq) != 3 ||
        tag != t->tag || tenant < 1 || tenant > t->tenants || seq < 0 ||
        seq >= t->per) {
        if (t->foreign++ == 0)
            snprintf(t->stray, sizeof(t->stray), "%s",
                     m->message_id ? m->message_id : "(no message_id)");
        return;
    }
    int *last = &t->last[tenant * t->aggs + seq % t->aggs];
    if (seq < *last && t->disorder[0] == '\0')
        snprintf(t->disorder, sizeof(t->disorder),
                 "%s came after event %d of its aggregate", m->message_id,
                 *last);
    *last = seq > *last ? seq : *last;
    unsigned char *seen = &t->seen[tenant * t->per + seq];
    if (*seen) {
        if (t->dups++ == 0)
            snprintf(t->again, sizeof(t->again), "%s", m->message_id);
        return;
    }
    *seen = 1;
    t->got++;
}

/* Consumes until want events of the tally came, or timeout_ms passed. */
static long
tally_consume(struct tfx *f, struct tally *t, long want, int timeout_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    while (t->got < want && it_now_ms() < deadline) {
        struct it_message m;
        if (it_consumer_next(f->consumer, &m, 1000) == 1) {
            tally_take(t, &m);
            it_message_free(&m);
        }
    }
    return t->got;
}

/* All want events came, each aggregate's in order. */
static void
tally_assert(struct tfx *f, struct tally *t, long want)
{
    if (tally_consume(f, t, want, SLOW_MS) < want) {
        it_daemon_dump_log(&f->d);
        ck_abort_msg("%ld of %ld events '%c' delivered", t->got, want, t->tag);
    }
    ck_assert_msg(t->disorder[0] == '\0', "out of order: %s", t->disorder);
}

/*
 * Without faults each event is published once (docs/contract.md section
 * 1.2): what the queue still holds, taken until it stays empty for a
 * second, repeats none of t's events and brings nothing else.
 */
static void
tally_assert_once(struct tfx *f, struct tally *t)
{
    struct it_message m;
    while (it_consumer_next(f->consumer, &m, 1000) == 1) {
        tally_take(t, &m);
        it_message_free(&m);
    }
    ck_assert_msg(t->disorder[0] == '\0', "out of order: %s", t->disorder);
    ck_assert_msg(t->dups == 0, "%ld events '%c' came again, %s first", t->dups,
                  t->tag, t->again);
    ck_assert_msg(t->foreign == 0, "%ld messages not of '%c', %s first",
                  t->foreign, t->tag, t->stray);
}

/* One event in every tenant, all delivered: every outbox is running;
 * once: no fault since the last round, so none came twice. */
static void
deliver_round(struct tfx *f, char tag, int tenants, bool once)
{
    struct tally t;
    tally_init(&t, tag, tenants, 1, 1);
    insert_events(f, tag, 1, tenants, 1, 1);
    tally_assert(f, &t, tenants);
    if (once)
        tally_assert_once(f, &t);
    tally_free(&t);
}

/* ---- tests ---- */

/* (a) Events in every tenant, all delivered once, each aggregate's in
 * order. */
/* Lines `cmd` prints, -1 if it cannot run. */
static long
count_lines(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    long n = 0;
    int ch;
    while ((ch = fgetc(p)) != EOF)
        n += ch == '\n';
    pclose(p);
    return n;
}

/*
 * What 200 tenants cost the process: relay.workers threads (0: 4 per
 * CPU, 4 to 32) and a helper each, main, the binlog stream and the
 * discovery's helper; a broker connection and a database session per
 * worker, beside the binlog dump and the discovery's session.
 */
static void
assert_bounded(struct tfx *f)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long w = cpus * 4 < 4 ? 4 : cpus * 4 > 32 ? 32 : cpus * 4;
    char *cmd = xasprintf("grep -h '^Threads:' /proc/%d/status | tr -dc "
                          "0-9; echo",
                          (int)f->d.pid);
    FILE *p = popen(cmd, "r");
    long threads = -1;
    if (p != NULL && fscanf(p, "%ld", &threads) != 1)
        threads = -1;
    if (p != NULL)
        pclose(p);
    free(cmd);
    cmd = xasprintf("ss -Htnp state established '( dport = :5672 )' | "
                    "grep 'pid=%d,'",
                    (int)f->d.pid);
    long amqp = count_lines(cmd);
    free(cmd);
    long sessions = it_db_int(f->sql,
                              "SELECT COUNT(*) FROM information_schema."
                              "PROCESSLIST WHERE USER = '%s'",
                              f->user);
    fprintf(stderr,
            "it_tenants: %d tenants: %ld threads, %ld AMQP connections, "
            "%ld database sessions (relay.workers %ld)\n",
            f->n, threads, amqp, sessions, w);
    ck_assert_msg(threads > 0 && threads <= 2 * w + 3, "%ld threads", threads);
    ck_assert_msg(amqp >= 1 && amqp <= w, "%ld AMQP connections", amqp);
    ck_assert_msg(sessions >= 1 && sessions <= w + 2, "%ld sessions", sessions);
}

START_TEST(test_all_delivered)
{
    struct tfx f;
    tfx_open(&f);
    tfx_start(&f);
    struct tally t;
    tally_init(&t, 'a', f.n, 20, 3);
    insert_events(&f, 'a', 1, f.n, 20, 3);
    tally_assert(&f, &t, (long)f.n * 20);
    TFX_WAIT(&f, SLOW_MS, unfinished(&f, 1, f.n) == 0,
             "rows of the tenants were delivered but not marked SENT");
    tally_assert_once(&f, &t);
    fprintf(stderr, "it_tenants: %ld events over %d tenants\n", t.got, f.n);
    if (f.pattern)
        assert_bounded(&f);
    tally_free(&t);
    tfx_close(&f);
}
END_TEST

/*
 * (b) A tenant whose table loses a column is reported, by name, and the
 * others go on delivering; its events wait, and go once the column is
 * back.
 */
START_TEST(test_broken_tenant)
{
    struct tfx f;
    tfx_open(&f);
    tfx_start(&f);
    deliver_round(&f, 'a', f.n, true);
    int k = f.n / 2 + 1;
    char db[96];
    tenant_db(&f, k, db, sizeof(db));
    it_db_exec(f.sql, "ALTER TABLE `%s`.`" TABLE "` DROP COLUMN event_type",
               db);
    it_db_exec(f.sql,
               "INSERT INTO `%s`.`" TABLE "` (event_id, aggregate_type, "
               "aggregate_id, payload) VALUES ('x%04d-0', 'Order', 'x', '{}')",
               db, k);
    struct tally t;
    tally_init(&t, 'b', f.n, 3, 1);
    insert_events(&f, 'b', 1, k - 1, 3, 1);
    insert_events(&f, 'b', k + 1, f.n, 3, 1);
    tally_assert(&f, &t, (long)(f.n - 1) * 3);
    tally_assert_once(&f, &t);
    TFX_WAIT(&f, SLOW_MS, log_lines(&f, "no column event_type", db) >= 1,
             "no log line says %s has no column event_type", db);
    ck_assert_int_eq(it_db_int(f.sql,
                               "SELECT COUNT(*) FROM `%s`.`" TABLE
                               "` WHERE status = 'PENDING'",
                               db),
                     1);
    it_db_exec(
        f.sql,
        "ALTER TABLE `%s`.`" TABLE "` ADD COLUMN event_type "
        "VARCHAR(128) NOT NULL DEFAULT 'OrderCreated' AFTER aggregate_id",
        db);
    struct tally x;
    tally_init(&x, 'x', f.n, 1, 1);
    tally_assert(&f, &x, 1);
    tally_assert_once(&f, &x);
    tally_free(&x);
    tally_free(&t);
    tfx_close(&f);
}
END_TEST

/* A test of the discovery, with explicit entries: says so, closes f. */
static bool
skipped_without_pattern(struct tfx *f, const char *test)
{
    if (f->pattern)
        return false;
    fprintf(stderr,
            "it_tenants: %s skipped: explicit entries discover "
            "nothing\n",
            test);
    tfx_close(f);
    return true;
}

/* (c) A tenant created while outboxd runs is found and delivered. */
START_TEST(test_new_tenant)
{
    struct tfx f;
    tfx_open(&f);
    if (skipped_without_pattern(&f, "test_new_tenant"))
        return;
    tfx_start(&f);
    deliver_round(&f, 'a', f.n, true);
    f.added = 1;
    create_tenants(&f, f.n + 1, f.n + 1);
    struct tally t;
    tally_init(&t, 'c', f.n + 1, 3, 1);
    insert_events(&f, 'c', f.n + 1, f.n + 1, 3, 1);
    tally_assert(&f, &t, 3);
    tally_assert_once(&f, &t);
    /* and says so in its metrics */
    char *page = NULL, want[96];
    snprintf(want, sizeof(want),
             "outboxd_tenants_changed_total{change=\"added\"} %d\n", f.n + 1);
    ck_assert_int_eq(it_http_get(f.http_port, "/metrics", &page), 200);
    ck_assert_msg(strstr(page, want) != NULL, "no \"%s\" on /metrics", want);
    free(page);
    /* and the others still go */
    deliver_round(&f, 'd', f.n + 1, true);
    tally_free(&t);
    tfx_close(&f);
}
END_TEST

/*
 * (d) outboxd killed (SIGKILL) while it drains every tenant, then
 * started again: each event delivered at least once, none after a later
 * one of its aggregate, every row SENT.
 */
START_TEST(test_sigkill_mid_drain)
{
    struct tfx f;
    tfx_open(&f);
    const int per = 100;
    long total = (long)f.n * per;
    insert_events(&f, 'k', 1, f.n, per, 10);
    tfx_start(&f);
    /* A tenth of the backlog SENT: the drain is under way. */
    TFX_WAIT(&f, SLOW_MS, unfinished(&f, 1, f.n) <= total * 9 / 10,
             "the drain did not start");
    ck_assert(it_daemon_signal_wait(&f.d, SIGKILL, 5000));
    long long left = unfinished(&f, 1, f.n);
    fprintf(stderr, "it_tenants: killed with %lld of %ld rows unfinished\n",
            left, total);
    ck_assert_msg(left > 0, "the drain ended before the kill: nothing tested");
    tfx_start(&f);
    struct tally t;
    tally_init(&t, 'k', f.n, per, 10);
    tally_assert(&f, &t, total);
    TFX_WAIT(&f, SLOW_MS, unfinished(&f, 1, f.n) == 0,
             "rows left unfinished after the restart");
    fprintf(stderr, "it_tenants: %ld events after the kill, %ld again\n", t.got,
            t.dups);
    tally_free(&t);
    tfx_close(&f);
}
END_TEST

/*
 * (e) The server out of the relay's reach, every session cut and every
 * new one refused (a proxy in front of it moved to a dead port): the
 * discovery fails, and a failed discovery is not an empty one, so no
 * tenant is dropped.  Events committed meanwhile all go once the path
 * is back, in order, and the discovery says it works again.
 */
START_TEST(test_discovery_fails)
{
    struct tfx f;
    struct it_proxy px;
    tfx_open(&f);
    if (skipped_without_pattern(&f, "test_discovery_fails"))
        return;
    it_proxy_start(&px, IT_DB_BINLOG_PORT);
    f.db_port = px.port;
    write_config(&f);
    tfx_start(&f);
    deliver_round(&f, 'a', f.n, true);
    it_proxy_move(&px, it_free_port(), true);
    TFX_WAIT(&f, SLOW_MS,
             log_lines(&f,
                       "cannot discover the tenants, the running ones go "
                       "on",
                       "") >= 1,
             "no log line says the discovery failed");
    struct tally t;
    tally_init(&t, 'e', f.n, 2, 1);
    insert_events(&f, 'e', 1, f.n, 2, 1);
    it_proxy_move(&px, IT_DB_BINLOG_PORT, false);
    tally_assert(&f, &t, (long)f.n * 2);
    TFX_WAIT(&f, SLOW_MS, log_lines(&f, "discovery works again", "") >= 1,
             "no log line says the discovery works again");
    ck_assert_msg(it_metric(f.http_port, "outboxd_discoveries_total{result="
                                         "\"failure\"} ") >= 1,
                  "no failed discovery counted");
    ck_assert_msg(it_metric(f.http_port, "outboxd_tenants_changed_total{change="
                                         "\"removed\"} ") == 0,
                  "tenants were dropped while the server was out of reach");
    deliver_round(&f, 'f', f.n, false); /* 'e' may come again */
    tally_free(&t);
    tfx_close(&f);
    it_proxy_stop(&px);
}
END_TEST

Suite *
it_tenants_suite(void)
{
    Suite *s = suite_create("it_tenants");
    TCase *tc = tcase_create("tenants");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_all_delivered);
    tcase_add_test(tc, test_broken_tenant);
    tcase_add_test(tc, test_new_tenant);
    tcase_add_test(tc, test_sigkill_mid_drain);
    tcase_add_test(tc, test_discovery_fails);
    suite_add_tcase(s, tc);
    return s;
}
