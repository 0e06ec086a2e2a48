/* it_wake: outboxd woken by commits read from the binary log, and polling
 * where there is no binlog, against the two real MariaDB servers. */
#define _GNU_SOURCE
#include "itest.h"
#include "itproxy.h"

#include "binlog.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_wake_suite(void);

/* What a woken claim must beat: far above the few ms it takes, far below
 * the 10 s ceiling a poll alone would wait. */
#define WAKE_LATENCY_MS 1000
/* Every other wait: a loaded 2-core machine, maybe under valgrind. */
#define SLOW_MS 60000
/* A server restart plus the relay's doubling reconnect backoffs. */
#define RESTART_MS 120000

#define LIVE_LINE "binlog stream live from"
#define NO_WAKE_LINE "no binlog wake, its outboxes poll (poll_interval)"
#define STILL_DOWN_LINE "binlog still unavailable"
#define NOT_LIVE_REASON "wake: binlog, and its binlog stream is not live"

/* Ceilings long enough that only a wake can deliver within a second. */
#define LONG_CEILINGS                                                          \
    "        poll_interval: 10s\n"                                             \
    "        wake_poll_interval: 10s\n"

/* The shared fixture on either server, with its HTTP port, and where the
 * daemon finds the database and the broker when a test moves them. */
struct wake_fx {
    struct it_fx it;
    char outbox[160];
    unsigned config_port; /* the daemon's, if not it.db_port (a proxy) */
    char amqp_url[128];   /* the daemon's broker, if not IT_AMQP_URL */
};

/* Fails the test with the daemon's log when expr does not come true. */
#define FX_WAIT(f, ms, expr, ...)                                              \
    do {                                                                       \
        if (!IT_WAIT(ms, expr)) {                                              \
            it_daemon_dump_log(&(f)->it.d);                                    \
            ck_abort_msg(__VA_ARGS__);                                         \
        }                                                                      \
    } while (0)

/* wake: the database's wake key (NULL: the default, auto).  The broker
 * keeps its default heartbeat (30 s): the worker comes back every half
 * heartbeat, and a shorter one would claim within the 10 s ceilings. */
static void
fx_write_config(struct wake_fx *f, const char *wake, const char *outbox_keys)
{
    char wake_line[64] = "";
    if (wake != NULL)
        snprintf(wake_line, sizeof(wake_line), "    wake: %s\n", wake);
    it_write_file(f->it.conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"127.0.0.1:%u\"\n"
                  "  shutdown_timeout: 10s\n"
                  "brokers:\n"
                  "  main:\n"
                  "    url: %s\n"
                  "    confirm_timeout: 10s\n"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    port: %u\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "%s"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        broker: main\n"
                  "        exchange: \"%s\"\n"
                  "%s",
                  f->it.name, f->it.port,
                  f->amqp_url[0] != '\0' ? f->amqp_url : IT_AMQP_URL, f->it.db,
                  f->config_port ? f->config_port : f->it.db_port, f->it.user,
                  f->it.password, f->it.db, wake_line, f->it.ex,
                  outbox_keys ? outbox_keys : "");
}

/* replication: the relay account also holds what a binlog stream needs. */
static void
fx_open(struct wake_fx *f, unsigned db_port, bool replication, const char *wake,
        const char *outbox_keys)
{
    memset(f, 0, sizeof(*f));
    it_fx_open_port(&f->it, db_port, "it_wake", "sql/outbox.sql");
    snprintf(f->outbox, sizeof(f->outbox), "%s.outbox_event", f->it.db);
    f->it.port = it_free_port();
    it_db_grant_relay_port(db_port, f->it.db, "outbox_event", f->it.user,
                           sizeof(f->it.user), f->it.password,
                           sizeof(f->it.password));
    if (replication)
        it_db_grant_replication(db_port, f->it.db);
    f->it.consumer = it_consumer_new(f->it.ex, "#");
    fx_write_config(f, wake, outbox_keys);
}

/* ---- what the daemon shows ---- */

/* The value of the sample line "series value" in text; -1 if absent. */
static double
sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return -1;
}

/* One series from a fresh scrape of /metrics; -1 if absent or no answer. */
static double
fx_series(struct wake_fx *f, const char *series)
{
    char *body;
    int status = it_http_get(f->it.port, "/metrics", &body);
    double v = status == 200 ? sample(body, series) : -1;
    free(body);
    return v;
}

/* The outbox's sample of family; -1 if absent. */
static double
fx_metric(struct wake_fx *f, const char *family)
{
    char series[256];
    snprintf(series, sizeof(series), "%s{outbox=\"%s\"}", family, f->outbox);
    return fx_series(f, series);
}

/* outboxd_wake_source of outbox and source ("binlog" or "poll"). */
static double
fx_source_of(struct wake_fx *f, const char *outbox, const char *source)
{
    char series[256];
    snprintf(series, sizeof(series),
             "outboxd_wake_source{outbox=\"%s\",source=\"%s\"}", outbox,
             source);
    return fx_series(f, series);
}

static double
fx_source(struct wake_fx *f, const char *source)
{
    return fx_source_of(f, f->outbox, source);
}

/* Lines of the daemon's log holding a, and b unless it is NULL. */
static int
log_lines(struct wake_fx *f, const char *a, const char *b)
{
    char *text = it_file_read(f->it.d.log_path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        n += strstr(line, a) != NULL && (b == NULL || strstr(line, b));
    free(text);
    return n;
}

static bool
fx_readyz(struct wake_fx *f, int status, const char *needle)
{
    char *body;
    int got = it_http_get(f->it.port, "/readyz", &body);
    bool ok = got == status && (needle == NULL || strstr(body, needle));
    free(body);
    return ok;
}

/* Binlog Dump connections of the relay's account on its server. */
static long long
fx_dumps(struct wake_fx *f)
{
    return it_db_int(f->it.sql,
                     "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                     "WHERE COMMAND LIKE 'Binlog Dump%%' AND USER = '%s'",
                     f->it.user);
}

/* "file:position" where the server's binary log ends, malloc'd. */
static char *
binlog_end(struct wake_fx *f)
{
    ck_assert_msg(mysql_query(f->it.sql, "SHOW MASTER STATUS") == 0, "%s",
                  mysql_error(f->it.sql));
    MYSQL_RES *res = mysql_store_result(f->it.sql);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    char *at = NULL;
    ck_assert_msg(row && row[0] && row[1], "SHOW MASTER STATUS: no binlog");
    at = xasprintf("%s:%s", row[0], row[1]);
    mysql_free_result(res);
    return at;
}

/* tests/servers.sh starts the binlog server with this schema left out
 * of the binary log (--binlog-ignore-db), as a user's filter would. */
#define UNLOGGED_DB "outboxd_test_unlogged"
#define UNLOGGED_OUTBOX "unlogged.outbox_event"
#define UNLOGGED_LINE "binlog: the server's binary log leaves out the schema"

/* The outbox of UNLOGGED_DB found by a database_like entry "unlogged". */
#define UNLOGGED_TENANT "unlogged/" UNLOGGED_DB ".outbox_event"

/*
 * A second database entry on the fixture's server and account: UNLOGGED_DB
 * with sql/outbox.sql's table, publishing to the same exchange, with a
 * wake_poll_interval a relay counting on a wake would idle for.  As a
 * tenant (database_like, looked for every second), the schema is left
 * for the test to create.
 */
static void
fx_add_unlogged(struct wake_fx *f, bool tenant)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    ck_assert_msg(mysql_query(f->it.sql, "SHOW MASTER STATUS") == 0, "%s",
                  mysql_error(f->it.sql));
    MYSQL_RES *res = mysql_store_result(f->it.sql);
    MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
    ck_assert_msg(row != NULL && row[3] != NULL &&
                      strstr(row[3], UNLOGGED_DB) != NULL,
                  "the binlog server does not leave out " UNLOGGED_DB
                  ": restart it with tests/servers.sh restart-mariadb-binlog");
    mysql_free_result(res);
    it_db_drop_port(f->it.db_port, UNLOGGED_DB);
    if (!tenant)
        it_db_create_port(f->it.db_port, UNLOGGED_DB,
                          it_src_path("sql/outbox.sql"));
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++)
        it_db_exec(f->it.sql, "GRANT ALL ON `" UNLOGGED_DB "`.* TO '%s'@'%s'",
                   f->it.user, hosts[i]);
    char *conf = it_file_read(f->it.conf);
    it_write_file(f->it.conf,
                  "%s"
                  "  unlogged:\n"
                  "    host: 127.0.0.1\n"
                  "    port: %u\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "%s"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        broker: main\n"
                  "        exchange: \"%s\"\n"
                  "        poll_interval: 1s\n"
                  "        wake_poll_interval: 60s\n",
                  conf, f->it.db_port, f->it.user, f->it.password,
                  tenant ? "    database_like: 'outboxd\\_test\\_unlogged'\n"
                           "    discover_interval: 1s\n"
                         : "    database: " UNLOGGED_DB "\n",
                  f->it.ex);
    free(conf);
}

/* ---- events ---- */

/* Inserts event id in a transaction of its own; returns the time just
 * before its COMMIT, where a wake's latency starts. */
static uint64_t
fx_insert(struct wake_fx *f, const char *id)
{
    it_db_exec(f->it.sql, "START TRANSACTION");
    it_db_exec(f->it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload) VALUES ('%s', 'Order', "
               "'%s', 'OrderCreated', '{}')",
               id, id);
    uint64_t t0 = it_now_ms();
    it_db_exec(f->it.sql, "COMMIT");
    return t0;
}

/* Receives event id, the next message; returns when it came. */
static uint64_t
fx_receive(struct wake_fx *f, const char *id, int timeout_ms)
{
    struct it_message m;
    if (it_consumer_next(f->it.consumer, &m, timeout_ms) != 1) {
        it_daemon_dump_log(&f->it.d);
        ck_abort_msg("%s not delivered within %d ms", id, timeout_ms);
    }
    uint64_t at = it_now_ms();
    ck_assert_msg(m.message_id != NULL && strcmp(m.message_id, id) == 0,
                  "expected %s, got %s", id, m.message_id);
    it_message_free(&m);
    return at;
}

/* Inserts id and receives it within timeout_ms; returns the latency. */
static uint64_t
fx_deliver(struct wake_fx *f, const char *id, int timeout_ms)
{
    uint64_t t0 = fx_insert(f, id);
    uint64_t ms = fx_receive(f, id, timeout_ms) - t0;
    fprintf(stderr, "it_wake: %s delivered %llu ms after its commit\n", id,
            (unsigned long long)ms);
    return ms;
}

/* An event committed now arrives within WAKE_LATENCY_MS, and the binlog
 * stream counted its wake. */
