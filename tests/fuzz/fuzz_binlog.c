/*
 * fuzz_binlog: a replication stream's packets (each led by a two-byte
 * length) parsed and tracked as the binlog stream does, MySQL 8's
 * compressed transactions opened; every name an event yields must lie
 * inside its own packet.  Seeds: a real MariaDB stream, and MySQL 8
 * streams built to its documented formats (seed_mysql8.py).
 */
#include <stdio.h>

#include "binlog_parse.h"
#include "binlog_payload.h"
#include "fuzz.h"

static void
notify(void *arg, bool inserted)
{
    (void)arg;
    (void)inserted;
}

static void
check_inside(const struct binlog_event *ev, const uint8_t *p, size_t n)
{
    const char *end = (const char *)p + n;
    FUZZ_ASSERT(ev->schema == NULL || ev->schema + ev->schema_len <= end);
    FUZZ_ASSERT(ev->table == NULL || ev->table + ev->table_len <= end);
    FUZZ_ASSERT(ev->text == NULL || ev->text + ev->text_len <= end);
    FUZZ_ASSERT(ev->body == NULL ||
                (const char *)ev->body + ev->body_len <= end);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct binlog_watchset ws;
    static struct binlog_tracker t;
    static struct binlog_payload payload; /* its buffers reused */
    struct binlog_format fmt = {0};
    struct binlog_event ev;
    char err[256];
    if (ws.n == 0) {
        binlog_watch_add(&ws, "shop", "outbox_event", notify, NULL);
        binlog_watch_add(&ws, "billing", "outbox", notify, NULL);
    }
    binlog_tracker_init(&t, &ws);
    while (size >= 2) {
        size_t n = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        if (n > size)
            n = size;
        /* A copy of its own size, so that ASan sees any overread. */
        uint8_t *pkt = malloc(n ? n : 1);
        memcpy(pkt, data, n);
        if (binlog_parse(&fmt, pkt, n, &ev, err, sizeof(err)) == 0) {
            check_inside(&ev, pkt, n);
            binlog_payload_feed(&payload, &fmt, &ev, &t);
        } else {
            FUZZ_ASSERT(err[0] != '\0');
        }
        free(pkt);
        data += n, size -= n;
    }
    return 0;
}
