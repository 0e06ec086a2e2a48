/*
 * binlog_parse: what one binary-log event, as a replication stream sends
 * it, means for the watched outbox tables; and the tracker that turns a
 * stream of them into one notice per table per committed transaction.
 * Pure: no I/O, no server, so that unit tests and a fuzzer drive it.
 */
#ifndef OUTBOXD_BINLOG_PARSE_H
#define OUTBOXD_BINLOG_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "binlog_watch.h"
#include "util.h"

/* What an event is, as far as waking a relay goes. */
enum binlog_kind {
    BINLOG_OTHER,       /* nothing to do with it */
    BINLOG_FORMAT,      /* format description: header and checksum learnt */
    BINLOG_TABLE_MAP,   /* table_id names schema.table for the rows events */
    BINLOG_ROWS_WRITE,  /* rows inserted into table_id */
    BINLOG_ROWS_CHANGE, /* rows updated or deleted in table_id */
    BINLOG_BEGIN,       /* a transaction starts */
    BINLOG_COMMIT,      /* it committed (an XID, or a COMMIT statement) */
    BINLOG_ROLLBACK,    /* a ROLLBACK statement: what it wrote is void */
    BINLOG_STATEMENT,   /* any other statement, logged as text */
    BINLOG_HEARTBEAT,   /* the server is idle, the stream alive */
};

/* What the last format description event said; zeroed at stream start. */
struct binlog_format {
    bool known;
    bool crc32;            /* every event ends in 4 checksum bytes */
    uint8_t header_len;    /* 19 in binlog version 4 */
    uint8_t post_len[256]; /* post-header length by event type */
};

/* One parsed event; pointers point into the packet given to parse. */
struct binlog_event {
    enum binlog_kind kind;
    uint8_t type;       /* the raw event type */
    uint64_t table_id;  /* TABLE_MAP and rows events */
    const char *schema; /* TABLE_MAP; a statement's default database */
    size_t schema_len;  /* (not NUL-terminated) */
    const char *table;  /* TABLE_MAP */
    size_t table_len;
    const char *text; /* STATEMENT: the statement */
    size_t text_len;
    bool text_inserts; /* STATEMENT: INSERT, REPLACE or LOAD DATA */
    bool text_unknown; /* STATEMENT: compressed, the text unread */
};

/*
 * Parses one packet of a binlog dump: the OK byte (0x00), then one event.
 * fmt is read for the header and post-header lengths, and updated by a
 * format description event.  -1 with err filled for a packet too short
 * or inconsistent for its own lengths: the caller drops the stream.
 */
int binlog_parse(struct binlog_format *fmt, const unsigned char *pkt,
                 size_t len, struct binlog_event *ev, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The tables the transactions being read have mapped, by table id, with
 * their names: the watch set may change between a table's map and its
 * rows (binlog_watch.h), so they are looked up at each rows event. */
#define BINLOG_MAP_SLOTS 64
#define BINLOG_NAME_MAX 255 /* a table map gives each name one length byte */

struct binlog_tracker {
    struct binlog_watchset *watches;
    struct {
        uint64_t table_id;
        uint64_t hash; /* binlog_watch_hash of the names */
        uint8_t schema_len, table_len;
        char schema[BINLOG_NAME_MAX], table[BINLOG_NAME_MAX];
    } map[BINLOG_MAP_SLOTS];
    size_t nmap, map_next;
    bool in_trx;
};

/* Tracks the transactions that touch the watches of ws, which may
 * change between events (not during one). */
void binlog_tracker_init(struct binlog_tracker *t, struct binlog_watchset *ws);
/* Feeds one event; calls the watches' notify at each commit, in no
 * particular order, each touched watch once. */
void binlog_tracker_feed(struct binlog_tracker *t,
                         const struct binlog_event *ev);
/* Forgets an open transaction (the stream broke in its middle). */
void binlog_tracker_reset(struct binlog_tracker *t);

#endif