static void
fx_assert_woken(struct wake_fx *f, const char *id)
{
    double wakes = fx_metric(f, "outboxd_wakes_total");
    ck_assert_msg(wakes >= 0, "no outboxd_wakes_total for %s", f->outbox);
    uint64_t ms = fx_deliver(f, id, 30000);
    ck_assert_msg(ms <= WAKE_LATENCY_MS,
                  "%s took %llu ms from commit to consumer (limit %d)", id,
                  (unsigned long long)ms, WAKE_LATENCY_MS);
    FX_WAIT(f, SLOW_MS, fx_metric(f, "outboxd_wakes_total") > wakes,
            "outboxd_wakes_total stayed %.0f after %s", wakes, id);
}

/* ---- states ---- */

/* The nth "live" line is logged and /metrics says the binlog wakes. */
static void
fx_wait_live(struct wake_fx *f, int nth, int timeout_ms)
{
    FX_WAIT(f, timeout_ms, log_lines(f, LIVE_LINE, NULL) >= nth,
            "no \"%s\" line number %d in the log", LIVE_LINE, nth);
    FX_WAIT(f, SLOW_MS, fx_source(f, "binlog") == 1,
            "wake_source binlog did not turn 1");
    ck_assert(fx_source(f, "poll") == 0);
}

/* The worker's empty claims have backed off to a long wait: from here on
 * only a wake claims soon.  A wait at the ceiling is spread by up to a
 * quarter (daemon/worker_int.h PERIOD_SPREAD): a 1 s ceiling waits 0.75 s
 * at least. */
static void
fx_wait_idle(struct wake_fx *f)
{
    FX_WAIT(f, SLOW_MS, fx_metric(f, "outboxd_poll_interval_seconds") >= 0.7,
            "the outbox never backed off to a wait of 0.7 s or more");
}

/* The stream gave up for why, said so once, and the outbox polls. */
static void
fx_assert_polls_because(struct wake_fx *f, const char *why)
{
    FX_WAIT(f, SLOW_MS, log_lines(f, NO_WAKE_LINE, why) >= 1,
            "no \"%s\" line saying %s", NO_WAKE_LINE, why);
    /* Two retries since, each meeting the same fault: still one warning. */
    FX_WAIT(f, SLOW_MS, log_lines(f, STILL_DOWN_LINE, why) >= 2,
            "the stream did not retry");
    ck_assert_int_eq(log_lines(f, NO_WAKE_LINE, NULL), 1);
    FX_WAIT(f, SLOW_MS, fx_source(f, "poll") == 1,
            "wake_source poll did not turn 1");
    ck_assert(fx_source(f, "binlog") == 0);
}

/* SIGTERM ends it with status 0 (under valgrind: no leak), whatever its
 * stream was doing: a blocking read, or a wait to retry. */
static void
fx_assert_clean_exit(struct wake_fx *f)
{
    if (!it_daemon_signal_wait(&f->it.d, SIGTERM, SLOW_MS)) {
        it_daemon_dump_log(&f->it.d);
        ck_abort_msg("outboxd did not exit on SIGTERM");
    }
    ck_assert_msg(WIFEXITED(f->it.d.status) && WEXITSTATUS(f->it.d.status) == 0,
                  "outboxd ended with wait status 0x%x", f->it.d.status);
}

/* ---- tests ---- */

/* A commit wakes the idle outbox: delivered in well under its ceiling. */
START_TEST(test_binlog_wake)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_wait_idle(&f);
    fx_assert_woken(&f, "woken-1");
    ck_assert(fx_metric(&f, "outboxd_wakes_total") >= 1);
    ck_assert(fx_source(&f, "binlog") == 1);
    ck_assert_int_eq(fx_dumps(&f), 1);
    ck_assert_int_eq(log_lines(&f, NO_WAKE_LINE, NULL), 0);
    /* From the file and offset where the binlog ended, not by GTID (only
     * a Galera node needs that, it_galera): a GTID start makes the server
     * read its current binlog file from the start to find the offset. */
    ck_assert_int_eq(log_lines(&f, LIVE_LINE " binlog.", NULL), 1);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/* The replication connection killed: polling covers the gap, the stream
 * comes back and wakes again. */
START_TEST(test_stream_killed)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL,
            "        poll_interval: 2s\n"
            "        wake_poll_interval: 10s\n");
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_wait_idle(&f);
    long long id = it_db_int(f.it.sql,
                             "SELECT ID FROM information_schema.PROCESSLIST "
                             "WHERE COMMAND LIKE 'Binlog Dump%%' AND "
                             "USER = '%s'",
                             f.it.user);
    ck_assert_int_gt(id, 0);
    it_db_exec(f.it.sql, "KILL %lld", id);
    /* Inserted once the relay saw the break, before it reconnects (half
     * a second at the soonest): only the poll or a claim at reconnect can
     * find it, within the 2 s ceiling plus margin for a loaded machine. */
    FX_WAIT(&f, SLOW_MS, log_lines(&f, NO_WAKE_LINE, "stream broke") == 1,
            "the relay did not log the stream's break");
    uint64_t t0 = fx_insert(&f, "gap-1");
    /* Read after the commit: the stream was not live again before it. */
    ck_assert_msg(log_lines(&f, LIVE_LINE, NULL) == 1,
                  "the stream was back before gap-1 was committed: no gap");
    fprintf(stderr, "it_wake: gap-1 delivered %llu ms after its commit\n",
            (unsigned long long)(fx_receive(&f, "gap-1", 6000) - t0));
    fx_wait_live(&f, 2, SLOW_MS);
    fx_wait_idle(&f);
    fx_assert_woken(&f, "back-1");
    it_fx_close(&f.it);
}
END_TEST

/*
 * The relay said that UNLOGGED_DB is left out of the binlog, and outbox
 * there polls: an event committed to it arrives by that poll, not by the
 * 60 s look of a relay waiting for a wake.  The fixture's own outbox is
 * still woken (event logged), and the relay exits clean.
 */
static void
fx_assert_unlogged_polls(struct wake_fx *f, const char *outbox,
                         const char *logged)
{
    FX_WAIT(f, SLOW_MS,
            log_lines(f, UNLOGGED_LINE,
                      UNLOGGED_DB ".outbox_event among them") >= 1,
            "the relay did not say that %s is not logged", outbox);
    FX_WAIT(f, SLOW_MS, fx_source_of(f, outbox, "poll") == 1,
            "wake_source poll of %s did not turn 1", outbox);
    ck_assert(fx_source_of(f, outbox, "binlog") == 0);
    MYSQL *u = it_db_connect_port(f->it.db_port, UNLOGGED_DB);
    it_db_exec(u, "INSERT INTO outbox_event (event_id, aggregate_type, "
                  "aggregate_id, event_type, payload) VALUES ('unlogged-1', "
                  "'Order', 'u1', 'OrderCreated', '{}')");
    mysql_close(u);
    fx_receive(f, "unlogged-1", 10000);
    fx_assert_woken(f, logged);
    fx_assert_clean_exit(f);
}

/*
 * A schema the server's binary log leaves out (binlog_ignore_db) cannot
 * wake its outbox, though the stream of its server is live: the relay
 * says so, and that outbox polls at its poll_interval rather than idle
 * for its wake_poll_interval (60 s), while the other outbox of the same
 * stream is still woken.
 */
START_TEST(test_unlogged_schema_polls)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    fx_add_unlogged(&f, false);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_assert_unlogged_polls(&f, UNLOGGED_OUTBOX, "logged-1");
    ck_assert_int_ge(
        log_lines(&f, UNLOGGED_LINE, "Binlog_Ignore_DB '" UNLOGGED_DB "'"), 1);
    it_fx_close(&f.it);
    it_db_drop_port(IT_DB_BINLOG_PORT, UNLOGGED_DB);
}
END_TEST

/*
 * The same for a watch added to a stream already live: a tenant whose
 * schema is created once the relay runs is found by discovery and
 * watched on the live stream, which says so in its own line and never
 * tells that outbox live, without connecting again.
 */
START_TEST(test_unlogged_tenant_added_live)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    fx_add_unlogged(&f, true);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_deliver(&f, "logged-1", SLOW_MS);
    ck_assert_int_eq(log_lines(&f, UNLOGGED_LINE, NULL), 0);
    it_db_create_port(f.it.db_port, UNLOGGED_DB, it_src_path("sql/outbox.sql"));
    fx_assert_unlogged_polls(&f, UNLOGGED_TENANT, "logged-2");
    ck_assert_int_eq(log_lines(&f, LIVE_LINE, NULL), 1);
    it_fx_close(&f.it);
    it_db_drop_port(IT_DB_BINLOG_PORT, UNLOGGED_DB);
}
END_TEST

/* The binlog server restarted: delivery resumes and the stream too. */
START_TEST(test_server_restarted)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_deliver(&f, "before-1", SLOW_MS);
    ck_assert_int_eq(it_sh("bash '%s' restart-mariadb-binlog >/dev/null",
                           it_src_path("tests/servers.sh")),
                     0);
    mysql_close(f.it.sql);
    f.it.sql = it_db_connect_port(f.it.db_port, f.it.db);
    fx_deliver(&f, "after-1", RESTART_MS);
    fx_wait_live(&f, 2, RESTART_MS);
    fx_wait_idle(&f);
    fx_assert_woken(&f, "after-2");
    it_fx_close(&f.it);
}
END_TEST

/* No binlog on the server: one warning why, and the outbox polls. */
START_TEST(test_no_binlog_polls)
{
    struct wake_fx f;
    /* The least-privilege account: the missing binlog is what it is told,
     * not the grants that would not help. */
    fx_open(&f, IT_DB_PORT, false, NULL, NULL);
    it_fx_start(&f.it);
    fx_assert_polls_because(&f, "log_bin is OFF");
    /* The default 1 s ceiling, and margin for a loaded machine. */
    fx_deliver(&f, "polled-1", 5000);
    /* wake: auto asks for no binlog to be ready. */
    FX_WAIT(&f, SLOW_MS, fx_readyz(&f, 200, NULL), "/readyz did not turn 200");
    ck_assert_int_eq(log_lines(&f, LIVE_LINE, NULL), 0);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/* A relay account without the replication privileges: told which. */
START_TEST(test_no_privilege_polls)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, false, NULL, NULL);
    it_fx_start(&f.it);
    fx_assert_polls_because(&f, "REPLICATION SLAVE");
    fx_deliver(&f, "polled-1", 5000);
    ck_assert_int_eq(log_lines(&f, LIVE_LINE, NULL), 0);
    it_fx_close(&f.it);
}
END_TEST

/* An account with REPLICATION SLAVE but not BINLOG MONITOR cannot read
 * SHOW MASTER STATUS: its stream starts by GTID, and wakes all the same. */
START_TEST(test_no_binlog_monitor_starts_by_gtid)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, false, NULL, LONG_CEILINGS);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++)
        it_db_exec(f.it.sql, "GRANT REPLICATION SLAVE ON *.* TO '%s'@'%s'",
                   f.it.user, hosts[i]);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    ck_assert_int_eq(log_lines(&f, LIVE_LINE " GTID", NULL), 1);
    fx_wait_idle(&f);
    fx_assert_woken(&f, "gtid-1");
    it_fx_close(&f.it);
}
END_TEST

