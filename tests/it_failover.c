/*
 * it_failover: a primary failover under a running relay, on a real
 * MariaDB primary and replica (tests/failover/servers.sh), the relay's
 * address a forwarder that the test moves from one to the other.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "itest.h"
#include "itproxy.h"

Suite *it_failover_suite(void);

#define PRIMARY_PORT 3308
#define REPLICA_PORT 3309
#define PAIR_LOCK "/run/lock/outboxd-failover.lock"
#define AGGREGATES 6
#define MAX_EVENTS 4000
#define DRAIN_MS 90000

/* ---- the pair, the relay, the consumer ---- */

struct fx {
    char name[64], db[96], ex[96], conf[128], outbox[160], dir[64];
    char user[64], password[64];
    int lock_fd;
    unsigned http_port;
    struct it_proxy px; /* the relay's address, moved at the failover */
    struct it_daemon d;
    struct it_consumer *consumer;
    MYSQL *primary, *replica; /* the test's admin sessions */
    int inserted;
    bool seen[MAX_EVENTS];
    long long last[AGGREGATES]; /* outbox_id last seen per aggregate */
    int received, duplicates;
};

static void
pair_start(struct fx *f)
{
    f->lock_fd = open(PAIR_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f->lock_fd >= 0)
        flock(f->lock_fd, LOCK_EX);
    snprintf(f->dir, sizeof(f->dir), "/tmp/outboxd-failover.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    ck_assert_msg(it_sh("bash '%s' start '%s' >&2",
                        it_src_path("tests/failover/servers.sh"), f->dir) == 0,
                  "tests/failover/servers.sh start failed");
}

static void
fx_write_config(struct fx *f, const char *wake)
{
    /* log_level info: the lines an operator sees are the ones counted. */
    it_write_file(f->conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: info\n"
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
                  "    wake: %s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        broker: main\n"
                  "        exchange: \"%s\"\n"
                  "        batch_size: 50\n"
                  "        poll_interval: 100ms\n"
                  "        lease: 5s\n",
                  f->name, f->http_port, IT_AMQP_URL, f->db, f->px.port,
                  f->user, f->password, f->db, wake, f->ex);
}

/* wake: binlog, or poll; the relay's account may read the binlog. */
static void
fx_open(struct fx *f, const char *wake)
{
    memset(f, 0, sizeof(*f));
    pair_start(f);
    it_unique_name(f->name, sizeof(f->name), "it_failover");
    snprintf(f->db, sizeof(f->db), "outboxd_test_%s", f->name + 12);
    snprintf(f->ex, sizeof(f->ex), "ex_%s", f->name);
    snprintf(f->conf, sizeof(f->conf), "/tmp/%s.yaml", f->name);
    snprintf(f->outbox, sizeof(f->outbox), "%s.outbox_event", f->db);
    f->http_port = it_free_port();
    /* Made on the primary, the table and the relay's account replicate. */
    it_db_create_port(PRIMARY_PORT, f->db, it_src_path("sql/outbox.sql"));
    it_db_grant_relay_port(PRIMARY_PORT, f->db, "outbox_event", f->user,
                           sizeof(f->user), f->password, sizeof(f->password));
    it_db_grant_replication(PRIMARY_PORT, f->db);
    f->primary = it_db_connect_port(PRIMARY_PORT, f->db);
    f->replica = it_db_connect_port(REPLICA_PORT, NULL);
    for (int a = 0; a < AGGREGATES; a++)
        f->last[a] = -1;
    it_proxy_start(&f->px, PRIMARY_PORT);
    f->consumer = it_consumer_new(f->ex, "#");
    fx_write_config(f, wake);
    it_daemon_start(&f->d, f->conf, f->name);
}

