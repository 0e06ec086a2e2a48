/*
 * store: one MySQL/MariaDB connection serving one outbox table.  Claims
 * batches with FOR UPDATE SKIP LOCKED under a fenced lease token and
 * finalizes their outcomes, one statement per outcome, each conditioned
 * on that token.  Only the blocking client API is used, so this builds
 * against MariaDB Connector/C and MySQL's libmysqlclient alike.
 */
#include "store.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <mysql.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "dbconn.h"
#include "util.h"

#define STORE_ATTEMPTS 3 /* a claim or finalize retried on deadlock */
/* Lock waits fail well before the read timeout would drop the session. */
#define STORE_LOCK_WAIT_S "10"
#define STORE_IO_TIMEOUT_MIN_MS 30000
#define STORE_ERROR_CHARS 1024 /* last_error cap, the column's size */
#define TOKEN_MIN_CHARS 24     /* room for some relay id, '/', 16 hex */
#define TOKEN_MAX_CHARS (sizeof(((struct outbox_batch *)0)->token) - 1)

/* Error numbers shared by MySQL and MariaDB (MariaDB-only ones marked). */
enum {
    ERRNO_UNKNOWN_COM = 1047, /* Galera: node not primary (WSREP not ready) */
    ERRNO_SERVER_SHUTDOWN = 1053,
    ERRNO_BAD_FIELD = 1054,
    ERRNO_TABLE_ACCESS_DENIED = 1142,
    ERRNO_COLUMN_ACCESS_DENIED = 1143,
    ERRNO_NO_SUCH_TABLE = 1146,
    ERRNO_LOCK_WAIT_TIMEOUT = 1205,
    ERRNO_DEADLOCK = 1213,
    ERRNO_OPTION_PREVENTS = 1290,   /* --read-only, --super-read-only */
    ERRNO_READ_ONLY_MODE = 1836,    /* MySQL: super_read_only */
    ERRNO_CONNECTION_KILLED = 1927, /* MariaDB */
    ERRNO_CLIENT_FIRST = 2000,      /* CR_*: the client library's own */
    ERRNO_CLIENT_LAST = 2999,
    ERRNO_INTERACTION_TIMEOUT = 4031, /* MySQL 8.0.24+ */
};

/* Where claim candidates come from, in the order they are taken. */
enum claim_source { SRC_EXPIRED, SRC_RETRY, SRC_PENDING, SRC_COUNT };

/* The first claim's window, before any row's size is known: see
 * claim_window. */
#define FIRST_WINDOW 32
/* At most this long between two looks for expired leases. */
#define EXPIRED_LOOK_MS 1000
/* How often a claim reads the table's definition again: see
 * refresh_schema. */
#define SCHEMA_RECHECK_MS 60000

static const enum outbox_status source_status[SRC_COUNT] = {
    OUTBOX_PROCESSING, OUTBOX_RETRY, OUTBOX_PENDING};

/* What makes a row a candidate of each source. */
static const char *const claim_cond[SRC_COUNT] = {
    [SRC_EXPIRED] = "`status` = 'PROCESSING' AND `locked_until` <= NOW(6)",
    [SRC_RETRY] = "`status` = 'RETRY' AND `next_retry_at` <= NOW(6)",
    [SRC_PENDING] = "`status` = 'PENDING'",
};

/* Columns of the claim's select list, in order; optional ones follow. */
enum {
    COL_ID,
    COL_EVENT_ID,
    COL_AGGREGATE_TYPE,
    COL_AGGREGATE_ID,
    COL_EVENT_TYPE,
    COL_PAYLOAD,
    COL_CREATED,
    COL_RETRY_COUNT,
    COL_FIXED
};

static const char *const required_columns[] = {
    "id",           "event_id",     "aggregate_type",
    "aggregate_id", "event_type",   "payload",
    "status",       "retry_count",  "next_retry_at",
    "locked_by",    "locked_until", "created_at",
    "sent_at",      "last_error"};
#define NREQUIRED (sizeof(required_columns) / sizeof(required_columns[0]))

enum { OPT_HEADERS, OPT_TRACE_ID, OPT_TRACEPARENT, NOPTIONAL };
static const char *const optional_columns[NOPTIONAL] = {"headers", "trace_id",
                                                        "traceparent"};

/* What last_error can hold: invalid or unstorable characters become '?'. */
enum text_charset { TEXT_UTF8MB4, TEXT_UTF8MB3, TEXT_ASCII };

/*
 * Whether a claimed row's event_id may repeat one claimed before: not
 * with a unique key on it; with a plain index each claim looks (cheaply);
 * with none it cannot afford to, and only a batch's own rows are compared.
 */
enum dup_check { DUP_IMPOSSIBLE, DUP_INDEXED, DUP_UNINDEXED };

/* What finalize does with a row. */
enum fin_kind { FIN_SENT, FIN_RETRY, FIN_DEAD, FIN_RELEASE };

struct fin_item {
    enum fin_kind kind;
    const char *error; /* NULL for SENT and RELEASE */
    uint64_t id;
};

struct sqlbuf {
    char *p;
    size_t len, cap;
};

/* The table as found by the schema check. */
struct schema {
    bool required[NREQUIRED];
    bool optional[NOPTIONAL];
    bool *extra; /* outbox_config.columns found */
    unsigned locked_by_len, last_error_len;
    enum text_charset last_error_charset;
    unsigned ncolumns;
    bool unfinished;           /* the generated column sql/outbox.sql defines */
    unsigned binary_aggregate; /* aggregate columns with a _bin collation */
};

/* An unfinished row of the candidates' aggregate groups[g]. */
struct earlier {
    size_t g;
    uint64_t id;
};

struct store {
    const struct outbox_config *ob;
    MYSQL *db;                  /* open, version checked, session set up */
    bool ready;                 /* table checked, claim statements built */
    bool schema_error;          /* last failure: schema, version or privilege */
    bool read_only;             /* last failure: the server refuses writes */
    bool allow_read_only;       /* store_allow_read_only: no read_only check */
    uint64_t schema_checked_ms; /* when the table was last checked */
    bool schema_stale;          /* store_recheck_schema: check it now */
    unsigned last_errno;
    uint64_t expired_none_ms; /* when the last look for expired leases
                                 found none */
    bool probe_first;         /* the last claim found nothing */
    char *where;              /* "schema.table" for messages */
    char *table;              /* quoted identifier */
    char *count_sql;          /* ordering: unfinished earlier events, "IN (" */
    char *select_list;        /* claim: "SELECT" and the columns */
    char *claim_where[SRC_COUNT]; /* candidates: index hint and WHERE */
    char *claim_order[SRC_COUNT]; /* their ORDER BY */
    char *unblocked_sql;          /* ordering: skip aggregates held back */
    char *head_sql;  /* ordering: ", candidate is its aggregate's first" */
    bool unfinished; /* ordering reads `unfinished` = 1, not status IN */
    /* Both aggregate columns compare as bytes (a _bin collation): the
     * server tells apart what strcmp does, but for trailing spaces. */
    bool binary_aggregate;
    char *retry_index; /* an index led by next_retry_at, quoted, or NULL */
    bool id_primary;   /* the primary key is led by id: fetch_candidates */
    int pos_optional[NOPTIONAL]; /* select list positions, -1 if absent */
    int pos_columns;
    enum dup_check dup_check;
    unsigned token_chars, error_chars;
    enum text_charset error_charset;
    struct sqlbuf sql; /* the statement being built, reused */
    char *text;        /* sanitized error text */
    size_t text_cap;
    unsigned char *drop; /* claim: candidates dropped by ordering */
    size_t drop_cap;
    struct outbox_row **byagg; /* claim: candidates by aggregate, id */
    size_t byagg_cap;
    size_t *groups; /* claim: where each aggregate starts in byagg */
    size_t groups_cap, ngroups;
    struct earlier *earlier; /* claim: unfinished rows of those aggregates */
    size_t earlier_cap;
    struct fin_item *items;
    size_t items_cap;
    uint64_t *located; /* claim: candidate ids, then those locked */
    size_t located_cap;
    /* The claim stopped short of its row limit on purpose (batch_bytes,
     * or the window): more rows may wait. */
    bool cut_short;
    /* Payload and headers per locked row: the mean of the last claim
     * that locked any (0: none yet), and this claim's sums; they size
     * the next claim's window. */
    uint64_t row_bytes_est, seen_bytes, seen_rows;
    uint64_t *heads; /* claim: located ids that lead their aggregate's
                        unfinished events, sorted when used */
    size_t heads_cap, nheads;
    uint64_t *purge_ids; /* retention: the expired ids of one step */
    size_t purge_cap;
    uint64_t purge_from; /* retention resumes after this id */
    uint64_t statements;
};

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

/* Scratch arrays grow to the largest batch seen and stay. */
static void *
grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    *cap = c;
    return xrealloc(p, c * size);
}

/* ---- building statements ---- */

static void
sql_reserve(struct sqlbuf *q, size_t more)
{
    if (q->cap - q->len > more)
        return;
    size_t cap = q->cap ? q->cap : 4096;
    while (cap - q->len <= more)
        cap *= 2;
    q->p = xrealloc(q->p, cap);
    q->cap = cap;
}

static void
sql_reset(struct sqlbuf *q)
{
    q->len = 0;
    sql_reserve(q, 0);
    q->p[0] = '\0';
}

