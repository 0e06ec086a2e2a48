/*
 * store_sql: building statements (quoted identifiers, escaped strings,
 * id lists), running them, and sorting errors into classes: connection,
 * schema, read-only, lock.  Never reconnects: store.c does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Scratch arrays grow to the largest batch seen and stay. */
void *
store_grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    *cap = c;
    return xrealloc(p, c * size);
}

/* `name`, with backticks doubled. */
void
sql_add_ident(struct strbuf *q, const char *name)
{
    strbuf_reserve(q, 2 * strlen(name) + 2);
    q->p[q->len++] = '`';
    for (const char *s = name; *s != '\0'; s++) {
        if (*s == '`')
            q->p[q->len++] = '`';
        q->p[q->len++] = *s;
    }
    q->p[q->len++] = '`';
    q->p[q->len] = '\0';
}

/* 'text', escaped for the connection's character set. */
void
sql_add_string(struct store *st, const char *s)
{
    struct strbuf *q = &st->sql;
    size_t n = strlen(s);
    strbuf_reserve(q, 2 * n + 2);
    q->p[q->len++] = '\'';
    q->len += mysql_real_escape_string(st->conn.db, q->p + q->len, s, n);
    q->p[q->len++] = '\'';
    q->p[q->len] = '\0';
}

void
sql_add_id(struct strbuf *q, uint64_t id, bool first)
{
    strbuf_addf(q, first ? "%" PRIu64 : ",%" PRIu64, id);
}

bool
store_errno_is_connection(unsigned code)
{
    return (code >= ERRNO_CLIENT_FIRST && code <= ERRNO_CLIENT_LAST) ||
           code == ERRNO_SERVER_SHUTDOWN || code == ERRNO_CONNECTION_KILLED ||
           code == ERRNO_INTERACTION_TIMEOUT;
}

static bool
is_schema_errno(unsigned code)
{
    return code == ERRNO_BAD_FIELD || code == ERRNO_NO_SUCH_TABLE ||
           code == ERRNO_TABLE_ACCESS_DENIED ||
           code == ERRNO_COLUMN_ACCESS_DENIED;
}

/*
 * "This server no longer takes writes": a demoted primary left up
 * read-only, or a Galera node out of the primary component.  Another
 * session to the same address may reach the new primary (DNS, a VIP or
 * a proxy moved), this one never will (docs/contract.md section 9).
 */
static bool
is_read_only_errno(unsigned code)
{
    return code == ERRNO_OPTION_PREVENTS || code == ERRNO_READ_ONLY_MODE ||
           code == ERRNO_UNKNOWN_COM;
}

bool
store_errno_is_lock(unsigned code)
{
    return code == ERRNO_DEADLOCK || code == ERRNO_LOCK_WAIT_TIMEOUT;
}

void
store_close(struct store *st)
{
    if (st->conn.db != NULL)
        mysql_close(st->conn.db);
    st->conn.db = NULL;
    st->conn.ready = false;
}

/*
 * Fills err from the connection's last error and classifies it.  Never
 * reconnects: a new session would have lost the transaction and the
 * session settings, so the caller reconnects through store_connect.
 */
int
store_fail(struct store *st, const char *what, char *err, size_t errlen)
{
    unsigned code = mysql_errno(st->conn.db);
    err_set(err, errlen, "%s %s: %s (error %u)", what, st->where,
            mysql_error(st->conn.db), code);
    st->conn.last_errno = code;
    if (is_schema_errno(code)) {
        st->conn.schema_error = true;
        st->conn.ready = false;
    }
    st->conn.read_only = is_read_only_errno(code);
    if (store_errno_is_connection(code) || st->conn.read_only)
        store_close(st);
    return -1;
}

int
store_run_query(struct store *st, const char *sql, size_t len, const char *what,
                char *err, size_t errlen)
{
    st->conn.statements++;
    if (mysql_real_query(st->conn.db, sql, len) != 0)
        return store_fail(st, what, err, errlen);
    return 0;
}

int
store_run_text(struct store *st, const char *sql, const char *what, char *err,
               size_t errlen)
{
    return store_run_query(st, sql, strlen(sql), what, err, errlen);
}

MYSQL_RES *
store_run_select(struct store *st, const char *what, char *err, size_t errlen)
{
    if (store_run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return NULL;
    MYSQL_RES *res = mysql_store_result(st->conn.db);
    if (res == NULL)
        store_fail(st, what, err, errlen);
    return res;
}

int
store_run_update(struct store *st, const char *what, uint64_t *affected,
                 char *err, size_t errlen)
{
    if (store_run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return -1;
    uint64_t n = (uint64_t)mysql_affected_rows(st->conn.db);
    *affected = n == UINT64_MAX ? 0 : n;
    return 0;
}

int
store_commit(struct store *st, const char *what, char *err, size_t errlen)
{
    st->conn.statements++;
    if (mysql_commit(st->conn.db) != 0)
        return store_fail(st, what, err, errlen);
    return 0;
}

/* Best effort: a dead session has rolled back on its own. */
void
store_rollback(struct store *st)
{
    if (st->conn.db == NULL)
        return;
    st->conn.statements++;
    if (mysql_rollback(st->conn.db) != 0 &&
        store_errno_is_connection(mysql_errno(st->conn.db)))
        store_close(st);
}

int
store_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int
store_strcmp_null(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}
