/*
 * itest: helpers shared by the integration suites: scratch databases,
 * a real AMQP consumer, the daemon as a child, polling with deadlines.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t
it_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void
it_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

const char *
it_src_path(const char *rel)
{
    static __thread char buf[1024];
    const char *src = getenv("OUTBOXD_SRC");
    snprintf(buf, sizeof(buf), "%s/%s", src ? src : "..", rel);
    return buf;
}

/*
 * pid and counter alone repeat: a run spawns more processes than
 * pid_max (32768 here), and a test that fails leaves its durable queue
 * behind with whatever it held, which a later test of the same pid would
 * then declare and read.  The clock tells them apart.
 */
void
it_unique_name(char *buf, size_t size, const char *prefix)
{
    static int counter;
    snprintf(buf, size, "%s_%d_%x_%d", prefix, (int)getpid(),
             (unsigned)time(NULL), ++counter);
}

/* ---- database ---- */

MYSQL *
it_db_connect(const char *database)
{
    return it_db_connect_port(IT_DB_PORT, database);
}

MYSQL *
it_db_connect_port(unsigned port, const char *database)
{
    MYSQL *db = mysql_init(NULL);
    ck_assert_ptr_nonnull(db);
    if (mysql_real_connect(db, "127.0.0.1", IT_DB_USER, IT_DB_PASSWORD,
                           database, port, NULL, 0) == NULL)
        ck_abort_msg("connect to MariaDB on port %u (%s): %s", port,
                     database ? database : "", mysql_error(db));
    return db;
}

static void
vexec(MYSQL *db, const char *fmt, va_list ap)
{
    char *sql = xvasprintf(fmt, ap);
    if (mysql_query(db, sql) != 0)
        ck_abort_msg("SQL failed: %s: %.300s", mysql_error(db), sql);
    free(sql);
}

void
it_db_exec(MYSQL *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vexec(db, fmt, ap);
    va_end(ap);
    MYSQL_RES *res = mysql_store_result(db);
    if (res)
        mysql_free_result(res);
}

static char *
vfirst_value(MYSQL *db, const char *fmt, va_list ap)
{
    vexec(db, fmt, ap);
    MYSQL_RES *res = mysql_store_result(db);
    ck_assert_msg(res != NULL, "query returned no result set");
    MYSQL_ROW row = mysql_fetch_row(res);
    char *v = row && row[0] ? strdup(row[0]) : NULL;
    mysql_free_result(res);
    return v;
}

long long
it_db_int(MYSQL *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *v = vfirst_value(db, fmt, ap);
    va_end(ap);
    long long n = v ? atoll(v) : 0;
    free(v);
    return n;
}

char *
it_db_str(MYSQL *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *v = vfirst_value(db, fmt, ap);
    va_end(ap);
    return v;
}

/* The relay account of database name: one per test database. */
static uint32_t
name_hash(const char *name)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

void
it_db_relay_account(const char *database, char *user, size_t userlen,
                    char *password, size_t passlen)
{
    uint32_t h = name_hash(database);
    snprintf(user, userlen, "outboxd_relay_%08x", h);
    snprintf(password, passlen, "relay-pw-%08x", h * 2654435761u);
}

static void
drop_relay_account(MYSQL *db, const char *database)
{
    char user[64], password[64];
    it_db_relay_account(database, user, sizeof(user), password,
                        sizeof(password));
    it_db_exec(db, "DROP USER IF EXISTS '%s'@'127.0.0.1', '%s'@'localhost'",
               user, user);
}

/* sql/grants.sql with its placeholders filled in. */
static char *
grants_sql(const char *database, const char *table, const char *user,
           const char *host)
{
    FILE *f = fopen(it_src_path("sql/grants.sql"), "r");
    ck_assert_msg(f != NULL, "cannot read sql/grants.sql");
    char *sql = NULL;
    size_t len = 0, cap = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "--", 2) == 0)
            continue;
        const struct {
            const char *from, *to;
        } subst[] = {
            /* A table not created yet cannot be granted on: the same
             * privileges on the database stand in until it is. */
            {"`{{table}}`", table ? NULL : "*"},
            {"{{database}}", database},
            {"{{table}}", table},
            {"{{user}}", user},
            {"{{host}}", host},
        };
        for (const char *p = line; *p;) {
            size_t i, n = sizeof(subst) / sizeof(*subst);
            for (i = 0; i < n; i++)
                if (subst[i].to != NULL &&
                    strncmp(p, subst[i].from, strlen(subst[i].from)) == 0)
                    break;
            const char *add = i < n ? subst[i].to : p;
            size_t addlen = i < n ? strlen(add) : 1;
            if (len + addlen + 1 > cap) {
                cap = (len + addlen + 1) * 2;
                sql = realloc(sql, cap);
            }
            memcpy(sql + len, add, addlen);
            len += addlen;
            sql[len] = '\0';
            p += i < n ? strlen(subst[i].from) : 1;
        }
    }
    fclose(f);
    ck_assert_msg(sql != NULL && strstr(sql, "GRANT") != NULL,
                  "sql/grants.sql holds no GRANT");
    return sql;
}

