/*
 * binlog_parse: reads the few binary-log events that tell when a
 * transaction that wrote an outbox table commits (format description,
 * table map, rows, XID, query, the GTIDs), by the layout of binlog
 * version 4 that MySQL 5.x/8 and MariaDB share; names the others it
 * knows to be harmless, and flags any other as unknown, so that the
 * tracker errs towards waking.  MySQL 8's compressed transactions are
 * opened by binlog_payload.c, whose events come back here one by one.
 */
#include "binlog_parse.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Event types: sql/log_event.h of both servers; MySQL 8.4's enum
 * Log_event_type in libs/mysql/binlog/event/binlog_event.h. */
enum {
    EV_START_V3 = 1,
    EV_QUERY = 2,
    EV_STOP = 3,
    EV_ROTATE = 4,
    EV_INTVAR = 5, /* the next statement's LAST_INSERT_ID, AUTO_INCREMENT */
    EV_RAND = 13,
    EV_USER_VAR = 14,
    EV_FORMAT = 15,
    EV_XID = 16,
    EV_BEGIN_LOAD_QUERY = 17,   /* a LOAD DATA file's first block */
    EV_EXECUTE_LOAD_QUERY = 18, /* the LOAD DATA statement: a query */
    EV_TABLE_MAP = 19,
    EV_WRITE_V1 = 23,
    EV_UPDATE_V1 = 24,
    EV_DELETE_V1 = 25,
    EV_HEARTBEAT = 27,
    EV_IGNORABLE = 28,
    EV_ROWS_QUERY = 29, /* the statement behind rows, as a comment */
    EV_WRITE_V2 = 30,
    EV_UPDATE_V2 = 31,
    EV_DELETE_V2 = 32,
    EV_GTID = 33, /* MySQL from here */
    EV_ANONYMOUS_GTID = 34,
    EV_PREVIOUS_GTIDS = 35,
    EV_TRANSACTION_CONTEXT = 36, /* group replication */
    EV_VIEW_CHANGE = 37,
    EV_XA_PREPARE = 38,
    EV_PARTIAL_UPDATE = 39,
    EV_TRANSACTION_PAYLOAD = 40,  /* 8.0.20 */
    EV_HEARTBEAT_V2 = 41,         /* 8.0.26 */
    EV_GTID_TAGGED = 42,          /* 8.3 */
    EV_MARIA_ANNOTATE_ROWS = 160, /* MariaDB from here */
    EV_MARIA_BINLOG_CHECKPOINT = 161,
    EV_MARIA_GTID = 162, /* starts an event group */
    EV_MARIA_GTID_LIST = 163,
    EV_MARIA_START_ENCRYPTION = 164,
    EV_QUERY_COMPRESSED = 165,
    EV_WRITE_COMPRESSED_V1 = 166,
    EV_UPDATE_COMPRESSED_V1 = 167,
    EV_DELETE_COMPRESSED_V1 = 168,
    EV_WRITE_COMPRESSED = 169,
    EV_UPDATE_COMPRESSED = 170,
    EV_DELETE_COMPRESSED = 171,
};

#define HEADER_V4 19
#define CHECKSUM_LEN 4
/* Format description: binlog version, server version, timestamp, then
 * the header length byte and the post-header lengths. */
#define FDE_FIXED (2 + 50 + 4 + 1)
#define MARIA_GTID_STANDALONE 0x01
/* The header's flags (offset 17, 2 bytes): an event a replica that does
 * not know its type may skip (LOG_EVENT_IGNORABLE_F, both servers). */
#define FLAGS_OFFSET 17
#define FLAG_IGNORABLE 0x80
/* MySQL's Gtid_event: flags (1), SID (16), GNO (8), then optional
 * fields (control_events.cpp, Gtid_event::Gtid_event). */
#define MYSQL_GTID_MIN 25
/* Previous_gtids_event: at least the count of SIDs (8). */
#define MYSQL_PREVIOUS_GTIDS_MIN 8