static void sql_addf(struct sqlbuf *q, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sql_addf(struct sqlbuf *q, const char *fmt, ...)
{
    sql_reserve(q, strlen(fmt));
    for (;;) {
        size_t room = q->cap - q->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(q->p + q->len, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort(); /* only on a bad format: a bug */
        if ((size_t)n < room) {
            q->len += (size_t)n;
            return;
        }
        sql_reserve(q, (size_t)n);
    }
}

/* `name`, with backticks doubled. */
static void
sql_add_ident(struct sqlbuf *q, const char *name)
{
    sql_reserve(q, 2 * strlen(name) + 2);
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
static void
sql_add_string(struct store *st, const char *s)
{
    struct sqlbuf *q = &st->sql;
    size_t n = strlen(s);
    sql_reserve(q, 2 * n + 2);
    q->p[q->len++] = '\'';
    q->len += mysql_real_escape_string(st->db, q->p + q->len, s, n);
    q->p[q->len++] = '\'';
    q->p[q->len] = '\0';
}

static void
sql_add_id(struct sqlbuf *q, uint64_t id, bool first)
{
    sql_addf(q, first ? "%" PRIu64 : ",%" PRIu64, id);
}

/* ---- running statements ---- */

static bool
is_connection_errno(unsigned code)
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

static bool
is_lock_errno(unsigned code)
{
    return code == ERRNO_DEADLOCK || code == ERRNO_LOCK_WAIT_TIMEOUT;
}

static void
close_db(struct store *st)
{
    if (st->db != NULL)
        mysql_close(st->db);
    st->db = NULL;
    st->ready = false;
}

/*
 * Fills err from the connection's last error and classifies it.  Never
 * reconnects: a new session would have lost the transaction and the
 * session settings, so the caller reconnects through store_connect.
 */
static int
db_fail(struct store *st, const char *what, char *err, size_t errlen)
{
    unsigned code = mysql_errno(st->db);
    err_set(err, errlen, "%s %s: %s (error %u)", what, st->where,
            mysql_error(st->db), code);
    st->last_errno = code;
    if (is_schema_errno(code)) {
        st->schema_error = true;
        st->ready = false;
    }
    st->read_only = is_read_only_errno(code);
    if (is_connection_errno(code) || st->read_only)
        close_db(st);
    return -1;
}

static int
run_query(struct store *st, const char *sql, size_t len, const char *what,
          char *err, size_t errlen)
{
    st->statements++;
    if (mysql_real_query(st->db, sql, len) != 0)
        return db_fail(st, what, err, errlen);
    return 0;
}

static int
run_text(struct store *st, const char *sql, const char *what, char *err,
         size_t errlen)
{
    return run_query(st, sql, strlen(sql), what, err, errlen);
}

static MYSQL_RES *
run_select(struct store *st, const char *what, char *err, size_t errlen)
{
    if (run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return NULL;
    MYSQL_RES *res = mysql_store_result(st->db);
    if (res == NULL)
        db_fail(st, what, err, errlen);
    return res;
}

static int
run_update(struct store *st, const char *what, uint64_t *affected, char *err,
           size_t errlen)
{
    if (run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return -1;
    uint64_t n = (uint64_t)mysql_affected_rows(st->db);
    *affected = n == UINT64_MAX ? 0 : n;
    return 0;
}

static int
db_commit(struct store *st, const char *what, char *err, size_t errlen)
{
    st->statements++;
    if (mysql_commit(st->db) != 0)
        return db_fail(st, what, err, errlen);
    return 0;
}

/* Best effort: a dead session has rolled back on its own. */
static void
db_rollback(struct store *st)
{
    if (st->db == NULL)
        return;
    st->statements++;
    if (mysql_rollback(st->db) != 0 && is_connection_errno(mysql_errno(st->db)))
        close_db(st);
}

/* ---- connecting ---- */

static int
db_open(struct store *st, char *err, size_t errlen)
{
    uint64_t io_ms = st->ob->lease_ms > STORE_IO_TIMEOUT_MIN_MS
                         ? st->ob->lease_ms
                         : STORE_IO_TIMEOUT_MIN_MS;
    st->db = dbconn_open(st->ob->database, true, dbconn_seconds(io_ms),
                         st->where, &st->last_errno, err, errlen);
    return st->db != NULL ? 0 : -1;
}

/* "5.5.5-10.11.6-MariaDB": the prefix MySQL's client library keeps. */
static unsigned long
parse_version(const char *s)
{
    unsigned major = 0, minor = 0, patch = 0;
    sscanf(s, "%u.%u.%u", &major, &minor, &patch);
    return major * 10000UL + minor * 100UL + patch;
}

static int
check_version(struct store *st, char *err, size_t errlen)
{
    const char *info = mysql_get_server_info(st->db);
    bool mariadb = info != NULL && strstr(info, "MariaDB") != NULL;
    unsigned long v = mysql_get_server_version(st->db);
    if (mariadb && strncmp(info, "5.5.5-", 6) == 0)
        v = parse_version(info + 6);
    unsigned long min = mariadb ? STORE_MIN_MARIADB : STORE_MIN_MYSQL;
    if (v >= min)
        return 0;
    err_set(err, errlen,
            "%s: server %s is too old: outboxd needs %s %lu.%lu.%lu or "
            "later (for SKIP LOCKED)",
            st->where, info ? info : "?", mariadb ? "MariaDB" : "MySQL",
            min / 10000, min / 100 % 100, min % 100);
    st->schema_error = true;
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
    if (run_text(st, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                 "session", err, errlen) < 0 ||
        run_text(st,
                 "SET SESSION time_zone = '+00:00', "
                 "innodb_lock_wait_timeout = " STORE_LOCK_WAIT_S ", "
                 "lock_wait_timeout = " STORE_LOCK_WAIT_S,
                 "session", err, errlen) < 0)
        return -1;
    st->statements++;
    if (mysql_autocommit(st->db, 0) != 0)
        return db_fail(st, "session", err, errlen);
    return 0;
}

/* ---- the schema check ---- */

static enum text_charset
parse_charset(const char *name)
{
    if (name == NULL)
        return TEXT_ASCII;
    if (strcasecmp(name, "utf8mb4") == 0)
        return TEXT_UTF8MB4;
    if (strcasecmp(name, "utf8mb3") == 0 || strcasecmp(name, "utf8") == 0)
        return TEXT_UTF8MB3;
    return TEXT_ASCII;
}

/*
 * sql/outbox.sql's `unfinished` is status IN ('PENDING', 'RETRY',
 * 'PROCESSING'), generated: the ordering index holds it instead of
 * status, so that a claim does not move the row's entry there.  Each
 * server prints the expression its own way; a column of that name is
 * trusted only when its expression names status and the three
 * unfinished states and nothing else, else status is read as before.
 */
static bool
is_unfinished_expression(const char *expr)
{
    if (expr == NULL)
        return false;
    char low[256];
    size_t n = 0;
    for (const char *c = expr; *c != '\0' && n + 1 < sizeof(low); c++)
        low[n++] = (char)tolower((unsigned char)*c);
    low[n] = '\0';
    return strstr(low, "status") && strstr(low, "'pending'") &&
           strstr(low, "'retry'") && strstr(low, "'processing'") &&
           strstr(low, " in ") && !strstr(low, "not") && !strstr(low, "sent") &&
           !strstr(low, "dead") && n < 200;
}

/*
 * utf8mb4_bin, latin1_bin, utf8mb4_nopad_bin, MySQL's utf8mb4_0900_bin:
 * equal by collation is equal as bytes, once trailing spaces are set
 * aside (PAD SPACE collations ignore them).
 */
static bool
is_binary_collation(const char *collation)
{
    size_t len = collation != NULL ? strlen(collation) : 0;
    return len > 4 && strcmp(collation + len - 4, "_bin") == 0;
}

static void
note_column(const struct store *st, struct schema *sc, MYSQL_ROW r)
{
    const char *name = r[0] ? r[0] : "";
    unsigned len = r[1] ? (unsigned)strtoul(r[1], NULL, 10) : 0;
    sc->ncolumns++;
    for (size_t i = 0; i < NREQUIRED; i++)
        if (strcasecmp(name, required_columns[i]) == 0)
            sc->required[i] = true;
    for (size_t i = 0; i < NOPTIONAL; i++)
        if (strcasecmp(name, optional_columns[i]) == 0)
            sc->optional[i] = true;
    for (size_t i = 0; i < st->ob->ncolumns; i++)
        if (strcasecmp(name, st->ob->columns[i]) == 0)
            sc->extra[i] = true;
    if (strcasecmp(name, "locked_by") == 0)
        sc->locked_by_len = len;
    if (strcasecmp(name, "last_error") == 0) {
        sc->last_error_len = len;
        sc->last_error_charset = parse_charset(r[2]);
    }
    if (strcasecmp(name, "unfinished") == 0)
        sc->unfinished = is_unfinished_expression(r[3]);
    if ((strcasecmp(name, "aggregate_type") == 0 ||
         strcasecmp(name, "aggregate_id") == 0) &&
        is_binary_collation(r[4]))
        sc->binary_aggregate++;
}

static int
load_columns(struct store *st, struct schema *sc, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, "SELECT COLUMN_NAME, CHARACTER_MAXIMUM_LENGTH, "
                "CHARACTER_SET_NAME, GENERATION_EXPRESSION, COLLATION_NAME "
                "FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ");
    sql_add_string(st, st->ob->table);
    MYSQL_RES *res = run_select(st, "schema check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL)
        note_column(st, sc, r);
    mysql_free_result(res);
    return 0;
}

/* Names every missing column in one message. */
static int
report_missing(struct store *st, const struct schema *sc, char *err,
               size_t errlen)
{
    struct sqlbuf msg = {0};
    sql_reset(&msg);
    for (size_t i = 0; i < NREQUIRED; i++)
        if (!sc->required[i])
            sql_addf(&msg, "%s%s", msg.len ? ", " : "", required_columns[i]);
    for (size_t i = 0; i < st->ob->ncolumns; i++)
        if (!sc->extra[i])
            sql_addf(&msg, "%s%s (named in the config)", msg.len ? ", " : "",
                     st->ob->columns[i]);
    int rc = 0;
    if (msg.len > 0) {
        err_set(err, errlen, "table %s has no column %s", st->where, msg.p);
        rc = -1;
    } else if (sc->locked_by_len < TOKEN_MIN_CHARS) {
        err_set(err, errlen,
                "column locked_by of %s holds %u characters; the claim token "
                "needs at least %d",
                st->where, sc->locked_by_len, TOKEN_MIN_CHARS);
        rc = -1;
    }
    free(msg.p);
    return rc;
}

static bool
ident_eq(const char *a, const char *b)
{
    return a != NULL && strcasecmp(a, b) == 0;
}

/* Rows i..j-1 are one index: is it led by a whole status column? */
static bool
led_by_status(MYSQL_ROW *rows, size_t i)
{
    return ident_eq(rows[i][1], "status") && rows[i][2] == NULL;
}

/* An index on (status) or (status, id) walks each status in id order. */
static bool
orders_by_id(MYSQL_ROW *rows, size_t i, size_t j)
{
    return j == i + 1 || ident_eq(rows[i + 1][1], "id");
}

/* "`c1`, `c2`, `id`": the index's order after status; NULL if unusable. */
static char *
index_order(MYSQL_ROW *rows, size_t i, size_t j)
{
    struct sqlbuf order = {0};
    sql_reset(&order);
    for (size_t k = i + 1; k < j && !ident_eq(rows[k][1], "id"); k++) {
        if (rows[k][1] == NULL || rows[k][2] != NULL) {
            free(order.p); /* an expression or a prefix: no order */
            return NULL;
        }
        sql_add_ident(&order, rows[k][1]);
        sql_addf(&order, ", ");
    }
    sql_add_ident(&order, "id");
    return order.p;
}

/*
 * The claim must walk an index in its ORDER BY or InnoDB locks every
 * candidate before sorting them, and LIMIT no longer bounds the locks:
 * on the seed's (status, next_retry_at, created_at) index, ORDER BY id
 * would lock the whole PENDING backlog.  So the order is id when an
 * index on (status) or (status, id) exists, else that of the first
 * index led by status.  Ordering per aggregate stays exact either way:
 * it is checked on ids, not on claim order.
 */
static char *
pick_claim_order(MYSQL_ROW *rows, size_t n)
{
    char *best = NULL;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && strcmp(rows[j][0], rows[i][0]) == 0; j++)
            ;
        if (!led_by_status(rows, i))
            continue;
        if (orders_by_id(rows, i, j)) {
            free(best);
            return xstrdup("`id`");
        }
        if (best == NULL)
            best = index_order(rows, i, j);
    }
    return best != NULL ? best : xstrdup("`id`");
}

/* Rows of STATISTICS as load_claim_order reads them: see dup_check. */
static enum dup_check
pick_dup_check(MYSQL_ROW *rows, size_t n)
{
    enum dup_check check = DUP_UNINDEXED;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && strcmp(rows[j][0], rows[i][0]) == 0; j++)
            ;
        if (!ident_eq(rows[i][1], "event_id") || rows[i][2] != NULL)
            continue;
        if (j == i + 1 && rows[i][3] != NULL && strcmp(rows[i][3], "0") == 0)
            return DUP_IMPOSSIBLE;
        check = DUP_INDEXED;
    }
    return check;
}

/* Rows of STATISTICS as load_claim_order reads them: see build_claim_sql. */
static char *
pick_retry_index(MYSQL_ROW *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(rows[i - 1][0], rows[i][0]) != 0;
        if (first && ident_eq(rows[i][1], "next_retry_at") &&
            rows[i][2] == NULL) {
            struct sqlbuf q = {0};
            sql_reset(&q);
            sql_add_ident(&q, rows[i][0]);
            return q.p;
        }
    }
    return NULL;
}