/* Runs each statement of sql (split at ';' ending a line). */
static void
exec_script(MYSQL *db, char *sql)
{
    char *stmt = sql;
    for (char *end; (end = strstr(stmt, ";\n")) != NULL; stmt = end + 2) {
        *end = '\0';
        if (strspn(stmt, " \t\r\n") != strlen(stmt))
            it_db_exec(db, "%s", stmt);
    }
    if (strspn(stmt, " \t\r\n;") != strlen(stmt))
        it_db_exec(db, "%s", stmt);
}

static bool
table_exists(MYSQL *db, const char *database, const char *table)
{
    return it_db_int(db,
                     "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                     "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'",
                     database, table) > 0;
}

void
it_db_grant_relay(const char *database, const char *table, char *user,
                  size_t userlen, char *password, size_t passlen)
{
    it_db_grant_relay_port(IT_DB_PORT, database, table, user, userlen, password,
                           passlen);
}

void
it_db_grant_relay_port(unsigned port, const char *database, const char *table,
                       char *user, size_t userlen, char *password,
                       size_t passlen)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    it_db_relay_account(database, user, userlen, password, passlen);
    MYSQL *db = it_db_connect_port(port, NULL);
    bool exists = table_exists(db, database, table);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++) {
        it_db_exec(db, "CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY '%s'",
                   user, hosts[i], password);
        char *sql = grants_sql(database, exists ? table : NULL, user, hosts[i]);
        exec_script(db, sql);
        free(sql);
    }
    mysql_close(db);
}

/* The global privileges a binlog stream needs, beyond sql/grants.sql. */
void
it_db_grant_replication(unsigned port, const char *database)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    char user[64], password[64];
    it_db_relay_account(database, user, sizeof(user), password,
                        sizeof(password));
    MYSQL *db = it_db_connect_port(port, NULL);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(*hosts); i++)
        it_db_exec(db,
                   "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO "
                   "'%s'@'%s'",
                   user, hosts[i]);
    mysql_close(db);
}

void
it_db_drop(const char *name)
{
    it_db_drop_port(IT_DB_PORT, name);
}

void
it_db_drop_port(unsigned port, const char *name)
{
    MYSQL *db = it_db_connect_port(port, NULL);
    it_db_exec(db, "DROP DATABASE IF EXISTS `%s`", name);
    drop_relay_account(db, name);
    mysql_close(db);
}

void
it_db_create(const char *name, const char *sql_file)
{
    it_db_create_port(IT_DB_PORT, name, sql_file);
}

void
it_db_create_port(unsigned port, const char *name, const char *sql_file)
{
    MYSQL *db = it_db_connect_port(port, NULL);
    it_db_exec(db, "DROP DATABASE IF EXISTS `%s`", name);
    drop_relay_account(db, name);
    it_db_exec(db, "CREATE DATABASE `%s`", name);
    mysql_close(db);
    if (sql_file != NULL) {
        int rc = it_sh("mariadb -h127.0.0.1 -P%u -u%s -p%s %s < '%s'", port,
                       IT_DB_USER, IT_DB_PASSWORD, name, sql_file);
        ck_assert_msg(rc == 0, "loading %s into %s failed", sql_file, name);
    }
}

