/*
 * store_schema: the schema check (columns, their sizes and collations,
 * privileges, indexes) and the claim plan it derives: the claim order,
 * the duplicate check, the retry index and the claim's statements.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "schema_cache.h"
#include "store_checks.h"
#include "store_int.h"

/* How often a claim reads the table's definition again: see
 * store_refresh_schema. */
#define SCHEMA_RECHECK_MS 60000

static const char *const required_columns[] = {
    "id",           "event_id",     "aggregate_type",
    "aggregate_id", "event_type",   "payload",
    "status",       "retry_count",  "next_retry_at",
    "locked_by",    "locked_until", "created_at",
    "sent_at",      "last_error"};
#define NREQUIRED (sizeof(required_columns) / sizeof(required_columns[0]))

static const char *const optional_columns[NOPTIONAL] = {
    "headers", "trace_id", "traceparent", "expires_at"};

/* The select lists of load_schema_rows' two reads, by position. */
enum {
    INFO_COLUMN_NAME,
    INFO_MAX_LENGTH,
    INFO_CHARSET,
    INFO_GENERATION,
    INFO_COLLATION
};
enum { STAT_INDEX_NAME, STAT_COLUMN_NAME, STAT_SUB_PART, STAT_NON_UNIQUE };

/* The table as found by the schema check. */
struct schema {
    bool required[NREQUIRED];
    bool optional[NOPTIONAL];
    bool *extra; /* outbox_config.columns found */
    unsigned locked_by_len, last_error_len;
    enum text_charset last_error_charset;
    unsigned ncolumns;
    int id_column;          /* its position, 0 for the first; -1: none */
    bool unfinished;        /* the generated column sql/outbox.sql defines */
    const char **generated; /* generated columns' names (in the result) */
    size_t ngenerated;
    bool held;                 /* and its `held`, for on_dead: hold */
    bool available_at;         /* optional: read by the claim's conditions */
    unsigned binary_aggregate; /* aggregate columns with a _bin collation */
};

enum text_charset
store_parse_charset(const char *name)
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
bool
store_is_unfinished_expression(const char *expr)
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
bool
store_is_binary_collation(const char *collation)
{
    size_t len = collation != NULL ? strlen(collation) : 0;
    return len > 4 && strcmp(collation + len - 4, "_bin") == 0;
}

static void
note_column(const struct store *st, struct schema *sc, MYSQL_ROW r)
{
    const char *name = r[INFO_COLUMN_NAME] ? r[INFO_COLUMN_NAME] : "";
    const char *max = r[INFO_MAX_LENGTH];
    unsigned len = max ? (unsigned)strtoul(max, NULL, 10) : 0;
    if (strcasecmp(name, "id") == 0)
        sc->id_column = (int)sc->ncolumns;
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
        sc->last_error_charset = store_parse_charset(r[INFO_CHARSET]);
    }
    if (strcasecmp(name, "available_at") == 0)
        sc->available_at = true;
    if (strcasecmp(name, "unfinished") == 0)
        sc->unfinished = store_is_unfinished_expression(r[INFO_GENERATION]);
    if (r[INFO_GENERATION] != NULL && r[INFO_GENERATION][0] != '\0')
        sc->generated[sc->ngenerated++] = xstrdup(name);
    if (strcasecmp(name, "held") == 0)
        sc->held = store_is_held_expression(r[INFO_GENERATION]);
    if ((strcasecmp(name, "aggregate_type") == 0 ||
         strcasecmp(name, "aggregate_id") == 0) &&
        store_is_binary_collation(r[INFO_COLLATION]))
        sc->binary_aggregate++;
}

static void
note_columns(const struct store *st, struct schema *sc,
             const struct text_rows *columns)
{
    sc->generated = xcalloc(columns->nrows + 1, sizeof(char *));
    for (size_t i = 0; i < columns->nrows; i++)
        note_column(st, sc, text_rows_row(columns, i));
}

