/*
 * discover: the tenants of a database entry that names a pattern
 * (database_like): which schemas on its server match and hold its tables,
 * and a concrete database entry, outboxes and all, for each of them.
 * Library style: returns -1 and fills err, never prints.
 */
#ifndef OUTBOXD_DISCOVER_H
#define OUTBOXD_DISCOVER_H

#include <mysql.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/*
 * The schemas matching entry->database_like that hold every table of
 * entry's outboxes, sorted (byte order), as a malloc'd array of malloc'd
 * names; a schema holding only some of them is left out until it holds
 * all.  The server lists only the tables the session's user has a
 * privilege on.  A matching schema whose name has a character outside
 * [A-Za-z0-9_$-] is left out too, and on 0 err then names it (else err
 * is ""), for the caller to warn; so does it when the tenants' tables
 * outnumber the server's table caches.  db is a session on entry's
 * server, outside a transaction: this commits the one it may open.  -1
 * and err on failure, with nothing in *names.  Free with
 * discover_names_free.
 */
int discover_schemas(MYSQL *db, const struct database_config *entry,
                     char ***names, size_t *n, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void discover_names_free(char **names, size_t n);

/*
 * A session on entry's server with no default schema, for
 * discover_schemas; NULL and err (naming the entry) on failure.
 */
MYSQL *discover_connect(const struct database_config *entry, char *err,
                        size_t errlen);

/*
 * A concrete database entry for one discovered schema: a deep copy of
 * entry with database = schema, no database_like, name
 * "<entry>/<schema>", and its outboxes instantiated: named
 * "<entry>/<schema>.<table>", each one's database pointing at the new
 * entry, a default cloudevents_source of
 * "outboxd://<entry>/<schema>/<table>"; the broker pointers stay the
 * config's.  Freed with discover_tenant_free.
 */
struct database_config *discover_tenant_new(const struct database_config *entry,
                                            const char *schema);
void discover_tenant_free(struct database_config *t);

/* The metrics group of a pattern entry, or of one of its tenants: the
 * entry's name, a slash and an asterisk, malloc'd. */
char *discover_group_name(const struct database_config *entry);

#endif
