/*
 * binlog: one replication stream per database server, read on its own
 * thread, that tells the outboxes on that server when a transaction that
 * inserted into their table commits.  Only a hint: the claim decides
 * what is published, so a lost or late notice only costs latency.
 */
#ifndef OUTBOXD_BINLOG_H
#define OUTBOXD_BINLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "binlog_watch.h"
#include "config.h"

/* Heartbeats asked of the server while it has nothing to send, and how
 * many of them may go missing before the stream counts as stalled. */
#define BINLOG_HEARTBEAT_MS 1000
#define BINLOG_STALL_BEATS 3

/* What a stream tells each outbox it serves, on the stream's thread and
 * under its lock: each must return at once (the workers' own threads do
 * the work), and none may call binlog_stream_add or _remove. */
struct binlog_client {
    /* A transaction that wrote the table committed; inserted: it
     * inserted rows (else it only updated or deleted some), ids: theirs,
     * where known. */
    void (*commit)(void *arg, bool inserted, const struct binlog_ids *ids);
    /* The table's id column and column count (binlog_watch.h); NULL:
     * never known. */
    int (*id_column)(void *arg, unsigned *ncolumns);
    /* The stream went live, or down: poll with the matching ceiling.
     * A client added to a live stream is told live at once, from the
     * thread that adds it. */
    void (*state)(void *arg, bool live);
    /* How many times the outbox's session left a server that refused
     * writes for a writable one; when it changes, the stream connects
     * again, to follow the outbox to the new primary.  NULL: never.
     * Polled over every client, at most every BINLOG_FAILOVER_POLL_MS. */
    uint64_t (*failovers)(void *arg);
    void *arg;
};

/* How often the stream asks its clients for their failovers. */
#define BINLOG_FAILOVER_POLL_MS 100

struct binlog_stream;

/* A stream to db's server, as db's user; nothing runs before start. */
struct binlog_stream *binlog_stream_new(const struct database_config *db);
/* Whether s reads the server that db names, as db's user. */
bool binlog_stream_serves(const struct binlog_stream *s,
                          const struct database_config *db);
/* Watches schema.table (copied) for c, from now on: before start or
 * while the stream runs, from any thread but the stream's.  The same
 * table may be watched by several clients, and one client may watch
 * several tables.  A stream with no client still reads, cheaply. */
void binlog_stream_add(struct binlog_stream *s, const char *schema,
                       const char *table, const struct binlog_client *c);
/* Stops every watch of the client whose arg is client_arg: once it
 * returns no callback of it runs (one in progress has finished), so the
 * caller may free client_arg.  O(watches); a client not found is none. */
void binlog_stream_remove(struct binlog_stream *s, void *client_arg);
/* How many watches s holds. */
size_t binlog_stream_watches(struct binlog_stream *s);
int binlog_stream_start(struct binlog_stream *s);
/* Ends the stream's read at once; its thread ends soon after. */
void binlog_stream_stop(struct binlog_stream *s);
/* Stops, joins the thread (which may be finishing a connect) and frees. */
void binlog_stream_free(struct binlog_stream *s);

/* "host:port" or the socket path, for logs and metrics. */
const char *binlog_stream_name(const struct binlog_stream *s);
/* Transactions the stream could not read whole (an event of a type it
 * does not know, a compressed transaction it cannot open), each of which
 * woke every outbox of the server rather than none; from any thread. */
uint64_t binlog_stream_unreadable(const struct binlog_stream *s);

#endif