static uint32_t
le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t
le48(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40;
}

/* Whether a server of this version ends its format event in a checksum
 * algorithm byte: MySQL from 5.6.1, MariaDB from 5.3. */
/* One part of a version number, clamped: the text comes off the wire. */
static long
version_part(const char *s, char **end)
{
    long v = strtol(s, end, 10);
    return v < 0 ? 0 : v > 999 ? 999 : v;
}

/* Whether a server of this version ends its format event in a checksum
 * algorithm byte: MySQL from 5.6.1, MariaDB from 5.3. */
static bool
has_checksum_alg(const char *version, size_t n)
{
    char v[51];
    size_t len = n < sizeof(v) - 1 ? n : sizeof(v) - 1;
    memcpy(v, version, len);
    v[len] = '\0';
    long major = 0, minor = 0, patch = 0;
    char *end;
    major = version_part(v, &end);
    if (*end == '.')
        minor = version_part(end + 1, &end);
    if (*end == '.')
        patch = version_part(end + 1, &end);
    long triple = major * 1000000 + minor * 1000 + patch;
    return strstr(v, "MariaDB") != NULL ? triple >= 5003000 : triple >= 5006001;
}

static int
parse_format(struct binlog_format *fmt, const unsigned char *ev, size_t n,
             char *err, size_t errlen)
{
    if (n < HEADER_V4 + FDE_FIXED) {
        err_set(err, errlen, "format description event of %zu bytes", n);
        return -1;
    }
    const unsigned char *body = ev + HEADER_V4;
    size_t end = n;
    bool crc = false;
    if (has_checksum_alg((const char *)body + 2, 50)) {
        if (n < HEADER_V4 + FDE_FIXED + 1 + CHECKSUM_LEN) {
            err_set(err, errlen, "format description event of %zu bytes", n);
            return -1;
        }
        crc = ev[n - CHECKSUM_LEN - 1] == 1; /* 1: CRC32 */
        end = n - CHECKSUM_LEN - 1;
    }
    uint8_t header_len = body[2 + 50 + 4];
    if (header_len < HEADER_V4) {
        err_set(err, errlen, "event header of %u bytes", header_len);
        return -1;
    }
    memset(fmt, 0, sizeof(*fmt));
    fmt->known = true;
    fmt->crc32 = crc;
    fmt->header_len = header_len;
    size_t npost = end - (HEADER_V4 + FDE_FIXED);
    for (size_t i = 0; i < npost && i + 1 < sizeof(fmt->post_len); i++)
        fmt->post_len[i + 1] = body[FDE_FIXED + i];
    return 0;
}

static uint8_t
post_len(const struct binlog_format *fmt, uint8_t type, uint8_t fallback)
{
    return fmt->known && fmt->post_len[type] != 0 ? fmt->post_len[type]
                                                  : fallback;
}

/* A table id is 6 bytes, but 4 where the post-header is 6 long (old). */
static uint64_t
table_id_at(const unsigned char *p, uint8_t plen)
{
    return plen == 6 ? le32(p) : le48(p);
}

static int
parse_table_map(const struct binlog_format *fmt, const unsigned char *b,
                size_t n, struct binlog_event *ev)
{
    uint8_t plen = post_len(fmt, EV_TABLE_MAP, 8);
    if (plen < 6 || n < (size_t)plen + 1)
        return -1;
    ev->table_id = table_id_at(b, plen);
    size_t i = plen;
    size_t slen = b[i++];
    if (i + slen + 2 > n)
        return -1;
    ev->schema = (const char *)b + i;
    ev->schema_len = slen;
    i += slen + 1; /* and its NUL */
    size_t tlen = b[i++];
    if (i + tlen > n)
        return -1;
    ev->table = (const char *)b + i;
    ev->table_len = tlen;
    ev->kind = BINLOG_TABLE_MAP;
    ev->body = b;
    ev->body_len = n;
    ev->columns_at = i + tlen + 1; /* past its NUL */
    return 0;
}

