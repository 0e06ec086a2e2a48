/*
 * config_dump: the key tables walked again, to print the effective
 * configuration for `outboxd -T` and to list the keys outboxd.yaml(5)
 * must document.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_table.h"
#include "amqpconn.h"
#include "util.h"

/* ---- the keys, for the documentation's drift test ---- */

static const char *
opt_type_name(enum opt_type type)
{
    static const char *const names[] = {
        [OPT_STRING] = "string",   [OPT_DURATION] = "duration",
        [OPT_UINT] = "integer",    [OPT_BOOL] = "boolean",
        [OPT_ENUM] = "enum",       [OPT_MAP] = "mapping",
        [OPT_ENTRIES] = "mapping", [OPT_LIST] = "list",
        [OPT_STRINGS] = "list",    [OPT_SIZE] = "size",
    };
    return names[type];
}

/* Where a nested table's keys sit below the key that holds it. */
static char *
sub_path(const struct opt *o, const char *path)
{
    if (o->type == OPT_ENTRIES)
        return xasprintf("%s.NAME", path);
    if (o->type == OPT_LIST)
        return xasprintf("%s[]", path);
    return xstrdup(path);
}

static void
keys_walk(const struct table *t, const char *path,
          void (*fn)(const struct config_key *, void *), void *arg)
{
    for (size_t i = 0; i < t->nopts; i++) {
        const struct opt *o = &t->opts[i];
        char *full =
            path ? xasprintf("%s.%s", path, o->name) : xstrdup(o->name);
        struct config_key k = {
            .section = t->name,
            .path = full,
            .name = o->name,
            .type = opt_type_name(o->type),
            .def = o->def,
            .min = o->min,
            .max = o->max,
            .required = (o->flags & OPT_REQUIRED) != 0,
            .reload = config_opt_reloadable(o),
        };
        fn(&k, arg);
        if (o->sub != NULL) {
            char *sub = sub_path(o, full);
            keys_walk(o->sub, sub, fn, arg);
            free(sub);
        }
        free(full);
    }
}

void
config_keys_walk(void (*fn)(const struct config_key *, void *), void *arg)
{
    keys_walk(config_top_table(), NULL, fn, arg);
}

/* ---- the effective configuration ---- */

struct dump {
    struct strbuf out;
    int indent;
    bool dash; /* the next key line starts a list item */
    const struct config *cfg;
};

static void dump_table(struct dump *d, const struct table *t, const void *base);

