/*
 * dbsession: opening, setting up and ending one session to a database
 * server, and which errors end it, for the stores that share it.
 */
#include "dbsession.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dbconn.h"
#include "schema_cache.h"
#include "util.h"

/*
 * How long a statement waits for a row or metadata lock: the least the
 * servers take.  The relay's own locks never wait (its claims skip
 * locked rows, its records touch rows it leased); what does is somebody
 * else's ALTER TABLE, LOCK TABLES or backup lock on one table, and while
 * a statement waits, every other outbox of its thread waits behind it.
 * The statement then fails and its outbox backs off (worker_link.c,
 * LOCK_BACKOFF_MAX_MS); nothing is lost (docs/operations.md, Threads and
 * connections).
 */
#define LOCK_WAIT_S "1"
#define IO_TIMEOUT_MIN_MS 30000

struct dbsession {
    const struct database_config *dc; /* &server, or a private one's own */
    /* A shared session's copy of what it connects with: the entry it was
     * made for (a tenant's, say) may go while others still use it. */
    struct database_config server;
    /* A shared session that failed to open refuses again, with the same
     * error, until retry_ms: a server that hangs on connect would
     * otherwise cost every outbox on the thread its connect timeout. */
    unsigned open_failures;
    uint64_t retry_ms;
    char open_err[ERR_LEN];
    char *where;      /* for messages */
    bool with_schema; /* a private session: dc's database is the default */
    MYSQL *db;        /* open, version checked, session set up */
    uint64_t io_ms;
    bool allow_read_only;
    bool mariadb;
    bool galera;         /* a Galera node (@@wsrep_on): locks are local to it */
    bool checks_off;     /* check_constraint_checks = 0 on this session */
    unsigned idle_trx_s; /* idle_transaction_timeout set here; 0: never */
    bool read_only;      /* last failure: the server refuses writes */
    bool version;        /* last failure: the server is too old */
    unsigned last_errno;
    uint64_t generation, statements, connects;
    uint64_t row_bytes_hint;      /* dbsession_row_bytes_hint */
    struct schema_cache *schemas; /* dbsession_schema_cache */
};

static pthread_once_t library_once = PTHREAD_ONCE_INIT;

/* mysql_init() would do this too, but not safely from several threads. */
static void
library_init(void)
{
    mysql_library_init(0, NULL, NULL);
}

static struct dbsession *
session_new(const struct database_config *dc, bool with_schema, char *where)
{
    pthread_once(&library_once, library_init);
    struct dbsession *s = xcalloc(1, sizeof(*s));
    s->dc = dc;
    s->where = where;
    s->with_schema = with_schema;
    s->io_ms = IO_TIMEOUT_MIN_MS;
    return s;
}

static char *
dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* What dbconn_open reads of an entry, with no schema and no outboxes. */
static void
server_copy(struct database_config *to, const struct database_config *dc)
{
    *to = (struct database_config){
        .name = dup_or_null(dc->name),
        .host = dup_or_null(dc->host),
        .port = dc->port,
        .socket = dup_or_null(dc->socket),
        .user = dup_or_null(dc->user),
        .password = dup_or_null(dc->password),
        .connect_timeout_ms = dc->connect_timeout_ms,
        .wake = dc->wake,
        .tls = dc->tls,
    };
    to->tls.ca_file = dup_or_null(dc->tls.ca_file);
    to->tls.cert_file = dup_or_null(dc->tls.cert_file);
    to->tls.key_file = dup_or_null(dc->tls.key_file);
    dbconn_hosts_copy(to, dc);
}

static void
server_free(struct database_config *c)
{
    free(c->name);
    free(c->host);
    free(c->socket);
    free(c->user);
    free(c->password);
    free(c->tls.ca_file);
    free(c->tls.cert_file);
    free(c->tls.key_file);
    for (size_t i = 0; i < c->nhosts; i++)
        free(c->hosts[i].host);
    free(c->hosts);
}

struct dbsession *
dbsession_new(const struct database_config *dc)
{
    struct dbsession *s =
        session_new(dc, false, xstrdup(dc->name ? dc->name : "database"));
    server_copy(&s->server, dc);
    s->dc = &s->server;
    return s;
}

struct dbsession *
dbsession_new_private(const struct database_config *dc, const char *where)
{
    return session_new(dc, true, xstrdup(where));
}

