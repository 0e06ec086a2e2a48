/*
 * config_outbox: an outbox entry's checks, once its keys are read: names
 * spliced into SQL, the broker it names, its routing templates and the
 * columns they read, its CloudEvents source, and the outboxes of a
 * database entry, each table once.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_int.h"
#include "util.h"

/* MySQL's limit for table and column names. */
#define IDENT_MAX 64

/* Table and column names are spliced into SQL: a strict alphabet. */
static bool
ident_check(struct loader *ld, const struct section *s, const char *key,
            const char *what, const char *name)
{
    size_t len = strlen(name);
    const char *alphabet = "abcdefghijklmnopqrstuvwxyz"
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$";
    if (len > 0 && len <= IDENT_MAX && strspn(name, alphabet) == len)
        return true;
    ld_error(ld, sec_mark(s, key),
             "%s.%s: invalid %s name \"%s\": use 1 to %d letters, digits, _ "
             "or $",
             s->path, key, what, name, IDENT_MAX);
    return false;
}

static void
outbox_add_column(struct outbox_config *ob, const char *name)
{
    for (size_t i = 0; i < ob->ncolumns; i++)
        if (strcmp(ob->columns[i], name) == 0)
            return;
    ob->columns =
        xrealloc(ob->columns, (ob->ncolumns + 1) * sizeof(*ob->columns));
    ob->columns[ob->ncolumns++] = xstrdup(name);
}

static void
outbox_template(struct loader *ld, struct section *s, const char *key,
                struct template *t)
{
    struct outbox_config *ob = s->base;
    const char *src = sec_text(s, key);
    char err[ERR_LEN];
    if (src == NULL)
        return;
    if (template_compile(src, t, err, sizeof(err)) < 0) {
        ld_error(ld, sec_mark(s, key), "%s.%s: %s", s->path, key, err);
        return;
    }
    for (size_t i = 0; i < t->nparts; i++)
        if (t->parts[i].is_column)
            outbox_add_column(ob, t->parts[i].text);
}

static void
outbox_broker(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    struct config *cfg = ld->cfg;
    yaml_node_t *v = sec_node(s, "broker");
    const char *name = node_text(v);
    if (v == NULL) {
        if (cfg->nbrokers == 1)
            ob->broker = &cfg->brokers[0];
        else if (cfg->nbrokers > 1)
            ld_error(ld, &s->map->start_mark,
                     "missing required key \"broker\" in %s (there is more "
                     "than one broker)",
                     s->path);
        return;
    }
    for (size_t i = 0; name != NULL && i < cfg->nbrokers; i++)
        if (strcmp(cfg->brokers[i].name, name) == 0)
            ob->broker = &cfg->brokers[i];
    /* With no brokers at all, that error says enough. */
    if (name != NULL && ob->broker == NULL && cfg->nbrokers > 0)
        ld_error(ld, &v->start_mark, "outbox %s: unknown broker \"%s\"",
                 ob->name ? ob->name : s->path, name);
}

/* RFC 3986 section 2: the characters a URI may hold unescaped. */
static bool
uri_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("-._~!$&'()*+,;=:@/?#[]", c) != NULL);
}

static bool
hex_digit(char c)
{
    return c != '\0' && strchr("0123456789abcdefABCDEF", c) != NULL;
}

/* Each character allowed, each '%' a full escape, at most one '#'. */
static const char *
uri_chars_problem(const char *s, char *why, size_t size)
{
    for (size_t i = 0; s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%' && !(hex_digit(s[i + 1]) && hex_digit(s[i + 2]))) {
            snprintf(why, size,
                     "'%%' at byte %zu is not followed by two hex digits",
                     i + 1);
            return why;
        }
        if (c != '%' && !uri_char(c)) {
            snprintf(why, size,
                     "byte %zu (0x%02x) is not allowed: percent-encode it",
                     i + 1, c);
            return why;
        }
    }
    const char *hash = strchr(s, '#');
    if (hash != NULL && strchr(hash + 1, '#') != NULL)
        return "more than one '#'";
    return NULL;
}

/*
 * RFC 3986 section 4.1: a URI-reference is a URI (scheme ":" ...) or a
 * relative reference, whose first segment holds no ':'; '[' and ']' are
 * only for an IP literal in the authority.  NULL when s is one.
 */