void
it_db_insert_events(MYSQL *db, const char *table, const char *prefix, int n,
                    int aggregates, int payload_bytes)
{
    size_t cap = (size_t)1000 * (size_t)(payload_bytes + 256) + 256;
    char *sql = malloc(cap);
    char *pad = malloc((size_t)payload_bytes + 1);
    int padlen = payload_bytes > 40 ? payload_bytes - 40 : 1;
    memset(pad, 'x', (size_t)padlen);
    pad[padlen] = '\0';
    for (int start = 0; start < n; start += 1000) {
        size_t len = (size_t)snprintf(
            sql, cap,
            "INSERT INTO %s (event_id, aggregate_type, aggregate_id, "
            "event_type, payload, status) VALUES ",
            table);
        int end = start + 1000 < n ? start + 1000 : n;
        for (int i = start; i < end; i++)
            len += (size_t)snprintf(sql + len, cap - len,
                                    "%s('%s-%d','Order','%s-%d','OrderCreated',"
                                    "'{\"seq\":%d,\"pad\":\"%s\"}','PENDING')",
                                    i > start ? "," : "", prefix, i, prefix,
                                    i % aggregates, i, pad);
        it_db_exec(db, "%s", sql);
    }
    free(pad);
    free(sql);
}

long long
it_db_count_status(MYSQL *db, const char *status)
{
    return it_db_int(
        db, "SELECT COUNT(*) FROM outbox_event WHERE status = '%s'", status);
}

/* ---- RabbitMQ ---- */

struct it_consumer {
    amqp_connection_state_t conn;
    char queue[128];
};

static void
amqp_check(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = r.reply.decoded;
        ck_abort_msg("%s: channel closed %d %.*s", what, m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
    }
    ck_abort_msg("%s failed (reply type %d, library error %s)", what,
                 r.reply_type, amqp_error_string2(r.library_error));
}

static amqp_connection_state_t
amqp_open(void)
{
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    ck_assert_ptr_nonnull(sock);
    struct timeval tv = {5, 0};
    ck_assert_msg(amqp_socket_open_noblock(sock, "127.0.0.1", 5672, &tv) ==
                      AMQP_STATUS_OK,
                  "cannot connect to RabbitMQ on 127.0.0.1:5672");
    amqp_check(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                          "guest", "guest"),
               "login");
    amqp_channel_open(conn, 1);
    amqp_check(amqp_get_rpc_reply(conn), "channel.open");
    return conn;
}

static void
amqp_close_all(amqp_connection_state_t conn)
{
    amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

void
it_exchange_declare(const char *exchange, const char *type)
{
    amqp_connection_state_t conn = amqp_open();
    amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange),
                          amqp_cstring_bytes(type), 0, 1, 0, 0,
                          amqp_empty_table);
    amqp_check(amqp_get_rpc_reply(conn), "exchange.declare");
    amqp_close_all(conn);
}

void
it_exchange_delete(const char *exchange)
{
    amqp_connection_state_t conn = amqp_open();
    amqp_exchange_delete(conn, 1, amqp_cstring_bytes(exchange), 0);
    amqp_check(amqp_get_rpc_reply(conn), "exchange.delete");
    amqp_close_all(conn);
}

static void
queue_declare_bound(const char *queue, const char *exchange,
                    const char *binding, bool durable, amqp_table_t args)
{
    amqp_connection_state_t conn = amqp_open();
    amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 0, durable, 0, 0,
                       args);
    amqp_check(amqp_get_rpc_reply(conn), "queue.declare");
    amqp_queue_bind(conn, 1, amqp_cstring_bytes(queue),
                    amqp_cstring_bytes(exchange), amqp_cstring_bytes(binding),
                    amqp_empty_table);
    amqp_check(amqp_get_rpc_reply(conn), "queue.bind");
    amqp_close_all(conn);
}

void
it_queue_declare(const char *queue, const char *exchange, const char *binding)
{
    queue_declare_bound(queue, exchange, binding, true, amqp_empty_table);
}

long
it_queue_messages(const char *queue)
{
    amqp_connection_state_t conn = amqp_open();
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        conn, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
    amqp_check(amqp_get_rpc_reply(conn), "queue.declare passive");
    long n = (long)ok->message_count;
    amqp_close_all(conn);
    return n;
}

void
it_nacking_queue_declare(const char *queue, const char *exchange,
                         const char *binding)
{
    amqp_table_entry_t args[2] = {
        {amqp_cstring_bytes("x-max-length"), {AMQP_FIELD_KIND_I64, {.i64 = 0}}},
        {amqp_cstring_bytes("x-overflow"),
         {AMQP_FIELD_KIND_UTF8,
          {.bytes = amqp_cstring_bytes("reject-publish")}}},
    };
    queue_declare_bound(queue, exchange, binding, false,
                        (amqp_table_t){2, args});
}