static bool
is_write_type(uint8_t t)
{
    return t == EV_WRITE_V1 || t == EV_WRITE_V2 ||
           t == EV_WRITE_COMPRESSED_V1 || t == EV_WRITE_COMPRESSED;
}

static bool
is_change_type(uint8_t t)
{
    return t == EV_UPDATE_V1 || t == EV_DELETE_V1 || t == EV_UPDATE_V2 ||
           t == EV_DELETE_V2 || t == EV_PARTIAL_UPDATE ||
           (t >= EV_UPDATE_COMPRESSED_V1 && t <= EV_DELETE_COMPRESSED_V1) ||
           t == EV_UPDATE_COMPRESSED || t == EV_DELETE_COMPRESSED;
}

/* A rows event; an uncompressed write read whole keeps its body, from
 * which binlog_rows.h reads the ids it inserted. */
static int
parse_rows(const struct binlog_format *fmt, uint8_t type,
           const unsigned char *b, size_t n, bool cut, struct binlog_event *ev)
{
    uint8_t plen = post_len(fmt, type, 8);
    if (plen < 6 || n < plen)
        return -1;
    ev->table_id = table_id_at(b, plen);
    ev->kind = is_write_type(type) ? BINLOG_ROWS_WRITE : BINLOG_ROWS_CHANGE;
    ev->rows_update = type != EV_DELETE_V1 && type != EV_DELETE_V2 &&
                      type != EV_DELETE_COMPRESSED_V1 &&
                      type != EV_DELETE_COMPRESSED && !is_write_type(type);
    if ((type == EV_WRITE_V1 || type == EV_WRITE_V2) && !cut) {
        ev->body = b;
        ev->body_len = n;
        ev->post_len = plen;
        ev->rows_v2 = type == EV_WRITE_V2;
    }
    return 0;
}

/* Past blanks and comments to the statement's first keyword. */
static const char *
first_keyword(const char *s, const char *end)
{
    while (s < end) {
        if (isspace((unsigned char)*s)) {
            s++;
        } else if (end - s >= 2 && s[0] == '/' && s[1] == '*') {
            const char *close = s + 2;
            while (close + 1 < end && !(close[0] == '*' && close[1] == '/'))
                close++;
            s = close + 2 <= end ? close + 2 : end;
        } else if (*s == '#' || (end - s >= 3 && s[0] == '-' && s[1] == '-' &&
                                 isspace((unsigned char)s[2]))) {
            while (s < end && *s != '\n')
                s++;
        } else {
            break;
        }
    }
    return s;
}

static bool
keyword_is(const char *s, const char *end, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(end - s) < n || strncasecmp(s, word, n) != 0)
        return false;
    return (size_t)(end - s) == n || !isalnum((unsigned char)s[n]);
}

static void
classify_statement(struct binlog_event *ev)
{
    const char *end = ev->text + ev->text_len;
    const char *k = first_keyword(ev->text, end);
    ev->kind = BINLOG_STATEMENT;
    if (keyword_is(k, end, "BEGIN"))
        ev->kind = BINLOG_BEGIN;
    else if (keyword_is(k, end, "COMMIT"))
        ev->kind = BINLOG_COMMIT;
    else if (keyword_is(k, end, "ROLLBACK"))
        ev->kind = BINLOG_ROLLBACK;
    else if (keyword_is(k, end, "XA"))
        ev->text_xa = true;
    else
        ev->text_inserts = keyword_is(k, end, "INSERT") ||
                           keyword_is(k, end, "REPLACE") ||
                           keyword_is(k, end, "LOAD");
}

/* A query, or EXECUTE_LOAD_QUERY: a query's post-header and 13 bytes
 * more (file id, start and end, duplicate handling), then the same. */
