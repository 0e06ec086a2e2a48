/*
 * binlog_watch: the watch set's two chained hash tables (schema.table,
 * and schema alone), grown at a load of one, and the flat list of all.
 */
#include "binlog_watch.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define INITIAL_BUCKETS 16
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

void
binlog_watchset_init(struct binlog_watchset *ws)
{
    memset(ws, 0, sizeof(*ws));
}

void
binlog_watchset_clear(struct binlog_watchset *ws)
{
    for (size_t i = 0; i < ws->n; i++) {
        free(ws->all[i]->schema);
        free(ws->all[i]->table);
        free(ws->all[i]);
    }
    free(ws->all);
    free(ws->by_name);
    free(ws->by_schema);
    binlog_watchset_init(ws);
}

/* FNV-1a over the bytes, ASCII letters folded: the names match so. */
static uint64_t
hash_more(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)tolower((unsigned char)s[i]);
        h *= FNV_PRIME;
    }
    return h;
}

static uint64_t
schema_hash(const char *schema, size_t len)
{
    return hash_more(FNV_OFFSET, schema, len);
}

uint64_t
binlog_watch_hash(const char *schema, size_t schema_len, const char *table,
                  size_t table_len)
{
    /* The length keeps "ab"."c" apart from "a"."bc". */
    uint64_t h = schema_hash(schema, schema_len) ^ schema_len;
    return hash_more(h * FNV_PRIME, table, table_len);
}

static bool
name_eq(const char *name, const char *s, size_t n)
{
    return strlen(name) == n && strncasecmp(name, s, n) == 0;
}

static void
link_watch(struct binlog_watchset *ws, struct binlog_watch *w)
{
    size_t b = w->hash & (ws->nbuckets - 1);
    size_t sb = w->schema_hash & (ws->nbuckets - 1);
    w->next = ws->by_name[b];
    ws->by_name[b] = w;
    w->next_schema = ws->by_schema[sb];
    ws->by_schema[sb] = w;
}

/* Twice the buckets (or the first ones), every watch linked again. */
static void
grow(struct binlog_watchset *ws)
{
    free(ws->by_name);
    free(ws->by_schema);
    ws->nbuckets = ws->nbuckets ? ws->nbuckets * 2 : INITIAL_BUCKETS;
    ws->by_name = xcalloc(ws->nbuckets, sizeof(*ws->by_name));
    ws->by_schema = xcalloc(ws->nbuckets, sizeof(*ws->by_schema));
    for (size_t i = 0; i < ws->n; i++)
        link_watch(ws, ws->all[i]);
}

struct binlog_watch *
binlog_watch_add(struct binlog_watchset *ws, const char *schema,
                 const char *table,
                 void (*notify)(void *, bool, const struct binlog_ids *),
                 void *arg)
{
    struct binlog_watch *w = xcalloc(1, sizeof(*w));
    w->schema = xstrdup(schema);
    w->table = xstrdup(table);
    w->notify = notify;
    w->arg = arg;
    w->schema_hash = schema_hash(schema, strlen(schema));
    w->hash = binlog_watch_hash(schema, strlen(schema), table, strlen(table));
    if (ws->n == ws->cap) {
        ws->cap = ws->cap ? ws->cap * 2 : INITIAL_BUCKETS;
        ws->all = xrealloc(ws->all, ws->cap * sizeof(*ws->all));
    }
    w->slot = ws->n;
    ws->all[ws->n++] = w;
    if (ws->n > ws->nbuckets)
        grow(ws); /* links w too */
    else
        link_watch(ws, w);
    return w;
}

static void
unlink_name(struct binlog_watchset *ws, struct binlog_watch *w)
{
    struct binlog_watch **p = &ws->by_name[w->hash & (ws->nbuckets - 1)];
    while (*p != w)
        p = &(*p)->next;
    *p = w->next;
}

static void
unlink_schema(struct binlog_watchset *ws, struct binlog_watch *w)
{
    struct binlog_watch **p =
        &ws->by_schema[w->schema_hash & (ws->nbuckets - 1)];
    while (*p != w)
        p = &(*p)->next_schema;
    *p = w->next_schema;
}

static void
unlink_touched(struct binlog_watchset *ws, struct binlog_watch *w)
{
    if (!w->touched)
        return;
    struct binlog_watch **p = &ws->touched;
    while (*p != w)
        p = &(*p)->next_touched;
    *p = w->next_touched;
}

void
binlog_watch_remove(struct binlog_watchset *ws, struct binlog_watch *w)
{
    unlink_name(ws, w);
    unlink_schema(ws, w);
    unlink_touched(ws, w);
    /* The last watch takes w's slot. */
    ws->all[w->slot] = ws->all[--ws->n];
    ws->all[w->slot]->slot = w->slot;
    free(w->schema);
    free(w->table);
    free(w);
}

struct binlog_watch *
binlog_watch_next(const struct binlog_watchset *ws,
                  const struct binlog_watch *prev, uint64_t hash,
                  const char *schema, size_t schema_len, const char *table,
                  size_t table_len)
{
    struct binlog_watch *w;
    if (prev != NULL)
        w = prev->next;
    else
        w = ws->nbuckets ? ws->by_name[hash & (ws->nbuckets - 1)] : NULL;
    for (; w != NULL; w = w->next)
        if (w->hash == hash && name_eq(w->schema, schema, schema_len) &&
            name_eq(w->table, table, table_len))
            return w;
    return NULL;
}

struct binlog_watch *
binlog_watch_next_in_schema(const struct binlog_watchset *ws,
                            const struct binlog_watch *prev, const char *schema,
                            size_t schema_len)
{
    uint64_t h = schema_hash(schema, schema_len);
    struct binlog_watch *w;
    if (prev != NULL)
        w = prev->next_schema;
    else
        w = ws->nbuckets ? ws->by_schema[h & (ws->nbuckets - 1)] : NULL;
    for (; w != NULL; w = w->next_schema)
        if (w->schema_hash == h && name_eq(w->schema, schema, schema_len))
            return w;
    return NULL;
}

/* Whether list (comma-separated) names schema, letter case folded or not. */
static bool
list_names(const char *list, const char *schema, bool fold)
{
    size_t len = strlen(schema);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len &&
            (fold ? strncasecmp(p, schema, n) : strncmp(p, schema, n)) == 0)
            return true;
        p = end != NULL ? end + 1 : NULL;
    }
    return false;
}

bool
binlog_filter_logs(const char *do_db, const char *ignore_db, const char *schema)
{
    if (do_db != NULL && do_db[0] != '\0')
        return list_names(do_db, schema, false);
    return !list_names(ignore_db, schema, true);
}