static const char *
uri_reference_problem(const char *s, char *why, size_t size)
{
    if (s[0] == '\0')
        return "it is empty";
    const char *problem = uri_chars_problem(s, why, size);
    if (problem != NULL)
        return problem;
    size_t end = strcspn(s, ":/?#"), hier = 0;
    if (s[end] == ':') {
        if (end == 0 || !isalpha((unsigned char)s[0]) ||
            strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789+-.") < end)
            return "the part before the first ':' is not a scheme (a "
                   "relative reference cannot have ':' in its first segment)";
        hier = end + 1;
    }
    size_t auth = 0, auth_end = 0;
    if (strncmp(s + hier, "//", 2) == 0) {
        auth = hier + 2;
        auth_end = auth + strcspn(s + auth, "/?#");
    }
    for (size_t i = 0; s[i] != '\0'; i++)
        if ((s[i] == '[' || s[i] == ']') && (i < auth || i >= auth_end))
            return "'[' and ']' are only allowed around an IP literal host";
    return NULL;
}

/* docs/contract.md section 7: the CloudEvents source of every message.
 * The default names the outbox, the same from every relay. */
static void
outbox_source(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    char why[128];
    /* A template's default names each tenant: discover_tenant_new. */
    if (ob->cloudevents_source == NULL && ob->database->database_like != NULL)
        return;
    if (ob->cloudevents_source == NULL) {
        if (ob->table != NULL)
            ob->cloudevents_source =
                xasprintf("outboxd://%s/%s", ob->database->name, ob->table);
        return;
    }
    const char *problem =
        uri_reference_problem(ob->cloudevents_source, why, sizeof(why));
    if (problem != NULL)
        ld_error(ld, sec_mark(s, "cloudevents_source"),
                 "%s.cloudevents_source: \"%s\" is not a URI-reference: %s",
                 s->path, ob->cloudevents_source, problem);
}

/* A hold is a rule of the ordering per aggregate: without it, nothing
 * waits behind anything (docs/contract.md section 1.3). */
static void
outbox_hold_check(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    if (ob->on_dead == ON_DEAD_HOLD && ob->ordering == ORDERING_NONE)
        ld_error(ld, sec_mark(s, "on_dead"),
                 "%s.on_dead: hold needs ordering: aggregate (with ordering: "
                 "none no event waits behind another)",
                 s->path);
}

static void
outbox_poll_check(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    char min[32], max[32];
    if (ob->poll_min_ms <= ob->poll_interval_ms)
        return;
    duration_format(ob->poll_min_ms, min, sizeof(min));
    duration_format(ob->poll_interval_ms, max, sizeof(max));
    ld_error(ld, &s->map->start_mark,
             "%s: poll_min (%s) is greater than poll_interval (%s)", s->path,
             min, max);
}

void
config_outbox_finish(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    outbox_poll_check(ld, s);
    outbox_hold_check(ld, s);
    if (ob->table != NULL) {
        ident_check(ld, s, "table", "table", ob->table);
        ob->name = xasprintf("%s.%s", ob->database->name, ob->table);
    }
    outbox_broker(ld, s);
    outbox_template(ld, s, "exchange", &ob->exchange);
    outbox_template(ld, s, "routing_key", &ob->routing_key);
    if (ob->exchange_column != NULL &&
        ident_check(ld, s, "exchange_column", "column", ob->exchange_column))
        outbox_add_column(ob, ob->exchange_column);
    if (ob->routing_key_column != NULL &&
        ident_check(ld, s, "routing_key_column", "column",
                    ob->routing_key_column))
        outbox_add_column(ob, ob->routing_key_column);
    outbox_source(ld, s);
}

static void
outboxes_unique(struct loader *ld, struct section *s,
                struct database_config *db, yaml_node_t *list)
{
    for (size_t i = 1; i < db->noutboxes; i++)
        for (size_t j = 0; j < i; j++) {
            const char *a = db->outboxes[i].table;
            if (a == NULL || db->outboxes[j].table == NULL ||
                strcmp(a, db->outboxes[j].table) != 0)
                continue;
            yaml_node_t *item =
                node_get(ld, list->data.sequence.items.start[i]);
            ld_error(ld, &item->start_mark,
                     "%s.outboxes[%zu]: duplicate outbox table \"%s\" (also "
                     "outboxes[%zu])",
                     s->path, i, a, j);
            break;
        }
}

void
config_outboxes_load(struct loader *ld, struct section *s,
                     struct database_config *db)
{
    yaml_node_t *list = sec_node(s, "outboxes");
    if (list == NULL || list->type != YAML_SEQUENCE_NODE)
        return; /* reported as missing or as the wrong type */
    size_t n = list_size(list);
    if (n == 0) {
        ld_error(ld, &list->start_mark, "%s.outboxes: no outboxes configured",
                 s->path);
        return;
    }
    db->outboxes = xcalloc(n, sizeof(*db->outboxes));
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = node_get(ld, list->data.sequence.items.start[i]);
        struct outbox_config *ob = &db->outboxes[db->noutboxes++];
        char *path = xasprintf("%s.outboxes[%zu]", s->path, i);
        struct section sub;
        ob->database = db;
        table_defaults(&config_outbox_table, ob);
        if (node_expect(ld, path, item, YAML_MAPPING_NODE, "a mapping"))
            section_load(ld, &sub, &config_outbox_table, item, path, ob);
        free(path);
    }
    outboxes_unique(ld, s, db, list);
}