static int
parse_query(const struct binlog_format *fmt, uint8_t type,
            const unsigned char *b, size_t n, bool cut, struct binlog_event *ev)
{
    uint8_t plen =
        post_len(fmt, type, type == EV_EXECUTE_LOAD_QUERY ? 13 + 13 : 13);
    if (plen < 13 || n < plen)
        return -1;
    size_t dblen = b[8];
    size_t vars = (size_t)b[11] | (size_t)b[12] << 8;
    size_t i = plen + vars;
    if (i + dblen + 1 > n)
        return -1;
    ev->schema = (const char *)b + i;
    ev->schema_len = dblen;
    i += dblen + 1;
    ev->text = (const char *)b + i;
    ev->text_len = n - i;
    if (type == EV_QUERY_COMPRESSED || cut) {
        /* The text is compressed, or cut: BEGIN and COMMIT are neither,
         * so this is some other statement, maybe an insert. */
        ev->kind = BINLOG_STATEMENT;
        ev->text_unknown = true;
        ev->text_len = 0;
        return 0;
    }
    classify_statement(ev);
    return 0;
}

static int
parse_maria_gtid(const struct binlog_format *fmt, const unsigned char *b,
                 size_t n, struct binlog_event *ev)
{
    uint8_t plen = post_len(fmt, EV_MARIA_GTID, 19);
    if (plen < 13 || n < 13)
        return -1;
    /* seq_no (8), domain_id (4), flags: a standalone group is one DDL
     * statement with no COMMIT after it. */
    ev->kind = (b[12] & MARIA_GTID_STANDALONE) ? BINLOG_OTHER : BINLOG_BEGIN;
    return 0;
}

/* MySQL's GTID events start a group; the tagged one (8.3) is one
 * mysql::serialization message with no fixed layout, not read further. */
static int
parse_mysql_gtid(uint8_t type, size_t n, struct binlog_event *ev)
{
    if (type != EV_GTID_TAGGED && n < MYSQL_GTID_MIN)
        return -1;
    ev->kind = BINLOG_GTID;
    return 0;
}

/* Events known to change no table: what they are is all there is to
 * read.  Any type not here nor parsed is unknown. */
static bool
is_harmless_type(uint8_t t)
{
    switch (t) {
    case EV_START_V3:
    case EV_STOP:
    case EV_ROTATE:
    case EV_INTVAR:
    case EV_RAND:
    case EV_USER_VAR:
    case EV_BEGIN_LOAD_QUERY:
    case EV_IGNORABLE:
    case EV_ROWS_QUERY:
    case EV_TRANSACTION_CONTEXT:
    case EV_VIEW_CHANGE:
    case EV_XA_PREPARE:
    case EV_MARIA_ANNOTATE_ROWS:
    case EV_MARIA_BINLOG_CHECKPOINT:
    case EV_MARIA_GTID_LIST:
    case EV_MARIA_START_ENCRYPTION:
        return true;
    default:
        return false;
    }
}

/* Events that are not a table's rows nor a statement, by type. */
static int
parse_control(uint8_t type, uint16_t flags, const unsigned char *b, size_t n,
              struct binlog_event *ev)
{
    if (type == EV_GTID || type == EV_ANONYMOUS_GTID || type == EV_GTID_TAGGED)
        return parse_mysql_gtid(type, n, ev);
    if (type == EV_PREVIOUS_GTIDS) {
        ev->kind = BINLOG_PREVIOUS_GTIDS;
        return n < MYSQL_PREVIOUS_GTIDS_MIN ? -1 : 0;
    }
    if (type == EV_TRANSACTION_PAYLOAD) {
        ev->kind = BINLOG_PAYLOAD;
        ev->body = b;
        ev->body_len = n;
    } else if (type == EV_XID) {
        ev->kind = BINLOG_COMMIT;
    } else if (type == EV_HEARTBEAT || type == EV_HEARTBEAT_V2) {
        ev->kind = BINLOG_HEARTBEAT;
    } else if (is_harmless_type(type) || (flags & FLAG_IGNORABLE)) {
        ev->kind = BINLOG_OTHER;
    } else {
        ev->kind = BINLOG_UNKNOWN;
    }
    return 0;
}

