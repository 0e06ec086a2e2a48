/*
 * binlog: one replication stream per database server, read on its own
 * thread, that tells the outboxes on that server when a transaction that
 * inserted into their table commits.  Only a hint: the claim decides
 * what is published, so a lost or late notice only costs latency.
 */
#ifndef OUTBOXD_BINLOG_H
#define OUTBOXD_BINLOG_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

/* Heartbeats asked of the server while it has nothing to send, and how
 * many of them may go missing before the stream counts as stalled. */
#define BINLOG_HEARTBEAT_MS 1000
#define BINLOG_STALL_BEATS 3

/* What a stream tells each outbox it serves, on the stream's thread:
 * both must return at once (the workers' own threads do the work). */
struct binlog_client {
    /* A transaction that wrote the table committed; inserted: it
     * inserted rows (else it only updated or deleted some). */
    void (*commit)(void *arg, bool inserted);
    /* The stream went live, or down: poll with the matching ceiling. */
    void (*state)(void *arg, bool live);
    /* How many times the outbox's session left a server that refused
     * writes for a writable one; when it changes, the stream connects
     * again, to follow the outbox to the new primary.  NULL: never. */
    uint64_t (*failovers)(void *arg);
    void *arg;
};

struct binlog_stream;

/* A stream to db's server, as db's user; nothing runs before start. */
struct binlog_stream *binlog_stream_new(const struct database_config *db);
/* Whether s reads the server that db names, as db's user. */
bool binlog_stream_serves(const struct binlog_stream *s,
                          const struct database_config *db);
/* Before start: watch schema.table for c. */
void binlog_stream_add(struct binlog_stream *s, const char *schema,
                       const char *table, const struct binlog_client *c);
int binlog_stream_start(struct binlog_stream *s);
/* Ends the stream's read at once; its thread ends soon after. */
void binlog_stream_stop(struct binlog_stream *s);
/* Stops, joins the thread (which may be finishing a connect) and frees. */
void binlog_stream_free(struct binlog_stream *s);

/* "host:port" or the socket path, for logs and metrics. */
const char *binlog_stream_name(const struct binlog_stream *s);

#endif