/* Whether either counter moved from what was read. */
static bool
counters_moved(struct wake_fx *f, double wakes, double empty)
{
    double w = fx_metric(f, "outboxd_wakes_total");
    double e = fx_metric(f, "outboxd_claims_empty_total");
    /* A scrape that failed is no movement: say so rather than blame it. */
    ck_assert_msg(w >= 0 && e >= 0, "/metrics: %s", it_http_why);
    return w != wakes || e != empty;
}

/*
 * An XA transaction's insert is logged at its XA PREPARE, before anyone
 * can see the row, and becomes visible at its XA COMMIT, which names no
 * table: that commit wakes the relay, so the event arrives within the
 * wake latency, not at the 10 s ceiling.  An event committed in between
 * closes the prepared group in the stream: the XA COMMIT is then the
 * only commit that could wake the relay for the row.
 */
START_TEST(test_xa_commit_wakes)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_deliver(&f, "warm-1", SLOW_MS);
    MYSQL *xa = it_db_connect_port(IT_DB_BINLOG_PORT, f.it.db);
    it_db_exec(xa, "XA START 'outboxd-xa'");
    it_db_exec(xa, "INSERT INTO outbox_event (event_id, aggregate_type, "
                   "aggregate_id, event_type, payload) VALUES ('xa-1', "
                   "'Order', 'xa', 'OrderCreated', '{}')");
    it_db_exec(xa, "XA END 'outboxd-xa'");
    it_db_exec(xa, "XA PREPARE 'outboxd-xa'");
    fx_deliver(&f, "between-1", SLOW_MS); /* xa-1 not seen yet */
    FX_WAIT(&f, SLOW_MS, fx_metric(&f, "outboxd_poll_interval_seconds") >= 5,
            "the relay never went idle till its ceiling");
    uint64_t t0 = it_now_ms();
    it_db_exec(xa, "XA COMMIT 'outboxd-xa'");
    mysql_close(xa);
    uint64_t ms = fx_receive(&f, "xa-1", SLOW_MS) - t0;
    ck_assert_msg(ms <= WAKE_LATENCY_MS,
                  "xa-1 arrived %llu ms after its commit",
                  (unsigned long long)ms);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/* Commits to another table of the same database wake nothing. */
START_TEST(test_other_table_no_wake)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    it_db_exec(f.it.sql, "CREATE TABLE other_table (id INT AUTO_INCREMENT "
                         "PRIMARY KEY, note VARCHAR(32))");
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    /* Just after a delivery the next empty claim is the 10 s ceiling away,
     * 7.5 s at the soonest once spread: the counters can only move by a
     * wake meanwhile. */
    fx_assert_woken(&f, "warm-1");
    fx_wait_idle(&f);
    uint64_t idle_at = it_now_ms();
    double wakes = fx_metric(&f, "outboxd_wakes_total");
    double empty = fx_metric(&f, "outboxd_claims_empty_total");
    char *before = binlog_end(&f);
    for (int i = 0; i < 20; i++)
        it_db_exec(f.it.sql, "INSERT INTO other_table (note) VALUES ('n%d')",
                   i);
    char *after = binlog_end(&f);
    ck_assert_msg(strcmp(before, after) != 0, "the inserts were not logged");
    free(before);
    free(after);
    /* Something that must not happen needs a window: a short one. */
    ck_assert(!IT_WAIT(500, counters_moved(&f, wakes, empty)));
    ck_assert_msg(it_now_ms() - idle_at < 7000,
                  "too slow to tell: the ceiling's claim may have come");
    /* The stream reads commits in order: one wake more, this insert's,
     * says that none of the 20 before it woke the outbox. */
    fx_assert_woken(&f, "after-1");
    ck_assert(fx_metric(&f, "outboxd_wakes_total") == wakes + 1);
    /* MariaDB's stream is read whole: nothing woke every outbox. */
    char series[128];
    snprintf(series, sizeof(series),
             "outboxd_binlog_unreadable_total{server=\"127.0.0.1:%d\"}",
             IT_DB_BINLOG_PORT);
    ck_assert_msg(fx_series(&f, series) == 0, "%s is not 0", series);
    it_fx_close(&f.it);
}
END_TEST

/* wake: poll opens no replication connection, even where it could. */
START_TEST(test_wake_poll)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, "poll", NULL);
    it_fx_start(&f.it);
    fx_deliver(&f, "polled-1", 5000);
    FX_WAIT(&f, SLOW_MS, fx_source(&f, "poll") == 1,
            "wake_source poll did not turn 1");
    ck_assert(fx_source(&f, "binlog") == 0);
    /* Its absence, watched for a second. */
    ck_assert(!IT_WAIT(1000, fx_dumps(&f) > 0));
    ck_assert_int_eq(log_lines(&f, LIVE_LINE, NULL), 0);
    ck_assert_int_eq(log_lines(&f, NO_WAKE_LINE, NULL), 0);
    it_fx_close(&f.it);
}
END_TEST

/* A new binlog file (as at a size limit or a backup) is followed: the
 * same stream wakes the outbox from it, with no reconnect. */
START_TEST(test_binlog_rotation)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, LONG_CEILINGS);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    for (int i = 0; i < 2; i++) {
        char *before = binlog_end(&f);
        it_db_exec(f.it.sql, "FLUSH BINARY LOGS");
        char *after = binlog_end(&f);
        ck_assert_msg(strcmp(before, after) != 0,
                      "FLUSH BINARY LOGS did not start a new file");
        free(before);
        free(after);
        fx_wait_idle(&f);
        char id[32];
        snprintf(id, sizeof(id), "rotated-%d", i);
        fx_assert_woken(&f, id);
    }
    ck_assert_int_eq(log_lines(&f, LIVE_LINE, NULL), 1);
    ck_assert_int_eq(fx_dumps(&f), 1);
    it_fx_close(&f.it);
}
END_TEST

/* ---- the binlog stream stalled by a proxy (tests/itproxy.h) ---- */

/*
 * A stream that stalls (no event, no heartbeat) is given up after a few
 * missed heartbeats: the outbox polls meanwhile, and the stream comes
 * back once the path does.
 */
START_TEST(test_stream_stalled)
{
    struct wake_fx f;
    struct it_proxy px;
    it_proxy_start(&px, IT_DB_BINLOG_PORT);
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    f.config_port = px.port;
    fx_write_config(&f, NULL,
                    "        poll_interval: 1s\n"
                    "        wake_poll_interval: 30s\n");
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_assert_woken(&f, "before-stall");
    px.stall_dump = true;
    /* Three missed heartbeats, and the stream is given up ... */
    FX_WAIT(&f, SLOW_MS, fx_source(&f, "poll") == 1,
            "wake_source poll did not turn 1 while the stream stalled");
    ck_assert_int_ge(log_lines(&f, NO_WAKE_LINE, "broke"), 1);
    /* ... and an event waits the poll's 1 s ceiling, not the 30 s one. */
    fx_wait_idle(&f);
    fx_deliver(&f, "stalled-1", 5000);
    px.stall_dump = false;
    fx_wait_live(&f, 2, RESTART_MS);
    fx_assert_woken(&f, "after-stall");
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

/* wake: binlog where there is none: not ready, and still delivering. */
START_TEST(test_wake_binlog_required)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_PORT, true, "binlog", NULL);
    it_fx_start(&f.it);
    FX_WAIT(&f, SLOW_MS, fx_readyz(&f, 503, NOT_LIVE_REASON),
            "/readyz did not say \"%s\"", NOT_LIVE_REASON);
    fx_deliver(&f, "polled-1", 5000);
    ck_assert(fx_readyz(&f, 503, NOT_LIVE_REASON));
    ck_assert(fx_source(&f, "poll") == 1);
    it_fx_close(&f.it);
}
END_TEST

/* ---- the stream's watch list changed while it runs (in process) ---- */

/* What one client of the stream was told, from the stream's thread:
 * the ids of its inserts are written before inserts counts them. */
struct told {
    atomic_int commits, inserts;
    atomic_bool live;
    uint64_t ids[32];
    size_t nids;
    bool ids_unknown;
    int id_column; /* what it answers for the table, with ncolumns */
    unsigned ncolumns;
};

static void
told_commit_cb(void *arg, bool inserted, const struct binlog_ids *ids)
{
    struct told *t = arg;
    if (inserted && !ids->known)
        t->ids_unknown = true;
    for (size_t i = 0; inserted && ids->known && i < ids->n; i++)
        if (t->nids < sizeof(t->ids) / sizeof(t->ids[0]))
            t->ids[t->nids++] = ids->id[i];
    t->commits++;
    t->inserts += inserted;
}

static int
told_id_column_cb(void *arg, unsigned *ncolumns)
{
    struct told *t = arg;
    *ncolumns = t->ncolumns;
    return t->id_column;
}

static void
told_state_cb(void *arg, bool live)
{
    struct told *t = arg;
    t->live = live;
}

static void
watch(struct binlog_stream *s, const char *db, const char *table,
      struct told *t)
{
    struct binlog_client c = {.commit = told_commit_cb,
                              .id_column = told_id_column_cb,
                              .state = told_state_cb,
                              .arg = t};
    binlog_stream_add(s, db, table, &c);
}

static void
insert_into(struct wake_fx *f, const char *table, const char *id)
{
    it_db_exec(f->it.sql,
               "INSERT INTO %s (event_id, aggregate_type, aggregate_id, "
               "event_type, payload) VALUES ('%s', 'Order', '%s', "
               "'OrderCreated', '{}')",
               table, id, id);
}

/* Clients added to and removed from the running stream, each time
 * freed at once (ASan sees any callback after its removal), while
 * commits into the table they watch flow: none is told after. */
static void
churn_clients(struct wake_fx *f, struct binlog_stream *s, const char *table)
{
    for (int i = 0; i < 200; i++) {
        struct told *t = xcalloc(1, sizeof(*t));
        watch(s, f->it.db, table, t);
        ck_assert(t->live);
        if (i % 20 == 0) {
            char id[32];
            snprintf(id, sizeof(id), "churn-%d", i);
            insert_into(f, table, id);
        }
        binlog_stream_remove(s, t);
        free(t);
    }
}

/* The relay account of f as a database entry of the binlog server. */
static struct database_config
fx_binlog_db(struct wake_fx *f)
{
    return (struct database_config){.host = "127.0.0.1",
                                    .port = IT_DB_BINLOG_PORT,
                                    .user = f->it.user,
                                    .password = f->it.password,
                                    .database = f->it.db,
                                    .connect_timeout_ms = 5000};
}

/* A stream started with no client serves the first one added later:
 * told live, and woken by its table's commits. */