/* Rows of STATISTICS as load_claim_order reads them: the primary key is
 * led by id, so a claim can lock the rows it located by id through it. */
static bool
pick_id_primary(MYSQL_ROW *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i][0], "PRIMARY") == 0)
            return ident_eq(rows[i][1], "id");
    return false;
}

static char *
load_claim_order(struct store *st, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART, NON_UNIQUE "
                "FROM information_schema.STATISTICS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ");
    sql_add_string(st, st->ob->table);
    sql_addf(q, " ORDER BY INDEX_NAME, SEQ_IN_INDEX");
    MYSQL_RES *res = run_select(st, "schema check", err, errlen);
    if (res == NULL)
        return NULL;
    size_t n = (size_t)mysql_num_rows(res);
    MYSQL_ROW *rows = xcalloc(n, sizeof(*rows));
    for (size_t i = 0; i < n; i++)
        rows[i] = mysql_fetch_row(res);
    st->dup_check = pick_dup_check(rows, n);
    free(st->retry_index);
    st->retry_index = pick_retry_index(rows, n);
    st->id_primary = pick_id_primary(rows, n);
    char *order = pick_claim_order(rows, n);
    free(rows);
    mysql_free_result(res);
    return order;
}

/* The claim's select list: fixed columns, optional ones present, config's. */
static void
add_select_list(struct store *st, const struct schema *sc, struct sqlbuf *q)
{
    sql_addf(q, "SELECT `id`, `event_id`, `aggregate_type`, "
                "`aggregate_id`, `event_type`, `payload`, "
                "UNIX_TIMESTAMP(`created_at`), `retry_count`");
    int pos = COL_FIXED;
    for (size_t i = 0; i < NOPTIONAL; i++) {
        st->pos_optional[i] = sc->optional[i] ? pos++ : -1;
        if (sc->optional[i]) {
            sql_addf(q, ", ");
            sql_add_ident(q, optional_columns[i]);
        }
    }
    st->pos_columns = pos;
    for (size_t i = 0; i < st->ob->ncolumns; i++) {
        sql_addf(q, ", ");
        sql_add_ident(q, st->ob->columns[i]);
    }
}

/*
 * The id of the first unfinished event of candidate `c`'s aggregate, as
 * the server's collation sees aggregates: one entry of the unfinished
 * column's index.
 */
static char *
first_unfinished_sql(const struct store *st)
{
    return xasprintf(
        "(SELECT `p`.`id` FROM %s `p` WHERE `p`.`aggregate_type` = "
        "`c`.`aggregate_type` AND `p`.`aggregate_id` = `c`.`aggregate_id` "
        "AND `p`.`unfinished` = 1 ORDER BY `p`.`id` LIMIT 1)",
        st->table);
}

/*
 * With ordering: aggregate, a candidate whose aggregate has an earlier
 * event backing off in RETRY cannot be kept: skip it in the read itself
 * (with the unfinished column, when that event is the aggregate's first
 * unfinished one: a read of one index entry, where looking for any held
 * RETRY row would scan every unfinished event of the aggregate).
 * Otherwise a held-back aggregate with batch_size events waiting would
 * fill every claim's LIMIT with rows the ordering check throws away, and
 * the whole table would stall behind one poison event.  Events behind a
 * leased one are not skipped here: that lease ends within seconds, and
 * skipping them would turn each claim beside a batch in flight into a
 * scan of the whole backlog.  The ordering check after the read stays
 * the judge; this only pages past what it would drop.
 */
static char *
build_unblocked_filter(const struct store *st)
{
    if (st->unfinished) {
        char *first = first_unfinished_sql(st);
        char *filter = xasprintf(
            " AND NOT EXISTS (SELECT 1 FROM %s `h` WHERE `h`.`id` = %s AND "
            "`h`.`status` = 'RETRY' AND `h`.`id` < `c`.`id` AND "
            "`h`.`next_retry_at` > NOW(6))",
            st->table, first);
        free(first);
        return filter;
    }
    return xasprintf(
        " AND NOT EXISTS (SELECT 1 FROM %s `p` WHERE "
        "`p`.`aggregate_type` = `c`.`aggregate_type` AND "
        "`p`.`aggregate_id` = `c`.`aggregate_id` AND `p`.`status` = 'RETRY' "
        "AND `p`.`id` < `c`.`id` AND `p`.`next_retry_at` > NOW(6))",
        st->table);
}

/*
 * Whether a candidate is the first unfinished event of its aggregate:
 * the unblocked filter's own index read, in the locate's select list.
 * When every candidate kept is such a first, the ordering check has
 * nothing to count.
 */
static char *
build_head_sql(const struct store *st)
{
    if (!st->unfinished)
        return NULL;
    char *first = first_unfinished_sql(st);
    char *head = xasprintf(", %s = `c`.`id`", first);
    free(first);
    return head;
}

/* "Not yet SENT or DEAD", by the generated column where it is trusted. */
static const char *
unfinished_cond(const struct store *st)
{
    return st->unfinished ? "`unfinished` = 1"
                          : "`status` IN ('PENDING', 'RETRY', 'PROCESSING')";
}

/* The exact count's statement up to its subquery's end: see
 * load_earlier_counts_exact.  Committed state, read without locks. */
static char *
build_count_sql(const struct store *st)
{
    return xasprintf(
        "SELECT c.`id`, (SELECT COUNT(*) FROM %s p "
        "WHERE p.`aggregate_type` = c.`aggregate_type` "
        "AND p.`aggregate_id` = c.`aggregate_id` AND p.`id` < c.`id` "
        "AND p.%s) FROM %s c WHERE c.`id` IN (",
        st->table, unfinished_cond(st), st->table);
}

/*
 * Due retries are read in next_retry_at order.  On an index led by
 * next_retry_at (sql/outbox.sql's, which only RETRY rows fill) the
 * optimizer would rather take (status, id) and sort, which locks every
 * due RETRY row before LIMIT: the index is forced.
 */
static void
build_claim_sql(struct store *st, const struct schema *sc, const char *order)
{
    struct sqlbuf list = {0};
    sql_reset(&list);
    add_select_list(st, sc, &list);
    free(st->select_list);
    st->select_list = list.p;
    for (int s = 0; s < SRC_COUNT; s++) {
        struct sqlbuf q = {0};
        sql_reset(&q);
        if (s == SRC_RETRY && st->retry_index != NULL)
            sql_addf(&q, " FORCE INDEX (%s)", st->retry_index);
        sql_addf(&q, " WHERE %s", claim_cond[s]);
        free(st->claim_where[s]);
        st->claim_where[s] = q.p;
        free(st->claim_order[s]);
        st->claim_order[s] = xasprintf(
            " ORDER BY %s", s == SRC_RETRY ? "`next_retry_at`" : order);
    }
    free(st->unblocked_sql);
    st->unblocked_sql = build_unblocked_filter(st);
    free(st->head_sql);
    st->head_sql = build_head_sql(st);
    free(st->count_sql);
    st->count_sql = build_count_sql(st);
}

static void
apply_schema(struct store *st, const struct schema *sc, const char *order)
{
    st->unfinished = sc->unfinished;
    st->binary_aggregate = sc->binary_aggregate == 2;
    build_claim_sql(st, sc, order);
    unsigned tok = sc->locked_by_len;
    st->token_chars = tok < TOKEN_MAX_CHARS ? tok : (unsigned)TOKEN_MAX_CHARS;
    unsigned ec = sc->last_error_len;
    st->error_chars = ec > 0 && ec < STORE_ERROR_CHARS ? ec : STORE_ERROR_CHARS;
    st->error_charset = sc->last_error_charset;
}

/* One EXPLAIN: the server checks the privilege and runs nothing. */
static int
check_privilege(struct store *st, const char *sql, const char *privilege,
                const char *needed_for, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, sql, st->table);
    MYSQL_RES *res = run_select(st, "privilege check", err, errlen);
    if (res != NULL) {
        mysql_free_result(res);
        return 0;
    }
    if (st->db != NULL && (st->last_errno == ERRNO_TABLE_ACCESS_DENIED ||
                           st->last_errno == ERRNO_COLUMN_ACCESS_DENIED)) {
        char why[512];
        str_copy(why, mysql_error(st->db), sizeof(why));
        err_set(err, errlen,
                "user %s lacks the %s privilege on %s, needed %s (see "
                "sql/grants.sql): %s (error %u)",
                st->ob->database->user ? st->ob->database->user : "?",
                privilege, st->where, needed_for, why, st->last_errno);
    }
    /* The session stays open and idle after a failed check: the metadata
     * lock of an EXPLAIN that passed would hold off the operator's ALTER
     * TABLE until the transaction ends. */
    db_rollback(st);
    return -1;
}

/*
 * With SELECT alone the schema check passes and every claim then fails
 * on its UPDATE: ask for each privilege the relay will use up front, so
 * the outbox stays not-ready with the one missing named.
 */