/* The event body between the header and the checksum, by type; cut: the
 * body is only the event's head. */
static int
parse_body(const struct binlog_format *fmt, uint8_t type, uint16_t flags,
           const unsigned char *b, size_t n, bool cut, struct binlog_event *ev)
{
    if (type == EV_TABLE_MAP) {
        int rc = parse_table_map(fmt, b, n, ev);
        if (cut)
            ev->body = NULL; /* its columns may be cut too */
        return rc;
    }
    if (is_write_type(type) || is_change_type(type))
        return parse_rows(fmt, type, b, n, cut, ev);
    if (type == EV_QUERY || type == EV_QUERY_COMPRESSED ||
        type == EV_EXECUTE_LOAD_QUERY)
        return parse_query(fmt, type, b, n, cut, ev);
    if (type == EV_MARIA_GTID)
        return parse_maria_gtid(fmt, b, n, ev);
    return parse_control(type, flags, b, n, ev);
}

static uint16_t
event_flags(const unsigned char *e)
{
    return (uint16_t)(e[FLAGS_OFFSET] | e[FLAGS_OFFSET + 1] << 8);
}

int
binlog_parse(struct binlog_format *fmt, const unsigned char *pkt, size_t len,
             struct binlog_event *ev, char *err, size_t errlen)
{
    memset(ev, 0, sizeof(*ev));
    if (len < 1 + HEADER_V4 || pkt[0] != 0x00) {
        err_set(err, errlen, "binlog packet of %zu bytes, not an event", len);
        return -1;
    }
    const unsigned char *e = pkt + 1;
    size_t size = le32(e + 9);
    if (size < HEADER_V4 || size > len - 1) {
        err_set(err, errlen, "binlog event of %zu bytes in a %zu-byte packet",
                size, len - 1);
        return -1;
    }
    ev->type = e[4];
    if (ev->type == EV_FORMAT) {
        if (parse_format(fmt, e, size, err, errlen) < 0)
            return -1;
        ev->kind = BINLOG_FORMAT;
        return 0;
    }
    size_t hlen = fmt->known ? fmt->header_len : HEADER_V4;
    size_t tail = fmt->crc32 ? CHECKSUM_LEN : 0;
    if (size < hlen + tail) {
        err_set(err, errlen, "binlog event of type %u, %zu bytes", ev->type,
                size);
        return -1;
    }
    if (parse_body(fmt, ev->type, event_flags(e), e + hlen, size - hlen - tail,
                   false, ev) < 0) {
        err_set(err, errlen, "binlog event of type %u is malformed (%zu bytes)",
                ev->type, size);
        memset(ev, 0, sizeof(*ev));
        return -1;
    }
    return 0;
}

int
binlog_parse_inner(const struct binlog_format *fmt, const unsigned char *e,
                   size_t len, struct binlog_event *ev, char *err,
                   size_t errlen)
{
    memset(ev, 0, sizeof(*ev));
    size_t hlen = fmt->known ? fmt->header_len : HEADER_V4;
    size_t size = len >= HEADER_V4 ? le32(e + 9) : 0;
    if (len < hlen || size < hlen) {
        err_set(err, errlen, "event of %zu bytes in a transaction payload",
                len < hlen ? len : size);
        return -1;
    }
    ev->type = e[4];
    size_t n = (size < len ? size : len) - hlen;
    if (ev->type == EV_FORMAT || ev->type == EV_TRANSACTION_PAYLOAD) {
        ev->kind = BINLOG_UNKNOWN; /* never written inside a payload */
        return 0;
    }
    if (parse_body(fmt, ev->type, event_flags(e), e + hlen, n, size > len, ev) <
        0) {
        err_set(err, errlen,
                "event of type %u in a transaction payload is malformed "
                "(%zu bytes)",
                ev->type, size);
        memset(ev, 0, sizeof(*ev));
        return -1;
    }
    return 0;
}