START_TEST(test_watch_list_from_empty)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    struct database_config db = fx_binlog_db(&f);
    struct told t = {0};
    struct binlog_stream *s = binlog_stream_new(&db);
    ck_assert_int_eq(binlog_stream_start(s), 0);
    /* Its dump under way, it reads with no one to tell. */
    ck_assert_msg(IT_WAIT(SLOW_MS, fx_dumps(&f) == 1), "no binlog dump");
    watch(s, f.it.db, "outbox_event", &t);
    ck_assert_msg(IT_WAIT(SLOW_MS, t.live), "the stream never went live");
    insert_into(&f, "outbox_event", "late-1");
    ck_assert_msg(IT_WAIT(SLOW_MS, t.inserts == 1), "told %d inserts of 1",
                  (int)t.inserts);
    binlog_stream_free(s);
    it_fx_close(&f.it);
}
END_TEST

/*
 * A stream started with one client: a second, added while it runs, is
 * told it is live and woken by commits into its table; the first,
 * removed, is told nothing more while the second keeps being told.
 */
START_TEST(test_watch_list_live)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    it_db_exec(f.it.sql, "CREATE TABLE second_event LIKE outbox_event");
    struct database_config db = fx_binlog_db(&f);
    struct told first = {0}, second = {0};
    struct binlog_stream *s = binlog_stream_new(&db);
    watch(s, f.it.db, "outbox_event", &first);
    ck_assert_int_eq(binlog_stream_start(s), 0);
    ck_assert_msg(IT_WAIT(SLOW_MS, first.live), "the stream never went live");

    watch(s, f.it.db, "second_event", &second);
    ck_assert_msg(second.live, "a client added to a live stream: not told");
    insert_into(&f, "second_event", "second-1");
    insert_into(&f, "outbox_event", "first-1");
    ck_assert_msg(IT_WAIT(SLOW_MS, second.inserts == 1 && first.inserts == 1),
                  "told: first %d, second %d, of one insert each",
                  (int)first.inserts, (int)second.inserts);

    binlog_stream_remove(s, &first);
    int before = first.commits;
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof(id), "after-%d", i);
        insert_into(&f, "outbox_event", id);
        insert_into(&f, "second_event", id);
    }
    /* The stream reads commits in order: once the last insert into
     * second_event is told, every one into outbox_event was read. */
    ck_assert_msg(IT_WAIT(SLOW_MS, second.inserts == 4),
                  "second told %d inserts of 4", (int)second.inserts);
    ck_assert_int_eq(first.commits, before);

    churn_clients(&f, s, "outbox_event");
    insert_into(&f, "second_event", "last");
    ck_assert(IT_WAIT(SLOW_MS, second.inserts == 5));
    ck_assert_int_eq(first.commits, before);
    ck_assert_uint_eq(binlog_stream_watches(s), 1);
    binlog_stream_free(s);
    it_fx_close(&f.it);
}
END_TEST

/*
 * The ids of the rows a transaction inserted, read from the live stream
 * of the real server by the column information_schema names: one row
 * alone, then three in one transaction of two statements, told in id
 * order; a client whose column count is off by one gets none.
 */
START_TEST(test_watch_ids_live)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    struct database_config db = fx_binlog_db(&f);
    const char *cols = "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                       "DATABASE() AND TABLE_NAME = 'outbox_event'";
    struct told t = {
        .id_column = it_db_int(f.it.sql,
                               "SELECT ORDINAL_POSITION - 1 %s AND "
                               "COLUMN_NAME = 'id'",
                               cols),
        .ncolumns = (unsigned)it_db_int(f.it.sql, "SELECT COUNT(*) %s", cols)};
    struct told off = t;
    off.ncolumns++;
    struct binlog_stream *s = binlog_stream_new(&db);
    watch(s, f.it.db, "outbox_event", &t);
    watch(s, f.it.db, "outbox_event", &off);
    ck_assert_int_eq(binlog_stream_start(s), 0);
    ck_assert_msg(IT_WAIT(SLOW_MS, t.live), "the stream never went live");
    insert_into(&f, "outbox_event", "ids-1");
    it_db_exec(f.it.sql, "BEGIN");
    insert_into(&f, "outbox_event", "ids-2");
    it_db_exec(f.it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload) VALUES ('ids-3', 'Order', "
               "'3', 'OrderCreated', '{}'), ('ids-4', 'Order', '4', "
               "'OrderCreated', '{}')");
    it_db_exec(f.it.sql, "COMMIT");
    ck_assert_msg(IT_WAIT(SLOW_MS, t.inserts == 2 && off.inserts == 2),
                  "told %d and %d inserts of 2", (int)t.inserts,
                  (int)off.inserts);
    ck_assert(!t.ids_unknown);
    ck_assert_uint_eq(t.nids, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq((long long)t.ids[i],
                         it_db_int(f.it.sql,
                                   "SELECT id FROM outbox_event WHERE "
                                   "event_id = 'ids-%d'",
                                   i + 1));
    ck_assert(off.ids_unknown && off.nids == 0);
    binlog_stream_free(s);
    it_fx_close(&f.it);
}
END_TEST

/* ---- the lean steady state (docs/design.md) ---- */

/* The rows of event id recorded as done: SENT, or gone (on_sent:
 * delete). */
static bool
fx_done(struct wake_fx *f, const char *id, bool deleted)
{
    return it_db_int(f->it.sql,
                     "SELECT COUNT(*) FROM outbox_event WHERE event_id = '%s' "
                     "AND status = 'SENT'",
                     id) == (deleted ? 0 : 1) &&
           it_db_int(f->it.sql,
                     "SELECT COUNT(*) FROM outbox_event WHERE event_id = '%s'",
                     id) == (deleted ? 0 : 1);
}

/* An idle outbox's events, committed one at a time: every batch lean,
 * each row written once, SENT or deleted. */
static void
lean_steady(const char *outbox_keys, bool deleted)
{
    enum { N = 20 };
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, outbox_keys);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_metric(&f, "outboxd_claims_empty_total") >= 1,
            "the relay never made its first claim");
    double batches = fx_metric(&f, "outboxd_batches_total");
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof(id), "steady-%d", i);
        fx_deliver(&f, id, SLOW_MS);
        FX_WAIT(&f, SLOW_MS, fx_done(&f, id, deleted), "%s not recorded", id);
    }
    /* One batch per event, each lean; no row took a lease or an attempt. */
    ck_assert_double_eq(fx_metric(&f, "outboxd_batches_total") - batches, N);
    ck_assert_double_eq(fx_metric(&f, "outboxd_batches_lean_total"), N);
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(*) FROM outbox_event "
                               "WHERE status = 'SENT' AND retry_count "
                               "= 0 AND locked_by IS NULL AND "
                               "locked_until IS NULL"),
                     deleted ? 0 : N);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event"),
                     deleted ? 0 : N);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f.it.consumer, &m, 500), 0);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}

START_TEST(test_lean_steady_state)
{
    lean_steady(NULL, false);
}
END_TEST

START_TEST(test_lean_steady_state_delete)
{
    lean_steady("        on_sent: delete\n", true);
}
END_TEST

#define NOT_COUNTED_LINE "rows not counted: no change unaccounted for"

/* The outbox's rows of status by outboxd_rows; -1 if absent. */
static double
fx_rows(struct wake_fx *f, const char *status)
{
    char series[256];
    snprintf(series, sizeof(series),
             "outboxd_rows{outbox=\"%s\",status=\"%s\"}", f->outbox, status);
    return fx_series(f, series);
}

/*
 * The gauges' count (outboxd_rows, every 5 s) is left out while every
 * change of the table since the last is the relay's own: events it sent
 * in full and its records of them.  A small outbox of a thousand tenants
 * counted after nearly every event, three statements each time.  An
 * event goes out every 0.8 s over 16 s, so that no turn of the gauges
 * finds the table untouched; at least one of those turns (three or more)
 * must then count nothing, as a turn may fall while an event is on its
 * way.  Then a write of another session's (a row made DEAD) is counted
 * within a turn or two.
 */
START_TEST(test_lean_gauges_count_others_writes)
{
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    fx_deliver(&f, "gauges-warm", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_done(&f, "gauges-warm", false),
            "gauges-warm not recorded");
    /* A turn of the gauges after it, whether it counted or not. */
    int turns = log_lines(&f, "rows ", "counted");
    FX_WAIT(&f, SLOW_MS, log_lines(&f, "rows ", "counted") > turns,
            "the gauges took no turn after the first event");
    int skipped = log_lines(&f, NOT_COUNTED_LINE, NULL);
    uint64_t end = it_now_ms() + 16000;
    for (int i = 0; it_now_ms() < end; i++) {
        char id[32];
        snprintf(id, sizeof(id), "gauges-%d", i);
        fx_deliver(&f, id, SLOW_MS);
        FX_WAIT(&f, SLOW_MS, fx_done(&f, id, false), "%s not recorded", id);
        it_sleep_ms(800);
    }
    ck_assert_msg(log_lines(&f, NOT_COUNTED_LINE, NULL) > skipped,
                  "every turn of the gauges counted the rows");
    /* A turn that fell while an event was on its way counted it
     * pending; the next counts again. */
    FX_WAIT(&f, SLOW_MS, fx_rows(&f, "PENDING") == 0,
            "outboxd_rows PENDING stayed %.0f", fx_rows(&f, "PENDING"));
    ck_assert_double_eq(fx_rows(&f, "DEAD"), 0);
    it_db_exec(f.it.sql, "UPDATE outbox_event SET status = 'DEAD' WHERE "
                         "event_id = 'gauges-0'");
    it_db_exec(f.it.sql, "COMMIT");
    /* Four turns at least (the minute's count would come later). */
    FX_WAIT(&f, 20000, fx_rows(&f, "DEAD") == 1,
            "a row made DEAD by another session was not counted in 20 s");
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/*
 * A relay on the binlog server whose broker connection runs through px
 * (to stall its confirms or cut it), started, live, and warmed by one
 * event confirmed and recorded: the next claim is lean.
 */
static void
fx_start_proxied_warm(struct wake_fx *f, struct it_proxy *px, const char *keys)
{
    it_proxy_start(px, 5672);
    fx_open(f, IT_DB_BINLOG_PORT, true, NULL, keys);
    snprintf(f->amqp_url, sizeof(f->amqp_url),
             "amqp://guest:guest@127.0.0.1:%u/", px->port);
    fx_write_config(f, NULL, keys);
    it_fx_start(&f->it);
    fx_wait_live(f, 1, SLOW_MS);
    fx_deliver(f, "warm-1", SLOW_MS);
    FX_WAIT(f, SLOW_MS, it_db_count_status(f->it.sql, "SENT") == 1,
            "warm-1 not SENT");
}

/* The end of a proxied test: nothing more arrives, the relay exits
 * cleanly, and the fixture and proxy go. */
static void
fx_end_proxied(struct wake_fx *f, struct it_proxy *px)
{
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f->it.consumer, &m, 500), 0);
    fx_assert_clean_exit(f);
    it_fx_close(&f->it);
    it_proxy_stop(px);
}

/* Whether another session holds event id's row locked: a locking read
 * that may not wait fails. */
static bool
row_locked(struct wake_fx *f, const char *id)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT id FROM outbox_event WHERE event_id = '%s' FOR UPDATE "
             "NOWAIT",
             id);
    if (mysql_query(f->it.sql, sql) != 0)
        return mysql_errno(f->it.sql) == 1205;
    mysql_free_result(mysql_store_result(f->it.sql));
    return false;
}

