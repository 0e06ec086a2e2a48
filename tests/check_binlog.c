/*
 * check_binlog: binlog events built byte by byte, parsed and tracked.
 * MySQL 8's (GTIDs, v2 heartbeats, compressed transactions) are built to
 * MySQL's documented formats, as no MySQL server is installable here.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "binlog.h"
#include "binlog_parse.h"
#include "binlog_payload.h"
#include "util.h"

Suite *binlog_suite(void);

/* Event types the tests build. */
enum {
    T_QUERY = 2,
    T_FORMAT = 15,
    T_XID = 16,
    T_TABLE_MAP = 19,
    T_WRITE = 23,
    T_UPDATE = 24,
    T_DELETE = 25,
    T_HEARTBEAT = 27,
    T_WRITE_V2 = 30,
    T_GTID = 33,
    T_ANONYMOUS_GTID = 34,
    T_PREVIOUS_GTIDS = 35,
    T_PAYLOAD = 40,
    T_HEARTBEAT_V2 = 41,
    T_GTID_TAGGED = 42,
    T_MARIA_GTID = 162,
    T_QUERY_COMPRESSED = 165,
};

struct pkt {
    unsigned char b[1024];
    size_t n;
};

static void
put(struct pkt *p, const void *data, size_t n)
{
    ck_assert_uint_le(p->n + n, sizeof(p->b));
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static void
put_le(struct pkt *p, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        put(p, &c, 1);
    }
}

/* The OK byte and a v4 header; the size is patched by finish. */
static void
start(struct pkt *p, unsigned type)
{
    p->n = 0;
    put_le(p, 0, 1);
    put_le(p, 1700000000, 4);
    put_le(p, type, 1);
    put_le(p, 1, 4);
    put_le(p, 0, 4); /* event size */
    put_le(p, 0, 4);
    put_le(p, 0, 2);
}

static void
finish(struct pkt *p, bool crc)
{
    if (crc)
        put_le(p, 0xdeadbeef, 4);
    size_t size = p->n - 1;
    for (int i = 0; i < 4; i++)
        p->b[1 + 9 + i] = (unsigned char)(size >> (8 * i));
}

static void
build_format(struct pkt *p, bool crc)
{
    char version[50] = "10.11.19-MariaDB-log";
    start(p, T_FORMAT);
    put_le(p, 4, 2);
    put(p, version, sizeof(version));
    put_le(p, 0, 4);
    put_le(p, 19, 1);
    for (unsigned t = 1; t <= 171; t++)
        put_le(p,
               t == T_QUERY         ? 13
               : t == T_TABLE_MAP   ? 8
               : t >= 23 && t <= 25 ? 8
               : t >= 30 && t <= 32 ? 10
               : t == T_MARIA_GTID  ? 19
                                    : 0,
               1);
    put_le(p, crc ? 1 : 0, 1);
    finish(p, true); /* the format event always ends in a checksum */
}

static void
build_table_map(struct pkt *p, uint64_t id, const char *db, const char *tbl,
                bool crc)
{
    start(p, T_TABLE_MAP);
    put_le(p, id, 6);
    put_le(p, 0, 2);
    put_le(p, strlen(db), 1);
    put(p, db, strlen(db) + 1);
    put_le(p, strlen(tbl), 1);
    put(p, tbl, strlen(tbl) + 1);
    put_le(p, 1, 1); /* one column, its type: a long */
    put_le(p, 3, 1);
    finish(p, crc);
}

static void
build_rows(struct pkt *p, unsigned type, uint64_t id, bool crc)
{
    start(p, type);
    put_le(p, id, 6);
    put_le(p, 1, 2);
    if (type == T_WRITE_V2)
        put_le(p, 2, 2);
    put_le(p, 0x0102030405060708ULL, 8); /* some row image */
    finish(p, crc);
}

static void
build_query(struct pkt *p, unsigned type, const char *db, const char *sql,
            bool crc)
{
    start(p, type);
    put_le(p, 7, 4);
    put_le(p, 0, 4);
    put_le(p, strlen(db), 1);
    put_le(p, 0, 2);
    put_le(p, 3, 2); /* status variables */
    put(p, "\x03\x01\x02", 3);
    put(p, db, strlen(db) + 1);
    put(p, sql, strlen(sql));
    finish(p, crc);
}

static void
build_bare(struct pkt *p, unsigned type, bool crc)
{
    start(p, type);
    if (type == T_XID)
        put_le(p, 42, 8);
    finish(p, crc);
}

/* ---- a tracker over two watched tables ---- */

struct seen {
    int commits, inserts;
    int reopens; /* commits that may have made a row unfinished again */
    /* The ids of the last commit that inserted, and whether known. */
    uint64_t ids[BINLOG_IDS_MAX];
    size_t nids;
    bool ids_known;
};

static struct seen seen[2];

static void
notify(void *arg, bool inserted, const struct binlog_ids *ids)
{
    struct seen *s = arg;
    s->commits++;
    s->inserts += inserted;
    s->reopens += ids->reopens;
    if (!inserted)
        return;
    s->ids_known = ids->known;
    s->nids = ids->known ? ids->n : 0;
    for (size_t i = 0; i < s->nids; i++)
        s->ids[i] = ids->id[i];
}

struct fixture {
    struct binlog_format fmt;
    struct binlog_watchset ws;
    struct binlog_tracker t;
    struct binlog_payload payload;
    bool crc;
};

static void
fx_init(struct fixture *f, bool crc)
{
    memset(f, 0, sizeof(*f));
    memset(seen, 0, sizeof(seen));
    f->crc = crc;
    binlog_watchset_init(&f->ws);
    binlog_watch_add(&f->ws, "shop", "outbox_event", notify, &seen[0]);
    binlog_watch_add(&f->ws, "billing", "outbox", notify, &seen[1]);
    binlog_tracker_init(&f->t, &f->ws);
    binlog_payload_init(&f->payload);
    struct pkt p;
    struct binlog_event ev;
    build_format(&p, crc);
    ck_assert_int_eq(binlog_parse(&f->fmt, p.b, p.n, &ev, NULL, 0), 0);
    ck_assert_int_eq(ev.kind, BINLOG_FORMAT);
}

static void
fx_free(struct fixture *f)
{
    binlog_watchset_clear(&f->ws);
    binlog_payload_free(&f->payload);
}

static enum binlog_kind
feed_bytes(struct fixture *f, const unsigned char *b, size_t n)
{
    struct binlog_event ev;
    char err[ERR_LEN];
    ck_assert_msg(binlog_parse(&f->fmt, b, n, &ev, err, sizeof(err)) == 0, "%s",
                  err);
    binlog_payload_feed(&f->payload, &f->fmt, &ev, &f->t);
    return ev.kind;
}

static enum binlog_kind
feed(struct fixture *f, struct pkt *p)
{
    return feed_bytes(f, p->b, p->n);
}

static void
feed_query(struct fixture *f, const char *db, const char *sql)
{
    struct pkt p;
    build_query(&p, T_QUERY, db, sql, f->crc);
    feed(f, &p);
}

/* BEGIN, a table map and rows of one table, no commit yet. */
static void
feed_rows(struct fixture *f, const char *db, const char *tbl, unsigned type,
          uint64_t id)
{
    struct pkt p;
    build_table_map(&p, id, db, tbl, f->crc);
    ck_assert_int_eq(feed(f, &p), BINLOG_TABLE_MAP);
    build_rows(&p, type, id, f->crc);
    feed(f, &p);
}

