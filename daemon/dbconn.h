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
 */
MYSQL *dbconn_open(const struct database_config *dc, bool with_schema,
                   unsigned io_s, const char *where, unsigned *code, char *err,
                   size_t errlen);

#endif