static void
fx_close(struct fx *f)
{
    if (f->d.pid > 0 && !it_daemon_signal_wait(&f->d, SIGKILL, 5000))
        ck_abort_msg("outboxd did not die");
    it_consumer_free(f->consumer);
    mysql_close(f->primary);
    mysql_close(f->replica);
    it_proxy_stop(&f->px);
    unlink(f->conf);
    /* The pair goes with its data: the next test starts a new one. */
    it_sh("bash '%s' stop '%s' >&2", it_src_path("tests/failover/servers.sh"),
          f->dir);
    if (f->lock_fd >= 0)
        close(f->lock_fd);
}

/* n events e-<k> on db, aggregates agg-<k % AGGREGATES>, 100 a commit. */
static void
fx_insert(struct fx *f, MYSQL *db, int n)
{
    ck_assert_int_le(f->inserted + n, MAX_EVENTS);
    it_db_exec(db, "USE `%s`", f->db);
    for (int done = 0; done < n;) {
        it_db_exec(db, "START TRANSACTION");
        for (int i = 0; i < 100 && done < n; i++, done++) {
            int k = f->inserted++;
            it_db_exec(db,
                       "INSERT INTO outbox_event (event_id, aggregate_type, "
                       "aggregate_id, event_type, payload) VALUES ('e-%d', "
                       "'Order', 'agg-%d', 'OrderCreated', '{\"k\": %d}')",
                       k, k % AGGREGATES, k);
        }
        it_db_exec(db, "COMMIT");
    }
}

/* Takes one message: each aggregate's outbox ids never go down. */
static void
fx_take(struct fx *f, const struct it_message *m)
{
    int k = -1, a = -1;
    ck_assert_msg(sscanf(m->message_id, "e-%d", &k) == 1 && k >= 0 &&
                      k < f->inserted,
                  "stray message %s", m->message_id);
    ck_assert(sscanf(m->h_aggregate_id, "agg-%d", &a) == 1 && a >= 0 &&
              a < AGGREGATES);
    /* Without the header the order below could not be checked. */
    ck_assert_msg(m->h_outbox_id > 0, "%s came without its outbox id",
                  m->message_id);
    ck_assert_msg(m->h_outbox_id >= f->last[a],
                  "agg-%d went back from outbox id %lld to %lld (%s)", a,
                  f->last[a], m->h_outbox_id, m->message_id);
    f->last[a] = m->h_outbox_id;
    f->duplicates += f->seen[k];
    f->received += !f->seen[k];
    f->seen[k] = true;
}

/* Receives until want distinct events arrived or timeout_ms passed. */
static bool
fx_receive(struct fx *f, int want, int timeout_ms)
{
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (f->received < want && it_now_ms() < deadline) {
        if (it_consumer_next(f->consumer, &m, 200) != 1)
            continue;
        fx_take(f, &m);
        it_message_free(&m);
    }
    return f->received >= want;
}

/* Takes what else the queue holds, until it stays empty for idle_ms:
 * once every row is SENT, no copy is still to come. */
static void
fx_drain(struct fx *f, int idle_ms)
{
    struct it_message m;
    while (it_consumer_next(f->consumer, &m, idle_ms) == 1) {
        fx_take(f, &m);
        it_message_free(&m);
    }
}

/* Every event the new primary holds was delivered, and is SENT there;
 * the queue drained, so that f->duplicates counts every copy. */
static void
fx_assert_all_delivered(struct fx *f, MYSQL *new_primary)
{
    long long held =
        it_db_int(new_primary, "SELECT COUNT(*) FROM `%s`.outbox_event", f->db);
    ck_assert_int_eq(held, f->inserted);
    if (!fx_receive(f, (int)held, DRAIN_MS)) {
        it_daemon_dump_log(&f->d);
        ck_abort_msg("%d of %lld events delivered", f->received, held);
    }
    bool all_sent =
        IT_WAIT(30000, it_db_int(new_primary,
                                 "SELECT COUNT(*) FROM `%s`.outbox_event WHERE "
                                 "status <> 'SENT'",
                                 f->db) == 0);
    ck_assert_msg(all_sent, "%lld rows not SENT, %lld DEAD",
                  it_db_int(new_primary,
                            "SELECT COUNT(*) FROM `%s`.outbox_event WHERE "
                            "status <> 'SENT'",
                            f->db),
                  it_db_int(new_primary,
                            "SELECT COUNT(*) FROM `%s`.outbox_event WHERE "
                            "status = 'DEAD'",
                            f->db));
    fx_drain(f, 1000);
}