static void
feed_xid(struct fixture *f)
{
    struct pkt p;
    build_bare(&p, T_XID, f->crc);
    ck_assert_int_eq(feed(f, &p), BINLOG_COMMIT);
}

START_TEST(test_format)
{
    struct fixture f;
    fx_init(&f, true);
    ck_assert(f.fmt.known);
    ck_assert(f.fmt.crc32);
    ck_assert_uint_eq(f.fmt.header_len, 19);
    ck_assert_uint_eq(f.fmt.post_len[T_TABLE_MAP], 8);
    ck_assert_uint_eq(f.fmt.post_len[T_MARIA_GTID], 19);
    fx_free(&f);
    fx_init(&f, false);
    ck_assert(!f.fmt.crc32);
    fx_free(&f);
}
END_TEST

/* The wake comes at the commit, not at the rows. */
START_TEST(test_insert_told_at_commit)
{
    struct fixture f;
    fx_init(&f, _i);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_WRITE, 77);
    ck_assert_int_eq(seen[0].commits, 0);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 1);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].commits, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_rows_v2_and_table_id_reuse)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "billing", "BEGIN");
    feed_rows(&f, "billing", "outbox", T_WRITE_V2, 0x123456789aULL);
    feed_xid(&f);
    ck_assert_int_eq(seen[1].inserts, 1);
    /* The same id now maps another table: no wake for it. */
    feed_query(&f, "billing", "BEGIN");
    feed_rows(&f, "billing", "invoices", T_WRITE_V2, 0x123456789aULL);
    feed_xid(&f);
    ck_assert_int_eq(seen[1].commits, 1);
    fx_free(&f);
}
END_TEST

/* The relay's own updates change the table but insert nothing. */
/* An update is a change, which may make a row unfinished again (a DEAD
 * row retried): the head-free join must hear of it.  A delete cannot. */
START_TEST(test_update_is_a_change_not_an_insert)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_UPDATE, 5);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 1);
    ck_assert_int_eq(seen[0].inserts, 0);
    ck_assert_int_eq(seen[0].reopens, 1);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_DELETE, 5);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 2);
    ck_assert_int_eq(seen[0].reopens, 1);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_WRITE, 6);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[0].reopens, 1);
    fx_free(&f);
}
END_TEST

START_TEST(test_other_tables_do_not_wake)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "orders", T_WRITE, 8);
    feed_rows(&f, "other", "outbox_event", T_WRITE, 9);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 0);
    ck_assert_int_eq(seen[1].commits, 0);
    fx_free(&f);
}
END_TEST

/* The server's binlog filters, as SHOW MASTER STATUS gives them: a do
 * list names what is logged, exactly; else an ignore list what is not,
 * in any letter case (in doubt, not logged: the outbox polls). */
START_TEST(test_filters_say_which_schemas_are_logged)
{
    ck_assert(binlog_filter_logs("", "", "shop"));
    ck_assert(binlog_filter_logs(NULL, NULL, "shop"));
    ck_assert(!binlog_filter_logs("", "shop", "shop"));
    ck_assert(!binlog_filter_logs("", "audit,Shop,tmp", "shop"));
    ck_assert(binlog_filter_logs("", "shopping,sho", "shop"));
    ck_assert(binlog_filter_logs("billing,shop", "", "shop"));
    ck_assert(!binlog_filter_logs("billing", "", "shop"));
    ck_assert(!binlog_filter_logs("Shop", "", "shop"));
    /* A do list makes the ignore list moot, as on the server. */
    ck_assert(binlog_filter_logs("shop", "shop", "shop"));
    ck_assert(!binlog_filter_logs("billing", "billing", "shop"));
}
END_TEST

START_TEST(test_rollback_forgets)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_WRITE, 8);
    feed_query(&f, "shop", "ROLLBACK");
    ck_assert_int_eq(seen[0].commits, 0);
    feed_query(&f, "shop", "BEGIN");
    feed_query(&f, "shop", "COMMIT");
    ck_assert_int_eq(seen[0].commits, 0);
    fx_free(&f);
}
END_TEST

/* Statement-based logging: inserts by name; any other statement naming
 * the table is a change that may make a row unfinished again. */
START_TEST(test_statements)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "shop", "BEGIN");
    feed_query(&f, "shop", "UPDATE outbox_event SET status = 'PENDING'");
    feed_query(&f, "shop", "COMMIT");
    ck_assert_int_eq(seen[0].commits, 1);
    ck_assert_int_eq(seen[0].inserts, 0);
    ck_assert_int_eq(seen[0].reopens, 1);
    ck_assert_int_eq(seen[1].commits, 0);
    feed_query(&f, "shop", "BEGIN");
    feed_query(&f, "shop",
               "/* app */ insert into `outbox_event` (id) values (1)");
    feed_query(&f, "shop", "COMMIT");
    ck_assert_int_eq(seen[0].inserts, 1);
    /* Named with its schema from another default database. */
    feed_query(&f, "", "INSERT INTO billing.outbox VALUES (2)");
    ck_assert_int_eq(seen[1].inserts, 1);
    /* A longer name that contains the table's is another table. */
    feed_query(&f, "shop", "INSERT INTO outbox_event_archive VALUES (3)");
    feed_query(&f, "other", "INSERT INTO outbox_event VALUES (3)");
    ck_assert_int_eq(seen[0].inserts, 1);
    /* An XA transaction's rows, logged at its prepare, are seen at its
     * XA COMMIT, which names no table: every watch is told, in doubt. */
    int reopens[2] = {seen[0].reopens, seen[1].reopens};
    feed_query(&f, "", "XA COMMIT X'31',X'',1");
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(seen[i].reopens, reopens[i] + 1);
        ck_assert(!seen[i].ids_known);
    }
    ck_assert_int_eq(seen[0].inserts, 2);
    fx_free(&f);
}
END_TEST

/* LOAD DATA logged as a statement: EXECUTE_LOAD_QUERY, a query's
 * post-header and 13 bytes more (file id, start and end, duplicates). */
START_TEST(test_load_data_statement)
{
    struct fixture f;
    fx_init(&f, true);
    const char *sql = "LOAD DATA INFILE '/tmp/x' INTO TABLE outbox_event";
    struct pkt p;
    start(&p, 18);
    put_le(&p, 7, 4);
    put_le(&p, 0, 4);
    put_le(&p, 4, 1); /* "shop" */
    put_le(&p, 0, 2);
    put_le(&p, 0, 2); /* no status variables */
    put_le(&p, 1, 4);
    put_le(&p, 19, 4);
    put_le(&p, 27, 4);
    put_le(&p, 0, 1);
    put(&p, "shop", 5);
    put(&p, sql, strlen(sql));
    finish(&p, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_STATEMENT);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].commits, 0);
    fx_free(&f);
}
END_TEST

/* A compressed statement cannot be read: any in the schema wakes. */
START_TEST(test_compressed_statement)
{
    struct fixture f;
    fx_init(&f, true);
    struct pkt p;
    build_query(&p, T_QUERY_COMPRESSED, "shop", "\x78\x9c\x01", true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_STATEMENT);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].inserts, 0);
    fx_free(&f);
}
END_TEST

