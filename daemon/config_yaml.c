/*
 * config_yaml: the walk of a YAML document against config.c's tables of
 * keys: errors kept in file order, nodes, scalar values by type, and
 * sections matched key by key for the finishers (config_int.h).
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_int.h"
#include "util.h"

/* Errors */

/* A NULL mark is a problem of the whole file, reported as "file: msg". */
void
ld_error(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);

    ld->errs = xrealloc(ld->errs, (ld->nerrs + 1) * sizeof(*ld->errs));
    struct pending_error *e = &ld->errs[ld->nerrs];
    e->line = mark ? mark->line + 1 : 0;
    e->column = mark ? mark->column + 1 : 0;
    e->seq = ld->nerrs++;
    e->msg = msg;
}

static int
error_cmp(const void *a, const void *b)
{
    const struct pending_error *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->column != y->column)
        return x->column < y->column ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Finishers run after the keys they check, so sort into file order. */
void
errors_flush(struct loader *ld, struct config_errors *errs)
{
    if (ld->nerrs > 1)
        qsort(ld->errs, ld->nerrs, sizeof(*ld->errs), error_cmp);
    for (size_t i = 0; i < ld->nerrs; i++) {
        struct pending_error *e = &ld->errs[i];
        if (errs != NULL) {
            errs->msgs =
                xrealloc(errs->msgs, (errs->n + 1) * sizeof(*errs->msgs));
            errs->msgs[errs->n++] = e->line == 0
                                        ? xasprintf("%s: %s", ld->path, e->msg)
                                        : xasprintf("%s:%zu:%zu: %s", ld->path,
                                                    e->line, e->column, e->msg);
        }
        free(e->msg);
    }
    free(ld->errs);
    ld->errs = NULL;
}

/* Nodes */

yaml_node_t *
node_get(struct loader *ld, int index)
{
    return yaml_document_get_node(&ld->doc, index);
}

static bool
node_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE ||
        n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)n->data.scalar.value;
    return *v == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* The text of a usable scalar; NULL for anything else. */
const char *
node_text(const yaml_node_t *n)
{
    if (n == NULL || n->type != YAML_SCALAR_NODE || node_is_null(n))
        return NULL;
    const char *v = (const char *)n->data.scalar.value;
    return strlen(v) == n->data.scalar.length ? v : NULL;
}

const char *
node_kind(const yaml_node_t *n)
{
    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    if (node_is_null(n))
        return "an empty value";
    return "a string";
}

size_t
map_size(const yaml_node_t *map)
{
    return (size_t)(map->data.mapping.pairs.top -
                    map->data.mapping.pairs.start);
}

size_t
list_size(const yaml_node_t *list)
{
    return (size_t)(list->data.sequence.items.top -
                    list->data.sequence.items.start);
}

/* Reports a value of the wrong kind; true when n has the expected one. */
bool
node_expect(struct loader *ld, const char *path, const yaml_node_t *n,
            yaml_node_type_t type, const char *want)
{
    bool null = node_is_null(n);
    if (n->type == type && !(type == YAML_SCALAR_NODE && null)) {
        if (type != YAML_SCALAR_NODE || node_text(n) != NULL)
            return true;
        ld_error(ld, &n->start_mark, "%s: string contains a NUL byte", path);
        return false;
    }
    /* An empty "exchange:" is null in YAML, not the empty string. */
    bool hint = null && strcmp(want, "a string") == 0;
    ld_error(ld, &n->start_mark, "%s: expected %s, got %s%s", path, want,
             node_kind(n), hint ? " (write \"\" for an empty string)" : "");
    return false;
}

char *
config_path_join(const char *path, const char *name)
{
    return path ? xasprintf("%s.%s", path, name) : xstrdup(name);
}

/*
 * The name of a mapping key, or NULL after reporting a key that is not
 * a string or that repeats an earlier one.
 */
const char *
map_key(struct loader *ld, const yaml_node_t *map, yaml_node_pair_t *pair,
        const char *path)
{
    yaml_node_t *k = node_get(ld, pair->key);
    const char *name = node_text(k);
    const char *where = path ? path : "the top level";
    if (name == NULL) {
        ld_error(ld, &k->start_mark, "keys in %s must be strings, got %s",
                 where, node_kind(k));
        return NULL;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < pair; p++) {
        const char *prev = node_text(node_get(ld, p->key));
        if (prev != NULL && strcmp(prev, name) == 0) {
            ld_error(ld, &k->start_mark, "duplicate key \"%s\" in %s", name,
                     where);
            return NULL;
        }
    }
    return name;
}

/* Values */

static void
enum_list(const char *const *choices, char *buf, size_t size)
{
    size_t n = 0, len = 0;
    while (choices[n] != NULL)
        n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s",
                                i == 0       ? ""
                                : i == n - 1 ? " or "
                                             : ", ",
                                choices[i]);
}