static int
check_privileges(struct store *st, char *err, size_t errlen)
{
    const struct outbox_config *ob = st->ob;
    if (check_privilege(st,
                        "EXPLAIN UPDATE %s SET `status` = `status` "
                        "WHERE 1 = 0",
                        "UPDATE", "to lease and mark rows", err, errlen) < 0)
        return -1;
    if (ob->on_sent != ON_SENT_DELETE && ob->retention_sent_ms == 0)
        return 0;
    return check_privilege(st, "EXPLAIN DELETE FROM %s WHERE 1 = 0", "DELETE",
                           ob->on_sent == ON_SENT_DELETE
                               ? "for on_sent: delete"
                               : "for retention of SENT rows",
                           err, errlen);
}

static int
check_schema(struct store *st, char *err, size_t errlen)
{
    struct schema sc = {0};
    sc.extra = xcalloc(st->ob->ncolumns + 1, sizeof(bool));
    char *order = NULL;
    int rc = -1;
    if (load_columns(st, &sc, err, errlen) < 0)
        goto out;
    if (sc.ncolumns == 0) {
        err_set(
            err, errlen, "table %s does not exist (or user %s may not read it)",
            st->where, st->ob->database->user ? st->ob->database->user : "?");
        st->schema_error = true;
        goto out;
    }
    if (report_missing(st, &sc, err, errlen) < 0) {
        st->schema_error = true;
        goto out;
    }
    if (check_privileges(st, err, errlen) < 0)
        goto out;
    if ((order = load_claim_order(st, err, errlen)) == NULL)
        goto out;
    apply_schema(st, &sc, order);
    /* End the transaction the information_schema reads opened. */
    rc = db_commit(st, "schema check", err, errlen);
    if (rc == 0) {
        st->schema_checked_ms = clock_ms();
        st->schema_stale = false;
    }
out:
    free(order);
    free(sc.extra);
    return rc;
}

/* ---- life cycle ---- */

struct store *
store_new(const struct outbox_config *ob)
{
    pthread_once(&library_once, library_init);
    struct store *st = xcalloc(1, sizeof(*st));
    st->ob = ob;
    const char *schema = ob->database->database;
    st->where = xasprintf("%s.%s", schema ? schema : "?", ob->table);
    struct sqlbuf q = {0};
    sql_reset(&q);
    sql_add_ident(&q, ob->table);
    st->table = q.p;
    return st;
}

void
store_free(struct store *st)
{
    if (st == NULL)
        return;
    close_db(st);
    free(st->select_list);
    for (int s = 0; s < SRC_COUNT; s++) {
        free(st->claim_where[s]);
        free(st->claim_order[s]);
    }
    free(st->located);
    free(st->heads);
    free(st->unblocked_sql);
    free(st->head_sql);
    free(st->retry_index);
    free(st->where);
    free(st->table);
    free(st->count_sql);
    free(st->sql.p);
    free(st->text);
    free(st->drop);
    free(st->byagg);
    free(st->groups);
    free(st->earlier);
    free(st->items);
    free(st->purge_ids);
    free(st);
}