/* The row's status, outcome time, attempts and lock, to compare. */
static char *
row_state(struct wake_fx *f, const char *id)
{
    return it_db_str(f->it.sql,
                     "SELECT CONCAT_WS('/', status, COALESCE(sent_at, '-'), "
                     "retry_count, COALESCE(locked_by, '-')) FROM "
                     "outbox_event WHERE event_id = '%s'",
                     id);
}

/*
 * A lean batch holds its row locked and PENDING while it is published.
 * Relay a frozen there (SIGSTOP) is taken over: the server ends its
 * transaction after the lease, relay b publishes and records the row,
 * and a, let go, records nothing over it.
 */
START_TEST(test_lean_frozen_relay_taken_over)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "        lease: 2s\n");
    px.stall_replies = true; /* its confirm held back: a stays publishing */
    fx_insert(&f, "frozen-1");
    FX_WAIT(&f, SLOW_MS, row_locked(&f, "frozen-1"),
            "relay a never held frozen-1");
    fx_receive(&f, "frozen-1", SLOW_MS); /* published, unconfirmed */
    char *held = row_state(&f, "frozen-1");
    ck_assert_str_eq(held, "PENDING/-/0/-");
    free(held);
    ck_assert(row_locked(&f, "frozen-1"));
    ck_assert_int_eq(kill(f.it.d.pid, SIGSTOP), 0);
    uint64_t frozen_at = it_now_ms();
    /* Relay b, straight to the broker. */
    struct wake_fx g = f;
    it_unique_name(g.it.name, sizeof(g.it.name), "it_wake_b");
    snprintf(g.it.conf, sizeof(g.it.conf), "/tmp/%s.yaml", g.it.name);
    g.it.port = it_free_port();
    g.amqp_url[0] = '\0';
    memset(&g.it.d, 0, sizeof(g.it.d));
    fx_write_config(&g, NULL, "        lease: 2s\n");
    it_fx_start(&g.it);
    if (!IT_WAIT(SLOW_MS, it_db_count_status(f.it.sql, "SENT") == 2)) {
        it_daemon_dump_log(&g.it.d);
        ck_abort_msg("relay b did not take frozen-1 over");
    }
    fprintf(stderr,
            "it_wake: frozen-1 SENT by relay b %llu ms after relay "
            "a froze (lease 2 s)\n",
            (unsigned long long)(it_now_ms() - frozen_at));
    fx_receive(&f, "frozen-1", SLOW_MS); /* b's copy: after a's fault */
    char *sent = row_state(&f, "frozen-1");
    /* Relay a, let go, gets its confirm and can record nothing. */
    px.stall_replies = false;
    ck_assert_int_eq(kill(f.it.d.pid, SIGCONT), 0);
    FX_WAIT(&f, SLOW_MS,
            log_lines(&f, "could not record the outcome of 1 events", NULL) ==
                1,
            "relay a did not find its transaction ended");
    fx_deliver(&f, "after-1", SLOW_MS); /* a reconnected and relays again */
    FX_WAIT(&f, SLOW_MS, it_db_count_status(f.it.sql, "SENT") == 3,
            "after-1 not SENT");
    char *after = row_state(&f, "frozen-1");
    ck_assert_str_eq(sent, after);
    free(sent);
    free(after);
    ck_assert(it_daemon_signal_wait(&g.it.d, SIGTERM, SLOW_MS));
    unlink(g.it.conf);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

/* Events id-0.. id-(n-1), of as many aggregates, in one transaction. */
static void
fx_insert_many(struct wake_fx *f, const char *prefix, int n)
{
    it_db_exec(f->it.sql, "START TRANSACTION");
    for (int i = 0; i < n; i++)
        it_db_exec(f->it.sql,
                   "INSERT INTO outbox_event (event_id, aggregate_type, "
                   "aggregate_id, event_type, payload) VALUES ('%s-%d', "
                   "'Order', '%s-%d', 'OrderCreated', '{}')",
                   prefix, i, prefix, i);
    it_db_exec(f->it.sql, "COMMIT");
}

/*
 * Commits told while a lean batch is out join its transaction: with its
 * confirm held back, two events of other aggregates are committed; once
 * the confirm comes, they are claimed into the same transaction (past
 * the row it holds), published, and recorded with the first in one
 * statement: one sent_at for all three, each delivered once.
 */
START_TEST(test_lean_join)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, NULL);
    double lean = fx_metric(&f, "outboxd_batches_lean_total");
    px.stall_replies = true; /* the first batch's confirm held back */
    fx_insert(&f, "first");
    FX_WAIT(&f, SLOW_MS, row_locked(&f, "first"), "first never held");
    fx_insert(&f, "join-1");
    fx_insert(&f, "join-2");
    px.stall_replies = false;
    fx_receive(&f, "first", SLOW_MS);
    fx_receive(&f, "join-1", SLOW_MS);
    fx_receive(&f, "join-2", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, it_db_count_status(f.it.sql, "SENT") == 4,
            "the three events not SENT");
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(DISTINCT sent_at) FROM "
                               "outbox_event WHERE event_id IN ('first', "
                               "'join-1', 'join-2')"),
                     1);
    ck_assert_double_ge(fx_metric(&f, "outboxd_batches_lean_total") - lean, 2);
    fx_end_proxied(&f, &px);
}
END_TEST

/* Event id of aggregate agg, committed alone; columns and values name
 * more of its columns, each list led by a comma ("" for none). */
static void
fx_insert_row(struct wake_fx *f, const char *id, const char *agg,
              const char *columns, const char *values)
{
    it_db_exec(f->it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload%s) VALUES ('%s', 'Order', "
               "'%s', 'OrderCreated', '{}'%s)",
               columns, id, agg, values);
    it_db_exec(f->it.sql, "COMMIT");
}

/* Whether event id is in status. */
static bool
fx_status_is(struct wake_fx *f, const char *id, const char *status)
{
    return it_db_int(f->it.sql,
                     "SELECT COUNT(*) FROM outbox_event WHERE event_id = '%s' "
                     "AND status = '%s'",
                     id, status) == 1;
}

/* ---- the lean read's looks while the relay accounts for every write ---- */

/* Delivers event id of a trickle: committed, received (a message named
 * other on the way is counted in *others, any other fails) and
 * recorded SENT. */
static void
trickle_one(struct wake_fx *f, const char *id, const char *other, int *others)
{
    fx_insert(f, id);
    for (bool mine = false; !mine;) {
        struct it_message m;
        if (it_consumer_next(f->it.consumer, &m, SLOW_MS) != 1) {
            it_daemon_dump_log(&f->it.d);
            ck_abort_msg("%s not delivered", id);
        }
        mine = strcmp(m.message_id, id) == 0;
        ck_assert_msg(mine ||
                          (other != NULL && strcmp(m.message_id, other) == 0),
                      "unexpected %s while %s was due", m.message_id, id);
        if (!mine)
            (*others)++;
        it_message_free(&m);
    }
    FX_WAIT(f, SLOW_MS, fx_status_is(f, id, "SENT"), "%s not recorded", id);
}

#define QUIET_LINE "lean reads leave out their looks"
#define LOOKS_LINE "lean reads look for expired leases and due delayed rows"

/* Whether the relay's lean reads leave out their looks now: of the two
 * lines it logs when that changes, the last is the quiet one. */
static bool
fx_claims_quiet(struct wake_fx *f)
{
    char *text = it_file_read(f->it.d.log_path);
    bool quiet = false;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, QUIET_LINE) != NULL)
            quiet = true;
        else if (strstr(line, LOOKS_LINE) != NULL)
            quiet = false;
    }
    free(text);
    return quiet;
}

/* Events q-<n> from *n, one every 200 ms, at least one, until the
 * relay's lean reads leave out their looks: every write since the
 * gauges' last count is the relay's own (store_set_quiet).  They may
 * have before the first event, and then say nothing more. */
static void
trickle_until_quiet(struct wake_fx *f, int *n)
{
    uint64_t end = it_now_ms() + SLOW_MS;
    do {
        char id[32];
        ck_assert_msg(it_now_ms() < end,
                      "the lean reads never left out their looks");
        snprintf(id, sizeof(id), "q-%d", (*n)++);
        trickle_one(f, id, NULL, NULL);
        it_sleep_ms(200);
    } while (!fx_claims_quiet(f));
}

/* Events go on every 200 ms until other has arrived once and is SENT;
 * fails after QUIET_FIND_MS (a relay that looked only when the gauges
 * counted again would take a minute). */
#define QUIET_FIND_MS 15000
static void
trickle_until_sent(struct wake_fx *f, int *n, const char *other,
                   const char *why)
{
    int seen = 0;
    uint64_t end = it_now_ms() + QUIET_FIND_MS;
    while (seen == 0 || !fx_status_is(f, other, "SENT")) {
        char id[32];
        if (it_now_ms() >= end)
            it_daemon_dump_log(&f->it.d);
        ck_assert_msg(it_now_ms() < end, "%s: %s not sent within %d ms", why,
                      other, QUIET_FIND_MS);
        snprintf(id, sizeof(id), "q-%d", (*n)++);
        trickle_one(f, id, other, &seen);
        it_sleep_ms(200);
    }
    ck_assert_int_eq(seen, 1);
}

/*
 * While every write of the table is the relay's own lean events, its
 * lean reads leave out the looks for expired leases and due delayed
 * rows, as nothing can be there for them.  Another session's write ends
 * that at once: a lease left to run out (as a relay that died would
 * leave it, written as an UPDATE, which wakes nothing) is reclaimed, and
 * an event delayed by a second is sent, each while events keep coming
 * and every claim is woken.
 */
START_TEST(test_lean_quiet_reads_see_others_writes)
{
    struct wake_fx f;
    int n = 0;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    trickle_until_quiet(&f, &n);
    it_db_exec(f.it.sql, "UPDATE outbox_event SET status = 'PROCESSING', "
                         "sent_at = NULL, locked_by = 'dead-relay', "
                         "locked_until = NOW(6) + INTERVAL 1 SECOND WHERE "
                         "event_id = 'q-0'");
    it_db_exec(f.it.sql, "COMMIT");
    trickle_until_sent(&f, &n, "q-0", "a lease that ran out");
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT retry_count FROM outbox_event "
                                         "WHERE event_id = 'q-0'"),
                     1);
    trickle_until_quiet(&f, &n);
    fx_insert_row(&f, "late", "late", ", available_at",
                  ", NOW(6) + INTERVAL 1 SECOND");
    trickle_until_sent(&f, &n, "late", "a delayed event");
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/*
 * A lean join leaves held-back rows to the ordering check: events committed
 * while a lean batch is out, behind a RETRY backing off and behind a
 * held DEAD event (on_dead: hold), stay PENDING while another
 * aggregate's event joins the batch; once the RETRY falls due the two
 * of its aggregate go in order, and the held one never goes.
 */
