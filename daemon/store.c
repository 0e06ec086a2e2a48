/*
 * store: the life of one outbox table's store on a MySQL/MariaDB session
 * (dbsession.c), its own or shared with the other tables of that server:
 * store_new and store_free, connecting (the session if it is closed,
 * then the schema check under each new generation of it) and the
 * accessors.  Only the blocking client API is used, so this builds
 * against MariaDB Connector/C and MySQL's libmysqlclient alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

void
store_thread_end(void)
{
    /* A no-op on MariaDB Connector/C; MySQL's library leaks without it. */
    mysql_thread_end();
}

unsigned long
store_parse_version(const char *s)
{
    return dbsession_parse_version(s);
}

/* `schema`.`table`: the one name every statement uses, on a shared
 * session (no default schema) and a private one alike. */
static char *
qualified_table(const struct outbox_config *ob)
{
    struct strbuf q = {0};
    strbuf_reset(&q);
    sql_add_ident(&q, ob->database->database ? ob->database->database : "");
    strbuf_adds(&q, ".");
    sql_add_ident(&q, ob->table);
    return q.p;
}

struct store *
store_new(const struct outbox_config *ob, struct dbsession *shared)
{
    struct store *st = xcalloc(1, sizeof(*st));
    st->ob = ob;
    const char *schema = ob->database->database;
    st->where = xasprintf("%s.%s", schema ? schema : "?", ob->table);
    st->table = qualified_table(ob);
    st->conn.own = shared == NULL;
    st->conn.sess = shared != NULL
                        ? shared
                        : dbsession_new_private(ob->database, st->where);
    dbsession_need_io_ms(st->conn.sess, ob->lease_ms);
    /* Most outboxes start with nothing to send (a thousand tenants, say):
     * the first claim asks in one read, not in its four looks. */
    st->claim.probe_first = true;
    st->claim.held_possible = true;
    st->id_column = -1;
    store_join_init(st);
    return st;
}

/* Frees and zeroes *p, its capacity with it. */
static void
free_grown(void *pp, size_t *cap)
{
    void **p = pp;
    free(*p);
    *p = NULL;
    *cap = 0;
}

void
store_trim(struct store *st)
{
    strbuf_free(&st->sql);
    strbuf_free(&st->fin.text);
    free_grown(&st->claim.located, &st->claim.located_cap);
    free_grown(&st->claim.heads, &st->claim.heads_cap);
    free_grown(&st->claim.drop, &st->claim.drop_cap);
    free_grown(&st->claim.byagg, &st->claim.byagg_cap);
    free_grown(&st->claim.groups, &st->claim.groups_cap);
    free_grown(&st->claim.earlier, &st->claim.earlier_cap);
    free_grown(&st->fin.items, &st->fin.items_cap);
}

void
store_free(struct store *st)
{
    if (st == NULL)
        return;
    store_disconnect(st);
    if (st->conn.own)
        dbsession_free(st->conn.sess);
    free(st->plan.select_list);
    for (int s = 0; s < SRC_COUNT; s++) {
        free(st->plan.claim_where[s]);
        free(st->plan.claim_order[s]);
    }
    free(st->claim.located);
    free(st->claim.heads);
    free(st->plan.unblocked_sql);
    free(st->plan.hold_sql);
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

/* Ends the session on a server found read-only (a claim's probe saw
 * @@read_only): no store on it may write there. */
int
store_refuse_read_only(struct store *st, char *err, size_t errlen)
{
    err_set(err, errlen,
            "%s: the server has read_only on: a replica or a demoted primary",
            st->where);
    st->conn.read_only = true;
    st->conn.last_errno = 0;
    st->conn.ready = false;
    dbsession_refuse_read_only(st->conn.sess);
    return -1;
}

/* Opens the session if it is closed; a failure is the session's, and
 * says how (a too old server counts as a schema error). */
static int
open_session(struct store *st, char *err, size_t errlen)
{
    struct dbsession *s = st->conn.sess;
    if (dbsession_open(s, err, errlen) == 0)
        return 0;
    st->conn.ready = false;
    st->conn.last_errno = dbsession_last_errno(s);
    st->conn.read_only = dbsession_last_error_is_read_only(s);
    st->conn.schema_error = dbsession_last_error_is_version(s);
    return -1;
}

/* Checks the table on the open session and marks it ready under the
 * session's generation. */
static int
check_table(struct store *st, char *err, size_t errlen)
{
    if (store_check_schema(st, err, errlen) < 0)
        return -1;
    st->conn.ready = true;
    st->conn.checked_gen = dbsession_generation(st->conn.sess);
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
    st->conn.read_only = false;
    st->conn.last_errno = 0;
    if (store_is_connected(st))
        return 0;
    bool kept = dbsession_is_open(st->conn.sess);
    if (open_session(st, err, errlen) < 0)
        return -1;
    if (check_table(st, err, errlen) == 0)
        return 0;
    if (dbsession_is_open(st->conn.sess)) {
        /* This table's fault: the session stays, idle, for the others. */
        store_rollback(st);
        return -1;
    }
    if (!kept || st->conn.schema_error || st->conn.read_only)
        return -1;
    /* The kept session died meanwhile: start a fresh one, once. */
    if (open_session(st, err, errlen) < 0 || check_table(st, err, errlen) < 0) {
        store_rollback(st);
        return -1;
    }
    return 0;
}

/* A shared session stays for the other stores: this one only lets go
 * of it, its transaction ended. */
void
store_disconnect(struct store *st)
{
    if (st->conn.own) {
        store_close(st);
        return;
    }
    /* Detached already (its worker's last act, on the session's thread):
     * a store freed from another thread must not touch the session. */
    if (st->conn.ready) {
        store_rollback(st);
        store_join_forget(st);
    }
    st->conn.ready = false;
}

bool
store_is_connected(const struct store *st)
{
    return store_db(st) != NULL && st->conn.ready &&
           st->conn.checked_gen == dbsession_generation(st->conn.sess);
}

MYSQL *
store_session(struct store *st)
{
    return store_is_connected(st) ? store_db(st) : NULL;
}

const char *
store_table_sql(const struct store *st)
{
    return st->table;
}

struct dbsession *
store_dbsession(const struct store *st)
{
    return st->conn.sess;
}

bool
store_last_error_is_schema(const struct store *st)
{
    return st->conn.schema_error;
}

void
store_allow_read_only(struct store *st)
{
    dbsession_allow_read_only(st->conn.sess);
}

bool
store_last_error_is_read_only(const struct store *st)
{
    return st->conn.read_only;
}

bool
store_last_error_is_lock_wait(const struct store *st)
{
    return st->conn.last_errno == ERRNO_LOCK_WAIT_TIMEOUT;
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
    if (store_db(st) != NULL && (store_is_connected(st) || !checked))
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