/* A type the parser does not know may have written anything: every
 * watch wakes, once, at the commit; unless the server marked it one a
 * replica may skip (LOG_EVENT_IGNORABLE_F). */
START_TEST(test_heartbeat_and_unknown)
{
    struct fixture f;
    fx_init(&f, true);
    struct pkt p;
    build_bare(&p, T_HEARTBEAT, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_HEARTBEAT);
    feed_query(&f, "shop", "BEGIN");
    build_bare(&p, 99, true);
    p.b[1 + 17] = 0x80; /* LOG_EVENT_IGNORABLE_F */
    ck_assert_int_eq(feed(&f, &p), BINLOG_OTHER);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits + seen[1].commits, 0);
    ck_assert_uint_eq(f.t.unreadable, 0);
    feed_query(&f, "shop", "BEGIN");
    build_bare(&p, 99, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_UNKNOWN);
    feed_rows(&f, "shop", "orders", T_WRITE, 3);
    ck_assert_int_eq(seen[0].commits + seen[1].commits, 0);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].inserts, 1);
    ck_assert_uint_eq(f.t.unreadable, 1);
    ck_assert_ptr_nonnull(strstr(f.t.why, "99"));
    /* The next transaction is read as usual. */
    feed_query(&f, "shop", "BEGIN");
    feed_rows(&f, "shop", "outbox_event", T_WRITE, 4);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].inserts, 2);
    ck_assert_int_eq(seen[1].inserts, 1);
    fx_free(&f);
}
END_TEST

/* Many tables in one transaction: the map keeps its latest entries. */
START_TEST(test_map_overflow)
{
    struct fixture f;
    fx_init(&f, true);
    struct pkt p;
    feed_query(&f, "shop", "BEGIN");
    for (uint64_t id = 100; id < 100 + 3 * BINLOG_MAP_SLOTS; id++) {
        build_table_map(&p, id, "shop", "t", true);
        feed(&f, &p);
    }
    feed_rows(&f, "shop", "outbox_event", T_WRITE, 1);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].inserts, 1);
    fx_free(&f);
}
END_TEST

/* Every way a packet can lie about its lengths is refused. */
START_TEST(test_malformed)
{
    struct fixture f;
    fx_init(&f, true);
    struct pkt p;
    struct binlog_event ev;
    char err[ERR_LEN];
    build_table_map(&p, 1, "shop", "outbox_event", true);
    for (size_t cut = 0; cut < p.n; cut++) {
        struct pkt q = p;
        q.n = cut;
        finish(&q, false);
        if (cut < 1 + 19) {
            ck_assert_int_eq(binlog_parse(&f.fmt, q.b, cut, &ev, err, 256), -1);
            continue;
        }
        /* Either refused, or a table map whose names lie in the packet. */
        if (binlog_parse(&f.fmt, q.b, q.n, &ev, err, sizeof(err)) == 0 &&
            ev.kind == BINLOG_TABLE_MAP)
            ck_assert(ev.table + ev.table_len <= (const char *)q.b + q.n);
    }
    p.b[0] = 0xff; /* an error packet, not an event */
    ck_assert_int_eq(binlog_parse(&f.fmt, p.b, p.n, &ev, err, 256), -1);
    build_table_map(&p, 1, "shop", "outbox_event", true);
    p.b[1 + 9] = 0xff; /* an event larger than its packet */
    ck_assert_int_eq(binlog_parse(&f.fmt, p.b, p.n, &ev, err, 256), -1);
    ck_assert_ptr_nonnull(strstr(err, "bytes"));
    fx_free(&f);
}
END_TEST

/* Feeds a file of packets, each led by its two-byte length (as
 * fuzz_binlog reads them); returns how many. */
static size_t
feed_file(struct fixture *f, const char *path)
{
    FILE *in = fopen(path, "rb");
    ck_assert_msg(in != NULL, "cannot open %s", path);
    static unsigned char buf[65536];
    size_t len = fread(buf, 1, sizeof(buf), in);
    fclose(in);
    ck_assert_uint_lt(len, sizeof(buf));
    size_t at = 0, events = 0;
    while (at + 2 <= len) {
        size_t n = buf[at] | (size_t)buf[at + 1] << 8;
        ck_assert_uint_le(at + 2 + n, len);
        feed_bytes(f, buf + at + 2, n);
        at += 2 + n;
        events++;
    }
    return events;
}

/*
 * A real stream of MariaDB 10.11 (tests/data/binlog_stream.bin, framed
 * as fuzz_binlog reads it): two rows inserted into shop.outbox_event in
 * one transaction, both updated in another, one inserted with
 * binlog_format STATEMENT, then the database dropped.
 */
START_TEST(test_real_stream)
{
    struct fixture f;
    fx_init(&f, false);
    memset(&f.fmt, 0, sizeof(f.fmt));
    size_t events = feed_file(&f, "data/binlog_stream.bin");
    ck_assert(f.fmt.crc32);
    ck_assert_uint_gt(events, 10);
    ck_assert_uint_eq(f.t.unreadable, 0); /* every MariaDB event known */
    ck_assert_int_eq(seen[0].inserts, 2);
    ck_assert_int_eq(seen[0].commits, 3);
    ck_assert_int_eq(seen[1].commits, 0);
    fx_free(&f);
}
END_TEST

/* ---- the ids of the rows inserted (binlog_rows.h) ---- */

/* Every commit one watch was told of, in order. */
struct told_log {
    int n;
    struct {
        bool inserted, known, reopens;
        size_t nids;
        uint64_t ids[BINLOG_IDS_MAX];
    } c[8];
    /* What the watch answers for its table's id column. */
    int id_column;
    unsigned ncolumns;
};

static void
log_commit(void *arg, bool inserted, const struct binlog_ids *ids)
{
    struct told_log *l = arg;
    ck_assert_int_lt(l->n, 8);
    l->c[l->n].inserted = inserted;
    l->c[l->n].known = ids->known;
    l->c[l->n].reopens = ids->reopens;
    l->c[l->n].nids = ids->known ? ids->n : 0;
    for (size_t i = 0; i < l->c[l->n].nids; i++)
        l->c[l->n].ids[i] = ids->id[i];
    l->n++;
}

static int
log_id_column(void *arg, unsigned *ncolumns)
{
    struct told_log *l = arg;
    *ncolumns = l->ncolumns;
    return l->id_column;
}

static void
watch_logged(struct fixture *f, const char *db, const char *table,
             struct told_log *l)
{
    struct binlog_watch *w = binlog_watch_add(&f->ws, db, table, log_commit, l);
    w->id_column = log_id_column;
    binlog_tracker_watch_added(&f->t, w);
}