START_TEST(test_lean_join_keeps_held_back_rows)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "        on_dead: hold\n");
    px.stall_replies = true; /* the first batch's confirm held back */
    fx_insert(&f, "first");
    FX_WAIT(&f, SLOW_MS, row_locked(&f, "first"), "first never held");
    fx_insert_row(&f, "retry-1", "r", ", status, retry_count, next_retry_at",
                  ", 'RETRY', 1, NOW(6) + INTERVAL 1 HOUR");
    fx_insert_row(&f, "dead-1", "d", ", status", ", 'DEAD'");
    fx_insert_row(&f, "retry-2", "r", "", "");
    fx_insert_row(&f, "dead-2", "d", "", "");
    fx_insert(&f, "join-1");
    px.stall_replies = false;
    fx_receive(&f, "first", SLOW_MS);
    fx_receive(&f, "join-1", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "join-1", "SENT"), "join-1 not SENT");
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(DISTINCT sent_at) FROM "
                               "outbox_event WHERE event_id IN ('first', "
                               "'join-1')"),
                     1);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f.it.consumer, &m, 500), 0);
    ck_assert(fx_status_is(&f, "retry-2", "PENDING"));
    ck_assert(fx_status_is(&f, "dead-2", "PENDING"));
    it_db_exec(f.it.sql, "UPDATE outbox_event SET next_retry_at = NOW(6) "
                         "WHERE event_id = 'retry-1'");
    it_db_exec(f.it.sql, "COMMIT");
    fx_receive(&f, "retry-1", SLOW_MS);
    fx_receive(&f, "retry-2", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "retry-2", "SENT"),
            "retry-2 not SENT");
    ck_assert_int_eq(it_consumer_next(f.it.consumer, &m, 500), 0);
    ck_assert(fx_status_is(&f, "dead-2", "PENDING"));
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

/* Holds 'first' in an open lean transaction, its confirm stalled; also,
 * more rows' VALUES inserted in its commit, after it ("" for none). */
static void
fx_hold_first(struct wake_fx *f, struct it_proxy *px, const char *also)
{
    px->stall_replies = true;
    it_db_exec(f->it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status) VALUES ('first', "
               "'Order', 'first', 'OrderCreated', '{}', 'PENDING')%s",
               also);
    it_db_exec(f->it.sql, "COMMIT");
    FX_WAIT(f, SLOW_MS, row_locked(f, "first"), "first never held");
}

/* The joins so far, and those head-free (the metrics count them once
 * their transaction ends). */
static void
fx_joins(struct wake_fx *f, double *joins, double *head_free)
{
    *joins = fx_metric(f, "outboxd_joins_total");
    *head_free = fx_metric(f, "outboxd_joins_head_free_total");
}

/* The head-free tests' middle, each part but the joined event's optional. */
struct behind_first {
    const char *with_first; /* rows' VALUES committed with 'first' */
    const char *between;    /* a statement committed after it is held */
    const char *id, *agg;   /* the event joined, and its aggregate */
};

/* 'first' held in an open lean transaction, the rest committed as b
 * says; then first confirmed, so that b's event is joined; first
 * received. */
static void
fx_join_behind_first(struct wake_fx *f, struct it_proxy *px,
                     struct behind_first b)
{
    fx_hold_first(f, px, b.with_first != NULL ? b.with_first : "");
    if (b.between != NULL) {
        it_db_exec(f->it.sql, "%s", b.between);
        it_db_exec(f->it.sql, "COMMIT");
    }
    fx_insert_row(f, b.id, b.agg, "", "");
    px->stall_replies = false;
    fx_receive(f, "first", SLOW_MS);
}

/* Since joins and head_free were read: a join more, and more_free more
 * of them head-free. */
static void
fx_assert_joins(struct wake_fx *f, double joins, double head_free,
                double more_free)
{
    double now_joins, now_free;
    FX_WAIT(f, SLOW_MS, (fx_joins(f, &now_joins, &now_free), now_joins > joins),
            "the join not counted");
    ck_assert_double_eq(now_free, head_free + more_free);
}

/*
 * A head-free join of an event whose aggregate the transaction already
 * holds does not publish it in that transaction: were its commit lost,
 * both would go out again, the earlier one after the later.  The join is
 * head-free (nothing else unfinished, nothing else told), and the event
 * goes in the next transaction, recorded apart.
 */
START_TEST(test_lean_head_free_one_event_per_aggregate)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "");
    double joins, head_free;
    fx_joins(&f, &joins, &head_free);
    fx_join_behind_first(
        &f, &px, (struct behind_first){.id = "first-2", .agg = "first"});
    fx_receive(&f, "first-2", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "first-2", "SENT"),
            "first-2 not SENT");
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(DISTINCT sent_at) FROM "
                               "outbox_event WHERE event_id IN ('first', "
                               "'first-2')"),
                     2);
    fx_assert_joins(&f, joins, head_free, 1);
    fx_end_proxied(&f, &px);
}
END_TEST

/*
 * The head-free join's premise read at its first join: the transaction
 * holds every unfinished row but the one it joins.  A RETRY row waiting
 * before it opens (not due for an hour) is one it does not hold, so a later
 * event of its aggregate, joined, is held back by the head of the
 * aggregate, and goes out after it.
 */
START_TEST(test_lean_head_free_needs_every_unfinished_row)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "");
    fx_insert_row(&f, "retry-1", "r", ", status, retry_count, next_retry_at",
                  ", 'RETRY', 1, NOW(6) + INTERVAL 1 HOUR");
    double joins, head_free;
    fx_joins(&f, &joins, &head_free);
    fx_join_behind_first(&f, &px,
                         (struct behind_first){.id = "r-2", .agg = "r"});
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "first", "SENT"), "first not SENT");
    fx_assert_joins(&f, joins, head_free, 0);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f.it.consumer, &m, 500), 0);
    ck_assert(fx_status_is(&f, "r-2", "PENDING"));
    it_db_exec(f.it.sql, "UPDATE outbox_event SET next_retry_at = NOW(6) "
                         "WHERE event_id = 'retry-1'");
    it_db_exec(f.it.sql, "COMMIT");
    fx_receive(&f, "retry-1", SLOW_MS);
    fx_receive(&f, "r-2", SLOW_MS);
    fx_end_proxied(&f, &px);
}
END_TEST

/*
 * A DEAD row sent back to PENDING while the transaction is open (what
 * `outboxctl dead retry` writes) is unfinished again outside it, though
 * it was finished when the claim opened the transaction: the join of the
 * event after it reads the head of the aggregate (the proof's read sees
 * the row; an update told after that read is a doubt, check_store's
 * test_join_doubt_ends_head_free), so that event waits, and arrives
 * after it.
 */
START_TEST(test_lean_head_free_sees_a_retried_dead_row)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "");
    fx_insert_row(&f, "dead-1", "d", ", status, retry_count", ", 'DEAD', 9");
    double joins, head_free;
    fx_joins(&f, &joins, &head_free);
    fx_join_behind_first(
        &f, &px,
        (struct behind_first){.between = "UPDATE outbox_event SET status = "
                                         "'PENDING', retry_count = 0 WHERE "
                                         "event_id = 'dead-1'",
                              .id = "d-2",
                              .agg = "d"});
    fx_receive(&f, "dead-1", SLOW_MS);
    fx_receive(&f, "d-2", SLOW_MS);
    fx_assert_joins(&f, joins, head_free, 0);
    fx_end_proxied(&f, &px);
}
END_TEST

/*
 * The premise of the claim: the proof's read sees a commit only once the
 * engine shows it, which may come after the binlog told it, so the claim
 * must hold a row of the last commit told, which proves that commit and
 * every one before it shown.
 * Here the last row of that commit is one no claim takes (inserted
 * SENT), so the event joined after it reads the head of its aggregate.
 */
START_TEST(test_lean_head_free_needs_the_last_commit_held)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "");
    double joins, head_free;
    fx_joins(&f, &joins, &head_free);
    fx_join_behind_first(
        &f, &px,
        (struct behind_first){
            .with_first =
                ", ('done-1', 'Order', 'done', 'OrderCreated', '{}', 'SENT')",
            .id = "x-2",
            .agg = "x"});
    fx_receive(&f, "x-2", SLOW_MS);
    fx_assert_joins(&f, joins, head_free, 0);
    fx_end_proxied(&f, &px);
}
END_TEST

/*
 * More rows held back behind a RETRY than a claim's window, committed
 * in the steady state, do not stall the events committed after them:
 * those go out on their wake.
 */
START_TEST(test_lean_window_held_back)
{
    enum { HELD = 30, FREE = 3 };
    struct wake_fx f;
    fx_open(&f, IT_DB_BINLOG_PORT, true, NULL,
            LONG_CEILINGS "        batch_size: 20\n");
    it_fx_start(&f.it);
    fx_wait_live(&f, 1, SLOW_MS);
    /* The first claim, leased, before any event: the next is lean. */
    FX_WAIT(&f, SLOW_MS, fx_metric(&f, "outboxd_claims_empty_total") >= 1,
            "the relay never made its first claim");
    fx_deliver(&f, "warm-1", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "warm-1", "SENT"), "warm-1 not SENT");
    double lean = fx_metric(&f, "outboxd_batches_lean_total");
    ck_assert_double_ge(lean, 1);
    it_db_exec(f.it.sql, "START TRANSACTION");
    it_db_exec(f.it.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, retry_count, "
               "next_retry_at) VALUES ('held-0', 'Order', 'held', "
               "'OrderCreated', '{}', 'RETRY', 1, NOW(6) + INTERVAL 1 HOUR)");
    for (int i = 1; i <= HELD; i++)
        it_db_exec(f.it.sql,
                   "INSERT INTO outbox_event (event_id, aggregate_type, "
                   "aggregate_id, event_type, payload) VALUES ('held-%d', "
                   "'Order', 'held', 'OrderCreated', '{}')",
                   i);
    it_db_exec(f.it.sql, "COMMIT");
    uint64_t t0 = it_now_ms();
    fx_insert_many(&f, "free", FREE);
    for (int i = 0; i < FREE; i++) {
        char id[32];
        snprintf(id, sizeof(id), "free-%d", i);
        fx_receive(&f, id, SLOW_MS);
    }
    uint64_t ms = it_now_ms() - t0;
    /* The ceilings are 10 s: within a second, a claim found them. */
    ck_assert_msg(ms <= WAKE_LATENCY_MS,
                  "the free events took %llu ms behind the held ones",
                  (unsigned long long)ms);
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(*) FROM outbox_event WHERE "
                               "aggregate_id = 'held' AND status <> "
                               "'PENDING' AND event_id <> 'held-0'"),
                     0);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/*
 * A join reads from the first row its transaction holds on: an event
 * whose producer took its id before that row and commits while the
 * batch is out is left to the next claim, which follows at once (the
 * rows found fell short of the commits told), not the 10 s ceiling.
 */