/* Ends the session on a server found read-only (see check_writable). */
static int
refuse_read_only(struct store *st, char *err, size_t errlen)
{
    err_set(err, errlen,
            "%s: the server has read_only on: a replica or a demoted primary",
            st->where);
    st->read_only = true;
    st->last_errno = 0;
    close_db(st);
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
    if (st->allow_read_only)
        return 0;
    sql_reset(&st->sql);
    sql_addf(&st->sql, "SELECT @@global.read_only");
    MYSQL_RES *res = run_select(st, "session", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(res);
    bool ro = row != NULL && row[0] != NULL && strcmp(row[0], "0") != 0;
    mysql_free_result(res);
    return ro ? refuse_read_only(st, err, errlen) : 0;
}

/* A fresh session: open, version, session settings, writable. */
static int
open_session(struct store *st, char *err, size_t errlen)
{
    st->read_only = false;
    if (db_open(st, err, errlen) < 0)
        return -1;
    if (check_version(st, err, errlen) < 0 ||
        setup_session(st, err, errlen) < 0 ||
        check_writable(st, err, errlen) < 0) {
        close_db(st);
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
    st->schema_error = false;
    st->last_errno = 0;
    if (st->db != NULL && st->ready)
        return 0;
    if (st->db == NULL && open_session(st, err, errlen) < 0)
        return -1;
    if (check_schema(st, err, errlen) == 0) {
        st->ready = true;
        return 0;
    }
    if (st->db == NULL || st->schema_error)
        return -1;
    /* The kept session died meanwhile: start a fresh one, once. */
    db_rollback(st);
    close_db(st);
    if (open_session(st, err, errlen) < 0 || check_schema(st, err, errlen) < 0)
        return -1;
    st->ready = true;
    return 0;
}

void
store_disconnect(struct store *st)
{
    close_db(st);
}

bool
store_is_connected(const struct store *st)
{
    return st->db != NULL && st->ready;
}

MYSQL *
store_session(struct store *st)
{
    return store_is_connected(st) ? st->db : NULL;
}

bool
store_last_error_is_schema(const struct store *st)
{
    return st->schema_error;
}

void
store_allow_read_only(struct store *st)
{
    st->allow_read_only = true;
}

bool
store_last_error_is_read_only(const struct store *st)
{
    return st->read_only;
}

uint64_t
store_statement_count(const struct store *st)
{
    return st->statements;
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
    if (st->db != NULL && (st->ready || !checked))
        return 0;
    err_set(err, errlen, "%s %s: not connected", what, st->where);
    st->last_errno = 0;
    return -1;
}

static int
require_ready(struct store *st, const char *what, char *err, size_t errlen)
{
    return require(st, true, what, err, errlen);
}

static int
require_session(struct store *st, const char *what, char *err, size_t errlen)
{
    return require(st, false, what, err, errlen);
}

/* ---- claim ---- */

/* "<relay_id>/<16 hex>": unique per claim, readable in locked_by. */
static void
make_token(const struct store *st, char *token, const char *relay_id)
{
    uint64_t rnd;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)wall_us() * 6364136223846793005ULL ^
              (uint64_t)getpid() ^ (uint64_t)clock_ms();
    size_t room = st->token_chars - 17, n = 0;
    for (const char *s = relay_id ? relay_id : ""; *s && n < room; s++)
        token[n++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    snprintf(token + n, 18, "/%016" PRIx64, rnd);
}

static const char *
field_dup(struct outbox_batch *b, MYSQL_ROW r, const unsigned long *len, int i)
{
    return r[i] != NULL ? batch_memdup(b, r[i], len[i]) : NULL;
}

/* Payload and headers: the one copy from the client's packet buffer. */
static const char *
field_bulk(struct outbox_batch *b, MYSQL_ROW r, const unsigned long *len, int i)
{
    return r[i] != NULL ? batch_bulkdup(b, r[i], len[i]) : NULL;
}

/* "1718000000.123456" or "1718000000" to microseconds. */
static int64_t
parse_us(const char *s)
{
    if (s == NULL)
        return 0;
    char *end;
    int64_t us = (int64_t)strtoll(s, &end, 10) * 1000000;
    int64_t frac = 0, scale = 100000;
    if (*end == '.')
        for (const char *p = end + 1; *p >= '0' && *p <= '9' && scale; p++) {
            frac += (*p - '0') * scale;
            scale /= 10;
        }
    return us + frac;
}

/* Copies one candidate into the batch's arena and bulk store: no malloc
 * per row, and the payload copied once. */
static void
add_candidate(struct store *st, struct outbox_batch *b, MYSQL_ROW r,
              const unsigned long *len, enum outbox_status from)
{
    struct outbox_row *row = batch_add(b);
    row->id = strtoull(r[COL_ID], NULL, 10);
    row->event_id = field_dup(b, r, len, COL_EVENT_ID);
    row->aggregate_type = field_dup(b, r, len, COL_AGGREGATE_TYPE);
    row->aggregate_id = field_dup(b, r, len, COL_AGGREGATE_ID);
    row->event_type = field_dup(b, r, len, COL_EVENT_TYPE);
    row->payload = field_bulk(b, r, len, COL_PAYLOAD);
    row->payload_len = r[COL_PAYLOAD] ? len[COL_PAYLOAD] : 0;
    row->created_us = parse_us(r[COL_CREATED]);
    long rc = r[COL_RETRY_COUNT] ? strtol(r[COL_RETRY_COUNT], NULL, 10) : 0;
    row->retry_count = rc > 0 ? (unsigned)rc : 0;
    /* A lease that expired counts as an attempt. */
    row->retry_count += from == OUTBOX_PROCESSING;
    row->claimed_from = from;
    const char **opt[NOPTIONAL] = {&row->headers, &row->trace_id,
                                   &row->traceparent};
    for (int i = 0; i < NOPTIONAL; i++)
        if (st->pos_optional[i] >= 0)
            *opt[i] = i == OPT_HEADERS
                          ? field_bulk(b, r, len, st->pos_optional[i])
                          : field_dup(b, r, len, st->pos_optional[i]);
    size_t nc = st->ob->ncolumns;
    if (nc == 0)
        return;
    /* The pointer array comes from the arena too: copy, then repoint. */
    const char **cols = (const char **)(void *)batch_memdup(
        b, &r[st->pos_columns], nc * sizeof(*cols));
    for (size_t i = 0; i < nc; i++)
        cols[i] = field_dup(b, r, len, st->pos_columns + (int)i);
    row->columns = cols;
}

static int
u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A row whose lease expired passed ordering when it was first claimed;
 * its reclaim does not read it again. */
static bool
ordering_applies(const struct store *st, enum claim_source src)
{
    return src != SRC_EXPIRED && st->ob->ordering == ORDERING_AGGREGATE;
}

/* The candidates' statement from FROM to LIMIT. */
static void
add_candidate_scan(struct store *st, enum claim_source src, size_t limit)
{
    bool filter = ordering_applies(st, src);
    sql_addf(&st->sql, " FROM %s `c`%s%s%s LIMIT %zu", st->table,
             st->claim_where[src], filter ? st->unblocked_sql : "",
             st->claim_order[src], limit);
}

/*
 * A result read row by row (mysql_use_result): each row is copied from
 * the client's packet buffer into the batch and nothing else holds the
 * batch's payloads, where mysql_store_result would keep a second copy of
 * them all until freed.
 */
static MYSQL_RES *
run_select_stream(struct store *st, const char *what, char *err, size_t errlen)
{
    if (run_query(st, st->sql.p, st->sql.len, what, err, errlen) < 0)
        return NULL;
    MYSQL_RES *res = mysql_use_result(st->db);
    if (res == NULL)
        db_fail(st, what, err, errlen);
    return res;
}

/* A streamed read that failed between rows: the result is freed before
 * the session may be closed. */
static int
stream_fail(struct store *st, MYSQL_RES *res, const char *what, char *err,
            size_t errlen)
{
    unsigned code = mysql_errno(st->db);
    err_set(err, errlen, "%s %s: %s (error %u)", what, st->where,
            mysql_error(st->db), code);
    st->last_errno = code;
    mysql_free_result(res);
    if (is_connection_errno(code))
        close_db(st);
    return -1;
}

/* What is left of batch_bytes, by the payloads and headers taken; a
 * config built by hand, with no batch_bytes, has no byte bound. */
static uint64_t
bytes_left(const struct store *st, const struct outbox_batch *b)
{
    uint64_t budget = st->ob->batch_bytes;
    if (budget == 0)
        return UINT64_MAX;
    return b->bulk_bytes < budget ? budget - b->bulk_bytes : 0;
}

/* A row's payload and headers: what it counts against batch_bytes. */
static uint64_t
row_bytes(const struct store *st, MYSQL_ROW r, const unsigned long *len)
{
    uint64_t n = r[COL_PAYLOAD] != NULL ? len[COL_PAYLOAD] : 0;
    int h = st->pos_optional[OPT_HEADERS];
    if (h >= 0 && r[h] != NULL)
        n += len[h];
    return n;
}

/* docs/contract.md section 1.6: a row joins the batch only within
 * batch_bytes, except as its first, so that a larger one goes alone. */
static bool
batch_takes(const struct store *st, const struct outbox_batch *b, uint64_t size)
{
    if (b->n == 0)
        return true;
    uint64_t left = bytes_left(st, b);
    return left > 0 && size <= left;
}

/*
 * Streams a locking read into the batch: at most limit rows, none of the
 * sorted skip[0..nskip), none from the first that would pass batch_bytes
 * on.  Rows past that cut are fetched (a streamed result must be read to
 * its end) but not copied: locked, never marked, the claim's commit
 * releases them unchanged, as it does the rows the ordering check drops.
 * *nread: the rows the read returned, skipped ones included.
 */
static int
add_locked_rows(struct store *st, struct outbox_batch *b, enum claim_source src,
                const uint64_t *skip, size_t nskip, size_t limit, size_t *nread,
                char *err, size_t errlen)
{
    MYSQL_RES *res = run_select_stream(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    size_t added = 0;
    bool cut = false;
    for (*nread = 0; (r = mysql_fetch_row(res)) != NULL; (*nread)++) {
        uint64_t id = strtoull(r[COL_ID], NULL, 10);
        if (nskip > 0 && bsearch(&id, skip, nskip, sizeof(*skip), u64_cmp))
            continue;
        const unsigned long *len = mysql_fetch_lengths(res);
        uint64_t size = row_bytes(st, r, len);
        st->seen_bytes += size;
        st->seen_rows++;
        if (cut || added == limit)
            continue;
        if (!batch_takes(st, b, size)) {
            cut = st->cut_short = true;
            continue;
        }
        add_candidate(st, b, r, len, source_status[src]);
        added++;
    }
    if (mysql_errno(st->db) != 0)
        return stream_fail(st, res, "claim", err, errlen);
    mysql_free_result(res);
    return 0;
}

/* Step one: the candidates' ids, by a read that takes no lock. */
static int
locate_candidates(struct store *st, enum claim_source src, size_t limit,
                  size_t *n, char *err, size_t errlen)
{
    bool heads = st->head_sql != NULL && ordering_applies(st, src);
    sql_reset(&st->sql);
    sql_addf(&st->sql, "SELECT `c`.`id`%s", heads ? st->head_sql : "");
    add_candidate_scan(st, src, limit);
    MYSQL_RES *res = run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    st->located = grow(st->located, &st->located_cap, limit, sizeof(uint64_t));
    st->heads =
        grow(st->heads, &st->heads_cap, st->nheads + limit, sizeof(uint64_t));
    MYSQL_ROW r;
    *n = 0;
    while (*n < limit && (r = mysql_fetch_row(res)) != NULL) {
        uint64_t id = strtoull(r[0], NULL, 10);
        st->located[(*n)++] = id;
        if (heads && r[1] != NULL && r[1][0] == '1')
            st->heads[st->nheads++] = id;
    }
    mysql_free_result(res);
    return 0;
}

/* Step two: those rows locked by id, if still candidates and not held. */
static int
lock_located(struct store *st, struct outbox_batch *b, enum claim_source src,
             size_t n, char *err, size_t errlen)
{
    sql_reset(&st->sql);
    sql_addf(&st->sql,
             "%s FROM %s `c` FORCE INDEX (PRIMARY) WHERE `c`.`id` IN (",
             st->select_list, st->table);
    for (size_t i = 0; i < n; i++)
        sql_add_id(&st->sql, st->located[i], i == 0);
    sql_addf(&st->sql, ") AND %s FOR UPDATE SKIP LOCKED", claim_cond[src]);
    size_t nread;
    return add_locked_rows(st, b, src, NULL, 0, n, &nread, err, errlen);
}

/*
 * How many candidates to ask for.  Rows past the byte cut are still read
 * whole, so the window is a quarter more than the last claim's mean row
 * says will fit, capped at limit: all of it for small rows, which never
 * reach the budget.  Before any mean, FIRST_WINDOW: one extra claim at
 * start for small rows, where limit would read batch_size large ones.
 */
static size_t
claim_window(const struct store *st, const struct outbox_batch *b, size_t limit)
{
    if (st->ob->batch_bytes == 0)
        return limit;
    uint64_t want = FIRST_WINDOW;
    if (st->row_bytes_est > 0) {
        uint64_t left = bytes_left(st, b);
        want = (left + left / 4) / st->row_bytes_est;
    }
    if (want < 1)
        want = 1;
    return want < limit ? (size_t)want : limit;
}

/* A window narrower than the limit that came back full: more rows may
 * wait, so the claim counts as full and the next follows at once. */
static void
note_window(struct store *st, size_t window, size_t limit, size_t got)
{
    if (window < limit && got == window)
        st->cut_short = true;
}

/* The mean row of this claim's locking reads sizes the next window. */
static void
note_row_bytes(struct store *st)
{
    if (st->seen_rows == 0)
        return;
    uint64_t mean = st->seen_bytes / st->seen_rows;
    st->row_bytes_est = mean > 0 ? mean : 1;
}

/*
 * The rows of one source, at most limit and batch_bytes, locked.  They
 * are found by a plain read, then locked by id: a locking read along the
 * status index also goes through the lock system for every entry that
 * the last claims left delete-marked at the head of the PENDING range,
 * until purge removes them, and that grew with the purge lag to four
 * fifths of the claim's read in a drain, where a plain read passes them
 * cheaply.  The lock re-reads the condition on the latest version, so a
 * row that another relay took in between is not taken again.  When rows
 * were taken in between and more may wait, the locking read along the
 * index tops the batch up, past what other relays hold; it alone claims
 * from a table whose primary key is not led by id.  The byte budget is
 * applied as the locked rows stream in (add_locked_rows), so the locate
 * reads ids alone, as cheap for large rows as for small.
 */
static int
fetch_candidates(struct store *st, struct outbox_batch *b,
                 enum claim_source src, size_t limit, char *err, size_t errlen)
{
    size_t window = claim_window(st, b, limit);
    size_t located = window, locked = 0, before = b->n, nread;
    if (st->id_primary) {
        if (locate_candidates(st, src, window, &located, err, errlen) < 0)
            return -1;
        note_window(st, window, limit, located);
        if (located == 0)
            return 0;
        if (lock_located(st, b, src, located, err, errlen) < 0)
            return -1;
        locked = b->n - before;
        if (locked == located || located < window || st->cut_short)
            return 0;
        for (size_t i = 0; i < locked; i++)
            st->located[i] = b->rows[before + i].id;
        qsort(st->located, locked, sizeof(*st->located), u64_cmp);
    }
    sql_reset(&st->sql);
    sql_addf(&st->sql, "%s", st->select_list);
    add_candidate_scan(st, src, window);
    sql_addf(&st->sql, " FOR UPDATE SKIP LOCKED");
    if (add_locked_rows(st, b, src, st->located, locked, window - locked,
                        &nread, err, errlen) < 0)
        return -1;
    note_window(st, window, limit, nread);
    return 0;
}

static int
row_cmp_id(const void *a, const void *b)
{
    const struct outbox_row *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int
str_cmp_null(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

static int
row_cmp_aggregate(const void *a, const void *b)
{
    const struct outbox_row *x = *(struct outbox_row *const *)a;
    const struct outbox_row *y = *(struct outbox_row *const *)b;
    int c = str_cmp_null(x->aggregate_type, y->aggregate_type);
    if (c == 0)
        c = str_cmp_null(x->aggregate_id, y->aggregate_id);
    return c != 0 ? c : row_cmp_id(x, y);
}

static bool
same_aggregate(const struct outbox_row *x, const struct outbox_row *y)
{
    return str_cmp_null(x->aggregate_type, y->aggregate_type) == 0 &&
           str_cmp_null(x->aggregate_id, y->aggregate_id) == 0;
}

static struct outbox_row *
find_row(struct outbox_batch *b, uint64_t id)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->rows[mid].id == id)
            return &b->rows[mid];
        if (b->rows[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Reclaimed from an expired lease once too often: goes DEAD, not out. */
static bool
is_dying(const struct store *st, const struct outbox_row *row)
{
    return row->claimed_from == OUTBOX_PROCESSING &&
           row->retry_count > st->ob->max_retries;
}

/*
 * The exact count, one correlated subquery per candidate: the server
 * matches aggregates by the column's collation.  It reads every index
 * entry of each candidate's aggregate, SENT history included, so it is
 * only the fallback for what the fast path below cannot judge.
 */
static int
load_earlier_counts_exact(struct store *st, struct outbox_batch *b, char *err,
                          size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, "%s", st->count_sql);
    for (size_t i = 0; i < b->n; i++) {
        sql_add_id(q, b->rows[i].id, i == 0);
        b->rows[i].earlier_unfinished = UINT_MAX; /* unanswered: dropped */
    }
    sql_addf(q, ")");
    MYSQL_RES *res = run_select(st, "claim ordering check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        struct outbox_row *row = find_row(b, strtoull(r[0], NULL, 10));
        if (row != NULL && r[1] != NULL)
            row->earlier_unfinished = (unsigned)strtoul(r[1], NULL, 10);
    }
    mysql_free_result(res);
    return 0;
}

/* Splits byagg into aggregates; false when one of them has a NULL part. */
static bool
group_candidates(struct store *st, size_t n)
{
    st->groups = grow(st->groups, &st->groups_cap, n, sizeof(*st->groups));
    st->ngroups = 0;
    for (size_t i = 0; i < n; i++) {
        const struct outbox_row *row = st->byagg[i];
        if (row->aggregate_type == NULL || row->aggregate_id == NULL)
            return false;
        if (i == 0 || !same_aggregate(st->byagg[i - 1], row))
            st->groups[st->ngroups++] = i;
    }
    return true;
}

static bool
ends_in_space(const char *s)
{
    size_t len = strlen(s);
    return len > 0 && s[len - 1] == ' ';
}

/*
 * Whether the server may see two of the candidates' aggregates, apart
 * byte for byte, as one: under a _bin collation only when a value ends
 * in a space.
 */
static bool
aliases_possible(const struct store *st)
{
    if (!st->binary_aggregate)
        return true;
    for (size_t g = 0; g < st->ngroups; g++) {
        const struct outbox_row *row = st->byagg[st->groups[g]];
        if (ends_in_space(row->aggregate_type) ||
            ends_in_space(row->aggregate_id))
            return true;
    }
    return false;
}

/*
 * One statement: how many distinct aggregates the server sees among the
 * candidates (by the collation; left out when aliases_possible says it
 * cannot differ), then every unfinished row of those aggregates below
 * the highest candidate, read by range on idx_outbox_aggregate.
 * Committed state, no locks: see ordering_filter.
 */
static void
build_earlier_sql(struct store *st, const struct outbox_batch *b)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    if (aliases_possible(st)) {
        sql_addf(q,
                 "SELECT 0, NULL, NULL, COUNT(DISTINCT `aggregate_type`, "
                 "`aggregate_id`) FROM %s WHERE `id` IN (",
                 st->table);
        for (size_t i = 0; i < b->n; i++)
            sql_add_id(q, b->rows[i].id, i == 0);
        sql_addf(q, ") UNION ALL ");
    }
    sql_addf(q,
             "SELECT 1, `aggregate_type`, `aggregate_id`, `id` "
             "FROM %s WHERE (`aggregate_type`, `aggregate_id`) IN (",
             st->table);
    for (size_t g = 0; g < st->ngroups; g++) {
        const struct outbox_row *row = st->byagg[st->groups[g]];
        sql_addf(q, g == 0 ? "(" : ",(");
        sql_add_string(st, row->aggregate_type);
        sql_addf(q, ",");
        sql_add_string(st, row->aggregate_id);
        sql_addf(q, ")");
    }
    sql_addf(q, ") AND %s AND `id` < %" PRIu64, unfinished_cond(st),
             b->rows[b->n - 1].id);
}

/* The candidates' aggregate that is byte-for-byte (type, id); or -1. */
static ssize_t
find_group(const struct store *st, const char *type, const char *id)
{
    size_t lo = 0, hi = st->ngroups;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct outbox_row *row = st->byagg[st->groups[mid]];
        int c = strcmp(row->aggregate_type, type);
        if (c == 0)
            c = strcmp(row->aggregate_id, id);
        if (c == 0)
            return (ssize_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/*
 * Collects the unfinished rows by aggregate.  Returns 1 when the server
 * matched aggregates that bytes tell apart ('a' and 'A' under a _ci
 * collation, trailing spaces under PAD SPACE): the exact count decides.
 */
static int
read_earlier(struct store *st, MYSQL_RES *res, size_t *n)
{
    MYSQL_ROW r;
    int rc = 0;
    *n = 0;
    while (rc == 0 && (r = mysql_fetch_row(res)) != NULL) {
        if (r[0][0] == '0') {
            if (strtoull(r[3], NULL, 10) != st->ngroups)
                rc = 1;
            continue;
        }
        ssize_t g = find_group(st, r[1], r[2]);
        if (g < 0) {
            rc = 1;
            continue;
        }
        st->earlier =
            grow(st->earlier, &st->earlier_cap, *n + 1, sizeof(*st->earlier));
        st->earlier[(*n)++] =
            (struct earlier){(size_t)g, strtoull(r[3], NULL, 10)};
    }
    return rc;
}

static int
earlier_cmp(const void *a, const void *b)
{
    const struct earlier *x = a, *y = b;
    if (x->g != y->g)
        return x->g < y->g ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Each candidate's count: the unfinished rows of its aggregate below it. */
static void
count_earlier(struct store *st, size_t nrows, size_t nearlier)
{
    if (nearlier > 1) /* qsort may not be given NULL, even for none */
        qsort(st->earlier, nearlier, sizeof(*st->earlier), earlier_cmp);
    size_t e = 0;
    for (size_t g = 0; g < st->ngroups; g++) {
        size_t end = g + 1 < st->ngroups ? st->groups[g + 1] : nrows;
        while (e < nearlier && st->earlier[e].g < g)
            e++;
        size_t first = e;
        for (size_t i = st->groups[g]; i < end; i++) {
            struct outbox_row *row = st->byagg[i];
            while (e < nearlier && st->earlier[e].g == g &&
                   st->earlier[e].id < row->id)
                e++;
            row->earlier_unfinished = (unsigned)(e - first);
        }
    }
}

/*
 * Counts, for each candidate, the unfinished events of its aggregate
 * before it.  Fast path: one range read of the unfinished rows of the
 * candidates' aggregates, matched here byte for byte; the exact query
 * when a NULL aggregate or a collation makes bytes a poor judge.
 */
static int
load_earlier_counts(struct store *st, struct outbox_batch *b, char *err,
                    size_t errlen)
{
    if (!group_candidates(st, b->n))
        return load_earlier_counts_exact(st, b, err, errlen);
    build_earlier_sql(st, b);
    MYSQL_RES *res = run_select(st, "claim ordering check", err, errlen);
    if (res == NULL)
        return -1;
    size_t n;
    int rc = read_earlier(st, res, &n);
    mysql_free_result(res);
    if (rc != 0)
        return load_earlier_counts_exact(st, b, err, errlen);
    count_earlier(st, b->n, n);
    return 0;
}

/*
 * Whether the locate found every candidate to be the first unfinished
 * event of its aggregate: then none has an earlier one to wait for, and
 * no two share an aggregate.  That read is committed state, as the
 * ordering check's own, a lock earlier: an earlier event that commits
 * in between is no different from one that commits after the check.
 */
static bool
all_located_heads(struct store *st, const struct outbox_batch *b)
{
    if (st->nheads < b->n)
        return false;
    qsort(st->heads, st->nheads, sizeof(*st->heads), u64_cmp);
    for (size_t i = 0; i < b->n; i++)
        if (!bsearch(&b->rows[i].id, st->heads, st->nheads, sizeof(*st->heads),
                     u64_cmp))
            return false;
    return true;
}

/*
 * Keeps a candidate only when every unfinished earlier event of its
 * aggregate is in the batch: the k-th candidate of an aggregate (by id)
 * must have exactly k unfinished events before it.  The counts come
 * from a non-locking read of committed state: a locking read would skip
 * the rows another relay is claiming right now and undercount.  Rows
 * going DEAD here hold their place like the others: DEAD finishes them
 * in this same transaction.  Comparing aggregates byte-wise is at most
 * stricter than the column's collation: that can delay a row, never
 * reorder one.
 */
static int
ordering_filter(struct store *st, struct outbox_batch *b, char *err,
                size_t errlen)
{
    if (all_located_heads(st, b)) {
        for (size_t i = 0; i < b->n; i++)
            b->rows[i].earlier_unfinished = 0;
        return 0;
    }
    st->byagg = grow(st->byagg, &st->byagg_cap, b->n, sizeof(*st->byagg));
    for (size_t i = 0; i < b->n; i++)
        st->byagg[i] = &b->rows[i];
    qsort(st->byagg, b->n, sizeof(*st->byagg), row_cmp_aggregate);
    if (load_earlier_counts(st, b, err, errlen) < 0)
        return -1;
    unsigned k = 0;
    bool broken = false;
    for (size_t i = 0; i < b->n; i++, k++) {
        struct outbox_row *row = st->byagg[i];
        if (i == 0 || !same_aggregate(st->byagg[i - 1], row)) {
            k = 0;
            broken = false;
        }
        if (broken || row->earlier_unfinished != k) {
            broken = true;
            st->drop[row - b->rows] = 1;
        }
    }
    return 0;
}

static int
kill_expired(struct store *st, struct outbox_batch *b, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q,
             "UPDATE %s SET `status` = 'DEAD', `next_retry_at` = NULL, "
             "`last_error` = CONCAT("
             "'lease expired after ', `retry_count` + 1, ' attempts without "
             "a confirm (relay crashed or hung while publishing)'), "
             "`retry_count` = `retry_count` + 1, `locked_by` = NULL, "
             "`locked_until` = NULL WHERE `id` IN (",
             st->table);
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        if (is_dying(st, &b->rows[i]))
            sql_add_id(q, b->rows[i].id, n++ == 0);
    if (n == 0)
        return 0;
    sql_addf(q, ")");
    uint64_t affected;
    return run_update(st, "claim", &affected, err, errlen);
}

/* Drops the dying and the out-of-order rows, keeping id order. */
static void
compact_batch(const struct store *st, struct outbox_batch *b)
{
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++)
        if (!st->drop[i] && !is_dying(st, &b->rows[i]))
            b->rows[k++] = b->rows[i];
    b->n = k;
}

/*
 * retry_count is assigned before status: MySQL assigns left to right
 * with the new values, MariaDB may assign simultaneously; this order
 * reads the old status under both.
 */
static int
mark_claimed(struct store *st, struct outbox_batch *b, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q,
             "UPDATE %s SET `retry_count` = `retry_count` + "
             "(`status` = 'PROCESSING'), `status` = 'PROCESSING', "
             "`next_retry_at` = NULL, `locked_by` = ",
             st->table);
    sql_add_string(st, b->token);
    sql_addf(q,
             ", `locked_until` = NOW(6) + INTERVAL %" PRIu64
             " MICROSECOND WHERE `id` IN (",
             st->ob->lease_ms * 1000);
    for (size_t i = 0; i < b->n; i++)
        sql_add_id(q, b->rows[i].id, i == 0);
    sql_addf(q, ")");
    uint64_t affected;
    if (run_update(st, "claim", &affected, err, errlen) < 0)
        return -1;
    if (affected != b->n) {
        /* Cannot happen while we hold the row locks; refuse if it does. */
        err_set(err, errlen, "claim %s: marked %" PRIu64 " of %zu locked rows",
                st->where, affected, b->n);
        st->last_errno = 0;
        return -1;
    }
    return 0;
}

/*
 * Sorts the candidates by id, drops those that ordering holds back, and
 * moves those reclaimed once too often to DEAD in this transaction.
 */
static int
filter_candidates(struct store *st, struct outbox_batch *b, char *err,
                  size_t errlen)
{
    if (b->n == 0)
        return 0;
    qsort(b->rows, b->n, sizeof(*b->rows), row_cmp_id);
    st->drop = grow(st->drop, &st->drop_cap, b->n, 1);
    memset(st->drop, 0, b->n);
    if (st->ob->ordering == ORDERING_AGGREGATE &&
        ordering_filter(st, b, err, errlen) < 0)
        return -1;
    if (kill_expired(st, b, err, errlen) < 0)
        return -1;
    compact_batch(st, b);
    return 0;
}

/*
 * Whether any lease has expired, read without locks, before the locking
 * read: that one skips a row someone holds locked at that instant, and
 * a look that runs once a second must not take that for "none" again
 * and again (until the row is taken, every claim looks).
 */
static int
expired_exists(struct store *st, bool *exists, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q,
             "SELECT 1 FROM %s WHERE `status` = 'PROCESSING' AND "
             "`locked_until` <= NOW(6) LIMIT 1",
             st->table);
    MYSQL_RES *res = run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    *exists = mysql_fetch_row(res) != NULL;
    mysql_free_result(res);
    return 0;
}

/*
 * A lease that expired means its relay died or hung, maybe because of
 * one of its rows: such rows are reclaimed one per batch.  Alone, a row
 * that crashes the relay counts attempts against itself only and ends
 * DEAD alone, while each other row of its batch pays one attempt.
 */
static int
claim_expired(struct store *st, struct outbox_batch *b, size_t cap, char *err,
              size_t errlen)
{
    bool exists;
    if (expired_exists(st, &exists, err, errlen) < 0)
        return -1;
    if (!exists) {
        st->expired_none_ms = clock_ms();
        return 0;
    }
    if (fetch_candidates(st, b, SRC_EXPIRED, cap, err, errlen) < 0 ||
        filter_candidates(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 1)
        b->n = 1; /* the lowest id: the first unfinished of its aggregate */
    return 0;
}

/*
 * The look for expired leases reads every PROCESSING row, the batches in
 * flight included, to find none on most claims: it ran at every claim
 * and cost an eighth of the database's time in a drain.  A lease is
 * seconds long, so once a second is soon enough; after a find it looks
 * again at once, as a dead relay leaves a batch of them.
 */
static bool
expired_look_due(const struct store *st)
{
    uint64_t every = st->ob->lease_ms / 4 < EXPIRED_LOOK_MS
                         ? st->ob->lease_ms / 4
                         : EXPIRED_LOOK_MS;
    return st->expired_none_ms == 0 ||
           clock_ms() - st->expired_none_ms >= every;
}

/*
 * Flags each claimed row whose event_id an earlier row already has: the
 * relay sends it DEAD rather than publish a message_id that consumers
 * deduplicate away.  A non-locking read through the event_id index.
 */
static int
find_duplicates(struct store *st, struct outbox_batch *b, char *err,
                size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q,
             "SELECT c.`id`, MIN(p.`id`) FROM %s c JOIN %s p ON "
             "p.`event_id` = c.`event_id` AND p.`id` < c.`id` "
             "WHERE c.`id` IN (",
             st->table, st->table);
    for (size_t i = 0; i < b->n; i++)
        sql_add_id(q, b->rows[i].id, i == 0);
    sql_addf(q, ") GROUP BY c.`id`");
    MYSQL_RES *res = run_select(st, "claim duplicate check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        struct outbox_row *row = find_row(b, strtoull(r[0], NULL, 10));
        if (row != NULL && r[1] != NULL)
            row->duplicate_of = strtoull(r[1], NULL, 10);
    }
    mysql_free_result(res);
    return 0;
}

/*
 * After an empty claim, the next one first asks in one read whether any
 * row is claimable, and if none is, when the next falls due: an idle
 * outbox then costs this statement and a commit per poll, where the
 * claim's reads would cost three or four.  Each part is one index probe
 * on sql/outbox.sql's table (status, id and next_retry_at).  The same
 * read asks whether the server went read-only: an idle relay writes
 * nothing that would be refused, and must still leave a demoted primary.
 */
static int
probe(struct store *st, bool *now, uint64_t *due_in_ms, char *err,
      size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q,
             "SELECT IF(EXISTS(SELECT 1 FROM %s WHERE `status` = 'PENDING'), "
             "0, TIMESTAMPDIFF(MICROSECOND, NOW(6), (SELECT "
             "MIN(`next_retry_at`) FROM %s WHERE `status` = 'RETRY'))), "
             "IF(EXISTS(SELECT 1 FROM %s WHERE `status` = 'PENDING'), NULL, "
             "TIMESTAMPDIFF(MICROSECOND, NOW(6), (SELECT MIN(`locked_until`) "
             "FROM %s WHERE `status` = 'PROCESSING'))), @@global.read_only",
             st->table, st->table, st->table, st->table);
    MYSQL_RES *res = run_select(st, "claim", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    bool retry = r != NULL && r[0] != NULL, lease = r != NULL && r[1] != NULL;
    long long retry_us = retry ? strtoll(r[0], NULL, 10) : 0;
    long long lease_us = lease ? strtoll(r[1], NULL, 10) : 0;
    bool ro = r != NULL && r[2] != NULL && strcmp(r[2], "0") != 0;
    mysql_free_result(res);
    if (ro && !st->allow_read_only)
        return refuse_read_only(st, err, errlen);
    /* A lease that ran out is what the claim's look for them finds. */
    if (lease && lease_us <= 0)
        st->expired_none_ms = 0;
    *now = (retry && retry_us <= 0) || (lease && lease_us <= 0);
    uint64_t due = UINT64_MAX;
    if (retry && retry_us > 0)
        due = (uint64_t)(retry_us + 999) / 1000;
    if (lease && lease_us > 0 && (uint64_t)(lease_us + 999) / 1000 < due)
        due = (uint64_t)(lease_us + 999) / 1000;
    *due_in_ms = due;
    return 0;
}

static int
claim_once(struct store *st, const char *relay_id, struct outbox_batch *b,
           char *err, size_t errlen)
{
    bool now = true;
    if (st->probe_first && probe(st, &now, &b->due_in_ms, err, errlen) < 0)
        return -1;
    if (!now)
        return db_commit(st, "claim", err, errlen);
    make_token(st, b->token, relay_id);
    st->nheads = 0;
    st->cut_short = false;
    st->seen_bytes = st->seen_rows = 0;
    size_t cap = st->ob->batch_size ? st->ob->batch_size : 1;
    if (expired_look_due(st) && claim_expired(st, b, cap, err, errlen) < 0)
        return -1;
    if (b->n > 0) {
        b->candidates = cap; /* cut short on purpose: claim again at once */
    } else {
        for (int s = SRC_RETRY; s < SRC_COUNT && b->n < cap && !st->cut_short;
             s++)
            if (fetch_candidates(st, b, s, cap - b->n, err, errlen) < 0)
                return -1;
        /* Cut by bytes or by the window: claim again at once. */
        b->candidates = st->cut_short ? cap : b->n;
        if (filter_candidates(st, b, err, errlen) < 0)
            return -1;
    }
    note_row_bytes(st);
    if (b->n > 0 && st->dup_check == DUP_INDEXED &&
        find_duplicates(st, b, err, errlen) < 0)
        return -1;
    if (b->n > 0 && mark_claimed(st, b, err, errlen) < 0)
        return -1;
    /* Even an empty claim commits: it ends the read and frees the MDL. */
    return db_commit(st, "claim", err, errlen);
}

/*
 * An ALTER TABLE does not end the session, yet the claim leans on what
 * the last check read: the columns' collations (whether bytes alone may
 * judge which candidates share an aggregate), the primary key, the
 * indexes, the privileges.  So a claim checks the table again every
 * SCHEMA_RECHECK_MS.  A failed check leaves the store not ready, as at
 * connect: the next store_connect checks again and names what is wrong.
 */
static int
refresh_schema(struct store *st, char *err, size_t errlen)
{
    if (!st->schema_stale &&
        clock_ms() - st->schema_checked_ms < SCHEMA_RECHECK_MS)
        return 0;
    if (check_schema(st, err, errlen) == 0)
        return 0;
    db_rollback(st);
    st->ready = false;
    return -1;
}

void
store_recheck_schema(struct store *st)
{
    st->schema_stale = true;
}

int
store_claim_batch(struct store *st, const char *relay_id,
                  struct outbox_batch *b, char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        batch_reset(b);
        if (require_ready(st, "claim", err, errlen) < 0 ||
            (attempt == 1 && refresh_schema(st, err, errlen) < 0))
            return -1;
        st->last_errno = 0;
        if (claim_once(st, relay_id, b, err, errlen) == 0) {
            st->probe_first = b->n == 0;
            return 0;
        }
        db_rollback(st);
        batch_reset(b);
        if (attempt == STORE_ATTEMPTS || !is_lock_errno(st->last_errno))
            return -1;
    }
}

/* ---- finalize ---- */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return len;
}

/*
 * Error text as last_error can store it: at most error_chars characters,
 * anything invalid or outside the column's character set as '?'.  A
 * strict sql_mode would otherwise fail the whole finalize on one byte.
 */
static const char *
clean_text(struct store *st, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), max = (size_t)st->error_chars * 4;
    st->text = grow(st->text, &st->text_cap, (n < max ? n : max) + 1, 1);
    size_t out = 0, i = 0;
    for (unsigned chars = 0; i < n && chars < st->error_chars; chars++) {
        size_t len = utf8_len(s + i, n - i);
        bool fits =
            len == 1 || (len > 1 && st->error_charset != TEXT_ASCII &&
                         (len < 4 || st->error_charset == TEXT_UTF8MB4));
        if (fits)
            memcpy(st->text + out, s + i, len);
        else
            st->text[out] = '?';
        out += fits ? len : 1;
        i += len ? len : 1;
    }
    st->text[out] = '\0';
    return st->text;
}

