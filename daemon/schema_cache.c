/*
 * schema_cache: the schema check's information_schema rows per table
 * definition, for the stores of one session.
 */
#include "schema_cache.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/*
 * Definitions kept per session.  Tenants of one migration share one; a
 * few more cover a migration rolling through them.  A miss costs only
 * what every check cost before: the two reads, 1.2 and 0.35 ms of the
 * server's CPU (docs/performance.md).
 */
#define SCHEMA_CACHE_SLOTS 4

struct schema_cache {
    char *key[SCHEMA_CACHE_SLOTS];
    struct schema_rows rows[SCHEMA_CACHE_SLOTS];
    size_t next; /* the slot the next put takes */
};

void
text_rows_load(struct text_rows *t, MYSQL_RES *res)
{
    t->nrows = (size_t)mysql_num_rows(res);
    t->ncols = mysql_num_fields(res);
    t->cells = xcalloc(t->nrows * t->ncols + 1, sizeof(char *));
    MYSQL_ROW r;
    for (size_t i = 0; i < t->nrows && (r = mysql_fetch_row(res)) != NULL; i++)
        for (size_t j = 0; j < t->ncols; j++)
            t->cells[i * t->ncols + j] = r[j] ? xstrdup(r[j]) : NULL;
}

char **
text_rows_row(const struct text_rows *t, size_t i)
{
    return &t->cells[i * t->ncols];
}

void
text_rows_free(struct text_rows *t)
{
    for (size_t i = 0; t->cells != NULL && i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    *t = (struct text_rows){0};
}

/* " AUTO_INCREMENT=<digits>" at p: its length, else 0. */
static size_t
auto_increment_option(const char *p)
{
    static const char opt[] = " AUTO_INCREMENT=";
    size_t n = sizeof(opt) - 1;
    if (strncmp(p, opt, n) != 0 || !isdigit((unsigned char)p[n]))
        return 0;
    while (isdigit((unsigned char)p[n]))
        n++;
    return n;
}

void
schema_definition_key(const char *create_table, struct strbuf *out)
{
    strbuf_reset(out);
    /* The table options follow the last line, ")": only they hold it. */
    const char *options = strstr(create_table, "\n)");
    for (const char *p; options && (p = strstr(options + 1, "\n)"));)
        options = p;
    if (options == NULL) {
        strbuf_adds(out, create_table);
        return;
    }
    strbuf_add(out, create_table, (size_t)(options - create_table));
    for (const char *p = options; *p != '\0';) {
        size_t skip = auto_increment_option(p);
        if (skip > 0)
            p += skip;
        else
            strbuf_add(out, p++, 1);
    }
}

struct schema_cache *
schema_cache_new(void)
{
    return xcalloc(1, sizeof(struct schema_cache));
}

static void
slot_free(struct schema_cache *c, size_t i)
{
    free(c->key[i]);
    c->key[i] = NULL;
    text_rows_free(&c->rows[i].columns);
    text_rows_free(&c->rows[i].indexes);
}

void
schema_cache_clear(struct schema_cache *c)
{
    for (size_t i = 0; i < SCHEMA_CACHE_SLOTS; i++)
        slot_free(c, i);
    c->next = 0;
}

void
schema_cache_free(struct schema_cache *c)
{
    if (c == NULL)
        return;
    schema_cache_clear(c);
    free(c);
}

const struct schema_rows *
schema_cache_find(const struct schema_cache *c, const char *key)
{
    for (size_t i = 0; i < SCHEMA_CACHE_SLOTS; i++)
        if (c->key[i] != NULL && strcmp(c->key[i], key) == 0)
            return &c->rows[i];
    return NULL;
}

void
schema_cache_put(struct schema_cache *c, const char *key,
                 struct schema_rows *rows)
{
    size_t i = c->next;
    c->next = (c->next + 1) % SCHEMA_CACHE_SLOTS;
    slot_free(c, i);
    c->key[i] = xstrdup(key);
    c->rows[i] = *rows;
    *rows = (struct schema_rows){0};
}
