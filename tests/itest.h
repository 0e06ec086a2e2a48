/*
 * itest: what every integration test needs against the real MariaDB and
 * RabbitMQ that tests/servers.sh starts: scratch databases, a real AMQP
 * consumer, the daemon as a child process, and polling with deadlines.
 */
#ifndef OUTBOXD_ITEST_H
#define OUTBOXD_ITEST_H

#include <check.h>
#include <mysql.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h" /* xasprintf, ERR_LEN: the tests use them too */

/* Credentials that tests/servers.sh creates. */
#define IT_DB_USER "outboxd"
#define IT_DB_PASSWORD "outboxd"
#define IT_AMQP_URL "amqp://guest:guest@127.0.0.1:5672/"
/* The two MariaDB servers on 127.0.0.1: the usual one, binary log off,
 * and the one with a binary log (ROW) for the binlog wake tests. */
#define IT_DB_PORT 3306
#define IT_DB_BINLOG_PORT 3307

/* Polls expr every 20 ms until it holds or timeout_ms passes. */
#define IT_WAIT(timeout_ms, expr)                                              \
    ({                                                                         \
        uint64_t it_deadline_ = it_now_ms() + (timeout_ms);                    \
        bool it_ok_;                                                           \
        while (!(it_ok_ = (expr)) && it_now_ms() < it_deadline_)               \
            it_sleep_ms(20);                                                   \
        it_ok_;                                                                \
    })

uint64_t it_now_ms(void);
void it_sleep_ms(unsigned ms);
/* Path of a file in the source tree (OUTBOXD_SRC). */
const char *it_src_path(const char *rel);
/* A name unique to this process and call: prefix_<pid>_<n>. */
void it_unique_name(char *buf, size_t size, const char *prefix);

/* Database: every helper aborts the test on an SQL error. */
MYSQL *it_db_connect(const char *database);
/* Drops and creates database name, then runs the statements in sql_file. */
void it_db_create(const char *name, const char *sql_file);
void it_db_drop(const char *name);
/*
 * The relay's own account for database: a user and password derived from
 * its name, created on first use with exactly the grants of
 * sql/grants.sql on database.table (on database.* while the table does
 * not exist yet), dropped with the database.  it_write_config uses it;
 * the tests themselves keep the admin account.
 */
void it_db_grant_relay(const char *database, const char *table, char *user,
                       size_t userlen, char *password, size_t passlen);
/* The account's name and password, without creating anything. */
void it_db_relay_account(const char *database, char *user, size_t userlen,
                         char *password, size_t passlen);
/* The same four on the server at port (IT_DB_PORT: the ones above). */
MYSQL *it_db_connect_port(unsigned port, const char *database);
void it_db_create_port(unsigned port, const char *name, const char *sql_file);
void it_db_drop_port(unsigned port, const char *name);
void it_db_grant_relay_port(unsigned port, const char *database,
                            const char *table, char *user, size_t userlen,
                            char *password, size_t passlen);
/* Adds what a binlog stream needs to database's relay account (created
 * by it_db_grant_relay_port first): REPLICATION SLAVE and BINLOG MONITOR
 * on *.*, on both of its hosts; dropped with the account. */