static enum fin_kind
classify(const struct store *st, const struct outbox_row *row,
         const char **error)
{
    *error = NULL;
    switch (row->state) {
    case ROW_ACKED:
        return FIN_SENT;
    case ROW_FAILED:
    case ROW_REJECTED:
        *error = row->error ? row->error : "failed (no reason given)";
        return row->dead ? FIN_DEAD : FIN_RETRY;
    case ROW_PUBLISHED:
        /* Outcome unknown: it may have landed; at-least-once retries it. */
        *error = "no publisher confirm received";
        return row->retry_count + 1 > st->ob->max_retries ? FIN_DEAD
                                                          : FIN_RETRY;
    default: /* CLAIMED or RELEASED: never attempted */
        return FIN_RELEASE;
    }
}

static int
item_cmp(const void *a, const void *b)
{
    const struct fin_item *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    int c = str_cmp_null(x->error, y->error);
    return c != 0 ? c : (x->id < y->id ? -1 : x->id > y->id);
}

static bool
same_group(const struct fin_item *x, const struct fin_item *y)
{
    return x->kind == y->kind && str_cmp_null(x->error, y->error) == 0;
}

/* The statement's head, up to "WHERE `id` IN (". */
static void
add_outcome_head(struct store *st, const struct fin_item *it)
{
    struct sqlbuf *q = &st->sql;
    const struct outbox_config *ob = st->ob;
    if (it->kind == FIN_SENT && ob->on_sent == ON_SENT_DELETE) {
        sql_addf(q, "DELETE FROM %s WHERE `id` IN (", st->table);
        return;
    }
    sql_addf(q, "UPDATE %s SET ", st->table);
    switch (it->kind) {
    case FIN_SENT:
        sql_addf(q, "`status` = 'SENT', `sent_at` = NOW(6), "
                    "`last_error` = NULL");
        break;
    case FIN_RETRY:
        /* Doubling per attempt, capped, with jitter in [half, full] so
         * that relays do not retry in step; next_retry_at is assigned
         * before retry_count changes (see mark_claimed). */
        sql_addf(q,
                 "`status` = 'RETRY', `next_retry_at` = NOW(6) + INTERVAL "
                 "FLOOR(LEAST(%" PRIu64 " * POW(2, LEAST(`retry_count`, 40)), "
                 "%" PRIu64 ") * (0.5 + RAND() * 0.5)) MICROSECOND, "
                 "`last_error` = ",
                 ob->backoff_initial_ms * 1000, ob->backoff_max_ms * 1000);
        sql_add_string(st, clean_text(st, it->error));
        sql_addf(q, ", `retry_count` = `retry_count` + 1");
        break;
    case FIN_DEAD:
        sql_addf(q, "`status` = 'DEAD', `next_retry_at` = NULL, "
                    "`last_error` = ");
        sql_add_string(st, clean_text(st, it->error));
        sql_addf(q, ", `retry_count` = `retry_count` + 1");
        break;
    case FIN_RELEASE:
        /* No attempt counted; a row that has failed before goes back to
         * RETRY, due now. */
        sql_addf(q, "`next_retry_at` = IF(`retry_count` > 0, NOW(6), NULL), "
                    "`status` = IF(`retry_count` > 0, 'RETRY', 'PENDING')");
        break;
    }
    sql_addf(q, ", `locked_by` = NULL, `locked_until` = NULL "
                "WHERE `id` IN (");
}

