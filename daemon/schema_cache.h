/*
 * schema_cache: the information_schema rows of the table definitions one
 * session has checked, keyed by their SHOW CREATE TABLE text, so that
 * the tenants of one definition read information_schema once a session.
 */
#ifndef OUTBOXD_SCHEMA_CACHE_H
#define OUTBOXD_SCHEMA_CACHE_H

#include <mysql.h>
#include <stddef.h>

#include "util.h"

/* A result's rows, copied: cells[row * ncols + col], NULL for SQL NULL. */
struct text_rows {
    size_t nrows, ncols;
    char **cells;
};

void text_rows_load(struct text_rows *t, MYSQL_RES *res);
char **text_rows_row(const struct text_rows *t, size_t i);
void text_rows_free(struct text_rows *t);

/*
 * The key of a SHOW CREATE TABLE text: the text less its AUTO_INCREMENT
 * table option, which moves with every insert.  Two tables of one key
 * have the same columns, collations, generated expressions and indexes;
 * the schema name is not in the text, the table's name is.
 */
void schema_definition_key(const char *create_table, struct strbuf *out);

/* What the schema check read for one definition. */
struct schema_rows {
    struct text_rows columns; /* information_schema.COLUMNS */
    struct text_rows indexes; /* information_schema.STATISTICS */
};

struct schema_cache;

struct schema_cache *schema_cache_new(void);
void schema_cache_free(struct schema_cache *c);
/* The rows read for key, or NULL; valid until the next put or clear. */
const struct schema_rows *schema_cache_find(const struct schema_cache *c,
                                            const char *key);
/* Keeps rows (taken over, left empty) under key, evicting the oldest. */
void schema_cache_put(struct schema_cache *c, const char *key,
                      struct schema_rows *rows);
void schema_cache_clear(struct schema_cache *c);

#endif