static void
assert_told_ids(const struct told_log *l, int commit, const uint64_t *ids,
                size_t n)
{
    ck_assert_int_lt(commit, l->n);
    ck_assert_msg(l->c[commit].inserted && l->c[commit].known,
                  "commit %d: ids not known", commit);
    ck_assert_uint_eq(l->c[commit].nids, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(l->c[commit].ids[i], ids[i]);
}

/*
 * A real stream of MariaDB 10.11 (tests/data/binlog_rows.bin): into
 * rows_sample.typed, whose id is its 23rd of 25 columns behind one of
 * nearly every type (DECIMAL, a CHAR past 255 bytes, ENUM, SET, BIT,
 * TIME(3), DATETIME(6), TIMESTAMP(2), TEXT, BLOB, JSON, a virtual
 * column), three rows in one statement, NULLs in every other column of
 * one, then one more; into sql/outbox.sql's table, the row 42, then 43,
 * 44 and 45 in one transaction of two statements, then 42 updated.  Each
 * table's CREATE TABLE comes first: a statement naming it, a change that
 * may make rows unfinished again, as the update is; the inserts are not.
 */
START_TEST(test_real_rows_ids)
{
    struct fixture f;
    fx_init(&f, false);
    memset(&f.fmt, 0, sizeof(f.fmt));
    struct told_log typed = {.id_column = 22, .ncolumns = 25};
    struct told_log outbox = {.id_column = 0, .ncolumns = 21};
    watch_logged(&f, "rows_sample", "typed", &typed);
    watch_logged(&f, "rows_sample", "outbox_event", &outbox);
    feed_file(&f, "data/binlog_rows.bin");
    ck_assert_uint_eq(f.t.unreadable, 0);
    ck_assert_int_eq(typed.n, 3);
    ck_assert(!typed.c[0].inserted && typed.c[0].reopens);
    assert_told_ids(&typed, 1, (uint64_t[]){5, 6, 300000}, 3);
    assert_told_ids(&typed, 2, (uint64_t[]){300001}, 1);
    ck_assert(!typed.c[1].reopens && !typed.c[2].reopens);
    ck_assert_int_eq(outbox.n, 4);
    ck_assert(!outbox.c[0].inserted && outbox.c[0].reopens);
    assert_told_ids(&outbox, 1, (uint64_t[]){42}, 1);
    assert_told_ids(&outbox, 2, (uint64_t[]){43, 44, 45}, 3);
    ck_assert(!outbox.c[1].reopens && !outbox.c[2].reopens);
    ck_assert(!outbox.c[3].inserted && outbox.c[3].reopens); /* the update */
    fx_free(&f);
}
END_TEST

/* A watch that names the wrong column, or a wrong count, gets no ids
 * rather than wrong ones; so does one that knows no column. */
START_TEST(test_real_rows_ids_unknown)
{
    static const struct {
        int id_column;
        unsigned ncolumns;
    } wrong[] = {{22, 24}, {1, 25}, {-1, 25}, {25, 25}, {5, 25}};
    struct fixture f;
    fx_init(&f, false);
    memset(&f.fmt, 0, sizeof(f.fmt));
    struct told_log typed = {.id_column = wrong[_i].id_column,
                             .ncolumns = wrong[_i].ncolumns};
    watch_logged(&f, "rows_sample", "typed", &typed);
    feed_file(&f, "data/binlog_rows.bin");
    ck_assert_int_eq(typed.n, 3); /* CREATE TABLE, then two inserts */
    ck_assert(typed.c[1].inserted && !typed.c[1].known);
    ck_assert(typed.c[2].inserted && !typed.c[2].known);
    fx_free(&f);
}
END_TEST

/*
 * Every write rows event of the real stream, cut at each of its bytes
 * and copied to a buffer of that size (so that ASan sees an overread):
 * read as unknown, or as a whole number of the first rows; never more.
 */
START_TEST(test_real_rows_cut_anywhere)
{
    FILE *in = fopen("data/binlog_rows.bin", "rb");
    ck_assert(in != NULL);
    static unsigned char buf[65536];
    size_t len = fread(buf, 1, sizeof(buf), in), at = 0, events = 0;
    fclose(in);
    struct binlog_format fmt = {0};
    struct binlog_columns cols = {0};
    while (at + 2 <= len) {
        size_t n = buf[at] | (size_t)buf[at + 1] << 8;
        struct binlog_event ev;
        ck_assert_int_eq(binlog_parse(&fmt, buf + at + 2, n, &ev, NULL, 0), 0);
        at += 2 + n;
        if (ev.kind == BINLOG_TABLE_MAP)
            ck_assert_int_eq(
                binlog_columns_read(&cols, ev.body, ev.body_len, ev.columns_at),
                0);
        if (ev.kind != BINLOG_ROWS_WRITE)
            continue;
        unsigned id_col = cols.n == 25 ? 22 : 0;
        uint64_t ids[8];
        size_t whole, got;
        ck_assert_int_eq(binlog_rows_ids(&cols, id_col, ev.body, ev.body_len,
                                         ev.post_len, ev.rows_v2, ids, 8,
                                         &whole),
                         0);
        for (size_t cut = 0; cut < ev.body_len; cut++) {
            unsigned char *b = malloc(cut ? cut : 1);
            memcpy(b, ev.body, cut);
            int rc = binlog_rows_ids(&cols, id_col, b, cut, ev.post_len,
                                     ev.rows_v2, ids, 8, &got);
            ck_assert(rc == -1 || got < whole);
            free(b);
        }
        events++;
    }
    ck_assert_uint_eq(events, 5);
}
END_TEST

/* A table map of one column, an unsigned BIGINT id. */ /* A table map of one
                                                           column, an unsigned
                                                           BIGINT id. */
static void
build_id_map(struct pkt *p, uint64_t table_id, bool crc)
{
    start(p, T_TABLE_MAP);
    put_le(p, table_id, 6);
    put_le(p, 0, 2);
    put_le(p, 4, 1);
    put(p, "shop", 5);
    put_le(p, 12, 1);
    put(p, "outbox_event", 13);
    put_le(p, 1, 1);
    put_le(p, 8, 1); /* LONGLONG, no metadata */
    put_le(p, 0, 1);
    put_le(p, 0, 1); /* NULL bitmap */
    finish(p, crc);
}

/* A write rows event of those ids (0: a NULL id), v2 with extra data. */
static void
build_id_rows(struct pkt *p, unsigned type, uint64_t table_id,
              const uint64_t *ids, size_t n, bool crc)
{
    start(p, type);
    put_le(p, table_id, 6);
    put_le(p, 1, 2);
    if (type == T_WRITE_V2) {
        put_le(p, 2 + 3, 2);
        put(p, "\x00\x01\x00", 3);
    }
    put_le(p, 1, 1);    /* columns */
    put_le(p, 0x01, 1); /* present */
    for (size_t i = 0; i < n; i++) {
        put_le(p, ids[i] == 0 ? 1 : 0, 1);
        if (ids[i] != 0)
            put_le(p, ids[i], 8);
    }
    finish(p, crc);
}

static void
feed_id_rows(struct fixture *f, unsigned type, const uint64_t *ids, size_t n)
{
    struct pkt p;
    build_id_map(&p, 90, f->crc);
    ck_assert_int_eq(feed(f, &p), BINLOG_TABLE_MAP);
    build_id_rows(&p, type, 90, ids, n, f->crc);
    ck_assert_int_eq(feed(f, &p), BINLOG_ROWS_WRITE);
}

/* One transaction inserting ids, in one v1 rows event. */
static void
feed_id_trx(struct fixture *f, const uint64_t *ids, size_t n)
{
    feed_query(f, "shop", "BEGIN");
    feed_id_rows(f, T_WRITE, ids, n);
    feed_xid(f);
}

/* Built to the documented layout: v1 and v2 events, several per
 * transaction, ids up to 2^64 - 1. */
START_TEST(test_ids_built)
{
    struct fixture f;
    fx_init(&f, true);
    struct told_log l = {.id_column = 0, .ncolumns = 1};
    watch_logged(&f, "shop", "outbox_event", &l);
    feed_query(&f, "shop", "BEGIN");
    feed_id_rows(&f, T_WRITE, (uint64_t[]){7, 8}, 2);
    feed_id_rows(&f, T_WRITE_V2, (uint64_t[]){UINT64_MAX}, 1);
    feed_xid(&f);
    assert_told_ids(&l, 0, (uint64_t[]){7, 8, UINT64_MAX}, 3);
    fx_free(&f);
}
END_TEST

/* A watch added between two rows events of one transaction saw only
 * the second: that transaction's ids are unknown, the next one's known. */
START_TEST(test_ids_watch_added_mid_transaction)
{
    struct fixture f;
    fx_init(&f, true);
    struct told_log l = {.id_column = 0, .ncolumns = 1};
    feed_query(&f, "shop", "BEGIN");
    feed_id_rows(&f, T_WRITE, (uint64_t[]){7}, 1);
    watch_logged(&f, "shop", "outbox_event", &l);
    feed_id_rows(&f, T_WRITE, (uint64_t[]){8}, 1);
    feed_xid(&f);
    ck_assert_int_eq(l.n, 1);
    ck_assert(l.c[0].inserted && !l.c[0].known);
    feed_id_trx(&f, (uint64_t[]){9}, 1);
    assert_told_ids(&l, 1, (uint64_t[]){9}, 1);
    fx_free(&f);
}
END_TEST

/* What leaves a commit's ids unknown: a NULL id, more rows than
 * BINLOG_IDS_MAX, an insert logged as a statement beside the rows, a
 * row cut short; the next transaction's are known again. */
START_TEST(test_ids_unknown)
{
    struct fixture f;
    fx_init(&f, true);
    struct told_log l = {.id_column = 0, .ncolumns = 1};
    watch_logged(&f, "shop", "outbox_event", &l);
    uint64_t many[BINLOG_IDS_MAX + 1];
    for (size_t i = 0; i < BINLOG_IDS_MAX + 1; i++)
        many[i] = i + 1;
    feed_query(&f, "shop", "BEGIN");
    switch (_i) {
    case 0:
        feed_id_rows(&f, T_WRITE, (uint64_t[]){7, 0}, 2);
        break;
    case 1:
        feed_id_rows(&f, T_WRITE, many, BINLOG_IDS_MAX);
        feed_id_rows(&f, T_WRITE, many, 1);
        break;
    case 2:
        feed_id_rows(&f, T_WRITE, many, 1);
        feed_query(&f, "shop", "INSERT INTO outbox_event VALUES (9)");
        break;
    default: {
        struct pkt p;
        build_id_map(&p, 90, f.crc);
        feed(&f, &p);
        build_id_rows(&p, T_WRITE, 90, many, 2, false);
        p.n -= 3; /* the second id cut short */
        finish(&p, f.crc);
        feed(&f, &p);
    }
    }
    feed_xid(&f);
    ck_assert_int_eq(l.n, 1);
    ck_assert(l.c[0].inserted && !l.c[0].known);
    feed_id_trx(&f, many, BINLOG_IDS_MAX);
    assert_told_ids(&l, 1, many, BINLOG_IDS_MAX);
    fx_free(&f);
}
END_TEST

/* ---- MySQL 8: built to MySQL 8.4's formats (libs/mysql/binlog/event) ---- */

/* A length-encoded integer, as MySQL's net_store_length writes it. */
static size_t
lenenc_size(uint64_t v)
{
    return v < 251 ? 1 : v < 65536 ? 3 : v < 16777216 ? 4 : 9;
}

static void
put_lenenc(struct pkt *p, uint64_t v)
{
    size_t n = lenenc_size(v);
    if (n > 1)
        put_le(p, n == 3 ? 252 : n == 4 ? 253 : 254, 1);
    put_le(p, v, n == 1 ? 1 : n - 1);
}

/* A format description as MySQL 8.4 writes it: no "MariaDB" in the
 * version, post-header lengths of types 1 to 42 (binlog_event.h). */
static void
build_mysql_format(struct pkt *p)
{
    char version[50] = "8.4.3";
    start(p, T_FORMAT);
    put_le(p, 4, 2);
    put(p, version, sizeof(version));
    put_le(p, 0, 4);
    put_le(p, 19, 1);
    for (unsigned t = 1; t <= 42; t++)
        put_le(p,
               t == T_QUERY                           ? 13
               : t == T_TABLE_MAP                     ? 8
               : t >= 30 && t <= 32                   ? 10
               : t == T_GTID || t == T_ANONYMOUS_GTID ? 42
                                                      : 0,
               1);
    put_le(p, 1, 1); /* CRC32 */
    finish(p, true);
}

/* Gtid_event (control_events.cpp): flags, SID, GNO, the logical clock's
 * type and two values (the 42-byte post-header), then the commit
 * timestamp, the transaction's length and the server version. */
static void
build_mysql_gtid(struct pkt *p, unsigned type, bool crc)
{
    start(p, type);
    put_le(p, 0, 1);
    for (int i = 0; i < 16; i++)
        put_le(p, type == T_ANONYMOUS_GTID ? 0 : 0xa0 + i, 1);
    put_le(p, type == T_ANONYMOUS_GTID ? 0 : 42, 8);
    put_le(p, 2, 1);
    put_le(p, 7, 8);
    put_le(p, 8, 8);
    put_le(p, 1700000000000000ULL, 7);
    put_lenenc(p, 300);
    put_le(p, 80403, 4);
    finish(p, crc);
}

/* Heartbeat::encode (codecs/binary.cpp): the log's name and position as
 * fields of type, length and value, then the end mark. */
static void
build_heartbeat_v2(struct pkt *p, bool crc)
{
    const char *log = "binlog.000007";
    start(p, T_HEARTBEAT_V2);
    put_lenenc(p, 1);
    put_lenenc(p, strlen(log));
    put(p, log, strlen(log));
    put_lenenc(p, 2);
    put_lenenc(p, lenenc_size(123456));
    put_lenenc(p, 123456);
    put_lenenc(p, 0);
    finish(p, crc);
}

/* The events of a transaction, without checksums, as a payload holds. */
struct blob {
    unsigned char *b;
    size_t n;
};

static void
blob_add(struct blob *bl, const struct pkt *p)
{
    bl->b = realloc(bl->b, bl->n + p->n - 1);
    memcpy(bl->b + bl->n, p->b + 1, p->n - 1); /* no OK byte */
    bl->n += p->n - 1;
}

/* BEGIN, a table's map and rows inserted, and, if xid, the XID. */
static void
blob_insert(struct blob *bl, const char *db, const char *tbl, bool xid)
{
    struct pkt p;
    build_query(&p, T_QUERY, db, "BEGIN", false);
    blob_add(bl, &p);
    build_table_map(&p, 90, db, tbl, false);
    blob_add(bl, &p);
    build_rows(&p, T_WRITE_V2, 90, false);
    blob_add(bl, &p);
    if (xid) {
        build_bare(&p, T_XID, false);
        blob_add(bl, &p);
    }
}

#define ZSTD 0
#define NONE 255

/* Transaction_payload::encode's fields (codecs/binary.cpp): compression
 * type, uncompressed size (when compressed), payload size, end mark;
 * then the payload, here cut to keep bytes when keep is not 0. */
static void
build_payload(struct pkt *p, unsigned compression, const struct blob *ev,
              size_t keep)
{
    size_t cap = ZSTD_compressBound(ev->n), n = ev->n;
    unsigned char *z = malloc(cap);
    if (compression == NONE)
        memcpy(z, ev->b, n);
    else
        n = ZSTD_compress(z, cap, ev->b, ev->n, 3);
    ck_assert(!ZSTD_isError(n));
    n = keep != 0 && keep < n ? keep : n;
    start(p, T_PAYLOAD);
    put_lenenc(p, 2);
    put_lenenc(p, lenenc_size(compression));
    put_lenenc(p, compression);
    if (compression != NONE) {
        put_lenenc(p, 3);
        put_lenenc(p, lenenc_size(ev->n));
        put_lenenc(p, ev->n);
    }
    put_lenenc(p, 1);
    put_lenenc(p, lenenc_size(n));
    put_lenenc(p, n);
    put_lenenc(p, 0);
    put(p, z, n);
    finish(p, true);
    free(z);
}

static void
mysql_init(struct fixture *f)
{
    fx_init(f, true);
    struct pkt p;
    build_mysql_format(&p);
    ck_assert_int_eq(feed(f, &p), BINLOG_FORMAT);
    ck_assert(f->fmt.crc32);
}

/* GTID, payload: one compressed transaction, as MySQL writes it. */
static void
feed_payload(struct fixture *f, unsigned compression, const struct blob *ev,
             size_t keep)
{
    struct pkt p;
    build_mysql_gtid(&p, T_GTID, true);
    ck_assert_int_eq(feed(f, &p), BINLOG_GTID);
    build_payload(&p, compression, ev, keep);
    ck_assert_int_eq(feed(f, &p), BINLOG_PAYLOAD);
}

START_TEST(test_mysql_control_events)
{
    struct fixture f;
    mysql_init(&f);
    struct pkt p;
    build_mysql_gtid(&p, T_GTID, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_GTID);
    build_mysql_gtid(&p, T_ANONYMOUS_GTID, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_GTID);
    /* A tagged GTID's body is a mysql::serialization message, not read:
     * these bytes stand for one. */
    start(&p, T_GTID_TAGGED);
    put_le(&p, 0x0102030405060708ULL, 8);
    finish(&p, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_GTID);
    start(&p, T_PREVIOUS_GTIDS);
    put_le(&p, 0, 8); /* no SID */
    finish(&p, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_PREVIOUS_GTIDS);
    build_heartbeat_v2(&p, true);
    ck_assert_int_eq(feed(&f, &p), BINLOG_HEARTBEAT);
    /* A GTID too short for its SID and GNO is refused. */
    struct binlog_event ev;
    char err[ERR_LEN];
    start(&p, T_GTID);
    for (int i = 0; i < 20; i++)
        put_le(&p, 0, 1);
    finish(&p, true);
    ck_assert_int_eq(binlog_parse(&f.fmt, p.b, p.n, &ev, err, sizeof(err)), -1);
    ck_assert_uint_eq(f.t.unreadable, 0);
    ck_assert_int_eq(seen[0].commits + seen[1].commits, 0);
    fx_free(&f);
}
END_TEST

/* A compressed transaction into a watched table wakes it, once, as an
 * insert; one into another table wakes nothing; zstd or uncompressed. */
START_TEST(test_payload_wakes_its_table)
{
    unsigned compression = _i == 0 ? ZSTD : NONE;
    struct fixture f;
    mysql_init(&f);
    struct blob bl = {0};
    blob_insert(&bl, "shop", "orders", true);
    feed_payload(&f, compression, &bl, 0);
    ck_assert_int_eq(seen[0].commits + seen[1].commits, 0);
    bl.n = 0;
    blob_insert(&bl, "shop", "outbox_event", true);
    feed_payload(&f, compression, &bl, 0);
    ck_assert_int_eq(seen[0].commits, 1);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].commits, 0);
    ck_assert_uint_eq(f.t.unreadable, 0);
    free(bl.b);
    fx_free(&f);
}
END_TEST

