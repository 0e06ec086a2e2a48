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
    q->len += mysql_real_escape_string(store_db(st), q->p + q->len, s, n);
    q->p[q->len++] = '\'';
    q->p[q->len] = '\0';
}

void
store_sql_add_string(struct store *st, const char *text)
{
    sql_add_string(st, text);
}

struct strbuf *
store_sql_begin(struct store *st, const char *head, const char *tail)
{
    strbuf_reset(&st->sql);
    strbuf_adds(&st->sql, head);
    strbuf_adds(&st->sql, st->table);
    strbuf_adds(&st->sql, tail);
    return &st->sql;
}

void
sql_add_id(struct strbuf *q, uint64_t id, bool first)
{
    strbuf_addf(q, first ? "%" PRIu64 : ",%" PRIu64, id);
}

bool
store_errno_is_connection(unsigned code)
{
    return dbsession_errno_is_connection(code);
}

static bool
is_schema_errno(unsigned code)
{
    return code == ERRNO_BAD_FIELD || code == ERRNO_NO_SUCH_TABLE ||
           code == ERRNO_TABLE_ACCESS_DENIED ||
           code == ERRNO_COLUMN_ACCESS_DENIED;
}

bool
store_errno_is_deadlock(unsigned code)
{
    return code == ERRNO_DEADLOCK;
}

/* The session failed: it ends for every store on it, and each checks
 * its table again once it is open anew. */
void
store_close(struct store *st)
{
    dbsession_close(st->conn.sess);
    st->conn.ready = false;
}

/* The schema of the table: its string literal, for information_schema. */
void
sql_add_schema(struct store *st)
{
    const char *schema = st->ob->database->database;
    sql_add_string(st, schema != NULL ? schema : "");
}

/*
 * Fills err from the connection's last error and classifies it: what
 * belongs to this table (a schema error, a lock wait, a refused CHECK)
 * leaves a shared session open for the other stores; what ends the
 * session (dbsession_fail) ends it for all.  Never reconnects: a new
 * session would have lost the transaction and the session settings, so
 * the caller reconnects through store_connect.
 */
int
store_fail(struct store *st, const char *what, char *err, size_t errlen)
{
    unsigned code = mysql_errno(store_db(st));
    err_set(err, errlen, "%s %s: %s (error %u)", what, st->where,
            mysql_error(store_db(st)), code);
    st->conn.last_errno = code;
    if (is_schema_errno(code)) {
        st->conn.schema_error = true;
        st->conn.ready = false;
    }
    st->conn.read_only = dbsession_errno_is_read_only(code);
    if (dbsession_fail(st->conn.sess, code))
        st->conn.ready = false;
    return -1;
}

/*
 * check_constraint_checks is the session's, the verdict this table's:
 * set it to this store's before its statements.  Tenant tables alike
 * agree, so this sends nothing in the normal case.  Off only while the
 * verdict is current; during the check itself nothing is written.
 */
static int
sync_checks(struct store *st, const char *what, char *err, size_t errlen)
{
    struct dbsession *s = st->conn.sess;
    if (st->conn.checking || !dbsession_is_mariadb(s))
        return 0;
    bool off = st->conn.checks_off && st->conn.ready &&
               st->conn.checked_gen == dbsession_generation(s);
    if (dbsession_checks_off(s) == off)
        return 0;
    st->conn.statements++;
    if (dbsession_set_checks_off(s, off) != 0)
        return store_fail(st, what, err, errlen);
    return 0;
}

int
store_run_query(struct store *st, const char *sql, size_t len, const char *what,
                char *err, size_t errlen)
{
    if (store_db(st) == NULL) {
        err_set(err, errlen, "%s %s: not connected", what, st->where);
        st->conn.last_errno = 0;
        return -1;
    }
    if (sync_checks(st, what, err, errlen) < 0)
        return -1;
    st->conn.statements++;
    if (dbsession_query(st->conn.sess, sql, len) != 0)
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
    MYSQL_RES *res = mysql_store_result(store_db(st));
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
    uint64_t n = (uint64_t)mysql_affected_rows(store_db(st));
    *affected = n == UINT64_MAX ? 0 : n;
    return 0;
}

int
store_commit(struct store *st, const char *what, char *err, size_t errlen)
{
    st->conn.statements++;
    if (mysql_commit(store_db(st)) != 0)
        return store_fail(st, what, err, errlen);
    return 0;
}

/* Best effort: a dead session has rolled back on its own. */
void
store_rollback(struct store *st)
{
    if (store_db(st) == NULL)
        return;
    st->conn.statements++;
    if (mysql_rollback(store_db(st)) != 0 &&
        store_errno_is_connection(mysql_errno(store_db(st))))
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
