/*
 * binlog_payload: opens MySQL 8's TRANSACTION_PAYLOAD events.  The
 * layout, from MySQL 8.4's libs/mysql/binlog/event: after the common
 * header (no post-header: TRANSACTION_PAYLOAD_HEADER_LEN is 0), fields of
 * a type, a length and a value, each a length-encoded integer, up to an
 * end mark (codecs/binary.cpp, Transaction_payload::decode), then the
 * payload: whole events, each with its common header and never a
 * checksum (Decompressing_event_object_istream), compressed by zstd or
 * not at all (compression/base.h).  Decompressed as a stream, a chunk at
 * a time, so that memory stays bounded: zstd's window (2 MiB at MySQL's
 * default level 3, at most 128 MiB, zstd's default limit) and the event
 * buffer (BINLOG_PAYLOAD_EVENT_MAX).
 */
#include "binlog_payload.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "util.h"

/* Transaction_payload_event::fields (control_events.h). */
enum {
    FIELD_END_MARK = 0,
    FIELD_PAYLOAD_SIZE = 1,
    FIELD_COMPRESSION_TYPE = 2,
    FIELD_UNCOMPRESSED_SIZE = 3,
};

/* mysql::binlog::event::compression::type (compression/base.h). */
enum {
    COMPRESSION_ZSTD = 0,
    COMPRESSION_NONE = 255,
};

#define HEADER_V4 19
#define EVENT_SIZE_OFFSET 9
#define OUT_CHUNK (64 * 1024)

struct payload_header {
    uint64_t size, compression;
    const unsigned char *data;
};

void
binlog_payload_init(struct binlog_payload *p)
{
    memset(p, 0, sizeof(*p));
}

void
binlog_payload_free(struct binlog_payload *p)
{
    ZSTD_freeDCtx(p->zstd);
    free(p->buf);
    free(p->out);
    binlog_payload_init(p);
}

/* A length-encoded integer (MySQL's net_field_length_ll); false: it does
 * not fit, or is 251 (NULL) or 255, which a header never holds. */
static bool
read_lenenc(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if (*p >= end)
        return false;
    unsigned c = **p;
    size_t n = c < 251    ? 0
               : c == 252 ? 2
               : c == 253 ? 3
               : c == 254 ? 8
                          : SIZE_MAX;
    if (n == SIZE_MAX || (size_t)(end - *p) < 1 + n)
        return false;
    uint64_t x = n == 0 ? c : 0;
    for (size_t i = 0; i < n; i++)
        x |= (uint64_t)(*p)[1 + i] << (8 * i);
    *v = x;
    *p += 1 + n;
    return true;
}

/* The fields up to the end mark, read as MySQL's decoder reads them: a
 * known field's value is a length-encoded integer, an unknown field is
 * skipped by its length; the size and the compression must be there,
 * and the payload within the event. */
static bool
read_header(const unsigned char *b, size_t n, struct payload_header *h)
{
    const unsigned char *p = b, *end = b + n;
    bool have_size = false, have_compression = false;
    uint64_t type, len, v;
    for (;;) {
        if (!read_lenenc(&p, end, &type))
            return false;
        if (type == FIELD_END_MARK)
            break;
        if (!read_lenenc(&p, end, &len))
            return false;
        if (type > FIELD_UNCOMPRESSED_SIZE) {
            if (len > (uint64_t)(end - p))
                return false;
            p += len;
        } else if (!read_lenenc(&p, end, &v)) {
            return false;
        } else if (type == FIELD_PAYLOAD_SIZE) {
            h->size = v;
            have_size = true;
        } else if (type == FIELD_COMPRESSION_TYPE) {
            h->compression = v;
            have_compression = true;
        }
    }
    if (!have_size || !have_compression || h->size > (uint64_t)(end - p))
        return false;
    h->data = p;
    return true;
}

static size_t
header_len(const struct binlog_format *fmt)
{
    return fmt->known ? fmt->header_len : HEADER_V4;
}

static size_t
event_size(const struct binlog_payload *p)
{
    const unsigned char *s = p->buf + EVENT_SIZE_OFFSET;
    return (size_t)s[0] | (size_t)s[1] << 8 | (size_t)s[2] << 16 |
           (size_t)s[3] << 24;
}

/* How much of the event being gathered is kept: its header first, then
 * the whole event, or its first EVENT_MAX bytes. */
static size_t
event_want(const struct binlog_payload *p, size_t hlen)
{
    if (p->have < hlen)
        return hlen;
    size_t size = event_size(p);
    return size < BINLOG_PAYLOAD_EVENT_MAX ? size : BINLOG_PAYLOAD_EVENT_MAX;
}