/*
 * What an orchestrator does: the primary read-only, the replica caught
 * up with everything it committed, then promoted.
 */
static long long
fx_promote_replica(struct fx *f)
{
    it_db_exec(f->primary, "SET GLOBAL read_only = 1");
    long long unfinished =
        it_db_int(f->primary,
                  "SELECT COUNT(*) FROM `%s`.outbox_event WHERE status <> "
                  "'SENT'",
                  f->db);
    char *pos = it_db_str(f->primary, "SELECT @@gtid_binlog_pos");
    ck_assert_int_eq(
        it_db_int(f->replica, "SELECT MASTER_GTID_WAIT('%s', 30)", pos), 0);
    free(pos);
    it_db_exec(f->replica, "STOP SLAVE");
    it_db_exec(f->replica, "RESET SLAVE ALL");
    it_db_exec(f->replica, "SET GLOBAL read_only = 0");
    return unfinished;
}

/* Lines of the daemon's log holding needle. */
static int
log_lines(const struct fx *f, const char *needle)
{
    char *text = it_file_read(f->d.log_path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        n += strstr(line, needle) != NULL;
    free(text);
    return n;
}

/* The outbox's sample of a counter in /metrics; -1 if absent. */
static double
fx_metric(const struct fx *f, const char *family)
{
    char *body, series[256];
    snprintf(series, sizeof(series), "%s{outbox=\"%s\"} ", family, f->outbox);
    int status = it_http_get(f->http_port, "/metrics", &body);
    const char *p = status == 200 ? strstr(body, series) : NULL;
    double v = p != NULL ? strtod(p + strlen(series), NULL) : -1;
    free(body);
    return v;
}

/* Sessions of the relay's account on the server of db: the binlog
 * stream's (dump) or the others. */
static long long
relay_sessions(const struct fx *f, MYSQL *db, bool dump)
{
    return it_db_int(db,
                     "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                     "WHERE USER = '%s' AND (COMMAND = 'Binlog Dump') = %d",
                     f->user, dump);
}

/* ---- the tests ---- */

/*
 * Mid-drain, the primary goes read-only, the replica is promoted and the
 * address moves to it, cutting the old connections: every event the new
 * primary holds arrives, in order per aggregate, none DEAD.  Then the
 * old primary stops, and the relay does not notice.
 */
START_TEST(test_failover_mid_drain)
{
    struct fx f;
    fx_open(&f, "poll");
    fx_insert(&f, f.primary, 2000);
    ck_assert_msg(fx_receive(&f, 100, 30000), "the drain did not start");
    long long unfinished = fx_promote_replica(&f);
    it_proxy_move(&f.px, REPLICA_PORT, true);
    fx_insert(&f, f.replica, 500);
    fx_assert_all_delivered(&f, f.replica);
    fprintf(stderr,
            "it_failover: %lld of 2000 events unfinished at read_only, %d "
            "duplicates, %.0f refusals\n",
            unfinished, f.duplicates,
            fx_metric(&f, "outboxd_database_read_only_total"));
    ck_assert_msg(unfinished > 0, "the drain was over before the failover");
    /* The batch in flight was recorded on the new primary, not published
     * again after its lease. */
    ck_assert_int_eq(f.duplicates, 0);
    ck_assert_int_ge(fx_metric(&f, "outboxd_database_read_only_total"), 1);
    ck_assert_int_ge(log_lines(&f, "database refuses writes (read-only): "
                                   "reconnecting"),
                     1);
    ck_assert_int_eq(it_sh("bash '%s' stop-primary >&2",
                           it_src_path("tests/failover/servers.sh")),
                     0);
    fx_insert(&f, f.replica, 100);
    fx_assert_all_delivered(&f, f.replica);
    fx_close(&f);
}
END_TEST

/*
 * The address moves but the old primary stays up, read-only, and keeps
 * the relay's session: the relay leaves it by itself.  While the old
 * one refuses, the log says so a bounded number of times, and once
 * when it clears; the metrics count every refusal.
 */
START_TEST(test_failover_leaves_read_only_primary)
{
    struct fx f;
    fx_open(&f, "binlog");
    fx_insert(&f, f.primary, 200);
    ck_assert(fx_receive(&f, 200, 30000));
    /* Drained and idle, on a session that has worked for a while. */
    ck_assert(
        IT_WAIT(10000, it_db_int(f.primary, "SELECT COUNT(*) FROM outbox_event "
                                            "WHERE status <> 'SENT'") == 0));
    ck_assert_int_eq(relay_sessions(&f, f.primary, false), 1);
    ck_assert(IT_WAIT(10000, relay_sessions(&f, f.primary, true) == 1));
    fx_promote_replica(&f);
    uint64_t t0 = it_now_ms();
    /* Still pointing at the old primary: refused, again and again. */
    bool refused =
        IT_WAIT(30000, fx_metric(&f, "outboxd_database_read_only_total") >= 4);
    double refusals = fx_metric(&f, "outboxd_database_read_only_total");
    double errors = fx_metric(&f, "outboxd_database_errors_total");
    int lines = log_lines(&f, "refuses writes (read-only)");
    uint64_t secs = (it_now_ms() - t0) / 1000 + 1;
    fprintf(stderr,
            "it_failover: %.0f refusals (%.0f errors) in %llu s, %d log "
            "lines\n",
            refusals, errors, (unsigned long long)secs, lines);
    ck_assert_msg(refused, "fewer than 4 refusals counted");
    ck_assert_int_ge(errors, refusals);
    ck_assert_int_ge(lines, 1);
    /* The first, then at most one per doubling step: 1, 2, 4, 8 s... */
    int steps = 1;
    for (uint64_t s = 1; s <= secs; s *= 2)
        steps++;
    ck_assert_msg(lines <= steps && lines <= refusals,
                  "%d log lines for %.0f refusals in %llu s", lines, refusals,
                  (unsigned long long)secs);
    it_proxy_move(&f.px, REPLICA_PORT, false);
    ck_assert(IT_WAIT(30000, log_lines(&f, "database writable again") == 1));
    /* The binlog stream follows the outbox to the new primary: its
     * commits wake the outbox again. */
    ck_assert_msg(IT_WAIT(30000, relay_sessions(&f, f.replica, true) == 1),
                  "no binlog stream on the new primary");
    double wakes = fx_metric(&f, "outboxd_wakes_total");
    fx_insert(&f, f.replica, 200);
    fx_assert_all_delivered(&f, f.replica);
    ck_assert_msg(IT_WAIT(10000, fx_metric(&f, "outboxd_wakes_total") > wakes),
                  "no wake from the new primary's binlog");
    ck_assert_msg(IT_WAIT(10000, relay_sessions(&f, f.primary, false) == 0 &&
                                     relay_sessions(&f, f.primary, true) == 0),
                  "the relay still has a session on the read-only server");
    ck_assert(
        IT_WAIT(10000, log_lines(&f, "database writable again after") == 1));
    fx_close(&f);
}
END_TEST

Suite *
it_failover_suite(void)
{
    Suite *s = suite_create("it_failover");
    TCase *tc = tcase_create("failover");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_failover_mid_drain);
    tcase_add_test(tc, test_failover_leaves_read_only_primary);
    suite_add_tcase(s, tc);
    return s;
}
