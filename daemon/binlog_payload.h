/*
 * binlog_payload: MySQL 8's TRANSACTION_PAYLOAD event (binlog_transaction_
 * compression=ON), a whole transaction's events in one, zstd-compressed:
 * opened and its events fed to the tracker one by one, as if they had
 * come uncompressed.  Pure but for libzstd: unit tests and a fuzzer
 * drive it.
 */
#ifndef OUTBOXD_BINLOG_PAYLOAD_H
#define OUTBOXD_BINLOG_PAYLOAD_H

#include <stddef.h>

#include "binlog_parse.h"

/* An event inside a payload longer than this is read by its head alone
 * (a rows event's table id, a statement as unknown): the memory a stream
 * holds stays bounded however large the transaction. */
#define BINLOG_PAYLOAD_EVENT_MAX (1024 * 1024)

/* What a stream keeps between payloads: made at the first, reused. */
struct binlog_payload {
    void *zstd;         /* a ZSTD_DCtx */
    unsigned char *buf; /* the event being gathered, up to EVENT_MAX */
    size_t have;        /* its bytes so far */
    size_t skip;        /* bytes of a longer event still to pass over */
    unsigned char *out; /* the decompressor's output, a chunk at a time */
};

void binlog_payload_init(struct binlog_payload *p);
void binlog_payload_free(struct binlog_payload *p);

/*
 * Feeds ev to t: the events of a BINLOG_PAYLOAD one by one, then the
 * payload's end (it held a whole transaction); any other event as it is.
 * A payload that cannot be read whole (a malformed header, a compression
 * other than zstd or none, a corrupt or truncated frame, a malformed
 * event inside) is binlog_tracker_unreadable: every watch wakes, once.
 */
void binlog_payload_feed(struct binlog_payload *p,
                         const struct binlog_format *fmt,
                         const struct binlog_event *ev,
                         struct binlog_tracker *t);

#endif
