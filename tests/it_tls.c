/*
 * it_tls: outboxd over TLS to both servers, against a MariaDB and a
 * RabbitMQ node that accept nothing else (tests/tls/servers.sh starts
 * them beside the shared ones, with a CA made for this run): the right CA
 * relays end to end with a client certificate and hostname checks; a
 * wrong CA, a wrong host name or a missing client certificate is refused
 * with an error that says so, and the daemon stays up, not ready,
 * retrying.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_tls_suite(void);

#define TLS_DB_PORT 3391
#define TLS_AMQPS_PORT 5691
#define TLS_LOCK "/run/lock/outboxd-tls.lock"

/* Set by the suite's setup, in the runner, before the tests fork. */
static char tls_dir[256];
static int tls_lock_fd = -1;
static bool tls_up;

static const char *
tls_file(const char *name)
{
    static __thread char buf[8][512];
    static __thread int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof(buf[0]), "%s/%s", tls_dir, name);
    return b;
}

static void
tls_servers_start(void)
{
    /* One run at a time: the ports and the node name are fixed. */
    tls_lock_fd = open(TLS_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (tls_lock_fd >= 0)
        flock(tls_lock_fd, LOCK_EX);
    snprintf(tls_dir, sizeof(tls_dir), "/tmp/outboxd-tls.XXXXXX");
    if (mkdtemp(tls_dir) == NULL)
        return;
    tls_up = it_sh("bash '%s' start '%s' >&2",
                   it_src_path("tests/tls/servers.sh"), tls_dir) == 0;
}

static void
tls_servers_stop(void)
{
    it_sh("bash '%s' stop '%s' >&2", it_src_path("tests/tls/servers.sh"),
          tls_dir);
    if (tls_lock_fd >= 0)
        close(tls_lock_fd);
    tls_lock_fd = -1;
    tls_up = false;
}

/* ---- the TLS MariaDB: admin as root on its socket ---- */

static int
tls_db_sh(const char *database, const char *sql)
{
    return it_sh("mariadb --no-defaults -uroot --socket='%s' %s -e \"%s\"",
                 tls_file("run/mysqld.sock"), database ? database : "", sql);
}

/* The shared fixture's names on the TLS servers: a database with the
 * outbox table there and a relay account that must use TLS, granted
 * exactly sql/grants.sql (it_fx_open and it_fx_close serve the plain
 * servers only). */
static void
fx_open(struct it_fx *f)
{
    ck_assert_msg(tls_up, "the TLS servers did not start (see above)");
    memset(f, 0, sizeof(*f));
    it_unique_name(f->name, sizeof(f->name), "it_tls");
    snprintf(f->db, sizeof(f->db), "tls_%s", f->name + 7);
    snprintf(f->ex, sizeof(f->ex), "ex_%s", f->name);
    snprintf(f->conf, sizeof(f->conf), "/tmp/%s.yaml", f->name);
    it_db_relay_account(f->db, f->user, sizeof(f->user), f->password,
                        sizeof(f->password));
    char sql[512];
    snprintf(sql, sizeof(sql),
             "CREATE DATABASE %s; CREATE USER '%s'@'127.0.0.1' IDENTIFIED "
             "BY '%s' REQUIRE SSL",
             f->db, f->user, f->password);
    ck_assert_int_eq(tls_db_sh(NULL, sql), 0);
    ck_assert_int_eq(it_sh("mariadb --no-defaults -uroot --socket='%s' %s < "
                           "'%s'",
                           tls_file("run/mysqld.sock"), f->db,
                           it_src_path("sql/outbox.sql")),
                     0);
    ck_assert_int_eq(
        it_sh("sed -e 's/{{database}}/%s/g' -e 's/{{table}}/outbox_event/g' "
              "-e 's/{{user}}/%s/g' -e 's/{{host}}/127.0.0.1/g' '%s' | "
              "mariadb --no-defaults -uroot --socket='%s'",
              f->db, f->user, it_src_path("sql/grants.sql"),
              tls_file("run/mysqld.sock")),
        0);
    f->port = it_free_port();
}

static void
fx_close(struct it_fx *f)
{
    if (f->d.pid > 0 && !it_daemon_signal_wait(&f->d, SIGKILL, 5000))
        ck_abort_msg("outboxd did not die");
    char sql[256];
    snprintf(sql, sizeof(sql), "DROP DATABASE %s; DROP USER '%s'@'127.0.0.1'",
             f->db, f->user);
    tls_db_sh(NULL, sql);
    unlink(f->conf);
}

static void
fx_insert(struct it_fx *f, int n)
{
    char sql[256];
    for (int i = 0; i < n; i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO outbox_event (event_id, aggregate_type, "
                 "aggregate_id, event_type, payload) VALUES ('tls-%d', "
                 "'Order', 'o-%d', 'OrderCreated', '{}')",
                 i, i % 3);
        ck_assert_int_eq(tls_db_sh(f->db, sql), 0);
    }
}

static long long
fx_count_sent(struct it_fx *f)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "mariadb --no-defaults -uroot --socket='%s' -Nse \"SELECT "
             "COUNT(*) FROM %s.outbox_event WHERE status = 'SENT'\"",
             tls_file("run/mysqld.sock"), f->db);
    FILE *p = popen(cmd, "r");
    long long n = -1;
    if (p != NULL) {
        if (fscanf(p, "%lld", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

/*
 * The config: broker and database over TLS.  url_host is the broker's
 * host name in the URL; broker_tls and db_tls are the keys of each tls:
 * block (flow style, without the braces).
 */
static void
fx_config(struct it_fx *f, const char *url_host, const char *broker_tls,
          const char *db_tls)
{
    it_write_file(f->conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"127.0.0.1:%u\"\n"
                  "brokers:\n"
                  "  main:\n"
                  "    url: amqps://guest:guest@%s:%d/\n"
                  "    connect_timeout: 3s\n"
                  "    tls: { %s }\n"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    port: %d\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "    connect_timeout: 3s\n"
                  "    tls: { %s }\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        exchange: \"%s\"\n",
                  f->name, f->port, url_host, TLS_AMQPS_PORT, broker_tls, f->db,
                  TLS_DB_PORT, f->user, f->password, f->db, db_tls, f->ex);
}

static char *
tls_keys(const char *ca, bool client_cert)
{
    return xasprintf("ca_file: %s%s%s%s%s", tls_file(ca),
                     client_cert ? ", cert_file: " : "",
                     client_cert ? tls_file("client.pem") : "",
                     client_cert ? ", key_file: " : "",
                     client_cert ? tls_file("client.key") : "");
}

/* The log says what: dumped when it never does. */
static void
wait_log(struct it_fx *f, const char *what, int timeout_ms)
{
    if (!IT_WAIT(timeout_ms, it_file_has(f->d.log_path, what))) {
        it_daemon_dump_log(&f->d);
        ck_abort_msg("the log never said \"%s\"", what);
    }
}

/* ---- an AMQPS consumer with the client certificate ---- */

static void
amqp_ok(amqp_rpc_reply_t r, const char *what)
{
    ck_assert_msg(r.reply_type == AMQP_RESPONSE_NORMAL,
                  "%s failed (reply type %d, %s)", what, r.reply_type,
                  amqp_error_string2(r.library_error));
}

static amqp_connection_state_t
tls_consumer(const char *exchange)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_ssl_socket_new(c);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(amqp_ssl_socket_set_cacert(s, tls_file("ca.pem")), 0);
    ck_assert_int_eq(amqp_ssl_socket_set_key(s, tls_file("client.pem"),
                                             tls_file("client.key")),
                     0);
    struct timeval tv = {10, 0};
    int rc = amqp_socket_open_noblock(s, "localhost", TLS_AMQPS_PORT, &tv);
    ck_assert_msg(rc == AMQP_STATUS_OK, "consumer: %s", amqp_error_string2(rc));
    amqp_ok(amqp_login(c, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest",
                       "guest"),
            "login");
    amqp_channel_open(c, 1);
    amqp_ok(amqp_get_rpc_reply(c), "channel.open");
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(exchange),
                          amqp_cstring_bytes("topic"), 0, 0, 0, 0,
                          amqp_empty_table);
    amqp_ok(amqp_get_rpc_reply(c), "exchange.declare");
    amqp_queue_declare_ok_t *q = amqp_queue_declare(c, 1, amqp_empty_bytes, 0,
                                                    0, 1, 1, amqp_empty_table);
    amqp_ok(amqp_get_rpc_reply(c), "queue.declare");
    amqp_bytes_t queue = amqp_bytes_malloc_dup(q->queue);
    amqp_queue_bind(c, 1, queue, amqp_cstring_bytes(exchange),
                    amqp_cstring_bytes("#"), amqp_empty_table);
    amqp_ok(amqp_get_rpc_reply(c), "queue.bind");
    amqp_basic_consume(c, 1, queue, amqp_empty_bytes, 0, 1, 0,
                       amqp_empty_table);
    amqp_ok(amqp_get_rpc_reply(c), "basic.consume");
    amqp_bytes_free(queue);
    return c;
}

/* Message ids received until n arrived or timeout_ms passed. */
static int
tls_receive(amqp_connection_state_t c, int n, int timeout_ms)
{
    int got = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    while (got < n && it_now_ms() < deadline) {
        amqp_envelope_t env;
        struct timeval tv = {1, 0};
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        amqp_ok(r, "consume");
        ck_assert(strncmp(env.message.properties.message_id.bytes, "tls-", 4) ==
                  0);
        got++;
        amqp_destroy_envelope(&env);
    }
    return got;
}

static void
tls_consumer_close(amqp_connection_state_t c)
{
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/* The daemon runs, says not ready, and keeps trying what failed. */
static void
check_retrying(struct it_fx *f, const char *still)
{
    wait_log(f, still, 30000);
    ck_assert_msg(it_daemon_alive(&f->d), "outboxd exited");
    /* A refused or unanswered probe is printed and tried again (seen
     * once in CI, not reproduced); the answer must say not ready. */
    char *body;
    int status;
    uint64_t deadline = it_now_ms() + 10000;
    while ((status = it_http_get(f->port, "/readyz", &body)) == -1 &&
           it_now_ms() < deadline) {
        fprintf(stderr, "tls: %s\n", it_http_why);
        free(body);
        it_sleep_ms(200);
    }
    ck_assert_msg(status == 503, "/readyz answered %d: %s", status, body);
    free(body);
    ck_assert_int_eq(fx_count_sent(f), 0);
    ck_assert(it_daemon_signal_wait(&f->d, SIGTERM, 15000));
    ck_assert(WIFEXITED(f->d.status) && WEXITSTATUS(f->d.status) == 0);
}

/* ---- tests ---- */

START_TEST(test_tls_end_to_end)
{
    struct it_fx f;
    fx_open(&f);
    char *btls = tls_keys("ca.pem", true), *dtls = tls_keys("ca.pem", false);
    fx_config(&f, "localhost", btls, dtls);
    amqp_connection_state_t c = tls_consumer(f.ex);
    fx_insert(&f, 12);
    it_fx_start(&f);
    ck_assert_int_eq(tls_receive(c, 12, 60000), 12);
    ck_assert(IT_WAIT(20000, fx_count_sent(&f) == 12));
    ck_assert(
        it_file_has(f.d.log_path, "broker connected: amqps://guest:***@"));
    ck_assert(IT_WAIT(10000, it_http_get(f.port, "/readyz", NULL) == 200));
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 15000));
    ck_assert(WIFEXITED(f.d.status) && WEXITSTATUS(f.d.status) == 0);
    tls_consumer_close(c);
    free(btls);
    free(dtls);
    fx_close(&f);
}
END_TEST