static void
consumer_start(struct it_consumer *c)
{
    amqp_basic_qos(c->conn, 1, 0, 1000, 0);
    amqp_check(amqp_get_rpc_reply(c->conn), "basic.qos");
    amqp_basic_consume(c->conn, 1, amqp_cstring_bytes(c->queue),
                       amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
    amqp_check(amqp_get_rpc_reply(c->conn), "basic.consume");
}

struct it_consumer *
it_consumer_new(const char *exchange, const char *binding_key)
{
    struct it_consumer *c = calloc(1, sizeof(*c));
    if (exchange[0] != '\0' && strncmp(exchange, "amq.", 4) != 0)
        it_exchange_declare(exchange, "topic");
    c->conn = amqp_open();
    it_unique_name(c->queue, sizeof(c->queue), "it_queue");
    /* Durable so that a broker restart in a fault test keeps it; gone
     * by itself a while after a failed test left it unused. */
    amqp_table_entry_t expires = {amqp_cstring_bytes("x-expires"),
                                  {AMQP_FIELD_KIND_I32, {.i32 = 900000}}};
    amqp_queue_declare(c->conn, 1, amqp_cstring_bytes(c->queue), 0, 1, 0, 0,
                       (amqp_table_t){1, &expires});
    amqp_check(amqp_get_rpc_reply(c->conn), "queue.declare");
    if (exchange[0] != '\0') {
        amqp_queue_bind(c->conn, 1, amqp_cstring_bytes(c->queue),
                        amqp_cstring_bytes(exchange),
                        amqp_cstring_bytes(binding_key), amqp_empty_table);
        amqp_check(amqp_get_rpc_reply(c->conn), "queue.bind");
    }
    consumer_start(c);
    return c;
}

struct it_consumer *
it_consumer_attach(const char *queue)
{
    struct it_consumer *c = calloc(1, sizeof(*c));
    snprintf(c->queue, sizeof(c->queue), "%s", queue);
    c->conn = amqp_open();
    consumer_start(c);
    return c;
}

void
it_consumer_close(struct it_consumer *c)
{
    amqp_close_all(c->conn);
    free(c);
}

const char *
it_consumer_queue(const struct it_consumer *c)
{
    return c->queue;
}

static char *
bytes_dup(amqp_bytes_t b)
{
    char *s = malloc(b.len + 1);
    if (b.len > 0)
        memcpy(s, b.bytes, b.len);
    s[b.len] = '\0';
    return s;
}

static void
copy_headers(struct it_message *m, const amqp_table_t *t)
{
    m->h_outbox_id = -1;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        char *key = bytes_dup(e->key);
        if (e->value.kind == AMQP_FIELD_KIND_UTF8 ||
            e->value.kind == AMQP_FIELD_KIND_BYTES) {
            char **dst = strcmp(key, "aggregate_type") == 0
                             ? &m->h_aggregate_type
                         : strcmp(key, "aggregate_id") == 0 ? &m->h_aggregate_id
                         : strcmp(key, "traceparent") == 0  ? &m->h_traceparent
                                                            : NULL;
            if (dst)
                *dst = bytes_dup(e->value.value.bytes);
        } else if (strcmp(key, "outbox_id") == 0) {
            switch (e->value.kind) {
            case AMQP_FIELD_KIND_I64:
                m->h_outbox_id = e->value.value.i64;
                break;
            case AMQP_FIELD_KIND_U64:
                m->h_outbox_id = (long long)e->value.value.u64;
                break;
            case AMQP_FIELD_KIND_I32:
                m->h_outbox_id = e->value.value.i32;
                break;
            default:
                break;
            }
        }
        free(key);
    }
}

static void
copy_message(struct it_message *m, const amqp_envelope_t *env)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    memset(m, 0, sizeof(*m));
    m->exchange = bytes_dup(env->exchange);
    m->routing_key = bytes_dup(env->routing_key);
    m->redelivered = env->redelivered;
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        m->message_id = bytes_dup(p->message_id);
    if (p->_flags & AMQP_BASIC_TYPE_FLAG)
        m->type = bytes_dup(p->type);
    if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
        m->content_type = bytes_dup(p->content_type);
    if (p->_flags & AMQP_BASIC_APP_ID_FLAG)
        m->app_id = bytes_dup(p->app_id);
    if (p->_flags & AMQP_BASIC_EXPIRATION_FLAG)
        m->expiration = bytes_dup(p->expiration);
    m->delivery_mode =
        p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG ? p->delivery_mode : 0;
    m->timestamp =
        p->_flags & AMQP_BASIC_TIMESTAMP_FLAG ? (long long)p->timestamp : -1;
    m->body = bytes_dup(env->message.body);
    m->body_len = env->message.body.len;
    m->h_outbox_id = -1;
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
        copy_headers(m, &p->headers);
}

