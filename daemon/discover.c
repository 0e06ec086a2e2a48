/*
 * discover: a database_like entry's tenants, asked of information_schema
 * on its server, and the concrete entry each of them gets: the
 * template's outboxes copied field by field, renamed for the schema.
 */
#include "discover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dbconn.h"
#include "util.h"

/* Reads and writes of the discovery session (one small query). */
#define DISCOVER_IO_MS 30000

/* Names outside this alphabet would make an outbox's name, its metrics
 * labels and its CloudEvents source ambiguous or invalid. */
static bool
schema_name_valid(const char *name)
{
    return str_is_word(name, "_$-");
}

/* s as a quoted SQL string; -1 when the client cannot escape it. */
static int
add_literal(struct strbuf *q, MYSQL *db, const char *s)
{
    size_t n = strlen(s);
    strbuf_reserve(q, 2 * n + 2);
    q->p[q->len++] = '\'';
    unsigned long got = mysql_real_escape_string(db, q->p + q->len, s, n);
    if (got == (unsigned long)-1)
        return -1;
    q->len += got;
    q->p[q->len++] = '\'';
    q->p[q->len] = '\0';
    return 0;
}

/*
 * The plain comparisons let the server look up each table by name; the
 * binary ones make them exact, as schema and table names are on Linux
 * (information_schema compares case-insensitively).
 */
static int
schemas_sql(struct strbuf *q, MYSQL *db, const struct database_config *entry)
{
    int rc = 0;
    for (int exact = 0; exact < 2; exact++) {
        strbuf_adds(q, exact ? " AND CAST(TABLE_SCHEMA AS BINARY) LIKE "
                             : "SELECT CAST(TABLE_SCHEMA AS BINARY) AS s "
                               "FROM information_schema.TABLES WHERE "
                               "TABLE_SCHEMA LIKE ");
        rc |= add_literal(q, db, entry->database_like);
        strbuf_adds(q, exact ? " AND CAST(TABLE_NAME AS BINARY) IN ("
                             : " AND TABLE_NAME IN (");
        for (size_t i = 0; i < entry->noutboxes; i++) {
            strbuf_adds(q, i ? "," : "");
            rc |= add_literal(q, db, entry->outboxes[i].table);
        }
        strbuf_adds(q, ")");
    }
    strbuf_addf(q,
                " GROUP BY s HAVING COUNT(DISTINCT CAST(TABLE_NAME AS "
                "BINARY)) = %zu ORDER BY s",
                entry->noutboxes);
    return rc;
}

static void
names_add(char ***names, size_t *n, const char *name, size_t len)
{
    *names = xrealloc(*names, (*n + 1) * sizeof(**names));
    (*names)[(*n)++] = xstrndup(name, len);
}

/* The rows of res into names; those with odd names into skipped. */
static void
schemas_read(MYSQL_RES *res, char ***names, size_t *n, struct strbuf *skipped)
{
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *lens = mysql_fetch_lengths(res);
        if (row[0] == NULL)
            continue;
        char *name = xstrndup(row[0], lens[0]);
        if (strlen(name) == lens[0] && schema_name_valid(name))
            names_add(names, n, name, lens[0]);
        else
            strbuf_addf(skipped, "%s\"%s\"", skipped->len ? ", " : "", name);
        free(name);
    }
}

static void
note_skipped(struct strbuf *skipped, struct strbuf *warn)
{
    if (skipped->len > 0)
        strbuf_addf(warn,
                    "skipped the schemas %s: a tenant's name is letters, "
                    "digits, _, $ and -",
                    skipped->p);
    strbuf_free(skipped);
}

/*
 * Each claim of a tenant opens its table: on a server whose table caches
 * hold fewer tables than the tenants have, claims keep reopening them,
 * which cost three times the database's CPU per idle tenant in the
 * bench (docs/operations.md, Many tenants).  The open cache holds an
 * instance per name in a statement, and the probe names its table up to
 * five times (store_claim.c build_probe_sql): 1,000 tenants' tables took
 * 5,000 of it in the bench.  Advice only: a failed read shows in the
 * commit that follows.
 */
#define OPENS_PER_TABLE 5

static void
check_table_caches(MYSQL *db, size_t tables, struct strbuf *warn)
{
    if (mysql_query(db,
                    "SELECT @@table_definition_cache, @@table_open_cache") != 0)
        return;
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = res != NULL ? mysql_fetch_row(res) : NULL;
    if (r != NULL && r[0] != NULL && r[1] != NULL) {
        unsigned long long defs = strtoull(r[0], NULL, 10);
        unsigned long long open = strtoull(r[1], NULL, 10);
        if (tables > defs || tables * OPENS_PER_TABLE > open)
            strbuf_addf(warn,
                        "%sthe tenants' %zu tables need more than the "
                        "server's table_definition_cache (%llu) or "
                        "table_open_cache (%llu) holds: each claim may "
                        "reopen its table; raise table_definition_cache "
                        "above the tables in use and table_open_cache above "
                        "%d times them",
                        warn->len ? "; " : "", tables, defs, open,
                        OPENS_PER_TABLE);
    }
    if (res != NULL)
        mysql_free_result(res);
}