void it_db_grant_replication(unsigned port, const char *database);
void it_db_exec(MYSQL *db, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
long long it_db_int(MYSQL *db, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* First column of the first row, malloc'd; NULL for SQL NULL or no row. */
char *it_db_str(MYSQL *db, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * Inserts n events into table: event_id "<prefix>-<i>", aggregate_type
 * "Order", aggregate_id "<prefix>-<i % aggregates>", event_type
 * "OrderCreated", a JSON payload of about payload_bytes, committed in
 * transactions of up to 1000 rows.
 */
void it_db_insert_events(MYSQL *db, const char *table, const char *prefix,
                         int n, int aggregates, int payload_bytes);
/* Rows of outbox_event in status ("SENT", say). */
long long it_db_count_status(MYSQL *db, const char *status);

/* RabbitMQ consumer on its own connection. */
struct it_message {
    char *exchange, *routing_key;
    char *message_id, *type, *content_type, *app_id;
    char *expiration;    /* NULL if absent */
    int delivery_mode;   /* 0 if absent */
    long long timestamp; /* -1 if absent */
    char *body;
    size_t body_len;
    char *h_aggregate_type, *h_aggregate_id, *h_traceparent;
    long long h_outbox_id; /* -1 if absent */
    bool redelivered;
};

struct it_consumer;
/*
 * Declares a durable topic exchange (unless exchange is "" or starts
 * with "amq."), a fresh queue bound with binding_key, and consumes it.
 */
struct it_consumer *it_consumer_new(const char *exchange,
                                    const char *binding_key);
const char *it_consumer_queue(const struct it_consumer *c);
/* Consumes an existing queue (after a broker restart, say). */
struct it_consumer *it_consumer_attach(const char *queue);
/* 1 with a message (acked), 0 when timeout_ms passed with none. */
int it_consumer_next(struct it_consumer *c, struct it_message *m,
                     int timeout_ms);
/* Receives until idle for idle_ms or max messages; returns the count. */
size_t it_consumer_drain(struct it_consumer *c, struct it_message **out,
                         size_t max, int idle_ms, int total_timeout_ms);
void it_message_free(struct it_message *m);
void it_consumer_free(struct it_consumer *c);
/* Closes the connection but keeps the queue. */
void it_consumer_close(struct it_consumer *c);
/* Declares or deletes an exchange on a short-lived connection. */
void it_exchange_declare(const char *exchange, const char *type);
void it_exchange_delete(const char *exchange);
/* A durable queue bound to exchange, that outlives a broker restart; the
 * test deletes it. */
void it_queue_declare(const char *queue, const char *exchange,
                      const char *binding);
/* Messages ready in queue, by a passive queue.declare. */
long it_queue_messages(const char *queue);
/* A queue that refuses everything bound to exchange: x-max-length 0 with
 * x-overflow reject-publish makes the broker nack each message routed to
 * it.  The test deletes it. */
void it_nacking_queue_declare(const char *queue, const char *exchange,
                              const char *binding);

/* The daemon. */
struct it_daemon {
    pid_t pid;
    char log_path[256];
    int status; /* wait status once reaped */
    bool reaped;
};
/* Writes a config file: the text is a printf format. */
void it_write_file(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A config for one outbox of database db, table, on exchange; extra is
 * appended to the outbox's keys (indented 8 spaces, one per line).  The
 * relay logs in with it_db_grant_relay's least-privilege account. */
void it_write_config(const char *path, const char *relay_id, const char *db,
                     const char *table, const char *exchange,
                     const char *extra_outbox_keys);
/* OUTBOXD_WRAPPER, when set, is a command the daemon runs under
 * ("valgrind --error-exitcode=99 ..."). */
void it_daemon_start(struct it_daemon *d, const char *config_path,
                     const char *log_name);
/* Sends sig, waits up to timeout_ms; returns true if it exited. */
bool it_daemon_signal_wait(struct it_daemon *d, int sig, int timeout_ms);
/* What a test leaves behind: kills its daemon if one runs (failing the
 * test if it will not die), frees its consumer (may be NULL), drops its
 * database and removes its config file. */
void it_teardown(struct it_daemon *d, struct it_consumer *c, MYSQL *sql,
                 const char *db, const char *conf);
/* The same, for a database on the server at port. */
void it_teardown_port(unsigned port, struct it_daemon *d, struct it_consumer *c,
                      MYSQL *sql, const char *db, const char *conf);
bool it_daemon_alive(struct it_daemon *d);
/* Prints the daemon's log to stderr (for failing tests). */
void it_daemon_dump_log(const struct it_daemon *d);
/* Runs a shell command, returns its exit status. */
int it_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True when the file holds needle (a daemon log, say). */
bool it_file_has(const char *path, const char *needle);
/* The whole file, malloc'd ("" when it cannot be read). */
char *it_file_read(const char *path);

/* What one outboxctl run printed, and its exit code. */
struct it_ctl_run {
    int rc;
    char *out, *err;
};
/* Runs $OUTBOXCTL_BIN -c conf <args>, capturing stdout and stderr. */
struct it_ctl_run it_ctl(const char *conf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void it_ctl_free(struct it_ctl_run *r);

/*
 * What a test of one relay over one outbox works on, as most daemon
 * suites set it up: a name unique to the test, the database
 * outboxd_test_<name without "it_"> with an admin session on it, the
 * exchange ex_<name>, the config path /tmp/<name>.yaml, the consumer the
 * test makes (or NULL) and the daemon.
 */
struct it_fx {
    char name[64], db[96], ex[96], conf[256];
    /* The relay's account (it_db_relay_account's names). */
    char user[64], password[64];
    unsigned port;    /* relay.listen's, once it_fx_listen chose it */
    unsigned db_port; /* db's server: IT_DB_PORT unless opened on another */
    MYSQL *sql;
    struct it_consumer *consumer;
    struct it_daemon d;
};
/* Names the fixture after prefix ("it_relay") and creates its database
 * with the statements of sql_file (a path in the source tree). */
void it_fx_open(struct it_fx *f, const char *prefix, const char *sql_file);
/* The same on the server at port (IT_DB_BINLOG_PORT, say). */
void it_fx_open_port(struct it_fx *f, unsigned port, const char *prefix,
                     const char *sql_file);
/* it_write_config for its outbox_event on its exchange, on its server. */
void it_fx_write_config(struct it_fx *f, const char *extra_outbox_keys);
/* Puts the HTTP endpoints of the config written on a free port, kept in
 * f->port; returns it. */
unsigned it_fx_listen(struct it_fx *f);
/* Starts the daemon on its config, logging under its name. */
void it_fx_start(struct it_fx *f);
/* it_teardown of all of it. */
void it_fx_close(struct it_fx *f);

/* One of several relays over a fixture's outbox (it_ordering's, it_faults'):
 * its relay.id, its config and its daemon. */
struct it_fx_relay {
    char id[96], conf[256];
    struct it_daemon d;
};
/* Names relay r "<fixture's name><suffix>", its config /tmp/<id>.yaml. */
void it_fx_relay_name(const struct it_fx *f, struct it_fx_relay *r,
                      const char *suffix);

/* A loopback port nobody listens on right now, for relay.listen; never
 * the same one twice in one test process. */
unsigned it_free_port(void);
/* GET http://127.0.0.1:port/path: the status (-1 when nothing answered)
 * and, if body is not NULL, the body, malloc'd. */
/* Why the last it_http_get returned -1. */
extern char it_http_why[256];
int it_http_get(unsigned port, const char *path, char **body);
/* The value of a series on port's /metrics, named up to its value's space
 * ("outboxd_x{k=\"v\"} "); -1 when the page or the series is missing. */
double it_metric(unsigned port, const char *series);

#endif