/* ---- the tracker ---- */

void
binlog_tracker_init(struct binlog_tracker *t, struct binlog_watchset *ws)
{
    t->watches = ws;
    binlog_tracker_reset(t);
}

/* Every touched watch untouched, the map of the transaction forgotten. */
static void
forget(struct binlog_tracker *t)
{
    struct binlog_watch *w = t->watches->touched;
    while (w != NULL) {
        struct binlog_watch *next = w->next_touched;
        w->touched = w->inserted = w->reopens = w->ids_lost = false;
        w->nids = 0;
        w->next_touched = NULL;
        w = next;
    }
    t->watches->touched = NULL;
    t->nmap = t->map_next = 0;
    t->in_trx = false;
    t->trx++;
    t->wake_all = false;
}

void
binlog_tracker_reset(struct binlog_tracker *t)
{
    forget(t);
}

void
binlog_tracker_watch_added(struct binlog_tracker *t, struct binlog_watch *w)
{
    w->partial_trx = t->in_trx ? t->trx + 1 : 0;
}

static void
map_table(struct binlog_tracker *t, const struct binlog_event *ev)
{
    size_t slot = t->nmap;
    for (size_t i = 0; i < t->nmap; i++)
        if (t->map[i].table_id == ev->table_id) {
            slot = i;
            break;
        }
    if (slot == BINLOG_MAP_SLOTS) {
        slot = t->map_next;
        t->map_next = (slot + 1) % BINLOG_MAP_SLOTS;
    } else if (slot == t->nmap) {
        t->nmap++;
    }
    /* Names longer than a table map can carry match no watch. */
    bool fits =
        ev->schema_len <= BINLOG_NAME_MAX && ev->table_len <= BINLOG_NAME_MAX;
    t->map[slot].table_id = ev->table_id;
    t->map[slot].schema_len = fits ? (uint8_t)ev->schema_len : 0;
    t->map[slot].table_len = fits ? (uint8_t)ev->table_len : 0;
    memcpy(t->map[slot].schema, ev->schema, t->map[slot].schema_len);
    memcpy(t->map[slot].table, ev->table, t->map[slot].table_len);
    t->map[slot].hash =
        binlog_watch_hash(t->map[slot].schema, t->map[slot].schema_len,
                          t->map[slot].table, t->map[slot].table_len);
    /* Columns only for a watched table: the stream maps every table the
     * server writes.  A watch added after the map sees the transaction
     * in part, its ids unknown anyway (binlog_tracker_watch_added). */
    t->map[slot].columns.n = 0;
    if (ev->body != NULL &&
        binlog_watch_next(t->watches, NULL, t->map[slot].hash,
                          t->map[slot].schema, t->map[slot].schema_len,
                          t->map[slot].table, t->map[slot].table_len) != NULL)
        (void)binlog_columns_read(&t->map[slot].columns, ev->body, ev->body_len,
                                  ev->columns_at);
}

static void
touch(struct binlog_tracker *t, struct binlog_watch *w, bool inserted)
{
    if (!w->touched) {
        w->touched = true;
        w->next_touched = t->watches->touched;
        t->watches->touched = w;
    }
    w->inserted = w->inserted || inserted;
}

/* How a rows event or a statement touched a table. */
enum touch_kind { TOUCH_INSERT, TOUCH_DELETE, TOUCH_REOPEN };

/* The ids an insert's rows event wrote into w's table, added to w's:
 * read by the column the watch names, and only where the table has as
 * many columns as the map says, so that a table altered since its
 * columns were counted reads as unknown rather than misread. */
