/*
 * config_int: what config.c's finishers share with config_yaml.c, the
 * walk of the document against the tables: the loader, its sections,
 * and the helpers that report a problem at its line and column.
 */
#ifndef OUTBOXD_CONFIG_INT_H
#define OUTBOXD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "config.h"
#include "config_table.h"

#define SECTION_MAX 24

/* One mapping matched against a table, kept for its finisher. */
struct section {
    const struct table *table;
    const char *path; /* "databases.orders"; NULL at the top level */
    yaml_node_t *map;
    void *base;
    yaml_node_t *keys[SECTION_MAX];
    yaml_node_t *vals[SECTION_MAX];
};

struct pending_error {
    size_t line, column, seq;
    char *msg;
};

struct loader {
    const char *path;
    char *dir; /* relative secret and TLS files are found beside the config */
    yaml_document_t doc;
    struct config *cfg;
    struct pending_error *errs;
    size_t nerrs;
    bool inline_password;
};

/* Kept as "file:line:column: message"; a NULL mark is the whole file's. */
void ld_error(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Into errs (NULL: dropped) in file order; the loader's list is freed. */
void errors_flush(struct loader *ld, struct config_errors *errs);

yaml_node_t *node_get(struct loader *ld, int index);
/* The text of a usable scalar; NULL for anything else. */
const char *node_text(const yaml_node_t *n);
/* "a mapping", "a list", "an empty value" or "a string". */
const char *node_kind(const yaml_node_t *n);
size_t map_size(const yaml_node_t *map);
size_t list_size(const yaml_node_t *list);
/* Reports a value of the wrong kind; true when n has the expected one. */
bool node_expect(struct loader *ld, const char *path, const yaml_node_t *n,
                 yaml_node_type_t type, const char *want);
/* The name of a mapping key, or NULL after reporting a bad or repeated
 * one. */
const char *map_key(struct loader *ld, const yaml_node_t *map,
                    yaml_node_pair_t *pair, const char *path);

/* Every key's default from the table, nested maps too, stored at base. */
void table_defaults(const struct table *t, void *base);
/* Matches map's keys against t in file order, storing into base; then
 * the table's finisher. */
void section_load(struct loader *ld, struct section *s, const struct table *t,
                  yaml_node_t *map, const char *path, void *base);
/* A key's value node and key node in s; NULL when absent. */
yaml_node_t *sec_node(const struct section *s, const char *name);
yaml_node_t *sec_key(const struct section *s, const char *name);
/* The key's text or its default; NULL when absent or already reported. */
const char *sec_text(const struct section *s, const char *name);
/* Where to point at a key's value, or at its section when it is absent. */
const yaml_mark_t *sec_mark(const struct section *s, const char *name);

/* An outbox entry's checks (config_outbox.c), the finisher of
 * config_outbox_table; and a database entry's outboxes loaded and
 * checked, each table once. */
void config_outbox_finish(struct loader *ld, struct section *s);
void config_outboxes_load(struct loader *ld, struct section *s,
                          struct database_config *db);

/* config_hosts.c: a database entry's hosts: list. */
void config_hosts_finish(struct loader *ld, struct section *s);
void config_hosts_free(struct database_config *db);

#endif