/* The ids of rows inserted inside a payload, v2 rows events without
 * checksums, compressed or not, as outside one. */
START_TEST(test_payload_ids)
{
    unsigned compression = _i == 0 ? ZSTD : NONE;
    struct fixture f;
    mysql_init(&f);
    struct told_log l = {.id_column = 0, .ncolumns = 1};
    watch_logged(&f, "shop", "outbox_event", &l);
    struct blob bl = {0};
    struct pkt p;
    build_query(&p, T_QUERY, "shop", "BEGIN", false);
    blob_add(&bl, &p);
    build_id_map(&p, 90, false);
    blob_add(&bl, &p);
    build_id_rows(&p, T_WRITE_V2, 90, (uint64_t[]){11, 12}, 2, false);
    blob_add(&bl, &p);
    build_bare(&p, T_XID, false);
    blob_add(&bl, &p);
    feed_payload(&f, compression, &bl, 0);
    assert_told_ids(&l, 0, (uint64_t[]){11, 12}, 2);
    free(bl.b);
    fx_free(&f);
}
END_TEST

/* A payload holds a whole committed transaction: its end commits, its
 * XID read or not. */
START_TEST(test_payload_is_a_transaction)
{
    struct fixture f;
    mysql_init(&f);
    struct blob bl = {0};
    blob_insert(&bl, "billing", "outbox", false);
    feed_payload(&f, ZSTD, &bl, 0);
    ck_assert_int_eq(seen[1].inserts, 1);
    ck_assert_int_eq(seen[0].commits, 0);
    free(bl.b);
    fx_free(&f);
}
END_TEST