/* What a scalar key expects, for "expected X, got Y". */
static const char *
opt_want(const struct opt *o, char *buf, size_t size)
{
    switch (o->type) {
    case OPT_DURATION:
        return "a duration such as 30s";
    case OPT_UINT:
        return "a whole number";
    case OPT_SIZE:
        return "a size such as 16MiB";
    case OPT_BOOL:
        return "true or false";
    case OPT_ENUM:
        enum_list(o->choices, buf, size);
        return buf;
    default:
        return "a string";
    }
}

static int
enum_value(const struct opt *o, const char *text, int *value, char *err,
           size_t errlen)
{
    *value = -1;
    if (o->parse != NULL) {
        *value = o->parse(text);
    } else {
        for (int i = 0; o->choices[i] != NULL; i++)
            if (strcmp(text, o->choices[i]) == 0)
                *value = i;
    }
    if (*value >= 0)
        return 0;
    char list[128];
    enum_list(o->choices, list, sizeof(list));
    err_set(err, errlen, "invalid value \"%s\" (expected %s)", text, list);
    return -1;
}

static int
uint_value(const struct opt *o, const char *text, unsigned *value, char *err,
           size_t errlen)
{
    uint64_t v = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9' && v <= o->max; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    if (p == text || (*p != '\0' && (*p < '0' || *p > '9'))) {
        err_set(err, errlen,
                "expected a whole number from %llu to %llu, got \"%s\"",
                (unsigned long long)o->min, (unsigned long long)o->max, text);
        return -1;
    }
    if (*p != '\0' || v < o->min || v > o->max) {
        err_set(err, errlen, "%s is out of range (%llu to %llu)", text,
                (unsigned long long)o->min, (unsigned long long)o->max);
        return -1;
    }
    *value = (unsigned)v;
    return 0;
}

static int
duration_value(const struct opt *o, const char *text, uint64_t *ms, char *err,
               size_t errlen)
{
    char bound[32];
    if (duration_parse(text, ms, err, errlen) < 0)
        return -1;
    if (*ms < o->min) {
        duration_format(o->min, bound, sizeof(bound));
        err_set(err, errlen, "%s is below the minimum of %s", text, bound);
        return -1;
    }
    if (o->max != 0 && *ms > o->max) {
        duration_format(o->max, bound, sizeof(bound));
        err_set(err, errlen, "%s is above the maximum of %s", text, bound);
        return -1;
    }
    return 0;
}

static int
size_value(const struct opt *o, const char *text, uint64_t *bytes, char *err,
           size_t errlen)
{
    char bound[32];
    if (size_parse(text, bytes, err, errlen) < 0)
        return -1;
    if (*bytes < o->min) {
        size_format(o->min, bound, sizeof(bound));
        err_set(err, errlen, "%s is below the minimum of %s", text, bound);
        return -1;
    }
    if (o->max != 0 && *bytes > o->max) {
        size_format(o->max, bound, sizeof(bound));
        err_set(err, errlen, "%s is above the maximum of %s", text, bound);
        return -1;
    }
    return 0;
}

static int
bool_value(const char *text, bool *value, char *err, size_t errlen)
{
    if (strcasecmp(text, "true") == 0 || strcasecmp(text, "yes") == 0) {
        *value = true;
        return 0;
    }
    if (strcasecmp(text, "false") == 0 || strcasecmp(text, "no") == 0) {
        *value = false;
        return 0;
    }
    err_set(err, errlen, "expected true or false, got \"%s\"", text);
    return -1;
}

/*
 * Converts text by the key's type and stores it at field; a NULL field
 * only checks.  Defaults go through here too, so the table's text is the
 * one source of them.
 */
static int
value_store(const struct opt *o, const char *text, void *field, char *err,
            size_t errlen)
{
    uint64_t ms;
    unsigned u;
    bool b;
    int e;
    switch (o->type) {
    case OPT_STRING:
        if (field != NULL) {
            free(*(char **)field);
            *(char **)field = xstrdup(text);
        }
        return 0;
    case OPT_DURATION:
        if (duration_value(o, text, &ms, err, errlen) < 0)
            return -1;
        if (field != NULL)
            *(uint64_t *)field = ms;
        return 0;
    case OPT_UINT:
        if (uint_value(o, text, &u, err, errlen) < 0)
            return -1;
        if (field != NULL)
            *(unsigned *)field = u;
        return 0;
    case OPT_SIZE:
        if (size_value(o, text, &ms, err, errlen) < 0)
            return -1;
        if (field != NULL)
            *(uint64_t *)field = ms;
        return 0;
    case OPT_BOOL:
        if (bool_value(text, &b, err, errlen) < 0)
            return -1;
        if (field != NULL)
            *(bool *)field = b;
        return 0;
    case OPT_ENUM:
        if (enum_value(o, text, &e, err, errlen) < 0)
            return -1;
        if (field != NULL)
            memcpy(field, &e, sizeof(e));
        return 0;
    default:
        return -1;
    }
}

/* Tables and sections */