static void dump_line(struct dump *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One "key: value" line at the current depth; "- " opens a list item. */
static void
dump_line(struct dump *d, const char *fmt, ...)
{
    va_list ap;
    int pad = d->indent - (d->dash ? 2 : 0);
    strbuf_addf(&d->out, "%*s%s", pad > 0 ? pad : 0, "", d->dash ? "- " : "");
    d->dash = false;
    va_start(ap, fmt);
    strbuf_vaddf(&d->out, fmt, ap);
    va_end(ap);
    strbuf_add(&d->out, "\n", 1);
}

/* A key the file leaves out and that has no default, as a comment. */
static void
dump_unset(struct dump *d, const char *name, const char *why)
{
    strbuf_addf(&d->out, "%*s# %s: unset%s%s\n", d->indent, "", name,
                why ? ", " : "", why ? why : "");
}

/* Plain when YAML reads it back as the same string, else quoted: a
 * ':' that ends the scalar would make it a mapping key ("mai:"). */
static bool
plain_safe(const char *s)
{
    static const char *const nulls[] = {"null", "Null", "NULL", "~"};
    const char *first = "abcdefghijklmnopqrstuvwxyz"
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._";
    if (s[0] == '\0' || strchr(first, s[0]) == NULL)
        return false;
    for (size_t i = 0; i < sizeof(nulls) / sizeof(*nulls); i++)
        if (strcmp(s, nulls[i]) == 0)
            return false;
    size_t len = strlen(s);
    return s[len - 1] != ':' &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._:@+=-") == len;
}

/* YAML reads these as line breaks (folded to a space) or a BOM even in
 * double quotes: they are written as escapes. */
static const struct {
    const char *utf8, *escape;
} yaml_breaks[] = {
    {"\xc2\x85", "\\N"},
    {"\xe2\x80\xa8", "\\L"},
    {"\xe2\x80\xa9", "\\P"},
    {"\xef\xbb\xbf", "\\uFEFF"},
};

/* Adds the escape for a break at s to out; the bytes it covers. */
static size_t
yaml_break(const char *s, struct strbuf *out)
{
    for (size_t i = 0; i < sizeof(yaml_breaks) / sizeof(*yaml_breaks); i++) {
        size_t n = strlen(yaml_breaks[i].utf8);
        if (strncmp(s, yaml_breaks[i].utf8, n) == 0) {
            strbuf_adds(out, yaml_breaks[i].escape);
            return n;
        }
    }
    return 0;
}

/* s as a YAML scalar, malloc'd: double quotes escape what they must. */
static char *
yaml_scalar(const char *s)
{
    if (plain_safe(s))
        return xstrdup(s);
    struct strbuf out = {0};
    strbuf_add(&out, "\"", 1);
    while (*s != '\0') {
        unsigned char c = (unsigned char)*s;
        size_t n = c >= 0x80 ? yaml_break(s, &out) : 0;
        if (n > 0)
            s += n;
        else if (c == '"' || c == '\\')
            strbuf_addf(&out, "\\%c", *s++);
        else if (c < 0x20 || c == 0x7f)
            strbuf_addf(&out, "\\x%02x", (unsigned char)*s++);
        else
            strbuf_add(&out, s++, 1);
    }
    strbuf_add(&out, "\"", 1);
    return out.p;
}

static void
dump_string(struct dump *d, const char *name, const char *value)
{
    char *v = yaml_scalar(value);
    dump_line(d, "%s: %s", name, v);
    free(v);
}

/* Relative file names are found from the working directory: made
 * absolute so that the output reads back from anywhere. */
static void
dump_file(struct dump *d, const char *name, const char *path)
{
    char cwd[4096];
    if (path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL) {
        dump_string(d, name, path);
        return;
    }
    char *abs = xasprintf("%s/%s", cwd, path);
    dump_string(d, name, abs);
    free(abs);
}

static void
dump_scalar(struct dump *d, const struct opt *o, const void *field)
{
    char buf[64];
    uint64_t ms;
    unsigned u;
    bool b;
    int e;
    switch (o->type) {
    case OPT_DURATION:
        memcpy(&ms, field, sizeof(ms));
        duration_format(ms, buf, sizeof(buf));
        break;
    case OPT_UINT:
        memcpy(&u, field, sizeof(u));
        snprintf(buf, sizeof(buf), "%u", u);
        break;
    case OPT_SIZE:
        memcpy(&ms, field, sizeof(ms));
        size_format(ms, buf, sizeof(buf));
        break;
    case OPT_BOOL:
        memcpy(&b, field, sizeof(b));
        str_copy(buf, b ? "true" : "false", sizeof(buf));
        break;
    case OPT_ENUM:
        memcpy(&e, field, sizeof(e));
        str_copy(buf, o->choices[e], sizeof(buf));
        break;
    default:
        return;
    }
    dump_line(d, "%s: %s", o->name, buf);
}

/* Names end in "_file": those are paths. */
static bool
is_file_key(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, "_file") == 0;
}

static void
dump_field(struct dump *d, const struct opt *o, const void *field)
{
    if (o->type != OPT_STRING) {
        dump_scalar(d, o, field);
        return;
    }
    const char *v = *(char *const *)field;
    if (v == NULL)
        dump_unset(d, o->name, NULL);
    else if (is_file_key(o->name))
        dump_file(d, o->name, v);
    else
        dump_string(d, o->name, v);
}