static void
note_ids(struct binlog_watch *w, const struct binlog_columns *columns,
         const struct binlog_event *ev)
{
    unsigned ncolumns = 0;
    int col = w->id_column != NULL ? w->id_column(w->arg, &ncolumns) : -1;
    size_t got = 0;
    if (w->ids_lost || col < 0 || ev->body == NULL || ncolumns != columns->n ||
        binlog_rows_ids(columns, (unsigned)col, ev->body, ev->body_len,
                        ev->post_len, ev->rows_v2, w->ids + w->nids,
                        BINLOG_IDS_MAX - w->nids, &got) < 0) {
        w->ids_lost = true;
        return;
    }
    w->nids += got;
}

/* Touches every watch of schema.table; rows inserted are read for their
 * ids from rows (by columns), or unknown without it (a statement). */
static void
touch_named(struct binlog_tracker *t, const char *schema, size_t slen,
            const char *table, size_t tlen, enum touch_kind kind,
            const struct binlog_columns *columns,
            const struct binlog_event *rows)
{
    bool inserted = kind == TOUCH_INSERT;
    uint64_t h = binlog_watch_hash(schema, slen, table, tlen);
    for (struct binlog_watch *w = NULL;
         (w = binlog_watch_next(t->watches, w, h, schema, slen, table,
                                tlen));) {
        touch(t, w, inserted);
        w->reopens = w->reopens || kind == TOUCH_REOPEN;
        if (inserted && rows != NULL)
            note_ids(w, columns, rows);
        else if (inserted)
            w->ids_lost = true;
    }
}

static void
rows_seen(struct binlog_tracker *t, const struct binlog_event *ev)
{
    enum touch_kind kind = ev->kind == BINLOG_ROWS_WRITE ? TOUCH_INSERT
                           : ev->rows_update             ? TOUCH_REOPEN
                                                         : TOUCH_DELETE;
    for (size_t i = 0; i < t->nmap; i++)
        if (t->map[i].table_id == ev->table_id) {
            touch_named(t, t->map[i].schema, t->map[i].schema_len,
                        t->map[i].table, t->map[i].table_len, kind,
                        &t->map[i].columns, ev);
            return;
        }
}

/* Bytes past ASCII are letters of an identifier, as MySQL has it. */
static bool
is_ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

/* One identifier of a statement's text, and whether a lone '.' joins it
 * to the one before (schema.table). */
struct ident {
    const char *s;
    size_t n;
    bool dotted;
};

/* The next identifier at or after *p, bare or backquoted; false: none. */
static bool
next_ident(const char **p, const char *end, struct ident *id)
{
    const char *q = *p;
    int dots = 0;
    bool spaces_only = true;
    for (; q < end && !is_ident_char(*q) && *q != '`'; q++) {
        if (*q == '.')
            dots++;
        else if (!isspace((unsigned char)*q))
            spaces_only = false;
    }
    if (q == end)
        return false;
    id->dotted = spaces_only && dots == 1;
    if (*q == '`') {
        const char *close = memchr(q + 1, '`', (size_t)(end - q - 1));
        id->s = q + 1;
        id->n = (size_t)((close != NULL ? close : end) - id->s);
        *p = close != NULL ? close + 1 : end;
        return true;
    }
    for (id->s = q; q < end && is_ident_char(*q); q++)
        ;
    id->n = (size_t)(q - id->s);
    *p = q;
    return true;
}

/* A statement logged as text: a hint by name, which a false match only
 * costs one claim, or one join that reads the head of the aggregate.
 * Each identifier is a table of the default schema, or of the one before
 * it with a dot between.  An insert inserts; any other statement may
 * have made some row unfinished again. */