/* One information_schema read of the table, its rows copied. */
static int
read_info_rows(struct store *st, const char *select_from, const char *order,
               struct text_rows *out, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_adds(q, select_from);
    strbuf_adds(q, " WHERE TABLE_SCHEMA = ");
    sql_add_schema(st);
    strbuf_adds(q, " AND TABLE_NAME = ");
    sql_add_string(st, st->ob->table);
    strbuf_adds(q, order);
    MYSQL_RES *res = store_run_select(st, "schema check", err, errlen);
    if (res == NULL)
        return -1;
    text_rows_load(out, res);
    mysql_free_result(res);
    return 0;
}

/*
 * The columns and indexes, from information_schema unless the session's
 * stores read them for this definition already: each read builds a
 * temporary table in the server (COLUMNS an on-disk one, for its
 * LONGTEXT columns), 1.2 and 0.35 ms of its CPU, for every tenant at start
 * and again at every recheck.  own holds what was read here.
 */
static int
load_schema_rows(struct store *st, const char *key, struct schema_rows *own,
                 const struct schema_rows **rows, char *err, size_t errlen)
{
    *rows = schema_cache_find(dbsession_schema_cache(st->conn.sess), key);
    if (*rows != NULL)
        return 0;
    *rows = own;
    if (read_info_rows(st,
                       "SELECT COLUMN_NAME, CHARACTER_MAXIMUM_LENGTH, "
                       "CHARACTER_SET_NAME, GENERATION_EXPRESSION, "
                       "COLLATION_NAME FROM information_schema.COLUMNS",
                       " ORDER BY ORDINAL_POSITION", &own->columns, err,
                       errlen) < 0)
        return -1;
    return read_info_rows(st,
                          "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART, "
                          "NON_UNIQUE FROM information_schema.STATISTICS",
                          " ORDER BY INDEX_NAME, SEQ_IN_INDEX", &own->indexes,
                          err, errlen);
}

/*
 * SHOW CREATE TABLE: the definition, for the cache's key and the CHECK
 * verdict.  1 when the server says the table is missing or not the
 * user's to read.
 */
static int
read_definition(struct store *st, struct strbuf *create, char *err,
                size_t errlen)
{
    strbuf_reset(create);
    strbuf_reset(&st->sql);
    strbuf_addf(&st->sql, "SHOW CREATE TABLE %s", st->table);
    MYSQL_RES *res = store_run_select(st, "schema check", err, errlen);
    if (res == NULL)
        return st->conn.last_errno == ERRNO_NO_SUCH_TABLE ||
                       st->conn.last_errno == ERRNO_TABLE_ACCESS_DENIED
                   ? 1
                   : -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    if (r != NULL && mysql_num_fields(res) > 1 && r[1] != NULL)
        strbuf_adds(create, r[1]);
    mysql_free_result(res);
    return 0;
}

/* The table's UPDATE triggers, counted: 1 when it has any. */
static int
count_update_triggers(struct store *st, char *err, size_t errlen)
{
    strbuf_reset(&st->sql);
    strbuf_adds(&st->sql, "SELECT COUNT(*) FROM information_schema.TRIGGERS "
                          "WHERE EVENT_MANIPULATION = 'UPDATE' AND "
                          "EVENT_OBJECT_SCHEMA = ");
    sql_add_schema(st);
    strbuf_adds(&st->sql, " AND EVENT_OBJECT_TABLE = ");
    sql_add_string(st, st->ob->table);
    MYSQL_RES *res = store_run_select(st, "schema check", err, errlen);
    if (res == NULL)
        return -1;
    MYSQL_ROW r = mysql_fetch_row(res);
    int some = r == NULL || r[0] == NULL || strcmp(r[0], "0") != 0;
    mysql_free_result(res);
    return some;
}

/* The table's CHECK constraints, judged (store_checks.h); an UPDATE
 * trigger would run under the session's setting too: none skipped then. */
static int
judge_checks(struct store *st, const struct schema *sc, const char *create,
             enum store_checks *verdict, char *err, size_t errlen)
{
    *verdict = store_checks_judge(create, sc->generated, sc->ngenerated);
    if (*verdict != CHECKS_SKIPPABLE)
        return 0;
    int triggers = count_update_triggers(st, err, errlen);
    if (triggers < 0)
        return -1;
    if (triggers > 0)
        *verdict = CHECKS_NEEDED;
    return 0;
}