static void
dump_map(struct dump *d, const struct opt *o, const void *field)
{
    dump_line(d, "%s:", o->name);
    d->indent += 2;
    dump_table(d, o->sub, field);
    d->indent -= 2;
}

/* ---- the keys that are more than a field ---- */

/* URLs with their passwords masked: one url:, or the urls: list. */
static void
dump_urls(struct dump *d, const struct opt *o, const char *const *urls,
          size_t n)
{
    bool list = o->type == OPT_STRINGS;
    if (list) {
        dump_line(d, "%s:", o->name);
        d->indent += 4;
    }
    for (size_t i = 0; i < n; i++) {
        char *masked = amqpconn_mask_url(urls[i]);
        char *v = yaml_scalar(masked);
        d->dash = list;
        if (list)
            dump_line(d, "%s", v);
        else
            dump_line(d, "%s: %s", o->name, v);
        free(v);
        free(masked);
    }
    if (list)
        d->indent -= 4;
}

/* Of url, url_env, url_file, urls (or the password's three) only the
 * one the file used, and of a secret only its mask or where it is read. */
static void
dump_secret(struct dump *d, const struct opt *o,
            const struct secret_source *src, const char *const *urls,
            size_t nurls)
{
    if (src->key == NULL || strcmp(src->key, o->name) != 0)
        return;
    if (src->ref != NULL && is_file_key(o->name))
        dump_file(d, o->name, src->ref);
    else if (src->ref != NULL)
        dump_string(d, o->name, src->ref);
    else if (strcmp(o->name, "password") == 0)
        dump_string(d, o->name, "***");
    else
        dump_urls(d, o, urls, nurls);
}

static void
dump_broker_key(struct dump *d, const struct opt *o, const void *base)
{
    const struct broker_config *b = base;
    dump_secret(d, o, &b->url_source, (const char *const *)b->urls, b->nurls);
}

/* hosts: each node as host:port, the port made explicit. */
static void
dump_hosts(struct dump *d, const struct database_config *db)
{
    if (db->nhosts == 0) {
        dump_unset(d, "hosts", "one server, host and port");
        return;
    }
    dump_line(d, "hosts:");
    d->indent += 4;
    for (size_t i = 0; i < db->nhosts; i++) {
        const char *h = db->hosts[i].host;
        char *item = strchr(h, ':') != NULL
                         ? xasprintf("[%s]:%u", h, db->hosts[i].port)
                         : xasprintf("%s:%u", h, db->hosts[i].port);
        char *v = yaml_scalar(item);
        d->dash = true;
        dump_line(d, "%s", v);
        free(v);
        free(item);
    }
    d->indent -= 4;
}

static void
dump_database_key(struct dump *d, const struct opt *o, const void *base)
{
    const struct database_config *db = base;
    if (strcmp(o->name, "hosts") == 0) {
        dump_hosts(d, db);
    } else if (strcmp(o->name, "outboxes") == 0) {
        dump_line(d, "outboxes:");
        d->indent += 4;
        for (size_t i = 0; i < db->noutboxes; i++) {
            d->dash = true;
            dump_table(d, o->sub, &db->outboxes[i]);
        }
        d->indent -= 4;
    } else if (db->password_source.key == NULL &&
               strcmp(o->name, "password") == 0) {
        dump_unset(d, "password", "no password");
    } else {
        dump_secret(d, o, &db->password_source, NULL, 0);
    }
}

static void
dump_outbox_key(struct dump *d, const struct opt *o, const void *base)
{
    const struct outbox_config *ob = base;
    if (strcmp(o->name, "broker") == 0)
        dump_string(d, "broker", ob->broker->name);
    else if (strcmp(o->name, "exchange") == 0)
        dump_string(d, "exchange", ob->exchange.source);
    else if (strcmp(o->name, "routing_key") == 0)
        dump_string(d, "routing_key", ob->routing_key.source);
}

