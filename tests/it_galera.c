/*
 * it_galera: relays on a three-node MariaDB Galera cluster of the test's
 * own (tests/galera/servers.sh): two relays on two nodes, producers on
 * all three, and a node that stops under its relay mid-drain.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "itest.h"

Suite *it_galera_suite(void);

#define NODES 3
#define NODE_PORT(n) (3310u + (unsigned)(n)) /* node 1..3 */
#define CLUSTER_LOCK "/run/lock/outboxd-galera.lock"
#define AGGREGATES 12 /* per producer: one writer per aggregate */
#define MAX_EVENTS 12000
#define DRAIN_MS 120000

/* The cluster, started once for the suite's tests by the runner process
 * (an unchecked fixture), so that it is stopped even when a test fails
 * or times out; the daemons' pids are kept beside it for the same end. */
static int cluster_lock_fd = -1;
static char cluster_dir[64];

static char *
pids_path(void)
{
    return xasprintf("%s/daemons", cluster_dir);
}

static void cluster_stop(void);

static void
cluster_start(void)
{
    cluster_lock_fd = open(CLUSTER_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (cluster_lock_fd >= 0)
        flock(cluster_lock_fd, LOCK_EX);
    snprintf(cluster_dir, sizeof(cluster_dir), "/tmp/outboxd-galera.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cluster_dir));
    if (it_sh("bash '%s' start '%s' >&2",
              it_src_path("tests/galera/servers.sh"), cluster_dir) == 0)
        return;
    /* Check runs no teardown after a failed setup: the nodes that did
     * start go now. */
    cluster_stop();
    ck_abort_msg("tests/galera/servers.sh start failed");
}

/* Kills what a failed test left running, then the cluster with its data. */
static void
cluster_stop(void)
{
    char *path = pids_path();
    it_sh("[ -f '%s' ] && while read -r p; do kill -KILL \"$p\" 2>/dev/null; "
          "done < '%s'; true",
          path, path);
    free(path);
    it_sh("bash '%s' stop '%s' >&2", it_src_path("tests/galera/servers.sh"),
          cluster_dir);
    if (cluster_lock_fd >= 0)
        close(cluster_lock_fd);
    cluster_lock_fd = -1;
}

/* ---- one test's database, relays and consumer ---- */

struct relay {
    char conf[128];
    unsigned http_port;
    struct it_daemon d;
};

struct fx {
    char name[64], db[96], ex[96], user[64], password[64];
    MYSQL *node[NODES + 1]; /* admin sessions, [1..3] */
    struct relay relay[2];
    size_t nrelays;
    struct it_consumer *consumer;
    int inserted;
    bool seen[MAX_EVENTS];
    int last[NODES + 1][AGGREGATES]; /* per producer and aggregate */
    int received, duplicates;
};

static void
fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    it_unique_name(f->name, sizeof(f->name), "it_galera");
    snprintf(f->db, sizeof(f->db), "outboxd_test_%s", f->name + 3);
    snprintf(f->ex, sizeof(f->ex), "ex_%s", f->name);
    /* Made on node 1, the table and the relay's account replicate. */
    it_db_create_port(NODE_PORT(1), f->db, it_src_path("sql/outbox.sql"));
    it_db_grant_relay_port(NODE_PORT(1), f->db, "outbox_event", f->user,
                           sizeof(f->user), f->password, sizeof(f->password));
    it_db_grant_replication(NODE_PORT(1), f->db);
    for (int n = 1; n <= NODES; n++)
        f->node[n] = it_db_connect_port(NODE_PORT(n), f->db);
    memset(f->last, -1, sizeof(f->last));
    f->consumer = it_consumer_new(f->ex, "#");
}

/* A relay whose database entry lists hosts (a YAML flow list). */
static void
fx_start_relay(struct fx *f, const char *hosts)
{
    struct relay *r = &f->relay[f->nrelays];
    char id[80];
    snprintf(id, sizeof(id), "%s_%zu", f->name, f->nrelays);
    snprintf(r->conf, sizeof(r->conf), "/tmp/%s.yaml", id);
    r->http_port = it_free_port();
    it_write_file(r->conf,
                  "relay:\n  id: %s\n  log_level: info\n"
                  "  listen: \"127.0.0.1:%u\"\n  shutdown_timeout: 10s\n"
                  "brokers:\n  main:\n    url: %s\n"
                  "databases:\n  %s:\n    hosts: %s\n    user: %s\n"
                  "    password: %s\n    database: %s\n    wake: binlog\n"
                  "    outboxes:\n      - table: outbox_event\n"
                  "        exchange: \"%s\"\n        lease: 10s\n",
                  id, r->http_port, IT_AMQP_URL, f->db, hosts, f->user,
                  f->password, f->db, f->ex);
    chmod(r->conf, 0600);
    it_daemon_start(&r->d, r->conf, id);
    char *path = pids_path();
    it_sh("echo %d >> '%s'", (int)r->d.pid, path);
    free(path);
    f->nrelays++;
}

static void
fx_close(struct fx *f)
{
    for (size_t i = 0; i < f->nrelays; i++) {
        struct relay *r = &f->relay[i];
        if (r->d.pid > 0 && !it_daemon_signal_wait(&r->d, SIGKILL, 5000))
            ck_abort_msg("outboxd did not die");
        unlink(r->conf);
    }
    it_consumer_free(f->consumer);
    for (int n = 1; n <= NODES; n++)
        if (f->node[n] != NULL)
            mysql_close(f->node[n]);
}

/* n events on node's producer, its own aggregates g<node>-<a>, 100 a
 * commit: e-<k> for the k-th event of the test. */
static void
fx_insert(struct fx *f, int node, int n)
{
    ck_assert_int_le(f->inserted + n, MAX_EVENTS);
    for (int done = 0; done < n;) {
        it_db_exec(f->node[node], "START TRANSACTION");
        for (int i = 0; i < 100 && done < n; i++, done++) {
            int k = f->inserted++;
            it_db_exec(f->node[node],
                       "INSERT INTO outbox_event (event_id, aggregate_type, "
                       "aggregate_id, event_type, payload) VALUES ('e-%d', "
                       "'Order', 'g%d-%d', 'OrderCreated', '{\"k\": %d}')",
                       k, node, k % AGGREGATES, k);
        }
        it_db_exec(f->node[node], "COMMIT");
    }
}

/* Producers on the nodes listed take turns, a commit each. */
static void
fx_insert_round_robin(struct fx *f, const int *nodes, int nnodes, int n)
{
    for (int i = 0; i < n / 100; i++)
        fx_insert(f, nodes[i % nnodes], 100);
}

/* One message: each aggregate's events arrive in the order written. */
static void
fx_take(struct fx *f, const struct it_message *m)
{
    int k = -1, node = -1, a = -1;
    ck_assert_msg(sscanf(m->message_id, "e-%d", &k) == 1 && k >= 0 &&
                      k < f->inserted,
                  "stray message %s", m->message_id);
    ck_assert(sscanf(m->h_aggregate_id, "g%d-%d", &node, &a) == 2 &&
              node >= 1 && node <= NODES && a >= 0 && a < AGGREGATES);
    if (!f->seen[k]) {
        ck_assert_msg(k > f->last[node][a], "g%d-%d went back from e-%d to %s",
                      node, a, f->last[node][a], m->message_id);
        f->last[node][a] = k;
    }
    f->duplicates += f->seen[k];
    f->received += !f->seen[k];
    f->seen[k] = true;
}

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

static void
fx_dump_logs(const struct fx *f)
{
    for (size_t i = 0; i < f->nrelays; i++)
        it_daemon_dump_log(&f->relay[i].d);
}

/* Every event delivered and SENT (read on node), then the queue taken
 * until it stays empty, so that duplicates counts every copy. */
static void
fx_assert_all_delivered(struct fx *f, int node)
{
    if (!fx_receive(f, f->inserted, DRAIN_MS)) {
        fx_dump_logs(f);
        ck_abort_msg("%d of %d events delivered", f->received, f->inserted);
    }
    ck_assert(IT_WAIT(30000, it_db_int(f->node[node],
                                       "SELECT COUNT(*) FROM outbox_event "
                                       "WHERE status <> 'SENT'") == 0));
    struct it_message m;
    while (it_consumer_next(f->consumer, &m, 1000) == 1) {
        fx_take(f, &m);
        it_message_free(&m);
    }
}

static int
log_lines(const struct relay *r, const char *needle)
{
    char *text = it_file_read(r->d.log_path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        n += strstr(line, needle) != NULL;
    free(text);
    return n;
}

static double
relay_metric(const struct fx *f, const struct relay *r, const char *family)
{
    char series[256];
    snprintf(series, sizeof(series), "%s{outbox=\"%s.outbox_event\"} ", family,
             f->db);
    return it_metric(r->http_port, series);
}

static bool
stream_live(const struct fx *f, const struct relay *r)
{
    char series[256];
    snprintf(series, sizeof(series),
             "outboxd_wake_source{outbox=\"%s.outbox_event\",source="
             "\"binlog\"} ",
             f->db);
    return it_metric(r->http_port, series) == 1;
}

/* node's status variable (wsrep_ready, say), read by the admin. */
static char *
node_status(int node, const char *name)
{
    MYSQL *db = it_db_connect_port(NODE_PORT(node), NULL);
    /* SHOW, as a node out of the cluster refuses a SELECT (1047). */
    char *sql = xasprintf("SHOW STATUS LIKE '%s'", name);
    ck_assert_msg(mysql_query(db, sql) == 0, "%s: %s", sql, mysql_error(db));
    free(sql);
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW row = res != NULL ? mysql_fetch_row(res) : NULL;
    char *v = strdup(row != NULL && row[1] != NULL ? row[1] : "");
    if (res != NULL)
        mysql_free_result(res);
    mysql_close(db);
    return v;
}

static bool
node_status_is(int node, const char *name, const char *want)
{
    char *v = node_status(node, name);
    bool is = strcmp(v, want) == 0;
    free(v);
    return is;
}

/* Node 3 cut off from the others (gmcast.isolate), or back. */
static void
isolate_node3(bool on)
{
    MYSQL *db = it_db_connect_port(NODE_PORT(3), NULL);
    it_db_exec(db, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=%d'",
               on ? 1 : 0);
    mysql_close(db);
    if (on)
        ck_assert(IT_WAIT(60000, node_status_is(3, "wsrep_ready", "OFF")));
    else
        ck_assert(
            IT_WAIT(60000, node_status_is(3, "wsrep_ready", "ON") &&
                               node_status_is(3, "wsrep_local_state_comment",
                                              "Synced") &&
                               node_status_is(1, "wsrep_cluster_size", "3")));
}

/* Sessions of the relay's account on node: the binlog stream's (dump)
 * or the others. */
static long long
relay_sessions(struct fx *f, int node, bool dump)
{
    return it_db_int(f->node[node],
                     "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                     "WHERE USER = '%s' AND (COMMAND = 'Binlog Dump') = %d",
                     f->user, dump);
}

/* ---- the tests ---- */

/*
 * Relays on nodes 1 and 2, a backlog from producers on all three: every
 * event once, in order per aggregate; each wake stream stays up through
 * the drain (one "live" line, no "no binlog wake"); the races the two
 * relays lose at certification are counted, and no line says error.
 */
START_TEST(test_two_relays_three_producers)
{
    static const int all[] = {1, 2, 3};
    struct fx f;
    fx_open(&f);
    fx_start_relay(&f, "[127.0.0.1:3311]");
    fx_start_relay(&f, "[127.0.0.1:3312]");
    for (size_t i = 0; i < 2; i++)
        ck_assert_msg(IT_WAIT(30000, stream_live(&f, &f.relay[i])),
                      "relay %zu: no live binlog stream", i);
    fx_insert_round_robin(&f, all, 3, 9000);
    fx_assert_all_delivered(&f, 3);
    double conflicts[2], wakes[2];
    for (size_t i = 0; i < 2; i++) {
        conflicts[i] =
            relay_metric(&f, &f.relay[i], "outboxd_claim_conflicts_total");
        wakes[i] = relay_metric(&f, &f.relay[i], "outboxd_wakes_total");
    }
    fprintf(stderr,
            "it_galera: %d events, %d duplicates; claim conflicts %.0f and "
            "%.0f, wakes %.0f and %.0f\n",
            f.received, f.duplicates, conflicts[0], conflicts[1], wakes[0],
            wakes[1]);
    ck_assert_int_eq(f.duplicates, 0);
    for (size_t i = 0; i < 2; i++) {
        const struct relay *r = &f.relay[i];
        if (log_lines(r, "level=error") != 0 ||
            log_lines(r, "no binlog wake") != 0)
            fx_dump_logs(&f);
        ck_assert_int_eq(log_lines(r, "level=error"), 0);
        ck_assert_int_eq(log_lines(r, "no binlog wake"), 0);
        ck_assert_int_eq(log_lines(r, "binlog stream live from GTID"), 1);
        ck_assert(stream_live(&f, r));
        ck_assert_double_gt(wakes[i], 0);
    }
    fx_close(&f);
}
END_TEST

/*
 * Node 3 up but out of the cluster (wsrep_ready OFF, 1047 to every
 * statement): a relay whose hosts list it first passes it over and
 * relays from node 1, its session and its binlog stream.  Node 3 then
 * rejoins, for the next test.
 */
START_TEST(test_node_not_ready_passed_over)
{
    static const int one[] = {1};
    struct fx f;
    fx_open(&f);
    isolate_node3(true);
    fx_start_relay(&f, "[127.0.0.1:3313, 127.0.0.1:3311]");
    ck_assert(IT_WAIT(30000, stream_live(&f, &f.relay[0])));
    fx_insert_round_robin(&f, one, 1, 500);
    fx_assert_all_delivered(&f, 1);
    ck_assert_int_eq(f.duplicates, 0);
    ck_assert_int_eq(relay_sessions(&f, 1, true), 1);
    ck_assert_int_ge(relay_sessions(&f, 1, false), 1);
    ck_assert_int_eq(log_lines(&f.relay[0], "level=error"), 0);
    ck_assert_int_eq(
        log_lines(&f.relay[0], "on 127.0.0.1:3311: commits wake their"), 1);
    isolate_node3(false);
    fx_close(&f);
}
END_TEST

/*
 * A relay whose hosts list node 3 first: node 3 stops mid-drain, and
 * the relay goes on on node 1 (its session and its binlog stream),
 * losing nothing.  The last test: the cluster stays two nodes.
 */
START_TEST(test_node_stops_mid_drain)
{
    static const int up[] = {1, 2};
    struct fx f;
    isolate_node3(false); /* in the cluster, whatever the last test did */
    fx_open(&f);
    fx_start_relay(&f, "[127.0.0.1:3313, 127.0.0.1:3311]");
    ck_assert(IT_WAIT(30000, stream_live(&f, &f.relay[0])));
    fx_insert_round_robin(&f, up, 2, 4000);
    ck_assert_msg(fx_receive(&f, 100, 30000), "the drain did not start");
    ck_assert_int_eq(it_sh("bash '%s' stop-node 3 >&2",
                           it_src_path("tests/galera/servers.sh")),
                     0);
    int before = f.received, written = f.inserted;
    mysql_close(f.node[3]);
    f.node[3] = NULL;
    fx_insert_round_robin(&f, up, 2, 1000);
    fx_assert_all_delivered(&f, 1);
    const struct relay *r = &f.relay[0];
    fprintf(stderr,
            "it_galera: node 3 stopped after %d of %d events (then %d "
            "more); %d duplicates, %.0f database errors\n",
            before, written, f.inserted - written, f.duplicates,
            relay_metric(&f, r, "outboxd_database_errors_total"));
    ck_assert_msg(before < written, "the drain was over before the stop");
    /* On the next host now: its session and its binlog stream. */
    ck_assert(IT_WAIT(30000, relay_sessions(&f, 1, true) == 1));
    ck_assert_int_ge(relay_sessions(&f, 1, false), 1);
    ck_assert_msg(IT_WAIT(30000, stream_live(&f, r)),
                  "no binlog stream after the stop");
    ck_assert_int_ge(log_lines(r, "binlog stream live from GTID"), 2);
    ck_assert_int_ge(log_lines(r, "on 127.0.0.1:3311: commits wake"), 1);
    fx_close(&f);
}
END_TEST

Suite *
it_galera_suite(void)
{
    Suite *s = suite_create("it_galera");
    TCase *tc = tcase_create("galera");
    tcase_set_timeout(tc, 240);
    tcase_add_unchecked_fixture(tc, cluster_start, cluster_stop);
    tcase_add_test(tc, test_two_relays_three_producers);
    tcase_add_test(tc, test_node_not_ready_passed_over);
    tcase_add_test(tc, test_node_stops_mid_drain);
    suite_add_tcase(s, tc);
    return s;
}