START_TEST(test_tls_broker_wrong_ca)
{
    struct it_fx f;
    fx_open(&f);
    char *btls = tls_keys("other-ca.pem", true),
         *dtls = tls_keys("ca.pem", false);
    fx_config(&f, "localhost", btls, dtls);
    fx_insert(&f, 3);
    it_fx_start(&f);
    wait_log(&f, "certificate verification failed", 30000);
    check_retrying(&f, "broker still unavailable");
    free(btls);
    free(dtls);
    fx_close(&f);
}
END_TEST

START_TEST(test_tls_database_wrong_ca)
{
    struct it_fx f;
    fx_open(&f);
    char *btls = tls_keys("ca.pem", true),
         *dtls = tls_keys("other-ca.pem", false);
    fx_config(&f, "localhost", btls, dtls);
    fx_insert(&f, 3);
    it_fx_start(&f);
    /* The binlog stream may say so first: wait for the relay's line. */
    wait_log(&f, "database unavailable", 30000);
    ck_assert(it_file_has(f.d.log_path, "certificate verification failed"));
    check_retrying(&f, "database still unavailable");
    free(btls);
    free(dtls);
    fx_close(&f);
}
END_TEST

/* The broker's certificate names localhost, not 127.0.0.1. */
START_TEST(test_tls_broker_hostname)
{
    struct it_fx f;
    fx_open(&f);
    char *dtls = tls_keys("ca.pem", false);
    char *btls = tls_keys("ca.pem", true), *lax;
    fx_config(&f, "127.0.0.1", btls, dtls);
    it_fx_start(&f);
    wait_log(&f, "hostname verification failed", 30000);
    check_retrying(&f, "broker still unavailable");
    /* verify_hostname: false accepts it, the CA still checked. */
    lax = xasprintf("%s, verify_hostname: false", btls);
    fx_config(&f, "127.0.0.1", lax, dtls);
    it_fx_start(&f);
    wait_log(&f, "broker connected", 30000);
    free(lax);
    free(btls);
    free(dtls);
    fx_close(&f);
}
END_TEST

