/*
 * store: the life of one MySQL/MariaDB session serving one outbox table:
 * store_new and store_free, connecting (version, session settings, the
 * read_only check, then the schema check) and the accessors.  Only the
 * blocking client API is used, so this builds against MariaDB
 * Connector/C and MySQL's libmysqlclient alike.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dbconn.h"
#include "store_int.h"

/* Lock waits fail well before the read timeout would drop the session. */
#define STORE_LOCK_WAIT_S "10"
#define STORE_IO_TIMEOUT_MIN_MS 30000

static pthread_once_t library_once = PTHREAD_ONCE_INIT;

/* mysql_init() would do this too, but not safely from several threads. */
static void
library_init(void)
{
    mysql_library_init(0, NULL, NULL);
}

void
store_thread_end(void)
{
    /* A no-op on MariaDB Connector/C; MySQL's library leaks without it. */
    mysql_thread_end();
}

static int
db_open(struct store *st, char *err, size_t errlen)
{
    uint64_t io_ms = st->ob->lease_ms > STORE_IO_TIMEOUT_MIN_MS
                         ? st->ob->lease_ms
                         : STORE_IO_TIMEOUT_MIN_MS;
    st->conn.db = dbconn_open(st->ob->database, true, dbconn_seconds(io_ms),
                              st->where, &st->conn.last_errno, err, errlen);
    return st->conn.db != NULL ? 0 : -1;
}

/* "5.5.5-10.11.6-MariaDB": the prefix MySQL's client library keeps. */
unsigned long
store_parse_version(const char *s)
{
    unsigned major = 0, minor = 0, patch = 0;
    sscanf(s, "%u.%u.%u", &major, &minor, &patch);
    return major * 10000UL + minor * 100UL + patch;
}

static int
check_version(struct store *st, char *err, size_t errlen)
{
    const char *info = mysql_get_server_info(st->conn.db);
    bool mariadb = info != NULL && strstr(info, "MariaDB") != NULL;
    unsigned long v = mysql_get_server_version(st->conn.db);
    if (mariadb && strncmp(info, "5.5.5-", 6) == 0)
        v = store_parse_version(info + 6);
    st->conn.mariadb = mariadb;
    unsigned long min = mariadb ? STORE_MIN_MARIADB : STORE_MIN_MYSQL;
    if (v >= min)
        return 0;
    err_set(err, errlen,
            "%s: server %s is too old: outboxd needs %s %lu.%lu.%lu or "
            "later (for SKIP LOCKED)",
            st->where, info ? info : "?", mariadb ? "MariaDB" : "MySQL",
            min / 10000, min / 100 % 100, min % 100);
    st->conn.schema_error = true;
    return -1;
}

/*
 * READ COMMITTED: no gap locks against the application's inserts, and
 * the ordering check sees what other relays committed.  UTC so that
 * UNIX_TIMESTAMP() and NOW() mean the same on every relay.
 */