START_TEST(test_lean_join_late_commit)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, LONG_CEILINGS);
    MYSQL *late = it_db_connect_port(IT_DB_BINLOG_PORT, f.it.db);
    it_db_exec(late, "START TRANSACTION");
    it_db_exec(late, "INSERT INTO outbox_event (event_id, aggregate_type, "
                     "aggregate_id, event_type, payload) VALUES ('late', "
                     "'Order', 'late', 'OrderCreated', '{}')");
    px.stall_replies = true; /* the first batch's confirm held back */
    fx_insert(&f, "first");
    FX_WAIT(&f, SLOW_MS, row_locked(&f, "first"), "first never held");
    /* late's id is below first's, the row the batch holds */
    ck_assert_int_lt(
        it_db_int(late, "SELECT id FROM outbox_event WHERE event_id = 'late'"),
        it_db_int(f.it.sql, "SELECT id FROM outbox_event WHERE event_id = "
                            "'first'"));
    it_db_exec(late, "COMMIT");
    mysql_close(late);
    px.stall_replies = false;
    fx_receive(&f, "first", SLOW_MS);
    uint64_t t0 = it_now_ms();
    fx_receive(&f, "late", SLOW_MS);
    uint64_t ms = it_now_ms() - t0;
    ck_assert_msg(ms <= WAKE_LATENCY_MS,
                  "late arrived %llu ms after first: its wake was lost",
                  (unsigned long long)ms);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "late", "SENT"), "late not SENT");
    fx_end_proxied(&f, &px);
}
END_TEST

/* A server status counter, as SHOW GLOBAL STATUS gives it. */
static long long
global_status(struct wake_fx *f, const char *name)
{
    return it_db_int(f->it.sql,
                     "SELECT VARIABLE_VALUE FROM information_schema."
                     "GLOBAL_STATUS WHERE VARIABLE_NAME = '%s'",
                     name);
}

/* A steady producer: n events, one per transaction every 5 ms, of
 * aggregates prefix-a0.. prefix-a(aggs-1) in turn. */
static void
fx_stream(struct wake_fx *f, const char *prefix, int n, int aggs)
{
    for (int i = 0; i < n; i++) {
        char id[32], agg[32];
        snprintf(id, sizeof(id), "%s-%d", prefix, i);
        snprintf(agg, sizeof(agg), "%s-a%d", prefix, i % aggs);
        it_db_exec(f->it.sql, "START TRANSACTION");
        fx_insert_row(f, id, agg, "", "");
        usleep(5000);
    }
}

/* The stream's n events arrive, each once, in order within each
 * aggregate, nothing after them, and are recorded SENT. */
static void
fx_receive_stream(struct wake_fx *f, const char *prefix, int n, int aggs)
{
    int next[64]; /* the event each aggregate owes next */
    ck_assert_int_le(aggs, 64);
    for (int a = 0; a < aggs; a++)
        next[a] = a;
    for (int got = 0; got < n; got++) {
        struct it_message m;
        if (it_consumer_next(f->it.consumer, &m, SLOW_MS) != 1) {
            it_daemon_dump_log(&f->it.d);
            ck_abort_msg("%d of %d events of %s delivered", got, n, prefix);
        }
        int i = -1;
        size_t pl = strlen(prefix);
        if (m.message_id != NULL && strncmp(m.message_id, prefix, pl) == 0 &&
            m.message_id[pl] == '-')
            i = atoi(m.message_id + pl + 1);
        ck_assert_msg(i >= 0 && i < n, "unexpected %s", m.message_id);
        if (i != next[i % aggs])
            it_daemon_dump_log(&f->it.d);
        ck_assert_msg(i == next[i % aggs],
                      "%s arrived when %s-%d was due in its aggregate",
                      m.message_id, prefix, next[i % aggs]);
        next[i % aggs] = i + aggs;
        it_message_free(&m);
    }
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f->it.consumer, &m, 500), 0);
    FX_WAIT(f, SLOW_MS,
            it_db_int(f->it.sql,
                      "SELECT COUNT(*) FROM outbox_event WHERE event_id LIKE "
                      "'%s-%%' AND status = 'SENT'",
                      prefix) == n,
            "the events of %s not all SENT", prefix);
}

/* Ends the relay's database sessions but its binlog stream's, between
 * claims (the events before are all SENT). */
static void
kill_relay_sessions(struct wake_fx *f)
{
    char q[256];
    snprintf(q, sizeof(q),
             "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '%s' "
             "AND ID <> CONNECTION_ID() AND COMMAND NOT LIKE 'Binlog Dump%%'",
             f->it.user);
    ck_assert_msg(mysql_query(f->it.sql, q) == 0, "%s", mysql_error(f->it.sql));
    MYSQL_RES *res = mysql_store_result(f->it.sql);
    ck_assert(res != NULL);
    MYSQL_ROW row;
    int killed = 0;
    while ((row = mysql_fetch_row(res)) != NULL) {
        /* Gone already is no failure: the sessions come and go. */
        char sql[64];
        snprintf(sql, sizeof(sql), "KILL %s", row[0]);
        killed += mysql_query(f->it.sql, sql) == 0;
    }
    mysql_free_result(res);
    ck_assert_int_ge(killed, 1);
}

/*
 * The relay's session lost while its lean transaction is open, before
 * the first join, whose first statement is the head-free check: the
 * join fails, and the record of the held event says its transaction was
 * rolled back.  The locks are gone with it, so the held event is
 * published again and the joined one for the first time, each recorded
 * SENT: nothing lost.
 */
START_TEST(test_lean_head_free_check_on_a_lost_session)
{
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, "");
    fx_hold_first(&f, &px, "");
    kill_relay_sessions(&f);
    fx_insert_row(&f, "x-2", "x", "", "");
    px.stall_replies = false;
    fx_receive(&f, "first", SLOW_MS); /* published before the loss */
    fx_receive(&f, "first", SLOW_MS);
    fx_receive(&f, "x-2", SLOW_MS);
    FX_WAIT(&f, SLOW_MS,
            fx_status_is(&f, "first", "SENT") &&
                fx_status_is(&f, "x-2", "SENT"),
            "first and x-2 not SENT");
    ck_assert_int_eq(log_lines(&f, "could not record the outcome of 1 events",
                               "rolled back"),
                     1);
    fx_end_proxied(&f, &px);
}
END_TEST

/* A relay on the binlog server in the steady state: its next claim is
 * lean and its joins count from the first. */
static void
fx_start_steady(struct wake_fx *f)
{
    fx_open(f, IT_DB_BINLOG_PORT, true, NULL, NULL);
    it_fx_start(&f->it);
    fx_wait_live(f, 1, SLOW_MS);
    FX_WAIT(f, SLOW_MS, fx_metric(f, "outboxd_claims_empty_total") >= 1,
            "the relay never made its first claim");
    fx_deliver(f, "warm-1", SLOW_MS);
    FX_WAIT(f, SLOW_MS, fx_status_is(f, "warm-1", "SENT"), "warm-1 not SENT");
}

/*
 * A steady stream (200 events/s) joins its lean transactions, and an
 * outbox that joins often prepares its join once and executes it from
 * then on: every event arrives once and in its aggregate's order, the
 * server ran the prepared join, and most joins locked the row told by
 * the id the binlog gave.  The relay's session then ends
 * (KILL), and the joins are prepared again on the new one: a prepared
 * statement does not outlive its session.
 */
START_TEST(test_lean_join_prepared)
{
    enum { N = 100, AGGS = 7 };
    struct wake_fx f;
    fx_start_steady(&f);
    double lean = fx_metric(&f, "outboxd_batches_lean_total");
    long long executes = global_status(&f, "COM_EXECUTE_SQL");
    fx_stream(&f, "s", N, AGGS);
    fx_receive_stream(&f, "s", N, AGGS);
    ck_assert_msg(global_status(&f, "COM_EXECUTE_SQL") > executes,
                  "no join was executed prepared");
    /* Each event committed alone, told with its id: joined by it. */
    double joins = fx_metric(&f, "outboxd_joins_total");
    double by_id = fx_metric(&f, "outboxd_joins_by_id_total");
    ck_assert_msg(joins > 0 && by_id >= joins / 2,
                  "%.0f of %.0f joins by the id told", by_id, joins);
    /* One relay, nothing else writing: its claims found no unfinished row
     * but their own, so its joins by id need not read the head. */
    double head_free = fx_metric(&f, "outboxd_joins_head_free_total");
    ck_assert_msg(head_free >= by_id / 2, "%.0f of %.0f joins by id head-free",
                  head_free, by_id);
    ck_assert_double_gt(fx_metric(&f, "outboxd_batches_lean_total") - lean,
                        N / 2);
    long long prepares = global_status(&f, "COM_PREPARE_SQL");
    kill_relay_sessions(&f);
    /* Its next claim fails and it reconnects: back once this is SENT. */
    fx_deliver(&f, "back-1", SLOW_MS);
    FX_WAIT(&f, SLOW_MS, fx_status_is(&f, "back-1", "SENT"), "back-1 not SENT");
    fx_stream(&f, "t", N, AGGS);
    fx_receive_stream(&f, "t", N, AGGS);
    ck_assert_msg(global_status(&f, "COM_PREPARE_SQL") > prepares,
                  "the join was not prepared on the new session");
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/* The binlog server's max_prepared_stmt_count: "0" refuses every
 * PREPARE; the case's teardown sets it back whatever a test did. */
static void
set_prepared_stmt_limit(const char *value)
{
    MYSQL *root = it_db_connect_port(IT_DB_BINLOG_PORT, NULL);
    it_db_exec(root, "SET GLOBAL max_prepared_stmt_count = %s", value);
    mysql_close(root);
}

static void
reset_prepared_stmt_limit(void)
{
    set_prepared_stmt_limit("DEFAULT");
}

/*
 * A server that refuses to prepare the join (max_prepared_stmt_count
 * reached) gets it as text: the stream arrives whole and in order.
 */
START_TEST(test_lean_join_prepare_refused)
{
    enum { N = 100, AGGS = 7 };
    struct wake_fx f;
    set_prepared_stmt_limit("0");
    fx_start_steady(&f);
    long long prepares = global_status(&f, "COM_PREPARE_SQL");
    long long executes = global_status(&f, "COM_EXECUTE_SQL");
    fx_stream(&f, "s", N, AGGS);
    fx_receive_stream(&f, "s", N, AGGS);
    long long tried = global_status(&f, "COM_PREPARE_SQL") - prepares;
    long long executed = global_status(&f, "COM_EXECUTE_SQL") - executes;
    set_prepared_stmt_limit("DEFAULT");
    /* Once per form of the join (by id, or the range) at most. */
    ck_assert_msg(tried >= 1 && tried <= 2, "%lld PREPAREs tried", tried);
    ck_assert_int_eq(executed, 0);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
}
END_TEST

/*
 * A lean batch cut from the broker mid-publish: its rows published, no
 * confirm back.  None is recorded SENT for that publish: each goes to
 * RETRY with an attempt counted, is published again after the fault and
 * only then SENT, and every event arrives.
 */
START_TEST(test_lean_broker_cut)
{
    enum { N = 3 };
    struct wake_fx f;
    struct it_proxy px;
    fx_start_proxied_warm(&f, &px, NULL);
    double lean = fx_metric(&f, "outboxd_batches_lean_total");
    px.stall_replies = true; /* the batch's confirms held back */
    fx_insert_many(&f, "cut", N);
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof(id), "cut-%d", i);
        fx_receive(&f, id, SLOW_MS); /* published, unconfirmed */
        FX_WAIT(&f, SLOW_MS, row_locked(&f, id), "%s never held", id);
        char *held = row_state(&f, id);
        ck_assert_str_eq(held, "PENDING/-/0/-");
        free(held);
    }
    FX_WAIT(&f, SLOW_MS, fx_metric(&f, "outboxd_batches_lean_total") > lean,
            "the batch in flight is not lean");
    it_proxy_move(&px, 5672, true); /* every broker connection cut */
    px.stall_replies = false;
    FX_WAIT(&f, SLOW_MS, it_db_count_status(f.it.sql, "SENT") == N + 1,
            "the cut batch's rows not SENT again");
    /* SENT on the publish after the cut: one attempt each, the cut's */
    ck_assert_int_eq(it_db_int(f.it.sql,
                               "SELECT COUNT(*) FROM outbox_event WHERE "
                               "event_id LIKE 'cut-%%' AND status = 'SENT' "
                               "AND retry_count = 1"),
                     N);
    fx_insert(&f, "after-1");
    int copies[N] = {0};
    struct it_message m;
    bool after = false;
    while (!after && it_consumer_next(f.it.consumer, &m, SLOW_MS) == 1) {
        int i = -1;
        after = strcmp(m.message_id, "after-1") == 0;
        ck_assert_msg(after || sscanf(m.message_id, "cut-%d", &i) == 1,
                      "unexpected %s", m.message_id);
        if (i >= 0 && i < N)
            copies[i]++;
        it_message_free(&m);
    }
    ck_assert_msg(after, "after-1 never arrived");
    for (int i = 0; i < N; i++)
        ck_assert_msg(copies[i] == 1, "cut-%d arrived %d more times", i,
                      copies[i]);
    fx_assert_clean_exit(&f);
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