/* brokers: and databases: name their entries. */
static void
dump_entries(struct dump *d, const struct opt *o)
{
    bool brokers = strcmp(o->name, "brokers") == 0;
    size_t n = brokers ? d->cfg->nbrokers : d->cfg->ndatabases;
    dump_line(d, "%s:", o->name);
    d->indent += 2;
    for (size_t i = 0; i < n; i++) {
        const char *name =
            brokers ? d->cfg->brokers[i].name : d->cfg->databases[i].name;
        char *key = yaml_scalar(name);
        dump_line(d, "%s:", key);
        free(key);
        d->indent += 2;
        dump_table(d, o->sub,
                   brokers ? (const void *)&d->cfg->brokers[i]
                           : (const void *)&d->cfg->databases[i]);
        d->indent -= 2;
    }
    d->indent -= 2;
}

static bool
table_is(const struct table *t, const char *name)
{
    return t->name != NULL && strcmp(t->name, name) == 0;
}

/* The keys the loader resolves itself (they have no field of their own). */
static void
dump_computed(struct dump *d, const struct table *t, const struct opt *o,
              const void *base)
{
    if (o->type == OPT_ENTRIES)
        dump_entries(d, o);
    else if (table_is(t, "brokers"))
        dump_broker_key(d, o, base);
    else if (table_is(t, "databases"))
        dump_database_key(d, o, base);
    else if (table_is(t, "outboxes"))
        dump_outbox_key(d, o, base);
}

/* discover_interval is refused without database_like: left out there. */
static bool
dump_not_applicable(const struct table *t, const struct opt *o,
                    const void *base)
{
    return table_is(t, "databases") &&
           strcmp(o->name, "discover_interval") == 0 &&
           ((const struct database_config *)base)->database_like == NULL;
}

static void
dump_opt(struct dump *d, const struct table *t, const struct opt *o,
         const void *base)
{
    const void *field = o->off == NO_FIELD ? NULL : (const char *)base + o->off;
    if (dump_not_applicable(t, o, base)) {
        dump_unset(d, o->name, "only with database_like");
    } else if (table_is(t, "databases") &&
               ((const struct database_config *)base)->nhosts > 0 &&
               (strcmp(o->name, "host") == 0 || strcmp(o->name, "port") == 0)) {
        dump_unset(d, o->name, "hosts names the nodes");
    } else if (table_is(t, "outboxes") &&
               strcmp(o->name, "cloudevents_source") == 0 &&
               *(char *const *)field == NULL) {
        /* A database_like template's: each tenant names its own. */
        dump_unset(d, o->name, "outboxd://<database>/<schema>/<table>");
    } else if (field == NULL) {
        dump_computed(d, t, o, base);
    } else if (o->type == OPT_MAP && table_is(o->sub, "tls") &&
               !((const struct tls_config *)field)->enabled) {
        /* A tls: block turns TLS on: none is printed where it is off. */
        dump_unset(d, "tls", "no TLS");
    } else if (o->type == OPT_MAP) {
        dump_map(d, o, field);
    } else if (table_is(t, "relay") && strcmp(o->name, "id") == 0 &&
               d->cfg->relay.id_default) {
        dump_unset(d, "id", "each process takes <hostname>:<pid>");
    } else {
        dump_field(d, o, field);
    }
}

static void
dump_table(struct dump *d, const struct table *t, const void *base)
{
    for (size_t i = 0; i < t->nopts; i++)
        dump_opt(d, t, &t->opts[i], base);
}

char *
config_dump(const struct config *cfg)
{
    struct dump d = {.cfg = cfg};
    strbuf_addf(&d.out,
                "# outboxd %s: the effective configuration, every default "
                "filled in, secrets masked\n",
                OUTBOXD_VERSION);
    dump_table(&d, config_top_table(), cfg);
    return d.out.p;
}