/* One statement for a run of items with the same outcome and error. */
static int
finalize_group(struct store *st, const char *token, const struct fin_item *it,
               size_t n, size_t *lost, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    add_outcome_head(st, it);
    for (size_t i = 0; i < n; i++)
        sql_add_id(q, it[i].id, i == 0);
    /* The fence: only rows still under this claim's lease. */
    sql_addf(q, ") AND `status` = 'PROCESSING' AND `locked_by` = ");
    sql_add_string(st, token);
    uint64_t affected;
    if (run_update(st, "finalize", &affected, err, errlen) < 0)
        return -1;
    *lost += affected < n ? n - (size_t)affected : 0;
    return 0;
}

static int
finalize_once(struct store *st, struct outbox_batch *b, size_t n, size_t *lost,
              char *err, size_t errlen)
{
    *lost = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && same_group(&st->items[i], &st->items[j]); j++)
            ;
        if (finalize_group(st, b->token, &st->items[i], j - i, lost, err,
                           errlen) < 0)
            return -1;
    }
    return db_commit(st, "finalize", err, errlen);
}

/* Records the n outcomes in st->items, retried on a deadlock. */
static int
finalize_items(struct store *st, struct outbox_batch *b, size_t n, size_t *lost,
               char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        if (require_session(st, "finalize", err, errlen) < 0)
            return -1;
        st->last_errno = 0;
        if (finalize_once(st, b, n, lost, err, errlen) == 0)
            return 0;
        db_rollback(st);
        *lost = 0;
        if (attempt == STORE_ATTEMPTS || !is_lock_errno(st->last_errno))
            return -1;
    }
}