/* The node requires a client certificate: without one, no handshake. */
START_TEST(test_tls_broker_needs_client_cert)
{
    struct it_fx f;
    fx_open(&f);
    char *btls = tls_keys("ca.pem", false), *dtls = tls_keys("ca.pem", false);
    fx_config(&f, "localhost", btls, dtls);
    it_fx_start(&f);
    wait_log(&f, "broker unavailable", 30000);
    ck_assert_msg(it_sh("grep 'broker unavailable' '%s' | grep -q TLS",
                        f.d.log_path) == 0,
                  "the broker error does not mention TLS");
    check_retrying(&f, "broker still unavailable");
    free(btls);
    free(dtls);
    fx_close(&f);
}
END_TEST

Suite *
it_tls_suite(void)
{
    Suite *s = suite_create("it_tls");
    TCase *tc = tcase_create("tls");
    tcase_set_timeout(tc, 180);
    tcase_add_unchecked_fixture(tc, tls_servers_start, tls_servers_stop);
    tcase_add_test(tc, test_tls_end_to_end);
    tcase_add_test(tc, test_tls_broker_wrong_ca);
    tcase_add_test(tc, test_tls_database_wrong_ca);
    tcase_add_test(tc, test_tls_broker_hostname);
    tcase_add_test(tc, test_tls_broker_needs_client_cert);
    suite_add_tcase(s, tc);
    return s;
}