/* What cannot be read wakes every watch, once, and is counted: a frame
 * cut short, corrupt bytes, a header whose payload overruns the event,
 * a compression MySQL does not write, a malformed event inside. */
START_TEST(test_payload_unreadable)
{
    struct fixture f;
    mysql_init(&f);
    struct blob bl = {0};
    blob_insert(&bl, "shop", "orders", true);
    struct pkt p;
    const char *why[] = {"truncated", "zstd", "header", "type 7", "bytes"};
    switch (_i) {
    case 0: /* truncated: half the frame, its size saying so */
        build_mysql_gtid(&p, T_GTID, true);
        feed(&f, &p);
        build_payload(&p, ZSTD, &bl, 20);
        break;
    case 1: /* corrupt: the frame's bytes past its header flipped */
        build_mysql_gtid(&p, T_GTID, true);
        feed(&f, &p);
        build_payload(&p, ZSTD, &bl, 0);
        for (size_t i = p.n - 4 - 12; i < p.n - 4; i++)
            p.b[i] ^= 0x5a;
        break;
    case 2: /* the payload size past the event's end: the fields are
             * 02 03 fc ff 00 (none), 01 01 <size> (under 251), 00 */
        build_payload(&p, NONE, &bl, 0);
        ck_assert_uint_lt(bl.n, 250);
        p.b[1 + 19 + 7] = 250;
        break;
    case 3: /* compressed by a type MySQL does not write */
        build_payload(&p, 7, &bl, 0);
        break;
    default: /* an event inside whose size is less than its header */
        bl.b[9] = 5, bl.b[10] = bl.b[11] = bl.b[12] = 0;
        build_payload(&p, NONE, &bl, 0);
        break;
    }
    ck_assert_int_eq(feed(&f, &p), BINLOG_PAYLOAD);
    ck_assert_int_eq(seen[0].commits, 1);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].commits, 1);
    ck_assert_uint_eq(f.t.unreadable, 1);
    ck_assert_msg(strstr(f.t.why, "payload") && strstr(f.t.why, why[_i]), "%s",
                  f.t.why);
    /* The next transaction is read as usual. */
    bl.n = 0;
    blob_insert(&bl, "shop", "outbox_event", true);
    feed_payload(&f, ZSTD, &bl, 0);
    ck_assert_int_eq(seen[0].commits, 2);
    ck_assert_int_eq(seen[1].commits, 1);
    ck_assert_uint_eq(f.t.unreadable, 1);
    free(bl.b);
    fx_free(&f);
}
END_TEST