static int
setup_session(struct store *st, char *err, size_t errlen)
{
    if (store_run_text(st,
                       "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                       "session", err, errlen) < 0 ||
        store_run_text(st,
                       "SET SESSION time_zone = '+00:00', "
                       "innodb_lock_wait_timeout = " STORE_LOCK_WAIT_S ", "
                       "lock_wait_timeout = " STORE_LOCK_WAIT_S,
                       "session", err, errlen) < 0)
        return -1;
    st->conn.statements++;
    if (mysql_autocommit(st->conn.db, 0) != 0)
        return store_fail(st, "session", err, errlen);
    return 0;
}

struct store *
store_new(const struct outbox_config *ob)
{
    pthread_once(&library_once, library_init);
    struct store *st = xcalloc(1, sizeof(*st));
    st->ob = ob;
    const char *schema = ob->database->database;
    st->where = xasprintf("%s.%s", schema ? schema : "?", ob->table);
    struct strbuf q = {0};
    strbuf_reset(&q);
    sql_add_ident(&q, ob->table);
    st->table = q.p;
    return st;
}

void
store_free(struct store *st)
{
    if (st == NULL)
        return;
    store_close(st);
    free(st->plan.select_list);
    for (int s = 0; s < SRC_COUNT; s++) {
        free(st->plan.claim_where[s]);
        free(st->plan.claim_order[s]);
    }
    free(st->claim.located);
    free(st->claim.heads);
    free(st->plan.unblocked_sql);
    free(st->plan.head_sql);
    free(st->plan.held_cond);
    free(st->plan.retry_index);
    free(st->plan.delay_index);
    free(st->where);
    free(st->table);
    free(st->plan.count_sql);
    strbuf_free(&st->sql);
    strbuf_free(&st->fin.text);
    free(st->claim.drop);
    free(st->claim.byagg);
    free(st->claim.groups);
    free(st->claim.earlier);
    free(st->fin.items);
    free(st->purge.ids);
    free(st);
}

/* Ends the session on a server found read-only (see check_writable). */
int
store_refuse_read_only(struct store *st, char *err, size_t errlen)
{
    err_set(err, errlen,
            "%s: the server has read_only on: a replica or a demoted primary",
            st->where);
    st->conn.read_only = true;
    st->conn.last_errno = 0;
    store_close(st);
    return -1;
}

/*
 * A server with read_only on is a replica or a demoted primary: even an
 * account that could write there (SUPER, READ_ONLY ADMIN) must not, so
 * the session is refused as a claim's 1290 would be, and the caller
 * reconnects until the address leads to the primary.
 */
static int
check_writable(struct store *st, char *err, size_t errlen)
{
    if (st->conn.allow_read_only)
        return 0;
    strbuf_reset(&st->sql);
    strbuf_adds(&st->sql, "SELECT @@global.read_only");
    MYSQL_RES *res = store_run_select(st, "session", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(res);
    bool ro = row != NULL && row[0] != NULL && strcmp(row[0], "0") != 0;
    mysql_free_result(res);
    return ro ? store_refuse_read_only(st, err, errlen) : 0;
}

/* A fresh session: open, version, session settings, writable. */
static int
open_session(struct store *st, char *err, size_t errlen)
{
    st->conn.read_only = false;
    st->conn.checks_off = false; /* a new session evaluates them */
    if (db_open(st, err, errlen) < 0)
        return -1;
    if (check_version(st, err, errlen) < 0 ||
        setup_session(st, err, errlen) < 0 ||
        check_writable(st, err, errlen) < 0) {
        store_close(st);
        return -1;
    }
    return 0;
}

/*
 * After a schema failure the session stays open and idle: the next call
 * only checks the table again, so a missing table costs no reconnects.
 */
int
store_connect(struct store *st, char *err, size_t errlen)
{
    st->conn.schema_error = false;
    st->conn.last_errno = 0;
    if (st->conn.db != NULL && st->conn.ready)
        return 0;
    if (st->conn.db == NULL && open_session(st, err, errlen) < 0)
        return -1;
    if (store_check_schema(st, err, errlen) == 0) {
        st->conn.ready = true;
        return 0;
    }
    if (st->conn.db == NULL || st->conn.schema_error)
        return -1;
    /* The kept session died meanwhile: start a fresh one, once. */
    store_rollback(st);
    store_close(st);
    if (open_session(st, err, errlen) < 0 ||
        store_check_schema(st, err, errlen) < 0)
        return -1;
    st->conn.ready = true;
    return 0;
}

void
store_disconnect(struct store *st)
{
    store_close(st);
}

bool
store_is_connected(const struct store *st)
{
    return st->conn.db != NULL && st->conn.ready;
}

MYSQL *
store_session(struct store *st)
{
    return store_is_connected(st) ? st->conn.db : NULL;
}

bool
store_last_error_is_schema(const struct store *st)
{
    return st->conn.schema_error;
}

void
store_allow_read_only(struct store *st)
{
    st->conn.allow_read_only = true;
}

bool
store_last_error_is_read_only(const struct store *st)
{
    return st->conn.read_only;
}

uint64_t
store_statement_count(const struct store *st)
{
    return st->conn.statements;
}

/*
 * Claims need the table checked (ready); recording outcomes needs a live
 * session only: a claim that failed on a table changed under it leaves
 * the store not ready, and the batch in flight is still to be recorded
 * (its statements are fenced by the claim token, and fail on their own
 * if the change broke them).
 */
static int
require(struct store *st, bool checked, const char *what, char *err,
        size_t errlen)
{
    if (st->conn.db != NULL && (st->conn.ready || !checked))
        return 0;
    err_set(err, errlen, "%s %s: not connected", what, st->where);
    st->conn.last_errno = 0;
    return -1;
}

int
store_require_ready(struct store *st, const char *what, char *err,
                    size_t errlen)
{
    return require(st, true, what, err, errlen);
}

int
store_require_session(struct store *st, const char *what, char *err,
                      size_t errlen)
{
    return require(st, false, what, err, errlen);
}
