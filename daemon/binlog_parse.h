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

#include "binlog_rows.h"
#include "binlog_watch.h"
#include "util.h"

/* What an event is, as far as waking a relay goes. */
enum binlog_kind {
    BINLOG_OTHER,          /* nothing to do with it */
    BINLOG_FORMAT,         /* format description: header and checksum learnt */
    BINLOG_TABLE_MAP,      /* table_id names schema.table for the rows events */
    BINLOG_ROWS_WRITE,     /* rows inserted into table_id */
    BINLOG_ROWS_CHANGE,    /* rows updated or deleted in table_id */
    BINLOG_BEGIN,          /* a transaction starts */
    BINLOG_COMMIT,         /* it committed (an XID, or a COMMIT statement) */
    BINLOG_ROLLBACK,       /* a ROLLBACK statement: what it wrote is void */
    BINLOG_STATEMENT,      /* any other statement, logged as text */
    BINLOG_HEARTBEAT,      /* the server is idle, the stream alive (v1, v2) */
    BINLOG_GTID,           /* MySQL: a transaction's GTID (tagged, anonymous) */
    BINLOG_PREVIOUS_GTIDS, /* MySQL: the GTIDs before this log file */
    BINLOG_PAYLOAD,        /* MySQL 8: a whole transaction's events, in body,
                            * compressed (binlog_payload.h reads them) */
    BINLOG_UNKNOWN,        /* a type this parser does not know, and not
                            * marked ignorable: what it did is unknown */
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
    bool text_unknown; /* STATEMENT: compressed or cut, the text unread */
    bool text_xa;      /* STATEMENT: XA COMMIT and the like, by xid alone */
    /* PAYLOAD: between header and checksum.  TABLE_MAP and an uncompressed
     * write rows event read whole: the same, for binlog_rows.h. */
    const unsigned char *body;
    size_t body_len;
    size_t columns_at; /* TABLE_MAP: past the table's name, in body */
    uint8_t post_len;  /* rows: the post-header's length */
    bool rows_v2;      /* rows: version 2, extra data after it */
    bool rows_update;  /* rows: updated, not inserted or deleted */
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

/*
 * Parses one event of a TRANSACTION_PAYLOAD's payload: no OK byte and no
 * checksum (MySQL never checksums them), the header's length as fmt
 * says.  len may be less than the event's size (a head of it): the body
 * is what there is, and a statement whose text is cut reads as unknown.
 * A format description or a payload inside a payload is BINLOG_UNKNOWN.
 */
int binlog_parse_inner(const struct binlog_format *fmt, const unsigned char *e,
                       size_t len, struct binlog_event *ev, char *err,
                       size_t errlen) __attribute__((warn_unused_result));

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
        struct binlog_columns columns; /* for the ids of its inserts */
    } map[BINLOG_MAP_SLOTS];
    size_t nmap, map_next;
    bool in_trx;
    uint64_t trx; /* transactions forgotten so far: names the open one */
    /* Something of the open transaction could not be read: its commit
     * wakes every watch.  unreadable counts such transactions, why says
     * what the last one was. */
    bool wake_all;
    uint64_t unreadable;
    char why[160];
};

/* Tracks the transactions that touch the watches of ws, which may
 * change between events (not during one). */
void binlog_tracker_init(struct binlog_tracker *t, struct binlog_watchset *ws);
/* Feeds one event; calls the watches' notify at each commit, in no
 * particular order, each touched watch once, with the ids its inserts
 * wrote where the rows events told them (binlog_rows.h). */
void binlog_tracker_feed(struct binlog_tracker *t,
                         const struct binlog_event *ev);
/* Something of the open transaction cannot be read (why): its commit,
 * or this call outside a transaction, wakes every watch.  Counted once
 * per transaction. */
void binlog_tracker_unreadable(struct binlog_tracker *t, const char *why);
/* A TRANSACTION_PAYLOAD's events were all fed: the payload held a whole
 * committed transaction, so it commits, whether its end was read or not. */
void binlog_tracker_payload_end(struct binlog_tracker *t);
/* w was just added to the tracker's watches: added while a transaction
 * is open, it saw only some of its rows, and that transaction's ids are
 * unknown to it. */
void binlog_tracker_watch_added(struct binlog_tracker *t,
                                struct binlog_watch *w);
/* Forgets an open transaction (the stream broke in its middle). */
void binlog_tracker_reset(struct binlog_tracker *t);

#endif
