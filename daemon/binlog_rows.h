/*
 * binlog_rows: the ids of the rows an insert wrote, read from its rows
 * event by the column types its table map gave, so that the claim woken
 * by the commit can lock those rows by primary key rather than read a
 * range.  Pure, like binlog_parse: unit tests and a fuzzer drive it.
 */
#ifndef OUTBOXD_BINLOG_ROWS_H
#define OUTBOXD_BINLOG_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Wider tables are read as unknown: an outbox has about twenty. */
#define BINLOG_COLUMNS_MAX 96

/* A table map's columns: type and metadata each, as the rows events of
 * the table lay their values out. */
struct binlog_columns {
    uint16_t n; /* 0: not known (too wide, or a map not read) */
    uint8_t type[BINLOG_COLUMNS_MAX];
    uint16_t meta[BINLOG_COLUMNS_MAX];
};

/*
 * Reads the columns of a table map's body from at, the byte after the
 * table name's NUL, to the body's end n.  -1: malformed, or a table
 * wider than BINLOG_COLUMNS_MAX; c->n is then 0.
 */
int binlog_columns_read(struct binlog_columns *c, const unsigned char *b,
                        size_t n, size_t at);

/*
 * The values of column id_col of the rows a write rows event inserted,
 * unsigned, into ids (at most max): b and n are the event's body without
 * its checksum, post_len its post-header's length, v2 whether it is a
 * version 2 event (extra data after the post-header).  0 and *nids, or
 * -1 for anything it cannot read to the end: a type it does not know, a
 * NULL or absent id, more rows than max, bytes that do not add up.  A
 * caller that gets -1 does without the ids, never with some of them.
 */
int binlog_rows_ids(const struct binlog_columns *c, unsigned id_col,
                    const unsigned char *b, size_t n, uint8_t post_len, bool v2,
                    uint64_t *ids, size_t max, size_t *nids);

#endif