/* An event longer than the buffer is read by its head: a rows event's
 * table, and a statement as unknown (its schema's watches wake). */
/* fuzz_binlog's MySQL 8 seeds (seed_mysql8.py) read as meant: the zstd
 * and uncompressed payloads wake their table, the cut one every table. */
START_TEST(test_mysql8_fuzz_seeds)
{
    static const char *const seeds[] = {"seed_mysql8_payload",
                                        "seed_mysql8_payload_none",
                                        "seed_mysql8_payload_cut"};
    char path[128];
    snprintf(path, sizeof(path), "fuzz/corpus/fuzz_binlog/%s", seeds[_i]);
    struct fixture f;
    fx_init(&f, false);
    memset(&f.fmt, 0, sizeof(f.fmt));
    feed_file(&f, path);
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].inserts, _i == 2);
    ck_assert_uint_eq(f.t.unreadable, _i == 2);
    fx_free(&f);
}
END_TEST

START_TEST(test_payload_large_events)
{
    struct fixture f;
    mysql_init(&f);
    struct blob bl = {0};
    struct pkt p;
    build_query(&p, T_QUERY, "billing", "BEGIN", false);
    blob_add(&bl, &p);
    build_table_map(&p, 91, "billing", "outbox", false);
    blob_add(&bl, &p);
    /* A rows event of 1.5 MiB: its header and post-header, then zeros. */
    size_t big = BINLOG_PAYLOAD_EVENT_MAX + BINLOG_PAYLOAD_EVENT_MAX / 2;
    build_rows(&p, T_WRITE_V2, 91, false);
    size_t head = p.n - 1 - 8; /* without the row image */
    bl.b = realloc(bl.b, bl.n + big);
    memcpy(bl.b + bl.n, p.b + 1, head);
    memset(bl.b + bl.n + head, 0, big - head);
    for (int i = 0; i < 4; i++)
        bl.b[bl.n + 9 + i] = (unsigned char)(big >> (8 * i));
    bl.n += big;
    build_bare(&p, T_XID, false);
    blob_add(&bl, &p);
    feed_payload(&f, ZSTD, &bl, 0);
    ck_assert_int_eq(seen[1].inserts, 1);
    ck_assert_int_eq(seen[0].commits, 0);
    ck_assert_uint_eq(f.t.unreadable, 0);
    free(bl.b);
    fx_free(&f);
}
END_TEST

/* ---- the watch list changing (binlog_watch.h) ---- */

/* Transactions of rows inserted into schema.table: BEGIN, map, rows. */
static void
feed_insert(struct fixture *f, const char *db, const char *tbl, uint64_t id)
{
    feed_query(f, db, "BEGIN");
    feed_rows(f, db, tbl, T_WRITE, id);
}

static size_t
count_named(struct binlog_watchset *ws, const char *schema, const char *table)
{
    size_t n = 0;
    uint64_t h =
        binlog_watch_hash(schema, strlen(schema), table, strlen(table));
    for (struct binlog_watch *w = NULL;
         (w = binlog_watch_next(ws, w, h, schema, strlen(schema), table,
                                strlen(table)));)
        n++;
    return n;
}

/* Found by either letter case, twice when watched twice, gone once
 * removed, and the names are the set's own copies. */
START_TEST(test_watch_add_find_remove)
{
    struct binlog_watchset ws;
    binlog_watchset_init(&ws);
    ck_assert_uint_eq(count_named(&ws, "shop", "outbox"), 0);
    char schema[] = "Shop";
    struct binlog_watch *a =
        binlog_watch_add(&ws, schema, "outbox", notify, &seen[0]);
    struct binlog_watch *b =
        binlog_watch_add(&ws, "shop", "outbox", notify, &seen[1]);
    binlog_watch_add(&ws, "shop", "outbox_archive", notify, &seen[1]);
    schema[0] = 'X';
    ck_assert_uint_eq(count_named(&ws, "SHOP", "OUTBOX"), 2);
    ck_assert_uint_eq(count_named(&ws, "sho", "poutbox"), 0);
    binlog_watch_remove(&ws, a);
    ck_assert_uint_eq(count_named(&ws, "shop", "outbox"), 1);
    ck_assert_ptr_eq(
        binlog_watch_next(&ws, NULL, binlog_watch_hash("shop", 4, "outbox", 6),
                          "shop", 4, "outbox", 6),
        b);
    binlog_watch_remove(&ws, b);
    ck_assert_uint_eq(count_named(&ws, "shop", "outbox"), 0);
    ck_assert_uint_eq(count_named(&ws, "shop", "outbox_archive"), 1);
    ck_assert_uint_eq(ws.n, 1);
    binlog_watchset_clear(&ws);
    ck_assert_uint_eq(ws.n, 0);
}
END_TEST

/* A table watched from between its map and its rows is told. */
START_TEST(test_watch_added_mid_transaction)
{
    struct fixture f;
    fx_init(&f, true);
    struct pkt p;
    feed_query(&f, "shop", "BEGIN");
    build_table_map(&p, 40, "shop", "late", true);
    feed(&f, &p);
    binlog_watch_add(&f.ws, "shop", "late", notify, &seen[1]);
    build_rows(&p, T_WRITE, 40, true);
    feed(&f, &p);
    feed_xid(&f);
    ck_assert_int_eq(seen[1].inserts, 1);
    fx_free(&f);
}
END_TEST

/* A watch removed after its rows and before the commit is not told (nor
 * read: ASan would see it), and the other watch still is. */
START_TEST(test_watch_removed_while_touched)
{
    struct fixture f;
    fx_init(&f, true);
    feed_insert(&f, "shop", "outbox_event", 1);
    feed_rows(&f, "billing", "outbox", T_WRITE, 2);
    binlog_watch_remove(&f.ws, f.ws.all[0]); /* shop.outbox_event */
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 0);
    ck_assert_int_eq(seen[1].inserts, 1);
    feed_insert(&f, "shop", "outbox_event", 1);
    feed_xid(&f);
    ck_assert_int_eq(seen[0].commits, 0);
    fx_free(&f);
}
END_TEST

/* Qualified names, spaced or quoted, name their own schema only. */
START_TEST(test_statement_qualified_names)
{
    struct fixture f;
    fx_init(&f, true);
    feed_query(&f, "", "INSERT INTO `billing` . `outbox` VALUES (1)");
    ck_assert_int_eq(seen[1].inserts, 1);
    /* billing's outbox_event, from shop: not shop's. */
    feed_query(&f, "shop", "INSERT INTO billing.outbox_event VALUES (1)");
    ck_assert_int_eq(seen[0].inserts, 0);
    /* Any mention counts (a false match costs one claim), but by its
     * schema: shop.outbox_event from billing is not billing.outbox. */
    feed_query(&f, "billing",
               "INSERT INTO t SELECT id FROM shop . outbox_event");
    ck_assert_int_eq(seen[0].inserts, 1);
    ck_assert_int_eq(seen[1].inserts, 1);
    fx_free(&f);
}
END_TEST

