/*
 * config_reload: a SIGHUP's file compared with the running config key by
 * key through config.c's tables, and the keys that may change applied.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_table.h"
#include "dbconn.h"
#include "util.h"

/*
 * A reload loads the file again and compares it with the running config,
 * key by key through the same tables.  Only scalar keys marked
 * OPT_RELOAD change live: a string is shared with the copies the workers
 * hold, so no string key changes without a restart.
 */

static size_t
scalar_size(enum opt_type type)
{
    switch (type) {
    case OPT_DURATION:
    case OPT_SIZE:
        return sizeof(uint64_t);
    case OPT_UINT:
        return sizeof(unsigned);
    case OPT_BOOL:
        return sizeof(bool);
    case OPT_ENUM:
        return sizeof(int);
    default:
        return 0;
    }
}

bool
config_opt_reloadable(const struct opt *o)
{
    return (o->flags & OPT_RELOAD) && scalar_size(o->type) > 0;
}

static bool
str_equal(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool
field_equal(const struct opt *o, const void *a, const void *b)
{
    if (o->type == OPT_STRING)
        return str_equal(*(char *const *)a, *(char *const *)b);
    return memcmp(a, b, scalar_size(o->type)) == 0;
}

static void
field_format(const struct opt *o, const void *f, char *buf, size_t size)
{
    uint64_t ms;
    unsigned u;
    bool b;
    int e;
    switch (o->type) {
    case OPT_STRING:
        snprintf(buf, size, "\"%s\"",
                 *(char *const *)f ? *(char *const *)f : "");
        break;
    case OPT_DURATION:
        memcpy(&ms, f, sizeof(ms));
        duration_format(ms, buf, size);
        break;
    case OPT_SIZE:
        memcpy(&ms, f, sizeof(ms));
        size_format(ms, buf, size);
        break;
    case OPT_UINT:
        memcpy(&u, f, sizeof(u));
        snprintf(buf, size, "%u", u);
        break;
    case OPT_BOOL:
        memcpy(&b, f, sizeof(b));
        snprintf(buf, size, "%s", b ? "true" : "false");
        break;
    case OPT_ENUM:
        memcpy(&e, f, sizeof(e));
        snprintf(buf, size, "%s", e >= 0 ? o->choices[e] : "?");
        break;
    default:
        buf[0] = '\0';
    }
}

struct reload_diff {
    struct config_errors *refused, *changed;
    size_t nrefused;
    bool fixed; /* refuse even OPT_RELOAD keys: see database_diff */
};

static void diff_add(struct reload_diff *d, bool refused, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
diff_add(struct reload_diff *d, bool refused, const char *fmt, ...)
{
    struct config_errors *list = refused ? d->refused : d->changed;
    d->nrefused += refused;
    if (list == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    list->msgs = xrealloc(list->msgs, (list->n + 1) * sizeof(*list->msgs));
    list->msgs[list->n++] = msg;
}

/* One key: the same, changed live, or refused with both values. */
static void
opt_diff(const struct opt *o, const void *a, const void *b, const char *path,
         struct reload_diff *d)
{
    char was[128], now[128];
    if (field_equal(o, a, b))
        return;
    field_format(o, a, was, sizeof(was));
    field_format(o, b, now, sizeof(now));
    if (config_opt_reloadable(o) &&
        (!d->fixed || (o->flags & OPT_RELOAD_SHARED)))
        diff_add(d, false, "%s.%s: %s -> %s", path, o->name, was, now);
    else
        diff_add(d, true,
                 "%s.%s: cannot change without a restart (running %s, "
                 "file %s)",
                 path, o->name, was, now);
}

/* Keys without a field (secrets, templates) are compared by the caller. */
static void
table_diff(const struct table *t, const void *a, const void *b,
           const char *path, struct reload_diff *d)
{
    for (size_t i = 0; i < t->nopts; i++) {
        const struct opt *o = &t->opts[i];
        if (o->off == NO_FIELD)
            continue;
        const void *fa = (const char *)a + o->off;
        const void *fb = (const char *)b + o->off;
        if (o->type == OPT_MAP && o->sub != NULL) {
            char *sub = config_path_join(path, o->name);
            table_diff(o->sub, fa, fb, sub, d);
            free(sub);
        } else if (o->type != OPT_MAP && o->type != OPT_LIST &&
                   o->type != OPT_STRINGS) {
            opt_diff(o, fa, fb, path, d);
        }
    }
}

static void
table_apply(const struct table *t, void *dst, const void *src)
{
    for (size_t i = 0; i < t->nopts; i++) {
        const struct opt *o = &t->opts[i];
        if (o->off == NO_FIELD)
            continue;
        if (o->type == OPT_MAP && o->sub != NULL)
            table_apply(o->sub, (char *)dst + o->off,
                        (const char *)src + o->off);
        else if (config_opt_reloadable(o))
            memcpy((char *)dst + o->off, (const char *)src + o->off,
                   scalar_size(o->type));
    }
}

static struct broker_config *
broker_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nbrokers; i++)
        if (str_equal(cfg->brokers[i].name, name))
            return &cfg->brokers[i];
    return NULL;
}

static struct database_config *
database_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->ndatabases; i++)
        if (str_equal(cfg->databases[i].name, name))
            return &cfg->databases[i];
    return NULL;
}

static struct outbox_config *
outbox_find_table(const struct database_config *db, const char *table)
{
    for (size_t i = 0; i < db->noutboxes; i++)
        if (str_equal(db->outboxes[i].table, table))
            return &db->outboxes[i];
    return NULL;
}