int
it_consumer_next(struct it_consumer *c, struct it_message *m, int timeout_ms)
{
    amqp_envelope_t env;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_rpc_reply_t r;
    for (;;) {
        amqp_maybe_release_buffers(c->conn);
        r = amqp_consume_message(c->conn, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION ||
            r.library_error != AMQP_STATUS_UNEXPECTED_STATE)
            break;
        /* A frame other than a delivery: connection.blocked/unblocked
         * while some test raises a memory alarm.  Skip those. */
        amqp_frame_t f;
        struct timeval zero = {0, 0};
        if (amqp_simple_wait_frame_noblock(c->conn, &f, &zero) !=
            AMQP_STATUS_OK)
            continue;
        ck_assert_msg(
            f.frame_type == AMQP_FRAME_METHOD &&
                (f.payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD ||
                 f.payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD),
            "consume: unexpected frame type %d method 0x%08x", f.frame_type,
            f.frame_type == AMQP_FRAME_METHOD ? f.payload.method.id : 0);
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_TIMEOUT)
        return 0;
    amqp_check(r, "consume");
    copy_message(m, &env);
    amqp_basic_ack(c->conn, 1, env.delivery_tag, 0);
    amqp_destroy_envelope(&env);
    return 1;
}

size_t
it_consumer_drain(struct it_consumer *c, struct it_message **out, size_t max,
                  int idle_ms, int total_timeout_ms)
{
    size_t n = 0, cap = 0;
    struct it_message *msgs = NULL;
    uint64_t deadline = it_now_ms() + (uint64_t)total_timeout_ms;
    while (n < max && it_now_ms() < deadline) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            msgs = realloc(msgs, cap * sizeof(*msgs));
        }
        if (it_consumer_next(c, &msgs[n], idle_ms) == 0)
            break;
        n++;
    }
    *out = msgs;
    return n;
}

void
it_message_free(struct it_message *m)
{
    free(m->exchange);
    free(m->routing_key);
    free(m->message_id);
    free(m->type);
    free(m->content_type);
    free(m->app_id);
    free(m->expiration);
    free(m->body);
    free(m->h_aggregate_type);
    free(m->h_aggregate_id);
    free(m->h_traceparent);
}

void
it_consumer_free(struct it_consumer *c)
{
    if (c == NULL)
        return;
    amqp_queue_delete(c->conn, 1, amqp_cstring_bytes(c->queue), 0, 0);
    amqp_get_rpc_reply(c->conn);
    amqp_close_all(c->conn);
    free(c);
}

/* ---- the daemon ---- */

void
it_write_file(const char *path, const char *fmt, ...)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    /* configs hold a password: keep them private, as operators should */
    fchmod(fileno(f), 0600);
    fclose(f);
}

/* it_write_config for a database on the server at port. */
static void
write_config_port(unsigned port, const char *path, const char *relay_id,
                  const char *db, const char *table, const char *exchange,
                  const char *extra_outbox_keys)
{
    char user[64], password[64];
    it_db_grant_relay_port(port, db, table, user, sizeof(user), password,
                           sizeof(password));
    it_write_file(path,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"\"\n"
                  "  shutdown_timeout: 10s\n"
                  "brokers:\n"
                  "  main:\n"
                  "    url: %s\n"
                  "    heartbeat: 10s\n"
                  "    confirm_timeout: 10s\n"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    port: %u\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "    outboxes:\n"
                  "      - table: %s\n"
                  "        broker: main\n"
                  "        exchange: \"%s\"\n"
                  "%s",
                  relay_id, IT_AMQP_URL, db, port, user, password, db, table,
                  exchange, extra_outbox_keys ? extra_outbox_keys : "");
}

void
it_write_config(const char *path, const char *relay_id, const char *db,
                const char *table, const char *exchange,
                const char *extra_outbox_keys)
{
    write_config_port(IT_DB_PORT, path, relay_id, db, table, exchange,
                      extra_outbox_keys);
}