static void *
opt_field(const struct opt *o, void *base)
{
    return o->off == NO_FIELD ? NULL : (char *)base + o->off;
}

void
table_defaults(const struct table *t, void *base)
{
    for (size_t i = 0; i < t->nopts; i++) {
        const struct opt *o = &t->opts[i];
        void *field = opt_field(o, base);
        if (o->type == OPT_MAP && o->sub != NULL && field != NULL) {
            table_defaults(o->sub, field);
        } else if (o->def != NULL && field != NULL) {
            int rc = value_store(o, o->def, field, NULL, 0);
            assert(rc == 0); /* a bad default is a bug in the table */
            (void)rc;
        }
    }
}

static int
table_find(const struct table *t, const char *name)
{
    for (size_t i = 0; i < t->nopts; i++)
        if (strcmp(t->opts[i].name, name) == 0)
            return (int)i;
    return -1;
}

static void
strings_check(struct loader *ld, const char *path, yaml_node_t *list)
{
    if (!node_expect(ld, path, list, YAML_SEQUENCE_NODE, "a list"))
        return;
    for (size_t i = 0; i < list_size(list); i++) {
        char *item = xasprintf("%s[%zu]", path, i);
        node_expect(ld, item, node_get(ld, list->data.sequence.items.start[i]),
                    YAML_SCALAR_NODE, "a string");
        free(item);
    }
}

static void
opt_apply(struct loader *ld, struct section *s, const struct opt *o,
          yaml_node_t *v)
{
    char *path = config_path_join(s->path, o->name);
    void *field = opt_field(o, s->base);
    char err[ERR_LEN], want[128];
    struct section sub;

    switch (o->type) {
    case OPT_MAP:
        if (node_expect(ld, path, v, YAML_MAPPING_NODE, "a mapping") &&
            o->sub != NULL)
            section_load(ld, &sub, o->sub, v, path, field);
        break;
    case OPT_ENTRIES: /* read by the top level's finisher */
        node_expect(ld, path, v, YAML_MAPPING_NODE, "a mapping");
        break;
    case OPT_LIST:
        node_expect(ld, path, v, YAML_SEQUENCE_NODE, "a list");
        break;
    case OPT_STRINGS:
        strings_check(ld, path, v);
        break;
    default:
        if (!node_expect(ld, path, v, YAML_SCALAR_NODE,
                         opt_want(o, want, sizeof(want))))
            break;
        if (value_store(o, node_text(v), field, err, sizeof(err)) < 0)
            ld_error(ld, &v->start_mark, "%s: %s", path, err);
    }
    free(path);
}

static void
section_required(struct loader *ld, struct section *s)
{
    for (size_t i = 0; i < s->table->nopts; i++) {
        const struct opt *o = &s->table->opts[i];
        if ((o->flags & OPT_REQUIRED) && s->vals[i] == NULL)
            ld_error(ld, &s->map->start_mark, "missing required key \"%s\"%s%s",
                     o->name, s->path ? " in " : "", s->path ? s->path : "");
    }
}

/* Matches map's keys against t in file order, storing into base. */
void
section_load(struct loader *ld, struct section *s, const struct table *t,
             yaml_node_t *map, const char *path, void *base)
{
    assert(t->nopts <= SECTION_MAX);
    memset(s, 0, sizeof(*s));
    s->table = t;
    s->path = path;
    s->map = map;
    s->base = base;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
         p < map->data.mapping.pairs.top; p++) {
        const char *name = map_key(ld, map, p, path);
        if (name == NULL)
            continue;
        yaml_node_t *k = node_get(ld, p->key);
        int i = table_find(t, name);
        if (i < 0) {
            ld_error(ld, &k->start_mark, "unknown key \"%s\" in %s", name,
                     path ? path : "the top level");
            continue;
        }
        s->keys[i] = k;
        s->vals[i] = node_get(ld, p->value);
        opt_apply(ld, s, &t->opts[i], s->vals[i]);
    }
    section_required(ld, s);
    if (t->finish != NULL)
        t->finish(ld, s);
}

yaml_node_t *
sec_node(const struct section *s, const char *name)
{
    int i = table_find(s->table, name);
    assert(i >= 0);
    return s->vals[i];
}

yaml_node_t *
sec_key(const struct section *s, const char *name)
{
    int i = table_find(s->table, name);
    assert(i >= 0);
    return s->keys[i];
}

/* The key's text or its default; NULL when absent or already reported. */
const char *
sec_text(const struct section *s, const char *name)
{
    int i = table_find(s->table, name);
    assert(i >= 0);
    if (s->vals[i] == NULL)
        return s->table->opts[i].def;
    return node_text(s->vals[i]);
}

/* Where to point at a key's value, or at its section when it is absent. */
const yaml_mark_t *
sec_mark(const struct section *s, const char *name)
{
    yaml_node_t *v = sec_node(s, name);
    return v ? &v->start_mark : &s->map->start_mark;
}