#define TENANTS 1000

static struct seen tenant_seen[TENANTS];

static void
tenant_name(char *buf, size_t size, int i)
{
    snprintf(buf, size, "tenant_%04d", i + 1);
}

/* The longest chain of the schema.table index. */
static size_t
longest_chain(const struct binlog_watchset *ws)
{
    size_t longest = 0;
    for (size_t b = 0; b < ws->nbuckets; b++) {
        size_t n = 0;
        for (const struct binlog_watch *w = ws->by_name[b]; w; w = w->next)
            n++;
        longest = n > longest ? n : longest;
    }
    return longest;
}

/* A thousand tenants, one outbox table each: every commit tells its own
 * tenant alone, by a short chain rather than a scan; half removed, the
 * other half still told. */
START_TEST(test_watch_many_tenants)
{
    struct fixture f;
    fx_init(&f, true);
    memset(tenant_seen, 0, sizeof(tenant_seen));
    char name[32];
    struct binlog_watch *w[TENANTS];
    for (int i = 0; i < TENANTS; i++) {
        tenant_name(name, sizeof(name), i);
        w[i] = binlog_watch_add(&f.ws, name, "outbox", notify, &tenant_seen[i]);
    }
    ck_assert_uint_ge(f.ws.nbuckets, TENANTS);
    ck_assert_uint_le(longest_chain(&f.ws), 8);
    for (int i = 0; i < TENANTS; i += 7) {
        tenant_name(name, sizeof(name), i);
        feed_insert(&f, name, "outbox", (uint64_t)i + 1);
        feed_xid(&f);
    }
    for (int i = 0; i < TENANTS; i++)
        ck_assert_int_eq(tenant_seen[i].inserts, i % 7 == 0);
    for (int i = 0; i < TENANTS; i += 2)
        binlog_watch_remove(&f.ws, w[i]);
    for (int i = 0; i < TENANTS; i++) {
        tenant_name(name, sizeof(name), i);
        feed_insert(&f, name, "outbox", 5);
    }
    feed_xid(&f);
    for (int i = 0; i < TENANTS; i++)
        ck_assert_int_eq(tenant_seen[i].inserts,
                         (i % 7 == 0) + (i % 2 == 1 ? 1 : 0));
    fx_free(&f);
}
END_TEST

/* A compressed statement in one tenant's schema wakes that tenant's
 * watches, found by the schema index. */
START_TEST(test_watch_schema_index)
{
    struct fixture f;
    fx_init(&f, true);
    memset(tenant_seen, 0, sizeof(tenant_seen));
    char name[32];
    for (int i = 0; i < TENANTS; i++) {
        tenant_name(name, sizeof(name), i);
        binlog_watch_add(&f.ws, name, "outbox", notify, &tenant_seen[i]);
    }
    binlog_watch_add(&f.ws, "tenant_0042", "outbox2", notify, &seen[1]);
    struct pkt p;
    build_query(&p, T_QUERY_COMPRESSED, "tenant_0042", "\x78\x9c\x01", true);
    feed(&f, &p);
    for (int i = 0; i < TENANTS; i++)
        ck_assert_int_eq(tenant_seen[i].inserts, i == 41);
    ck_assert_int_eq(seen[1].inserts, 1);
    ck_assert_int_eq(seen[0].inserts, 0);
    fx_free(&f);
}
END_TEST

static void
client_commit_cb(void *arg, bool inserted, const struct binlog_ids *ids)
{
    notify(arg, inserted, ids);
}

static void
client_state_cb(void *arg, bool live)
{
    (void)arg;
    ck_abort_msg("a stream never started told live=%d", live);
}

/* The stream's own list: a client's every watch goes with it, another
 * client's stay, and an unknown one is no error. */
START_TEST(test_stream_add_remove)
{
    struct database_config db = {.host = "127.0.0.1", .port = 1};
    struct binlog_stream *s = binlog_stream_new(&db);
    struct binlog_client a = {
        .commit = client_commit_cb, .state = client_state_cb, .arg = &seen[0]};
    struct binlog_client b = a;
    b.arg = &seen[1];
    binlog_stream_add(s, "shop", "outbox", &a);
    binlog_stream_add(s, "shop", "outbox_archive", &a);
    binlog_stream_add(s, "billing", "outbox", &b);
    ck_assert_uint_eq(binlog_stream_watches(s), 3);
    binlog_stream_remove(s, &seen[0]);
    ck_assert_uint_eq(binlog_stream_watches(s), 1);
    binlog_stream_remove(s, &seen[0]);
    binlog_stream_remove(s, NULL);
    ck_assert_uint_eq(binlog_stream_watches(s), 1);
    binlog_stream_free(s);
}
END_TEST

Suite *
binlog_suite(void)
{
    Suite *s = suite_create("binlog");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_format);
    tcase_add_loop_test(tc, test_insert_told_at_commit, 0, 2);
    tcase_add_test(tc, test_rows_v2_and_table_id_reuse);
    tcase_add_test(tc, test_update_is_a_change_not_an_insert);
    tcase_add_test(tc, test_filters_say_which_schemas_are_logged);
    tcase_add_test(tc, test_other_tables_do_not_wake);
    tcase_add_test(tc, test_rollback_forgets);
    tcase_add_test(tc, test_statements);
    tcase_add_test(tc, test_compressed_statement);
    tcase_add_test(tc, test_load_data_statement);
    tcase_add_test(tc, test_heartbeat_and_unknown);
    tcase_add_test(tc, test_map_overflow);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_real_stream);
    suite_add_tcase(s, tc);
    tc = tcase_create("ids");
    tcase_add_test(tc, test_real_rows_ids);
    tcase_add_loop_test(tc, test_real_rows_ids_unknown, 0, 5);
    tcase_add_test(tc, test_real_rows_cut_anywhere);
    tcase_add_test(tc, test_ids_built);
    tcase_add_test(tc, test_ids_watch_added_mid_transaction);
    tcase_add_loop_test(tc, test_ids_unknown, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("mysql8");
    tcase_add_test(tc, test_mysql_control_events);
    tcase_add_loop_test(tc, test_payload_wakes_its_table, 0, 2);
    tcase_add_loop_test(tc, test_payload_ids, 0, 2);
    tcase_add_test(tc, test_payload_is_a_transaction);
    tcase_add_loop_test(tc, test_payload_unreadable, 0, 5);
    tcase_add_test(tc, test_payload_large_events);
    tcase_add_loop_test(tc, test_mysql8_fuzz_seeds, 0, 3);
    suite_add_tcase(s, tc);
    tc = tcase_create("watch");
    tcase_add_test(tc, test_watch_add_find_remove);
    tcase_add_test(tc, test_watch_added_mid_transaction);
    tcase_add_test(tc, test_watch_removed_while_touched);
    tcase_add_test(tc, test_statement_qualified_names);
    tcase_add_test(tc, test_watch_many_tenants);
    tcase_add_test(tc, test_watch_schema_index);
    tcase_add_test(tc, test_stream_add_remove);
    suite_add_tcase(s, tc);
    return s;
}