void
it_daemon_start(struct it_daemon *d, const char *config_path,
                const char *log_name)
{
    const char *bin = getenv("OUTBOXD_BIN");
    ck_assert_msg(bin != NULL, "OUTBOXD_BIN is not set (run via make)");
    memset(d, 0, sizeof(*d));
    snprintf(d->log_path, sizeof(d->log_path), "/tmp/%s.log", log_name);
    d->pid = fork();
    ck_assert_int_ge(d->pid, 0);
    if (d->pid == 0) {
        int fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
        }
        /* A daemon left behind by a failed test dies with it, and holds
         * none of the runner's descriptors (a flock(1) lock, say). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 3; i < 1024; i++)
            close(i);
        /* OUTBOXD_WRAPPER="valgrind ...": exec keeps the pid, so
         * signals reach the daemon through the wrapper. */
        const char *wrapper = getenv("OUTBOXD_WRAPPER");
        if (wrapper != NULL && wrapper[0] != '\0') {
            char *cmd = xasprintf("exec %s \"$0\" -c \"$1\"", wrapper);
            execl("/bin/sh", "sh", "-c", cmd, bin, config_path, (char *)NULL);
        } else {
            execl(bin, bin, "-c", config_path, (char *)NULL);
        }
        _exit(127);
    }
}

static bool
reap(struct it_daemon *d, bool block)
{
    if (d->reaped)
        return true;
    pid_t r = waitpid(d->pid, &d->status, block ? 0 : WNOHANG);
    if (r == d->pid)
        d->reaped = true;
    return d->reaped;
}

bool
it_daemon_alive(struct it_daemon *d)
{
    return !reap(d, false);
}

bool
it_daemon_signal_wait(struct it_daemon *d, int sig, int timeout_ms)
{
    if (d->reaped)
        return true;
    kill(d->pid, sig);
    return IT_WAIT(timeout_ms, reap(d, false));
}

void
it_teardown(struct it_daemon *d, struct it_consumer *c, MYSQL *sql,
            const char *db, const char *conf)
{
    it_teardown_port(IT_DB_PORT, d, c, sql, db, conf);
}

void
it_teardown_port(unsigned port, struct it_daemon *d, struct it_consumer *c,
                 MYSQL *sql, const char *db, const char *conf)
{
    if (d->pid > 0 && !it_daemon_signal_wait(d, SIGKILL, 5000))
        ck_abort_msg("outboxd did not die");
    it_consumer_free(c);
    mysql_close(sql);
    it_db_drop_port(port, db);
    unlink(conf);
}

/* ---- the fixture of one relay over one outbox ---- */

void
it_fx_open(struct it_fx *f, const char *prefix, const char *sql_file)
{
    it_fx_open_port(f, IT_DB_PORT, prefix, sql_file);
}

void
it_fx_open_port(struct it_fx *f, unsigned port, const char *prefix,
                const char *sql_file)
{
    memset(f, 0, sizeof(*f));
    f->db_port = port;
    it_unique_name(f->name, sizeof(f->name), prefix);
    const char *bare = strncmp(f->name, "it_", 3) == 0 ? f->name + 3 : f->name;
    snprintf(f->db, sizeof(f->db), "outboxd_test_%s", bare);
    snprintf(f->ex, sizeof(f->ex), "ex_%s", f->name);
    snprintf(f->conf, sizeof(f->conf), "/tmp/%s.yaml", f->name);
    it_db_relay_account(f->db, f->user, sizeof(f->user), f->password,
                        sizeof(f->password));
    it_db_create_port(port, f->db, it_src_path(sql_file));
    f->sql = it_db_connect_port(port, f->db);
}

void
it_fx_write_config(struct it_fx *f, const char *extra_outbox_keys)
{
    write_config_port(f->db_port, f->conf, f->name, f->db, "outbox_event",
                      f->ex, extra_outbox_keys);
}

/* it_write_config keeps the endpoints off; a test of them turns them on. */
unsigned
it_fx_listen(struct it_fx *f)
{
    f->port = it_free_port();
    char *conf = it_file_read(f->conf);
    char *at = strstr(conf, "listen: \"\"");
    ck_assert_ptr_nonnull(at);
    *at = '\0';
    it_write_file(f->conf, "%slisten: \"127.0.0.1:%u\"%s", conf, f->port,
                  at + strlen("listen: \"\""));
    free(conf);
    return f->port;
}

void
it_fx_start(struct it_fx *f)
{
    it_daemon_start(&f->d, f->conf, f->name);
}