int
store_finalize_batch(struct store *st, struct outbox_batch *b, size_t *lost,
                     char *err, size_t errlen)
{
    *lost = 0;
    st->items = grow(st->items, &st->items_cap, b->n, sizeof(*st->items));
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->rows[i].recorded)
            continue; /* store_mark_sent did it */
        st->items[n].kind = classify(st, &b->rows[i], &st->items[n].error);
        st->items[n++].id = b->rows[i].id;
    }
    if (n == 0)
        return 0;
    qsort(st->items, n, sizeof(*st->items), item_cmp);
    return finalize_items(st, b, n, lost, err, errlen);
}

int
store_mark_sent(struct store *st, struct outbox_batch *b,
                struct outbox_row **rows, size_t n, size_t *lost, char *err,
                size_t errlen)
{
    *lost = 0;
    if (n == 0)
        return 0;
    st->items = grow(st->items, &st->items_cap, n, sizeof(*st->items));
    for (size_t i = 0; i < n; i++)
        st->items[i] = (struct fin_item){.kind = FIN_SENT, .id = rows[i]->id};
    if (finalize_items(st, b, n, lost, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        rows[i]->recorded = true;
    return 0;
}

/* ---- retention ---- */

/* One step of the walk: the rows read, the expired among them. */
struct purge_step {
    size_t seen, expired;
    uint64_t last_id;
    bool last_young; /* the last row read was created after the cutoff */
    bool capped;     /* stopped at the cap: the walk is not over */
};

/* Evaluated per statement: each one is exact at its own time. */
static void
sql_add_cutoff(struct sqlbuf *q, uint64_t older_than_ms)
{
    sql_addf(q, "NOW(6) - INTERVAL %" PRIu64 " MICROSECOND",
             older_than_ms * 1000);
}

/*
 * The next batch rows by primary key, read without locks.  The walk is
 * bounded by batch whatever the indexes: a DELETE ... WHERE status =
 * 'SENT' AND sent_at < ... LIMIT n reads every younger SENT row when
 * fewer than n are old, which is the whole retention window.
 */
static int
purge_scan(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, "SELECT `id`, `status` = 'SENT' AND `sent_at` < ");
    sql_add_cutoff(q, older_than_ms);
    sql_addf(q, ", `created_at` >= ");
    sql_add_cutoff(q, older_than_ms);
    sql_addf(q, " FROM %s WHERE `id` > %" PRIu64 " ORDER BY `id` LIMIT %u",
             st->table, st->purge_from, batch);
    MYSQL_RES *res = run_select(st, "retention", err, errlen);
    if (res == NULL)
        return -1;
    st->purge_ids =
        grow(st->purge_ids, &st->purge_cap, batch, sizeof(*st->purge_ids));
    MYSQL_ROW r;
    while ((r = mysql_fetch_row(res)) != NULL) {
        /* The rows after the cap are read again by the next step. */
        if (ps->expired == cap) {
            ps->capped = true;
            break;
        }
        ps->last_id = strtoull(r[0], NULL, 10);
        ps->last_young = r[2] != NULL && r[2][0] == '1';
        if (r[1] != NULL && r[1][0] == '1')
            st->purge_ids[ps->expired++] = ps->last_id;
        ps->seen++;
    }
    mysql_free_result(res);
    return 0;
}

/* By primary key, the condition checked again: locks exactly these rows,
 * none that a claim could want. */
static int
purge_delete(struct store *st, uint64_t older_than_ms, size_t n,
             uint64_t *deleted, char *err, size_t errlen)
{
    struct sqlbuf *q = &st->sql;
    sql_reset(q);
    sql_addf(q, "DELETE FROM %s WHERE `id` IN (", st->table);
    for (size_t i = 0; i < n; i++)
        sql_add_id(q, st->purge_ids[i], i == 0);
    sql_addf(q, ") AND `status` = 'SENT' AND `sent_at` < ");
    sql_add_cutoff(q, older_than_ms);
    return run_update(st, "retention", deleted, err, errlen);
}

static int
purge_once(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, uint64_t *deleted, char *err, size_t errlen)
{
    memset(ps, 0, sizeof(*ps));
    *deleted = 0;
    if (purge_scan(st, older_than_ms, batch, cap, ps, err, errlen) < 0)
        return -1;
    if (ps->expired > 0 &&
        purge_delete(st, older_than_ms, ps->expired, deleted, err, errlen) < 0)
        return -1;
    /* Even a step that deleted nothing commits: it ends the read. */
    return db_commit(st, "retention", err, errlen);
}

/*
 * A relay user without the DELETE privilege is a choice, not a broken
 * table: the relay keeps running and only retention reports it.
 */
static void
purge_fail(struct store *st, char *err, size_t errlen)
{
    db_rollback(st);
    if (st->last_errno != ERRNO_TABLE_ACCESS_DENIED || st->db == NULL)
        return;
    st->ready = true;
    st->schema_error = false;
    size_t len = err != NULL ? strlen(err) : errlen;
    if (len + 1 < errlen)
        err_set(err + len, errlen - len,
                "; grant DELETE on %s or set retention.sent to 0s", st->where);
}

static int
purge_step(struct store *st, uint64_t older_than_ms, unsigned batch, size_t cap,
           struct purge_step *ps, uint64_t *deleted, char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        if (require_ready(st, "retention", err, errlen) < 0)
            return -1;
        st->last_errno = 0;
        if (purge_once(st, older_than_ms, batch, cap, ps, deleted, err,
                       errlen) == 0)
            return 0;
        purge_fail(st, err, errlen);
        if (attempt == STORE_ATTEMPTS || !is_lock_errno(st->last_errno))
            return -1;
    }
}

/* One step of the walk and where the next one starts; res adds up. */
static int
purge_advance(struct store *st, uint64_t older_than_ms, unsigned batch,
              size_t cap, struct store_purge *res, char *err, size_t errlen)
{
    struct purge_step ps;
    uint64_t deleted;
    if (purge_step(st, older_than_ms, batch, cap, &ps, &deleted, err, errlen) <
        0)
        return -1;
    res->deleted += deleted;
    res->batches += deleted > 0;
    res->examined += ps.seen;
    /* Rows created after the cutoff were sent after it too; ids and
     * created_at rise together, so the rest is younger still.  What an
     * out-of-order created_at hides now, the next walk finds. */
    if (!ps.capped && (ps.seen < batch || ps.last_young)) {
        st->purge_from = 0;
        res->done = true;
    } else {
        st->purge_from = ps.last_id;
    }
    return 0;
}

int
store_purge_sent(struct store *st, uint64_t older_than_ms, unsigned batch,
                 uint64_t deadline_ms, struct store_purge *res, char *err,
                 size_t errlen)
{
    memset(res, 0, sizeof(*res));
    batch = batch ? batch : 1;
    while (!res->done) {
        if (purge_advance(st, older_than_ms, batch, batch, res, err, errlen) <
            0)
            return -1;
        if (!res->done && deadline_ms != 0 && clock_ms() >= deadline_ms)
            return 0;
    }
    return 0;
}

int
store_purge_sent_step(struct store *st, uint64_t older_than_ms, unsigned batch,
                      uint64_t max, struct store_purge *res, char *err,
                      size_t errlen)
{
    batch = batch ? batch : 1;
    size_t cap = max != 0 && max < batch ? (size_t)max : batch;
    return purge_advance(st, older_than_ms, batch, cap, res, err, errlen);
}