static void
statement_seen(struct binlog_tracker *t, const struct binlog_event *ev)
{
    if (ev->text_xa) {
        /* An XA transaction's rows were logged at its XA PREPARE, and are
         * seen only now, at a commit that names no table: any watch's. */
        for (size_t i = 0; i < t->watches->n; i++) {
            touch(t, t->watches->all[i], true);
            t->watches->all[i]->ids_lost = t->watches->all[i]->reopens = true;
        }
        return;
    }
    if (ev->text_unknown) {
        for (struct binlog_watch *w = NULL;
             (w = binlog_watch_next_in_schema(t->watches, w, ev->schema,
                                              ev->schema_len));) {
            touch(t, w, true);
            w->ids_lost = w->reopens = true;
        }
        return;
    }
    enum touch_kind kind = ev->text_inserts ? TOUCH_INSERT : TOUCH_REOPEN;
    const char *p = ev->text, *end = ev->text + ev->text_len;
    struct ident prev = {0}, id;
    while (next_ident(&p, end, &id)) {
        if (id.dotted && prev.s != NULL)
            touch_named(t, prev.s, prev.n, id.s, id.n, kind, NULL, NULL);
        else
            touch_named(t, ev->schema, ev->schema_len, id.s, id.n, kind, NULL,
                        NULL);
        prev = id;
    }
}

/* Tells each touched watch, or every watch when part of the transaction
 * could not be read, then forgets the transaction. */
static void
commit(struct binlog_tracker *t)
{
    if (t->wake_all) {
        const struct binlog_ids unknown = {.known = false, .reopens = true};
        for (size_t i = 0; i < t->watches->n; i++)
            t->watches->all[i]->notify(t->watches->all[i]->arg, true, &unknown);
    } else {
        for (struct binlog_watch *w = t->watches->touched; w != NULL;
             w = w->next_touched) {
            bool partial = w->partial_trx == t->trx + 1;
            const struct binlog_ids ids = {.id = w->ids,
                                           .n = w->nids,
                                           .known = !w->ids_lost && !partial,
                                           .reopens = w->reopens || partial};
            w->notify(w->arg, w->inserted, &ids);
        }
    }
    forget(t);
}

void
binlog_tracker_unreadable(struct binlog_tracker *t, const char *why)
{
    if (!t->wake_all) {
        t->wake_all = true;
        t->unreadable++;
        str_copy(t->why, why, sizeof(t->why));
    }
    if (!t->in_trx)
        commit(t);
}

void
binlog_tracker_payload_end(struct binlog_tracker *t)
{
    commit(t);
}

static void
unknown_seen(struct binlog_tracker *t, const struct binlog_event *ev)
{
    char why[64];
    snprintf(why, sizeof(why), "an event of unknown type %u", ev->type);
    binlog_tracker_unreadable(t, why);
}

static void
rollback(struct binlog_tracker *t)
{
    forget(t);
}

void
binlog_tracker_feed(struct binlog_tracker *t, const struct binlog_event *ev)
{
    switch (ev->kind) {
    case BINLOG_TABLE_MAP:
        map_table(t, ev);
        break;
    case BINLOG_ROWS_WRITE:
    case BINLOG_ROWS_CHANGE:
        rows_seen(t, ev);
        break;
    case BINLOG_BEGIN:
        /* A group whose end we did not see still committed: the server
         * logs only committed transactions. */
        commit(t);
        t->in_trx = true;
        break;
    case BINLOG_COMMIT:
        commit(t);
        break;
    case BINLOG_ROLLBACK:
        rollback(t);
        break;
    case BINLOG_STATEMENT:
        statement_seen(t, ev);
        if (!t->in_trx)
            commit(t); /* autocommitted, or a non-transactional table */
        break;
    case BINLOG_GTID:
        /* A new group: the last one ended, seen or not (MySQL writes no
         * BEGIN before DDL, so the group is not open until one comes). */
        commit(t);
        break;
    case BINLOG_UNKNOWN:
        unknown_seen(t, ev);
        break;
    default:
        break;
    }
}