void
it_fx_close(struct it_fx *f)
{
    it_teardown_port(f->db_port, &f->d, f->consumer, f->sql, f->db, f->conf);
}

void
it_fx_relay_name(const struct it_fx *f, struct it_fx_relay *r,
                 const char *suffix)
{
    snprintf(r->id, sizeof(r->id), "%s%s", f->name, suffix);
    snprintf(r->conf, sizeof(r->conf), "/tmp/%s.yaml", r->id);
}

void
it_daemon_dump_log(const struct it_daemon *d)
{
    it_sh("echo '--- %s'; tail -n 60 '%s' >&2", d->log_path, d->log_path);
}

int
it_sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = xvasprintf(fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    free(cmd);
    if (rc == -1 || !WIFEXITED(rc))
        return -1;
    return WEXITSTATUS(rc);
}

char *
it_file_read(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    while (f != NULL) {
        if (len + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0)
            break;
        len += n;
    }
    if (f != NULL)
        fclose(f);
    buf[len] = '\0';
    return buf;
}

struct it_ctl_run
it_ctl(const char *conf, const char *fmt, ...)
{
    const char *bin = getenv("OUTBOXCTL_BIN");
    ck_assert_msg(bin != NULL, "OUTBOXCTL_BIN is not set (run via make)");
    char out[128], err[128];
    va_list ap;
    va_start(ap, fmt);
    char *args = xvasprintf(fmt, ap);
    va_end(ap);
    it_unique_name(out, sizeof(out), "/tmp/it_ctl_out");
    it_unique_name(err, sizeof(err), "/tmp/it_ctl_err");
    struct it_ctl_run r;
    r.rc = it_sh("'%s' -c '%s' %s >'%s' 2>'%s'", bin, conf, args, out, err);
    r.out = it_file_read(out);
    r.err = it_file_read(err);
    unlink(out);
    unlink(err);
    free(args);
    return r;
}

void
it_ctl_free(struct it_ctl_run *r)
{
    free(r->out);
    free(r->err);
}

bool
it_file_has(const char *path, const char *needle)
{
    char *text = it_file_read(path);
    bool has = strstr(text, needle) != NULL;
    free(text);
    return has;
}

unsigned
it_free_port(void)
{
    /* A port is free again once its probe closes, so the kernel may hand
     * it out twice before the first taker binds it (a relay's HTTP port
     * and a proxy's, chosen in turn): never return one twice. */
    static unsigned given[256];
    static size_t ngiven;
    for (;;) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        getsockname(fd, (struct sockaddr *)&a, &len);
        close(fd);
        unsigned port = ntohs(a.sin_port);
        bool seen = false;
        for (size_t i = 0; i < ngiven && i < 256; i++)
            seen = seen || given[i] == port;
        if (!seen) {
            given[ngiven++ % 256] = port;
            return port;
        }
    }
}

char it_http_why[256];

int
it_http_get(unsigned port, const char *path, char **body)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;
    char req[512], *raw = NULL;
    if (body != NULL)
        *body = strdup("");
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        snprintf(it_http_why, sizeof(it_http_why), "GET :%u%s: connect: %s",
                 port, path, strerror(errno));
        goto out;
    }
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n)
        goto out;
    size_t len = 0, cap = 16384;
    raw = malloc(cap);
    uint64_t deadline = it_now_ms() + 5000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint64_t now = it_now_ms();
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) != 1)
            break;
        if (len + 4096 > cap)
            raw = realloc(raw, cap *= 2);
        ssize_t got = read(fd, raw + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    raw[len] = '\0';
    char *sep = strstr(raw, "\r\n\r\n");
    if (sscanf(raw, "HTTP/1.%*d %d", &status) != 1 || sep == NULL) {
        snprintf(it_http_why, sizeof(it_http_why),
                 "GET :%u%s: no answer (%zu bytes read)", port, path, len);
        status = -1;
    }
    if (body != NULL && sep != NULL) {
        free(*body);
        *body = strdup(sep + 4);
    }
out:
    if (fd >= 0)
        close(fd);
    free(raw);
    return status;
}

double
it_metric(unsigned port, const char *series)
{
    char *body = NULL;
    double v = -1;
    if (it_http_get(port, "/metrics", &body) == 200) {
        const char *p = strstr(body, series);
        if (p != NULL)
            v = strtod(p + strlen(series), NULL);
    }
    free(body);
    return v;
}