/*
 * MariaDB evaluates every CHECK constraint of a table on every UPDATE:
 * with sql/outbox.sql's JSON payload each status change parses the
 * payload again (3,000 updates of 64 KiB rows: 1.05 s, against 0.13 s
 * without).  When no constraint can change its verdict under the
 * store's updates, the session stops evaluating them; a constraint
 * added later that could is seen at the next check, which turns them
 * back on.  MySQL has no such setting (and its JSON type is checked on
 * write only).
 */
static int
set_check_constraints(struct store *st, const struct schema *sc,
                      const char *create, char *err, size_t errlen)
{
    if (!dbsession_is_mariadb(st->conn.sess))
        return 0;
    enum store_checks verdict;
    if (judge_checks(st, sc, create, &verdict, err, errlen) < 0)
        return -1;
    st->conn.checks_off = verdict == CHECKS_SKIPPABLE;
    /* Set now, as the verdict's store will write next; another store's
     * statements set the session to theirs (store_sql.c, sync_checks). */
    if (dbsession_checks_off(st->conn.sess) == st->conn.checks_off)
        return 0;
    st->conn.statements++;
    if (dbsession_set_checks_off(st->conn.sess, st->conn.checks_off) != 0)
        return store_fail(st, "schema check", err, errlen);
    return 0;
}