static int
discover_fail(MYSQL *db, const struct database_config *entry, char *err,
              size_t errlen)
{
    err_set(err, errlen,
            "database %s: listing the schemas like \"%s\": %s "
            "(error %u)",
            entry->name, entry->database_like, mysql_error(db),
            mysql_errno(db));
    return -1;
}

int
discover_schemas(MYSQL *db, const struct database_config *entry, char ***names,
                 size_t *n, char *err, size_t errlen)
{
    struct strbuf q = {0}, skipped = {0};
    *names = NULL;
    *n = 0;
    err_set(err, errlen, "%s", "");
    if (entry->noutboxes == 0) /* config refuses it; "IN ()" is no SQL */
        return 0;
    if (schemas_sql(&q, db, entry) < 0 ||
        mysql_real_query(db, q.p, q.len) != 0) {
        strbuf_free(&q);
        return discover_fail(db, entry, err, errlen);
    }
    strbuf_free(&q);
    MYSQL_RES *res = mysql_store_result(db);
    if (res == NULL)
        return discover_fail(db, entry, err, errlen);
    schemas_read(res, names, n, &skipped);
    mysql_free_result(res);
    struct strbuf warn = {0};
    strbuf_adds(&warn, "");
    note_skipped(&skipped, &warn);
    check_table_caches(db, *n * entry->noutboxes, &warn);
    if (mysql_commit(db) != 0) {
        discover_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        strbuf_free(&warn);
        return discover_fail(db, entry, err, errlen);
    }
    if (warn.len > 0)
        err_set(err, errlen, "database %s: %s", entry->name, warn.p);
    strbuf_free(&warn);
    return 0;
}

void
discover_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

MYSQL *
discover_connect(const struct database_config *entry, char *err, size_t errlen)
{
    unsigned code;
    char *where = xasprintf("database %s", entry->name);
    MYSQL *db = dbconn_open(entry, false, dbconn_seconds(DISCOVER_IO_MS), where,
                            &code, err, errlen);
    free(where);
    return db;
}

/* ---- the tenant's entry ---- */

static char *
dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

static void
template_copy(struct template *dst, const struct template *src)
{
    dst->source = dup_or_null(src->source);
    dst->parts = src->nparts ? xcalloc(src->nparts, sizeof(*dst->parts)) : NULL;
    for (size_t i = 0; i < src->nparts; i++) {
        dst->parts[i].is_column = src->parts[i].is_column;
        dst->parts[i].text = xstrdup(src->parts[i].text);
    }
    dst->nparts = src->nparts;
}

/* Every scalar as the template has it, every string a copy of its own. */
static void
outbox_copy(struct outbox_config *dst, const struct outbox_config *src,
            struct database_config *t)
{
    *dst = *src;
    dst->name = xasprintf("%s.%s", t->name, src->table);
    dst->table = xstrdup(src->table);
    dst->database = t;
    template_copy(&dst->exchange, &src->exchange);
    template_copy(&dst->routing_key, &src->routing_key);
    dst->exchange_column = dup_or_null(src->exchange_column);
    dst->routing_key_column = dup_or_null(src->routing_key_column);
    /* The default names the tenant, as config.c names a database. */
    dst->cloudevents_source =
        src->cloudevents_source != NULL
            ? xstrdup(src->cloudevents_source)
            : xasprintf("outboxd://%s/%s", t->name, src->table);
    dst->columns =
        src->ncolumns ? xcalloc(src->ncolumns, sizeof(char *)) : NULL;
    for (size_t i = 0; i < src->ncolumns; i++)
        dst->columns[i] = xstrdup(src->columns[i]);
}

static void
tls_copy(struct tls_config *dst, const struct tls_config *src)
{
    *dst = *src;
    dst->ca_file = dup_or_null(src->ca_file);
    dst->cert_file = dup_or_null(src->cert_file);
    dst->key_file = dup_or_null(src->key_file);
}

struct database_config *
discover_tenant_new(const struct database_config *entry, const char *schema)
{
    struct database_config *t = xmalloc(sizeof(*t));
    *t = *entry;
    t->name = xasprintf("%s/%s", entry->name, schema);
    t->host = dup_or_null(entry->host);
    dbconn_hosts_copy(t, entry);
    t->socket = dup_or_null(entry->socket);
    t->user = dup_or_null(entry->user);
    t->password = dup_or_null(entry->password);
    t->password_source.ref = dup_or_null(entry->password_source.ref);
    t->database = xstrdup(schema);
    t->database_like = NULL;
    tls_copy(&t->tls, &entry->tls);
    t->server_public_key_file = dup_or_null(entry->server_public_key_file);
    t->outboxes = xcalloc(entry->noutboxes, sizeof(*t->outboxes));
    for (size_t i = 0; i < entry->noutboxes; i++)
        outbox_copy(&t->outboxes[i], &entry->outboxes[i], t);
    return t;
}

void
discover_tenant_free(struct database_config *t)
{
    if (t == NULL)
        return;
    config_database_clear(t);
    free(t);
}

char *
discover_group_name(const struct database_config *entry)
{
    size_t len = strcspn(entry->name, "/");
    return xasprintf("%.*s/*", (int)len, entry->name);
}