/* The gathered event (or its head) parsed and fed. */
static int
event_done(struct binlog_payload *p, const struct binlog_format *fmt,
           struct binlog_tracker *t, char *why, size_t whylen)
{
    size_t size = event_size(p);
    struct binlog_event ev;
    int rc = binlog_parse_inner(fmt, p->buf, p->have, &ev, why, whylen);
    p->skip = size > p->have ? size - p->have : 0;
    p->have = 0;
    if (rc == 0)
        binlog_tracker_feed(t, &ev);
    return rc;
}

/* n more bytes of the payload's events: each event gathered and fed as
 * soon as it is whole; -1 when they do not add up to events. */
static int
split_events(struct binlog_payload *p, const struct binlog_format *fmt,
             struct binlog_tracker *t, const unsigned char *d, size_t n,
             char *why, size_t whylen)
{
    size_t hlen = header_len(fmt);
    while (n > 0) {
        size_t k = p->skip > 0 ? p->skip : event_want(p, hlen) - p->have;
        k = k < n ? k : n;
        if (p->skip > 0) {
            p->skip -= k;
        } else {
            memcpy(p->buf + p->have, d, k);
            p->have += k;
        }
        d += k, n -= k;
        if (p->skip > 0 || p->have < hlen)
            continue;
        if (event_size(p) < hlen) {
            err_set(why, whylen,
                    "an event of %zu bytes in a transaction "
                    "payload",
                    event_size(p));
            return -1;
        }
        if (p->have == event_want(p, hlen) &&
            event_done(p, fmt, t, why, whylen) < 0)
            return -1;
    }
    return 0;
}

static int
inflate_zstd(struct binlog_payload *p, const struct binlog_format *fmt,
             struct binlog_tracker *t, const unsigned char *in, size_t n,
             char *why, size_t whylen)
{
    if (p->zstd == NULL && (p->zstd = ZSTD_createDCtx()) == NULL) {
        err_set(why, whylen, "no memory to decompress a transaction payload");
        return -1;
    }
    ZSTD_DCtx_reset(p->zstd, ZSTD_reset_session_only);
    ZSTD_inBuffer src = {in, n, 0};
    for (;;) {
        ZSTD_outBuffer dst = {p->out, OUT_CHUNK, 0};
        size_t left = ZSTD_decompressStream(p->zstd, &dst, &src);
        if (ZSTD_isError(left)) {
            err_set(why, whylen, "a transaction payload's zstd frame: %s",
                    ZSTD_getErrorName(left));
            return -1;
        }
        if (split_events(p, fmt, t, p->out, dst.pos, why, whylen) < 0)
            return -1;
        if (left == 0 && src.pos == src.size)
            return 0;
        if (src.pos == src.size && dst.pos < dst.size) {
            err_set(why, whylen,
                    "a transaction payload's zstd frame is "
                    "truncated");
            return -1;
        }
    }
}

/* The payload's events fed to t; -1 with why when not all could be. */
static int
read_payload(struct binlog_payload *p, const struct binlog_format *fmt,
             const struct binlog_event *ev, struct binlog_tracker *t, char *why,
             size_t whylen)
{
    struct payload_header h = {0};
    if (!read_header(ev->body, ev->body_len, &h)) {
        err_set(why, whylen, "a transaction payload's header is malformed");
        return -1;
    }
    if (p->buf == NULL) {
        p->buf = xmalloc(BINLOG_PAYLOAD_EVENT_MAX);
        p->out = xmalloc(OUT_CHUNK);
    }
    p->have = p->skip = 0;
    int rc;
    if (h.compression == COMPRESSION_NONE) {
        rc = split_events(p, fmt, t, h.data, (size_t)h.size, why, whylen);
    } else if (h.compression == COMPRESSION_ZSTD) {
        rc = inflate_zstd(p, fmt, t, h.data, (size_t)h.size, why, whylen);
    } else {
        err_set(why, whylen, "a transaction payload compressed by type %llu",
                (unsigned long long)h.compression);
        return -1;
    }
    if (rc == 0 && (p->have != 0 || p->skip != 0)) {
        err_set(why, whylen, "a transaction payload ends inside an event");
        rc = -1;
    }
    return rc;
}

void
binlog_payload_feed(struct binlog_payload *p, const struct binlog_format *fmt,
                    const struct binlog_event *ev, struct binlog_tracker *t)
{
    if (ev->kind != BINLOG_PAYLOAD) {
        binlog_tracker_feed(t, ev);
        return;
    }
    char why[ERR_LEN];
    if (read_payload(p, fmt, ev, t, why, sizeof(why)) < 0) {
        p->have = p->skip = 0;
        binlog_tracker_unreadable(t, why);
    }
    binlog_tracker_payload_end(t);
}