static bool
urls_equal(const struct broker_config *a, const struct broker_config *b)
{
    if (a->nurls != b->nurls)
        return false;
    for (size_t i = 0; i < a->nurls; i++)
        if (!str_equal(a->urls[i], b->urls[i]))
            return false;
    return true;
}

static void
brokers_diff(const struct config *cur, const struct config *next,
             struct reload_diff *d)
{
    for (size_t i = 0; i < next->nbrokers; i++) {
        const struct broker_config *b = &next->brokers[i];
        const struct broker_config *a = broker_find(cur, b->name);
        char *path = xasprintf("brokers.%s", b->name);
        if (a == NULL) {
            diff_add(d, true, "%s: a new broker needs a restart", path);
        } else {
            table_diff(&config_broker_table, a, b, path, d);
            /* The URLs carry passwords: never quoted. */
            if (!urls_equal(a, b))
                diff_add(d, true, "%s.url: cannot change without a restart",
                         path);
        }
        free(path);
    }
    for (size_t i = 0; i < cur->nbrokers; i++)
        if (broker_find(next, cur->brokers[i].name) == NULL)
            diff_add(d, true,
                     "brokers.%s: removing a broker needs a restart; it "
                     "stays in use",
                     cur->brokers[i].name);
}

static void
outbox_diff(const struct outbox_config *a, const struct outbox_config *b,
            const char *path, struct reload_diff *d)
{
    static const char *const why = "cannot change without a restart";
    table_diff(&config_outbox_table, a, b, path, d);
    if (!str_equal(a->broker ? a->broker->name : NULL,
                   b->broker ? b->broker->name : NULL))
        diff_add(d, true, "%s.broker: %s", path, why);
    if (!str_equal(a->exchange.source, b->exchange.source))
        diff_add(d, true, "%s.exchange: %s", path, why);
    if (!str_equal(a->routing_key.source, b->routing_key.source))
        diff_add(d, true, "%s.routing_key: %s", path, why);
}

static void
database_diff(const struct database_config *a, const struct database_config *b,
              struct reload_diff *d)
{
    char *path = xasprintf("databases.%s", b->name);
    /* Workers read these through the shared struct, not a copy of
     * their own: none of them may change under a running thread. */
    d->fixed = true;
    table_diff(&config_database_table, a, b, path, d);
    d->fixed = false;
    if (!str_equal(a->password, b->password))
        diff_add(d, true, "%s.password: cannot change without a restart", path);
    if (!dbconn_hosts_equal(a, b))
        diff_add(d, true, "%s.hosts: cannot change without a restart", path);
    for (size_t i = 0; i < b->noutboxes; i++) {
        const struct outbox_config *ob = &b->outboxes[i];
        const struct outbox_config *old = outbox_find_table(a, ob->table);
        char *sub = xasprintf("%s.outboxes[%zu]", path, i);
        if (old == NULL)
            diff_add(d, true, "%s: a new outbox (%s) needs a restart", sub,
                     ob->name);
        else
            outbox_diff(old, ob, sub, d);
        free(sub);
    }
    for (size_t i = 0; i < a->noutboxes; i++)
        if (outbox_find_table(b, a->outboxes[i].table) == NULL)
            diff_add(d, true,
                     "%s: removing outbox %s needs a restart; it keeps "
                     "running",
                     path, a->outboxes[i].name);
    free(path);
}

size_t
config_reload_check(const struct config *cur, const struct config *next,
                    struct config_errors *refused,
                    struct config_errors *changed)
{
    struct reload_diff d = {.refused = refused, .changed = changed};
    table_diff(&config_relay_table, &cur->relay, &next->relay, "relay", &d);
    brokers_diff(cur, next, &d);
    for (size_t i = 0; i < next->ndatabases; i++) {
        const struct database_config *b = &next->databases[i];
        const struct database_config *a = database_find(cur, b->name);
        if (a == NULL)
            diff_add(&d, true, "databases.%s: a new database needs a restart",
                     b->name);
        else
            database_diff(a, b, &d);
    }
    for (size_t i = 0; i < cur->ndatabases; i++)
        if (database_find(next, cur->databases[i].name) == NULL)
            diff_add(&d, true,
                     "databases.%s: removing a database needs a restart; "
                     "its outboxes keep running",
                     cur->databases[i].name);
    return d.nrefused;
}

void
config_outbox_adopt(struct outbox_config *dst, const struct outbox_config *src)
{
    table_apply(&config_outbox_table, dst, src);
}

void
config_broker_adopt(struct broker_config *dst, const struct broker_config *src)
{
    table_apply(&config_broker_table, dst, src);
}

void
config_reload_apply(struct config *cur, const struct config *next)
{
    table_apply(&config_relay_table, &cur->relay, &next->relay);
    for (size_t i = 0; i < cur->nbrokers; i++) {
        const struct broker_config *b = broker_find(next, cur->brokers[i].name);
        if (b != NULL)
            config_broker_adopt(&cur->brokers[i], b);
    }
    for (size_t i = 0; i < cur->ndatabases; i++) {
        struct database_config *a = &cur->databases[i];
        const struct database_config *b = database_find(next, a->name);
        if (b == NULL)
            continue;
        table_apply(&config_database_table, a, b); /* discover_interval alone */
        for (size_t j = 0; j < a->noutboxes; j++) {
            const struct outbox_config *ob =
                outbox_find_table(b, a->outboxes[j].table);
            if (ob != NULL)
                config_outbox_adopt(&a->outboxes[j], ob);
        }
    }
}