void
dbsession_free(struct dbsession *s)
{
    if (s == NULL)
        return;
    dbsession_close(s);
    schema_cache_free(s->schemas);
    if (s->dc == &s->server)
        server_free(&s->server);
    free(s->where);
    free(s);
}

static bool
str_eq_null(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static bool
tls_eq(const struct tls_config *a, const struct tls_config *b)
{
    return a->enabled == b->enabled && a->verify_peer == b->verify_peer &&
           a->verify_hostname == b->verify_hostname &&
           str_eq_null(a->ca_file, b->ca_file) &&
           str_eq_null(a->cert_file, b->cert_file) &&
           str_eq_null(a->key_file, b->key_file);
}

/* A private session serves its own database alone (it is the default
 * schema admin's statements rely on). */
bool
dbsession_serves(const struct dbsession *s, const struct database_config *dc)
{
    const struct database_config *o = s->dc;
    if (s->with_schema)
        return o == dc;
    return str_eq_null(o->host, dc->host) && o->port == dc->port &&
           dbconn_hosts_equal(o, dc) && str_eq_null(o->socket, dc->socket) &&
           str_eq_null(o->user, dc->user) &&
           str_eq_null(o->password, dc->password) &&
           o->connect_timeout_ms == dc->connect_timeout_ms &&
           tls_eq(&o->tls, &dc->tls);
}

unsigned long
dbsession_parse_version(const char *s)
{
    unsigned major = 0, minor = 0, patch = 0;
    sscanf(s, "%u.%u.%u", &major, &minor, &patch);
    return major * 10000UL + minor * 100UL + patch;
}

static int
check_version(struct dbsession *s, char *err, size_t errlen)
{
    const char *info = mysql_get_server_info(s->db);
    bool mariadb = info != NULL && strstr(info, "MariaDB") != NULL;
    unsigned long v = mysql_get_server_version(s->db);
    if (mariadb && strncmp(info, "5.5.5-", 6) == 0)
        v = dbsession_parse_version(info + 6);
    s->mariadb = mariadb;
    unsigned long min = mariadb ? DBSESSION_MIN_MARIADB : DBSESSION_MIN_MYSQL;
    if (v >= min)
        return 0;
    err_set(err, errlen,
            "%s: server %s is too old: outboxd needs %s %lu.%lu.%lu or "
            "later (for SKIP LOCKED)",
            s->where, info ? info : "?", mariadb ? "MariaDB" : "MySQL",
            min / 10000, min / 100 % 100, min % 100);
    s->version = true;
    return -1;
}

static int
session_error(struct dbsession *s, const char *what, char *err, size_t errlen)
{
    unsigned code = mysql_errno(s->db);
    err_set(err, errlen, "%s %s: %s (error %u)", what, s->where,
            mysql_error(s->db), code);
    s->last_errno = code;
    s->read_only = dbsession_errno_is_read_only(code);
    return -1;
}

static int
run_text(struct dbsession *s, const char *sql, char *err, size_t errlen)
{
    if (dbsession_query(s, sql, strlen(sql)) != 0)
        return session_error(s, "session", err, errlen);
    return 0;
}

/*
 * READ COMMITTED: no gap locks against the application's inserts, and
 * the ordering check sees what other relays committed.  UTC so that
 * UNIX_TIMESTAMP() and NOW() mean the same on every relay.  None of it
 * differs between outboxes, so it is set once per session.
 *
 * MariaDB caches a correlated subquery's results in a temporary table
 * it builds for each execution; the claims' subqueries are keyed by a
 * row's id or aggregate, so a join of one or two rows never hits it,
 * and building it cost that join a fifth to a third of its CPU.  Only
 * this session's plans change: the subqueries run as written.
 */
#define SESSION_SETTINGS                                                       \
    "SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout "              \
    "= " LOCK_WAIT_S ", lock_wait_timeout = " LOCK_WAIT_S
#define MARIADB_SETTINGS                                                       \
    SESSION_SETTINGS ", optimizer_switch = 'subquery_cache=off'"

static int
setup_session(struct dbsession *s, char *err, size_t errlen)
{
    const char *settings = s->mariadb ? MARIADB_SETTINGS : SESSION_SETTINGS;
    if (run_text(s, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                 err, errlen) < 0 ||
        run_text(s, settings, err, errlen) < 0)
        return -1;
    s->statements++;
    if (mysql_autocommit(s->db, 0) != 0)
        return session_error(s, "session", err, errlen);
    return 0;
}

/*
 * On a Galera node a row lock keeps out only the sessions of that node:
 * another node's claim of the same rows is stopped at its commit, by
 * certification.  The lean claim relies on its locks across a publish,
 * so the store asks (dbsession_is_galera).
 */
static int
check_galera(struct dbsession *s, char *err, size_t errlen)
{
    s->galera = false;
    if (!s->mariadb)
        return 0;
    const char *sql = "SELECT @@wsrep_on";
    MYSQL_RES *res = NULL;
    if (dbsession_query(s, sql, strlen(sql)) != 0 ||
        (res = mysql_store_result(s->db)) == NULL)
        return session_error(s, "session", err, errlen);
    MYSQL_ROW row = mysql_fetch_row(res);
    s->galera = row != NULL && row[0] != NULL && strcmp(row[0], "1") == 0;
    mysql_free_result(res);
    return 0;
}

/*
 * A server with read_only on is a replica or a demoted primary: even an
 * account that could write there (SUPER, READ_ONLY ADMIN) must not, so
 * the session is refused as a claim's 1290 would be, and the caller
 * reconnects until the address leads to the primary.
 */
static int
check_writable(struct dbsession *s, char *err, size_t errlen)
{
    if (s->allow_read_only)
        return 0;
    const char *sql = "SELECT @@global.read_only";
    MYSQL_RES *res = NULL;
    if (dbsession_query(s, sql, strlen(sql)) != 0 ||
        (res = mysql_store_result(s->db)) == NULL)
        return session_error(s, "session", err, errlen);
    MYSQL_ROW row = mysql_fetch_row(res);
    bool ro = row != NULL && row[0] != NULL && strcmp(row[0], "0") != 0;
    mysql_free_result(res);
    if (!ro)
        return 0;
    err_set(err, errlen,
            "%s: the server has read_only on: a replica or a demoted primary",
            s->where);
    s->read_only = true;
    return -1;
}

/* Half the workers' own reconnect backoff (1 s doubling to 30 s): the
 * first of them to come back after it connects for all. */
static void
open_failed(struct dbsession *s, const char *err)
{
    s->retry_ms = clock_ms() + backoff_ms(s->open_failures++, 500, 15000);
    str_copy(s->open_err, err, sizeof(s->open_err));
}

int
dbsession_open(struct dbsession *s, char *err, size_t errlen)
{
    if (s->db != NULL)
        return 0;
    if (!s->with_schema && clock_ms() < s->retry_ms) {
        str_copy(err, s->open_err, errlen);
        return -1;
    }
    s->read_only = s->version = false;
    s->checks_off = false; /* a new session evaluates them */
    s->idle_trx_s = 0;
    s->db = dbconn_open(s->dc, s->with_schema, dbconn_seconds(s->io_ms),
                        s->where, &s->last_errno, err, errlen);
    if (s->db == NULL) {
        open_failed(s, err);
        return -1;
    }
    s->last_errno = 0;
    if (check_version(s, err, errlen) < 0 ||
        setup_session(s, err, errlen) < 0 || check_galera(s, err, errlen) < 0 ||
        check_writable(s, err, errlen) < 0) {
        dbsession_close(s);
        open_failed(s, err);
        return -1;
    }
    s->generation++;
    s->connects++;
    s->open_failures = 0;
    s->retry_ms = 0;
    return 0;
}

/* The next session may reach another server (a failover): what the
 * stores read of this one's tables goes with it. */
void
dbsession_close(struct dbsession *s)
{
    if (s->db != NULL)
        mysql_close(s->db);
    s->db = NULL;
    if (s->schemas != NULL)
        schema_cache_clear(s->schemas);
}

bool
dbsession_is_open(const struct dbsession *s)
{
    return s->db != NULL;
}

MYSQL *
dbsession_db(const struct dbsession *s)
{
    return s->db;
}

uint64_t
dbsession_generation(const struct dbsession *s)
{
    return s->generation;
}

unsigned long
dbsession_connection_id(const struct dbsession *s)
{
    return s->db != NULL ? mysql_thread_id(s->db) : 0;
}

uint64_t
dbsession_statement_count(const struct dbsession *s)
{
    return s->statements;
}

uint64_t
dbsession_connect_count(const struct dbsession *s)
{
    return s->connects;
}

bool
dbsession_is_mariadb(const struct dbsession *s)
{
    return s->mariadb;
}

bool
dbsession_is_galera(const struct dbsession *s)
{
    return s->galera;
}

void
dbsession_need_io_ms(struct dbsession *s, uint64_t ms)
{
    if (ms > s->io_ms)
        s->io_ms = ms;
}

void
dbsession_allow_read_only(struct dbsession *s)
{
    s->allow_read_only = true;
}

bool
dbsession_read_only_allowed(const struct dbsession *s)
{
    return s->allow_read_only;
}

int
dbsession_query(struct dbsession *s, const char *sql, size_t len)
{
    s->statements++;
    return mysql_real_query(s->db, sql, len);
}

bool
dbsession_errno_is_connection(unsigned code)
{
    return (code >= ERRNO_CLIENT_FIRST && code <= ERRNO_CLIENT_LAST) ||
           code == ERRNO_SERVER_SHUTDOWN || code == ERRNO_CONNECTION_KILLED ||
           code == ERRNO_INTERACTION_TIMEOUT;
}

/*
 * "This server no longer takes writes": a demoted primary left up
 * read-only, or a Galera node out of the primary component.  Another
 * session to the same address may reach the new primary (DNS, a VIP or
 * a proxy moved), this one never will (docs/contract.md section 9).
 */
bool
dbsession_errno_is_read_only(unsigned code)
{
    return code == ERRNO_OPTION_PREVENTS || code == ERRNO_READ_ONLY_MODE ||
           code == ERRNO_UNKNOWN_COM;
}

bool
dbsession_errno_ends_session(unsigned code)
{
    return dbsession_errno_is_connection(code) ||
           dbsession_errno_is_read_only(code);
}

bool
dbsession_fail(struct dbsession *s, unsigned code)
{
    s->last_errno = code;
    s->read_only = dbsession_errno_is_read_only(code);
    if (!dbsession_errno_ends_session(code))
        return false;
    dbsession_close(s);
    return true;
}

unsigned
dbsession_last_errno(const struct dbsession *s)
{
    return s->last_errno;
}

bool
dbsession_last_error_is_read_only(const struct dbsession *s)
{
    return s->read_only;
}

bool
dbsession_last_error_is_version(const struct dbsession *s)
{
    return s->version;
}

void
dbsession_refuse_read_only(struct dbsession *s)
{
    s->read_only = true;
    s->last_errno = 0;
    dbsession_close(s);
}

bool
dbsession_checks_off(const struct dbsession *s)
{
    return s->checks_off;
}

int
dbsession_set_checks_off(struct dbsession *s, bool off)
{
    if (s->checks_off == off)
        return 0;
    const char *sql = off ? "SET SESSION check_constraint_checks = 0"
                          : "SET SESSION check_constraint_checks = 1";
    if (dbsession_query(s, sql, strlen(sql)) != 0)
        return -1;
    s->checks_off = off;
    return 0;
}

/*
 * A lean claim holds its rows' locks across the publish (store_claim.c):
 * should the relay freeze there, the server ends the session after this
 * long idle in the transaction, and its rows are free again, as a lease
 * would free them.  MariaDB has the variable since 10.3; MySQL has none,
 * so there the relay keeps to the leased claim.
 */
int
dbsession_set_idle_trx_timeout(struct dbsession *s, unsigned seconds)
{
    if (!s->mariadb)
        return -1;
    if (s->idle_trx_s == seconds)
        return 0;
    char sql[80];
    int n = snprintf(sql, sizeof(sql),
                     "SET SESSION idle_transaction_timeout = %u", seconds);
    if (dbsession_query(s, sql, (size_t)n) != 0)
        return -1;
    s->idle_trx_s = seconds;
    return 0;
}

uint64_t
dbsession_row_bytes_hint(const struct dbsession *s)
{
    return s->row_bytes_hint;
}

void
dbsession_set_row_bytes_hint(struct dbsession *s, uint64_t bytes)
{
    s->row_bytes_hint = bytes;
}

struct schema_cache *
dbsession_schema_cache(struct dbsession *s)
{
    if (s->schemas == NULL)
        s->schemas = schema_cache_new();
    return s->schemas;
}
