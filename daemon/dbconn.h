/*
 * dbconn: opens a client session to one configured database server, with
 * bounded waits, TLS as configured, utf8mb4 and no auto-reconnect: the
 * one way both the relay's store and the binlog stream connect.
 */
#ifndef OUTBOXD_DBCONN_H
#define OUTBOXD_DBCONN_H

#include <stddef.h>
#include <mysql.h>

#include "config.h"

/* Milliseconds to the client library's whole seconds, at least 1. */
unsigned dbconn_seconds(uint64_t ms);

/*
 * Connects to dc (its database as the default schema when with_schema)
 * with reads and writes bounded by io_s seconds.  NULL with err naming
 * where (for messages) and *code the client's error number on failure.
 * A Galera node that is not ready (wsrep_ready OFF) is refused as 1047;
 * with hosts: each is tried in turn, and the last failure is reported.
 */
MYSQL *dbconn_open(const struct database_config *dc, bool with_schema,
                   unsigned io_s, const char *where, unsigned *code, char *err,
                   size_t errlen);

/* A copy of dc's hosts: list into to (none: none), for a session's own
 * copy of an entry; and whether two entries list the same hosts. */
void dbconn_hosts_copy(struct database_config *to,
                       const struct database_config *dc);
bool dbconn_hosts_equal(const struct database_config *a,
                        const struct database_config *b);

#endif