/* The relay's idle transaction that holds row locks and has written
 * nothing, as a lean batch's while it is published: its id, or 0. */
static long long
idle_locking_trx(struct wake_fx *f)
{
    return it_db_int(f->it.sql,
                     "SELECT COALESCE(MAX(t.trx_id), 0) FROM "
                     "information_schema.INNODB_TRX t JOIN "
                     "information_schema.PROCESSLIST p ON p.ID = "
                     "t.trx_mysql_thread_id WHERE p.USER = '%s' AND "
                     "t.trx_query IS NULL AND t.trx_rows_locked > 0 AND "
                     "t.trx_rows_modified = 0",
                     f->it.user);
}

/* Whether a lean batch holds the poison row: locked, PENDING, by the
 * relay's transaction idle in its publish (a leased claim's goes from
 * its locking read to its mark at once). */
static bool
poison_held_lean(struct wake_fx *f)
{
    char *st = row_state(f, "poison");
    bool pending = strncmp(st, "PENDING/", 8) == 0;
    free(st);
    if (!pending || !row_locked(f, "poison"))
        return false;
    long long trx = idle_locking_trx(f);
    it_sleep_ms(2);
    return trx != 0 && idle_locking_trx(f) == trx;
}

/*
 * One look of the leased phase, as it_faults' poison test does: the
 * locking read waits out a claim's transaction, so a claim is seen as
 * soon as it commits, and while the row is locked here the relay cannot
 * record it.  A new token: the relay is killed.  Returns the status.
 */
static char *
poison_look_leased(struct wake_fx *f, char **last_token, int *kills)
{
    it_db_exec(f->it.sql, "START TRANSACTION");
    char *st =
        it_db_str(f->it.sql, "SELECT CONCAT(status, ' ', "
                             "COALESCE(locked_by, '')) FROM outbox_event "
                             "WHERE event_id = 'poison' FOR UPDATE");
    if (strncmp(st, "PROCESSING ", 11) == 0 &&
        (*last_token == NULL || strcmp(st, *last_token) != 0)) {
        ck_assert(it_daemon_signal_wait(&f->it.d, SIGKILL, 5000));
        (*kills)++;
        free(*last_token);
        *last_token = strdup(st);
        it_db_exec(f->it.sql, "ROLLBACK");
        it_fx_start(&f->it);
        return st;
    }
    it_db_exec(f->it.sql, "ROLLBACK");
    return st;
}

/*
 * A row that kills the relay whenever it is published, fresh in the
 * steady state: its lean attempt leaves no trace, so the relay, started
 * again, claims it leased, and its attempts count from there: DEAD after
 * max_retries, one lean kill and four leased ones.
 */
START_TEST(test_lean_poison_row)
{
    struct wake_fx f;
    struct it_proxy px;
    const char *keys = "        lease: 1s\n        max_retries: 3\n";
    fx_start_proxied_warm(&f, &px, keys);
    /* The lean attempt: held in flight (no confirm comes back) until the
     * watcher has seen it, and killed there. */
    px.stall_replies = true;
    it_db_exec(f.it.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                         "aggregate_id, event_type, payload) VALUES ('poison', "
                         "'Poison', 'p-1', 'Crash', '{}')");
    FX_WAIT(&f, SLOW_MS, poison_held_lean(&f),
            "the poison row was never held by a lean batch");
    ck_assert(it_daemon_signal_wait(&f.it.d, SIGKILL, 5000));
    px.stall_replies = false;
    char *st = row_state(&f, "poison");
    ck_assert_str_eq(st, "PENDING/-/0/-"); /* no trace of the attempt */
    free(st);
    /* Each publish's confirm comes late, so the watcher, looking every
     * millisecond, sees each claim before its record could follow.  And
     * the row is past the lean claim's 2 s first: a relay's first claim
     * that finds it locked by the watcher commits empty and lets the
     * next be lean, which would leave no PROCESSING for it to see. */
    px.delay_replies_ms = 50;
    FX_WAIT(&f, SLOW_MS,
            it_db_int(f.it.sql, "SELECT COUNT(*) FROM outbox_event WHERE "
                                "event_id = 'poison' AND created_at < NOW(6) "
                                "- INTERVAL 2 SECOND") == 1,
            "the poison row never grew 2 s old");
    it_fx_start(&f.it);
    /* The leased attempts, each killed, until the row is DEAD. */
    int kills = 0;
    char *last_token = NULL;
    uint64_t deadline = it_now_ms() + SLOW_MS;
    for (;;) {
        ck_assert_msg(it_now_ms() < deadline, "poison row not DEAD in time");
        st = poison_look_leased(&f, &last_token, &kills);
        ck_assert_msg(strncmp(st, "SENT", 4) != 0,
                      "the poison row was SENT: the watcher missed a claim");
        bool dead = strncmp(st, "DEAD", 4) == 0;
        free(st);
        if (dead)
            break;
        it_sleep_ms(1);
    }
    free(last_token);
    px.delay_replies_ms = 0;
    fprintf(stderr, "it_wake: poison DEAD after 1 lean and %d leased kills\n",
            kills);
    ck_assert_int_eq(kills, 4);
    ck_assert_int_eq(it_db_int(f.it.sql, "SELECT retry_count FROM outbox_event "
                                         "WHERE event_id = 'poison'"),
                     4);
    char *err = it_db_str(f.it.sql, "SELECT last_error FROM outbox_event WHERE "
                                    "event_id = 'poison'");
    ck_assert_msg(strstr(err, "lease expired") != NULL, "%s", err);
    free(err);
    /* The relay goes on: the next event arrives, past the poison's
     * copies that each killed relay had published. */
    fx_insert(&f, "after-1");
    struct it_message m;
    bool after = false;
    while (!after && it_consumer_next(f.it.consumer, &m, SLOW_MS) == 1) {
        ck_assert_msg(strcmp(m.message_id, "poison") == 0 ||
                          strcmp(m.message_id, "after-1") == 0,
                      "unexpected %s", m.message_id);
        after = strcmp(m.message_id, "after-1") == 0;
        it_message_free(&m);
    }
    ck_assert_msg(after, "after-1 never arrived");
    it_fx_close(&f.it);
    it_proxy_stop(&px);
}
END_TEST

Suite *
it_wake_suite(void)
{
    Suite *s = suite_create("it_wake");
    TCase *tc = tcase_create("binlog_wake");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_binlog_wake);
    tcase_add_test(tc, test_binlog_rotation);
    tcase_add_test(tc, test_stream_killed);
    tcase_add_test(tc, test_stream_stalled);
    tcase_add_test(tc, test_server_restarted);
    tcase_add_test(tc, test_unlogged_schema_polls);
    tcase_add_test(tc, test_unlogged_tenant_added_live);
    tcase_add_test(tc, test_no_binlog_polls);
    tcase_add_test(tc, test_no_privilege_polls);
    tcase_add_test(tc, test_no_binlog_monitor_starts_by_gtid);
    tcase_add_test(tc, test_other_table_no_wake);
    tcase_add_test(tc, test_xa_commit_wakes);
    tcase_add_test(tc, test_wake_poll);
    tcase_add_test(tc, test_wake_binlog_required);
    suite_add_tcase(s, tc);
    tc = tcase_create("lean");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, NULL, reset_prepared_stmt_limit);
    tcase_add_test(tc, test_lean_steady_state);
    tcase_add_test(tc, test_lean_steady_state_delete);
    tcase_add_test(tc, test_lean_gauges_count_others_writes);
    tcase_add_test(tc, test_lean_quiet_reads_see_others_writes);
    tcase_add_test(tc, test_lean_frozen_relay_taken_over);
    tcase_add_test(tc, test_lean_poison_row);
    tcase_add_test(tc, test_lean_broker_cut);
    tcase_add_test(tc, test_lean_join);
    tcase_add_test(tc, test_lean_join_keeps_held_back_rows);
    tcase_add_test(tc, test_lean_window_held_back);
    tcase_add_test(tc, test_lean_join_prepared);
    tcase_add_test(tc, test_lean_join_prepare_refused);
    tcase_add_test(tc, test_lean_join_late_commit);
    tcase_add_test(tc, test_lean_head_free_one_event_per_aggregate);
    tcase_add_test(tc, test_lean_head_free_needs_every_unfinished_row);
    tcase_add_test(tc, test_lean_head_free_sees_a_retried_dead_row);
    tcase_add_test(tc, test_lean_head_free_needs_the_last_commit_held);
    tcase_add_test(tc, test_lean_head_free_check_on_a_lost_session);
    suite_add_tcase(s, tc);
    /* In process, of the stream alone: CK_RUN_CASE=watch_list. */
    tc = tcase_create("watch_list");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_watch_list_live);
    tcase_add_test(tc, test_watch_ids_live);
    tcase_add_test(tc, test_watch_list_from_empty);
    suite_add_tcase(s, tc);
    return s;
}
