/*
 * fuzz_binlog: a replication stream's packets (each led by a two-byte
 * length) parsed and tracked as the binlog stream does, MySQL 8's
 * compressed transactions opened, the ids of rows inserted read; every
 * name an event yields must lie inside its own packet.  Seeds: a real MariaDB
 * stream, and MySQL 8 streams built to its documented formats (seed_mysql8.py).
 */
#include <stdio.h>

#include "binlog_parse.h"
#include "binlog_payload.h"
#include "binlog_rows.h"
#include "fuzz.h"

/* The last table map's columns: the watches' id is its first column. */
static struct binlog_columns last_map;

static void
notify(void *arg, bool inserted, const struct binlog_ids *ids)
{
    (void)arg;
    FUZZ_ASSERT(!inserted || !ids->known || ids->n <= BINLOG_IDS_MAX);
}

static int
id_column(void *arg, unsigned *ncolumns)
{
    (void)arg;
    *ncolumns = last_map.n;
    return last_map.n > 0 ? 0 : -1;
}

/* The ids of a write rows event read by its first and its last column:
 * never more than asked for. */
static void
read_ids(const struct binlog_event *ev)
{
    uint64_t ids[4];
    size_t n;
    if (ev->kind == BINLOG_TABLE_MAP && ev->body != NULL)
        (void)binlog_columns_read(&last_map, ev->body, ev->body_len,
                                  ev->columns_at);
    if (ev->kind != BINLOG_ROWS_WRITE || ev->body == NULL || last_map.n == 0)
        return;
    unsigned cols[2] = {0, last_map.n - 1u};
    for (int i = 0; i < 2; i++)
        if (binlog_rows_ids(&last_map, cols[i], ev->body, ev->body_len,
                            ev->post_len, ev->rows_v2, ids, 4, &n) == 0)
            FUZZ_ASSERT(n <= 4);
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
        binlog_watch_add(&ws, "shop", "outbox_event", notify, NULL)->id_column =
            id_column;
        binlog_watch_add(&ws, "rows_sample", "outbox_event", notify, NULL)
            ->id_column = id_column;
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
            read_ids(&ev);
            binlog_payload_feed(&payload, &fmt, &ev, &t);
        } else {
            FUZZ_ASSERT(err[0] != '\0');
        }
        free(pkt);
        data += n, size -= n;
    }
    return 0;
}