/* Names every missing column in one message. */
static int
report_missing(struct store *st, const struct schema *sc, char *err,
               size_t errlen)
{
    struct strbuf msg = {0};
    strbuf_reset(&msg);
    for (size_t i = 0; i < NREQUIRED; i++)
        if (!sc->required[i])
            strbuf_addf(&msg, "%s%s", msg.len ? ", " : "", required_columns[i]);
    for (size_t i = 0; i < st->ob->ncolumns; i++)
        if (!sc->extra[i])
            strbuf_addf(&msg, "%s%s (named in the config)", msg.len ? ", " : "",
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
    strbuf_free(&msg);
    return rc;
}

static bool
ident_eq(const char *a, const char *b)
{
    return a != NULL && strcasecmp(a, b) == 0;
}

/* Where the index that starts at ix[i] ends. */
static size_t
index_end(const struct index_column *ix, size_t n, size_t i)
{
    size_t j = i + 1;
    while (j < n && strcmp(ix[j].index, ix[i].index) == 0)
        j++;
    return j;
}

/* A whole column, not an expression or a prefix of one. */
static bool
whole_column(const struct index_column *c, const char *name)
{
    return ident_eq(c->column, name) && !c->prefix;
}

/* An index on (status) or (status, id) walks each status in id order. */
static bool
orders_by_id(const struct index_column *ix, size_t i, size_t j)
{
    return j == i + 1 || ident_eq(ix[i + 1].column, "id");
}

/* "`c1`, `c2`, `id`": the index's order after status; NULL if unusable. */
static char *
index_order(const struct index_column *ix, size_t i, size_t j)
{
    struct strbuf order = {0};
    strbuf_reset(&order);
    for (size_t k = i + 1; k < j && !ident_eq(ix[k].column, "id"); k++) {
        if (ix[k].column == NULL || ix[k].prefix) {
            strbuf_free(&order); /* an expression or a prefix: no order */
            return NULL;
        }
        sql_add_ident(&order, ix[k].column);
        strbuf_adds(&order, ", ");
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
char *
store_pick_claim_order(const struct index_column *ix, size_t n)
{
    char *best = NULL;
    for (size_t i = 0, j; i < n; i = j) {
        j = index_end(ix, n, i);
        if (!whole_column(&ix[i], "status"))
            continue;
        if (orders_by_id(ix, i, j)) {
            free(best);
            return xstrdup("`id`");
        }
        if (best == NULL)
            best = index_order(ix, i, j);
    }
    return best != NULL ? best : xstrdup("`id`");
}

enum dup_check
store_pick_dup_check(const struct index_column *ix, size_t n)
{
    enum dup_check check = DUP_UNINDEXED;
    for (size_t i = 0, j; i < n; i = j) {
        j = index_end(ix, n, i);
        if (!whole_column(&ix[i], "event_id"))
            continue;
        if (j == i + 1 && ix[i].unique)
            return DUP_IMPOSSIBLE;
        check = DUP_INDEXED;
    }
    return check;
}

/* See build_claim_sql. */
char *
store_pick_retry_index(const struct index_column *ix, size_t n)
{
    for (size_t i = 0; i < n; i = index_end(ix, n, i)) {
        if (whole_column(&ix[i], "next_retry_at")) {
            struct strbuf q = {0};
            strbuf_reset(&q);
            sql_add_ident(&q, ix[i].index);
            return q.p;
        }
    }
    return NULL;
}

/* See source_index: (status, available_at, id) holds the undelayed rows
 * in id order and the delayed ones in available_at order. */
char *
store_pick_delay_index(const struct index_column *ix, size_t n)
{
    for (size_t i = 0, j; i < n; i = j) {
        j = index_end(ix, n, i);
        if (j < i + 2 || !whole_column(&ix[i], "status") ||
            !whole_column(&ix[i + 1], "available_at"))
            continue;
        if (j == i + 2 || ident_eq(ix[i + 2].column, "id")) {
            struct strbuf q = {0};
            strbuf_reset(&q);
            sql_add_ident(&q, ix[i].index);
            return q.p;
        }
    }
    return NULL;
}

bool
store_pick_id_primary(const struct index_column *ix, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ix[i].index, "PRIMARY") == 0)
            return ident_eq(ix[i].column, "id");
    return false;
}

/* The rows as the planners take them, pointing into t. */
static struct index_column *
read_indexes(const struct text_rows *t)
{
    struct index_column *ix = xcalloc(t->nrows + 1, sizeof(*ix));
    for (size_t i = 0; i < t->nrows; i++) {
        char **r = text_rows_row(t, i);
        const char *non_unique = r[STAT_NON_UNIQUE];
        ix[i] = (struct index_column){
            .index = r[STAT_INDEX_NAME] ? r[STAT_INDEX_NAME] : "",
            .column = r[STAT_COLUMN_NAME],
            .prefix = r[STAT_SUB_PART] != NULL,
            .unique = non_unique != NULL && strcmp(non_unique, "0") == 0,
        };
    }
    return ix;
}

/* The plan's index choices; returns the claim order. */
static char *
pick_indexes(struct store *st, const struct text_rows *indexes)
{
    size_t n = indexes->nrows;
    struct index_column *ix = read_indexes(indexes);
    st->plan.dup_check = store_pick_dup_check(ix, n);
    free(st->plan.retry_index);
    st->plan.retry_index = store_pick_retry_index(ix, n);
    free(st->plan.delay_index);
    st->plan.delay_index = store_pick_delay_index(ix, n);
    st->plan.id_primary = store_pick_id_primary(ix, n);
    char *order = store_pick_claim_order(ix, n);
    free(ix);
    return order;
}

/*
 * One optional column of the select list; returns the places it takes.
 * expires_at is judged by the database clock, so that the relay host's
 * clock never matters (docs/contract.md section 6): the claim reads the
 * time left, and the time itself for the error text (the session is UTC).
 */
static int
add_optional_column(struct strbuf *q, size_t i)
{
    if (i == OPT_EXPIRES_AT) {
        strbuf_adds(q, ", TIMESTAMPDIFF(MICROSECOND, NOW(6), `expires_at`), "
                       "DATE_FORMAT(`expires_at`, '%Y-%m-%d %H:%i:%s.%f')");
        return 2;
    }
    strbuf_adds(q, ", ");
    sql_add_ident(q, optional_columns[i]);
    return 1;
}

/* The claim's select list: fixed columns, optional ones present, config's. */
static void
add_select_list(struct store *st, const struct schema *sc, struct strbuf *q)
{
    strbuf_adds(q, "SELECT `id`, `event_id`, `aggregate_type`, "
                   "`aggregate_id`, `event_type`, `payload`, "
                   "UNIX_TIMESTAMP(`created_at`), `retry_count`");
    int pos = COL_FIXED;
    for (size_t i = 0; i < NOPTIONAL; i++) {
        st->plan.pos_optional[i] = sc->optional[i] ? pos : -1;
        if (sc->optional[i])
            pos += add_optional_column(q, i);
    }
    st->plan.pos_columns = pos;
    for (size_t i = 0; i < st->ob->ncolumns; i++) {
        strbuf_adds(q, ", ");
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
 * An earlier event that holds its aggregate for a while, on alias a: a
 * RETRY backing off, or a PENDING row delayed until a later available_at
 * (docs/contract.md section 5): a million delayed aggregates would
 * otherwise fill every claim with their successors.
 */
static char *
held_cond(const struct store *st, const char *a)
{
    char *retry = xasprintf(
        "`%s`.`status` = 'RETRY' AND `%s`.`next_retry_at` > NOW(6)", a, a);
    if (!st->plan.available_at)
        return retry;
    char *cond = xasprintf("((%s) OR (`%s`.`status` = 'PENDING' AND "
                           "`%s`.`available_at` > NOW(6)))",
                           retry, a, a);
    free(retry);
    return cond;
}

/*
 * With ordering: aggregate, a candidate whose aggregate has an earlier
 * event backing off in RETRY, or delayed, cannot be kept: skip it in the
 * read itself (with the unfinished column, when that event is the
 * aggregate's first unfinished one: a read of one index entry, where
 * looking for any held RETRY row would scan every unfinished event of
 * the aggregate).
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
    char *held = held_cond(st, st->plan.unfinished ? "h" : "p");
    char *filter;
    if (st->plan.unfinished) {
        char *first = first_unfinished_sql(st);
        filter = xasprintf(" AND NOT EXISTS (SELECT 1 FROM %s `h` WHERE "
                           "`h`.`id` = %s AND `h`.`id` < `c`.`id` AND %s)",
                           st->table, first, held);
        free(first);
    } else {
        filter = xasprintf(
            " AND NOT EXISTS (SELECT 1 FROM %s `p` WHERE "
            "`p`.`aggregate_type` = `c`.`aggregate_type` AND "
            "`p`.`aggregate_id` = `c`.`aggregate_id` AND `p`.`id` < `c`.`id` "
            "AND %s)",
            st->table, held);
    }
    free(held);
    return filter;
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
    if (!st->plan.unfinished)
        return NULL;
    char *first = first_unfinished_sql(st);
    char *head = xasprintf(", %s = `c`.`id`", first);
    free(first);
    return head;
}

/* "Not yet SENT or DEAD", by the generated column where it is trusted. */
const char *
store_unfinished_cond(const struct store *st)
{
    return st->plan.unfinished
               ? "`unfinished` = 1"
               : "`status` IN ('PENDING', 'RETRY', 'PROCESSING')";
}

/* The exact count's statement up to its subquery's end: see
 * load_earlier_counts_exact.  Committed state, read without locks. */
static char *
build_count_sql(const struct store *st)
{
    char *hold = store_hold_count_term(st);
    char *sql =
        xasprintf("SELECT c.`id`, (SELECT COUNT(*) FROM %s p "
                  "WHERE p.`aggregate_type` = c.`aggregate_type` "
                  "AND p.`aggregate_id` = c.`aggregate_id` AND p.`id` < c.`id` "
                  "AND p.%s)%s FROM %s c WHERE c.`id` IN (",
                  st->table, store_unfinished_cond(st), hold, st->table);
    free(hold);
    return sql;
}

/*
 * Each source's condition: on a table with available_at, PENDING splits
 * into the undelayed rows and the delayed ones that are due, as RETRY
 * rows are taken only when due.
 */
static void
set_claim_conds(struct store *st)
{
    for (int s = 0; s < SRC_COUNT; s++)
        st->plan.claim_cond[s] = store_claim_cond[s];
    if (!st->plan.available_at)
        st->plan.claim_cond[SRC_DELAYED] = NULL;
    else
        st->plan.claim_cond[SRC_PENDING] = store_undelayed_cond;
}

/*
 * Due retries are read in next_retry_at order.  On an index led by
 * next_retry_at (sql/outbox.sql's, which only RETRY rows fill) the
 * optimizer would rather take (status, id) and sort, which locks every
 * due RETRY row before LIMIT: the index is forced.  So is the index on
 * (status, available_at, id) for the PENDING rows of a table with
 * available_at: along (status, id), the undelayed claim would read every
 * delayed row of a lower id, and the delayed one every row not yet due.
 */
static const char *
source_index(const struct store *st, int s)
{
    if (s == SRC_RETRY)
        return st->plan.retry_index;
    if ((s == SRC_DELAYED || s == SRC_PENDING) && st->plan.available_at)
        return st->plan.delay_index;
    return NULL;
}

/* The order the source's index reads in; without that index, delayed
 * rows come in the claim's usual order, which no sort serves either. */
static const char *
source_order(const struct store *st, int s, const char *order)
{
    if (s == SRC_RETRY)
        return "`next_retry_at`";
    if (source_index(st, s) != NULL && s == SRC_DELAYED)
        return "`available_at`, `id`";
    if (source_index(st, s) != NULL && s == SRC_PENDING)
        return "`id`";
    return order;
}

static void
build_source_sql(struct store *st, int s, const char *order)
{
    free(st->plan.claim_where[s]);
    free(st->plan.claim_order[s]);
    st->plan.claim_where[s] = st->plan.claim_order[s] = NULL;
    if (st->plan.claim_cond[s] == NULL)
        return;
    struct strbuf q = {0};
    strbuf_reset(&q);
    const char *index = source_index(st, s);
    if (index != NULL)
        strbuf_addf(&q, " FORCE INDEX (%s)", index);
    strbuf_addf(&q, " WHERE %s", st->plan.claim_cond[s]);
    st->plan.claim_where[s] = q.p;
    st->plan.claim_order[s] =
        xasprintf(" ORDER BY %s", source_order(st, s, order));
}

static void
build_claim_sql(struct store *st, const struct schema *sc, const char *order)
{
    struct strbuf list = {0};
    strbuf_reset(&list);
    add_select_list(st, sc, &list);
    free(st->plan.select_list);
    st->plan.select_list = list.p;
    set_claim_conds(st);
    for (int s = 0; s < SRC_COUNT; s++)
        build_source_sql(st, s, order);
    free(st->plan.unblocked_sql);
    st->plan.unblocked_sql = store_hold_filter(st, build_unblocked_filter(st));
    free(st->plan.hold_sql);
    st->plan.hold_sql = store_hold_filter(st, xstrdup(""));
    free(st->plan.head_sql);
    st->plan.head_sql = build_head_sql(st);
    free(st->plan.count_sql);
    st->plan.count_sql = build_count_sql(st);
    store_join_plan_changed(st);
}

static void
apply_schema(struct store *st, const struct schema *sc, const char *order)
{
    st->plan.unfinished = sc->unfinished;
    store_hold_plan(st, sc->held);
    st->plan.available_at = sc->available_at;
    st->plan.binary_aggregate = sc->binary_aggregate == 2;
    build_claim_sql(st, sc, order);
    unsigned tok = sc->locked_by_len;
    st->plan.token_chars =
        tok < TOKEN_MAX_CHARS ? tok : (unsigned)TOKEN_MAX_CHARS;
    unsigned ec = sc->last_error_len;
    st->plan.error_chars =
        ec > 0 && ec < STORE_ERROR_CHARS ? ec : STORE_ERROR_CHARS;
    st->plan.error_charset = sc->last_error_charset;
    store_set_id_column(st, sc->id_column, sc->ncolumns);
}

void
store_set_id_column(struct store *st, int id_column, unsigned ncolumns)
{
    st->id_column = id_column;
    st->ncolumns = ncolumns;
}

int
store_id_column(const struct store *st, unsigned *ncolumns)
{
    *ncolumns = st->ncolumns;
    return st->id_column;
}

/* One EXPLAIN: the server checks the privilege and runs nothing. */
static int
check_privilege(struct store *st, const char *sql, const char *privilege,
                const char *needed_for, char *err, size_t errlen)
{
    struct strbuf *q = &st->sql;
    strbuf_reset(q);
    strbuf_addf(q, sql, st->table);
    MYSQL_RES *res = store_run_select(st, "privilege check", err, errlen);
    if (res != NULL) {
        mysql_free_result(res);
        return 0;
    }
    if (store_db(st) != NULL &&
        (st->conn.last_errno == ERRNO_TABLE_ACCESS_DENIED ||
         st->conn.last_errno == ERRNO_COLUMN_ACCESS_DENIED)) {
        char cause[ERR_LEN]; /* the server's own words, before err is set */
        str_copy(cause, mysql_error(store_db(st)), sizeof(cause));
        err_set(err, errlen,
                "user %s lacks the %s privilege on %s, needed %s (see "
                "sql/grants.sql): %s (error %u)",
                st->ob->database->user ? st->ob->database->user : "?",
                privilege, st->where, needed_for, cause, st->conn.last_errno);
    }
    /* The session stays open and idle after a failed check: the metadata
     * lock of an EXPLAIN that passed would hold off the operator's ALTER
     * TABLE until the transaction ends. */
    store_rollback(st);
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

static void
missing_table(struct store *st, char *err, size_t errlen)
{
    err_set(err, errlen, "table %s does not exist (or user %s may not read it)",
            st->where, st->ob->database->user ? st->ob->database->user : "?");
    st->conn.schema_error = true;
}

static int
check_schema(struct store *st, char *err, size_t errlen)
{
    struct schema sc = {0};
    sc.extra = xcalloc(st->ob->ncolumns + 1, sizeof(bool));
    sc.id_column = -1;
    struct strbuf create = {0}, key = {0};
    struct schema_rows own = {0};
    const struct schema_rows *rows = NULL;
    char *order = NULL;
    int rc = -1, found = read_definition(st, &create, err, errlen);
    if (found < 0)
        goto out;
    if (found == 0 && create.len > 0) {
        schema_definition_key(create.p, &key);
        if (load_schema_rows(st, key.p, &own, &rows, err, errlen) < 0)
            goto out;
        note_columns(st, &sc, &rows->columns);
    }
    if (sc.ncolumns == 0) {
        missing_table(st, err, errlen);
        goto out;
    }
    if (report_missing(st, &sc, err, errlen) < 0) {
        st->conn.schema_error = true;
        goto out;
    }
    if (check_privileges(st, err, errlen) < 0 ||
        set_check_constraints(st, &sc, create.p, err, errlen) < 0)
        goto out;
    order = pick_indexes(st, &rows->indexes);
    apply_schema(st, &sc, order);
    /* End the transaction the information_schema reads opened. */
    rc = store_commit(st, "schema check", err, errlen);
    if (rc == 0) {
        st->plan.schema_checked_ms = clock_ms();
        st->plan.schema_stale = false;
        if (rows == &own) /* for the session's next store of it */
            schema_cache_put(dbsession_schema_cache(st->conn.sess), key.p,
                             &own);
    }
out:
    free(order);
    free(sc.extra);
    for (size_t i = 0; i < sc.ngenerated; i++)
        free((char *)sc.generated[i]);
    free(sc.generated);
    text_rows_free(&own.columns);
    text_rows_free(&own.indexes);
    strbuf_free(&create);
    strbuf_free(&key);
    return rc;
}

/* The check's statements read only: they leave check_constraint_checks
 * as another store set it (sync_checks). */
int
store_check_schema(struct store *st, char *err, size_t errlen)
{
    st->conn.checking = true;
    int rc = check_schema(st, err, errlen);
    st->conn.checking = false;
    return rc;
}

/*
 * An ALTER TABLE does not end the session, yet the claim leans on what
 * the last check read: the columns' collations (whether bytes alone may
 * judge which candidates share an aggregate), the primary key, the
 * indexes, the privileges.  So a claim checks the table again every
 * SCHEMA_RECHECK_MS.  A failed check leaves the store not ready, as at
 * connect: the next store_connect checks again and names what is wrong.
 */
int
store_refresh_schema(struct store *st, char *err, size_t errlen)
{
    if (!st->plan.schema_stale &&
        clock_ms() - st->plan.schema_checked_ms < SCHEMA_RECHECK_MS)
        return 0;
    if (store_check_schema(st, err, errlen) == 0)
        return 0;
    store_rollback(st);
    st->conn.ready = false;
    return -1;
}

void
store_recheck_schema(struct store *st)
{
    st->plan.schema_stale = true;
}
