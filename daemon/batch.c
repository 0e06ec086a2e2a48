/*
 * batch: claimed rows, their arena, and the per-row state machine with
 * its one legal set of transitions.
 */
#include "batch.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "util.h"

#define ARENA_CHUNK (64 * 1024)
#define ARENA_FIRST_CHUNK 4096

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    bool mapped; /* its own mapping: munmap gives it back to the kernel */
    uint64_t spared_ms; /* when it joined the spares */
    /* Aligned whatever the fields above: the arena holds pointer arrays
     * (outbox_row.columns) as well as strings. */
    _Alignas(max_align_t) char data[];
};

static const char *const status_names[OUTBOX_STATUS_COUNT] = {
    "PENDING", "PROCESSING", "SENT", "RETRY", "DEAD"};

static const char *const row_state_names[ROW_STATE_COUNT] = {
    "claimed", "published", "acked", "failed", "rejected", "released"};

/* allowed[from] is a bit set of the states a row may enter from there. */
#define BIT(s) (1u << (s))
static const unsigned allowed[ROW_STATE_COUNT] = {
    [ROW_CLAIMED] = BIT(ROW_PUBLISHED) | BIT(ROW_REJECTED) | BIT(ROW_RELEASED),
    /* RELEASED: the outcome is unknown but says nothing against the row
     * (broker blocked, or it closed the channel for another message). */
    [ROW_PUBLISHED] = BIT(ROW_ACKED) | BIT(ROW_FAILED) | BIT(ROW_RELEASED),
};

const char *
outbox_status_name(enum outbox_status s)
{
    return s < OUTBOX_STATUS_COUNT ? status_names[s] : "?";
}

int
outbox_status_parse(const char *name)
{
    for (int i = 0; i < OUTBOX_STATUS_COUNT; i++)
        if (strcmp(name, status_names[i]) == 0)
            return i;
    return -1;
}

const char *
row_state_name(enum row_state s)
{
    return s < ROW_STATE_COUNT ? row_state_names[s] : "?";
}

void
batch_init(struct outbox_batch *b)
{
    memset(b, 0, sizeof(*b));
    b->due_in_ms = UINT64_MAX;
}

/*
 * Mappings given back while rows flow stay mapped for the next claims:
 * a fresh one costs a page fault and a zeroed page for every 4 KiB the
 * payload fills, a third of outboxd's CPU with 64 KiB rows
 * (docs/performance.md).  Shared by all threads (a batch is claimed on
 * the relay's helper thread and released on its worker), newest first,
 * at most BATCH_SPARE_BYTES, and unmapped once unused for
 * BATCH_SPARE_IDLE_MS, so that an idle relay holds none.
 */
static struct {
    pthread_mutex_t lock;
    struct arena_chunk *head;
    size_t bytes;
} spares = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

/* Whole pages: what the kernel maps, and at most what it keeps resident. */
static size_t
mapping_size(size_t size)
{
    size_t page = 4096;
    return (sizeof(struct arena_chunk) + size + page - 1) / page * page;
}

/* A spare at most a quarter larger than asked for: the pages it keeps
 * resident are bounded by what the batch would have mapped anyway. */
static struct arena_chunk *
spare_take(size_t size)
{
    size_t want = mapping_size(size);
    pthread_mutex_lock(&spares.lock);
    struct arena_chunk **at = &spares.head, *c = NULL;
    for (; *at != NULL; at = &(*at)->next) {
        size_t have = mapping_size((*at)->size);
        if (have >= want && have - want <= want / 4) {
            c = *at;
            *at = c->next;
            spares.bytes -= have;
            break;
        }
    }
    pthread_mutex_unlock(&spares.lock);
    return c;
}

/* false: no room, the caller unmaps it. */
static bool
spare_put(struct arena_chunk *c)
{
    size_t have = mapping_size(c->size);
    pthread_mutex_lock(&spares.lock);
    bool room = spares.bytes + have <= BATCH_SPARE_BYTES;
    if (room) {
        c->spared_ms = clock_ms();
        c->next = spares.head;
        spares.head = c;
        spares.bytes += have;
    }
    pthread_mutex_unlock(&spares.lock);
    return room;
}

/* now_ms may predate a spare another thread put since it was read. */
static bool
spare_stale(const struct arena_chunk *c, uint64_t now_ms)
{
    return now_ms > c->spared_ms &&
           now_ms - c->spared_ms >= BATCH_SPARE_IDLE_MS;
}

void
batch_spares_expire(uint64_t now_ms)
{
    struct arena_chunk *old = NULL;
    pthread_mutex_lock(&spares.lock);
    /* Newest first: everything past the first stale one is stale. */
    struct arena_chunk **at = &spares.head;
    while (*at != NULL && !spare_stale(*at, now_ms))
        at = &(*at)->next;
    old = *at;
    *at = NULL;
    for (struct arena_chunk *c = old; c != NULL; c = c->next)
        spares.bytes -= mapping_size(c->size);
    pthread_mutex_unlock(&spares.lock);
    while (old != NULL) {
        struct arena_chunk *next = old->next;
        munmap(old, mapping_size(old->size));
        old = next;
    }
}

size_t
batch_spare_bytes(void)
{
    pthread_mutex_lock(&spares.lock);
    size_t n = spares.bytes;
    pthread_mutex_unlock(&spares.lock);
    return n;
}

/*
 * A payload larger than a chunk gets a mapping of its own in the bulk
 * store: unmapping returns it to the kernel at once, where malloc, whose
 * mmap threshold rises with each large free, keeps such blocks in heaps
 * that other threads allocate from and RSS stays at the high-water mark.
 */
static struct arena_chunk *
chunk_new(size_t size, bool map)
{
    struct arena_chunk *c = NULL;
    if (map && (c = spare_take(size)) != NULL) {
        c->used = 0;
        c->next = NULL;
        return c;
    }
    if (map) {
        size_t len = mapping_size(size);
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        c = p != MAP_FAILED ? p : NULL;
        size = len - sizeof(*c);
    }
    if (c == NULL) {
        c = xmalloc(sizeof(*c) + size);
        map = false;
    }
    c->size = size;
    c->used = 0;
    c->mapped = map;
    c->next = NULL;
    return c;
}

static void
chunk_free(struct arena_chunk *c)
{
    if (c != NULL && c->mapped) {
        if (!spare_put(c))
            munmap(c, mapping_size(c->size));
    } else {
        free(c);
    }
}

/* Frees all but the newest chunk, the largest (arena_alloc), and that
 * too if it is outsized: a steady stream of batches reuses it. */
static void
arena_trim(struct arena_chunk **head)
{
    struct arena_chunk *c = *head;
    if (c == NULL)
        return;
    struct arena_chunk *older = c->next;
    while (older != NULL) {
        struct arena_chunk *next = older->next;
        chunk_free(older);
        older = next;
    }
    c->next = NULL;
    if (c->size > ARENA_CHUNK || c->mapped) {
        chunk_free(c);
        c = NULL;
    }
    *head = c;
    if (c != NULL)
        c->used = 0;
}

void
batch_release_bulk(struct outbox_batch *b)
{
    arena_trim(&b->bulk);
    b->bulk_bytes = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->rows[i].payload = NULL;
        b->rows[i].payload_len = 0;
        b->rows[i].headers = NULL;
    }
}

void
batch_reset(struct outbox_batch *b)
{
    /* Every claim begins here, idle looks too: spares a drain left go
     * back within BATCH_SPARE_IDLE_MS of its end plus one look. */
    batch_spares_expire(clock_ms());
    batch_release_bulk(b);
    b->n = 0;
    b->candidates = 0;
    b->due_in_ms = UINT64_MAX;
    b->token[0] = '\0';
    b->lean = false;
    b->lean_next = NULL;
    arena_trim(&b->arena);
}

void
batch_free(struct outbox_batch *b)
{
    batch_reset(b);
    chunk_free(b->arena);
    chunk_free(b->bulk);
    free(b->rows);
    memset(b, 0, sizeof(*b));
}

struct outbox_row *
batch_add(struct outbox_batch *b)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 8; /* a join's: a row or two */
        b->rows = xrealloc(b->rows, b->cap * sizeof(*b->rows));
    }
    struct outbox_row *row = &b->rows[b->n++];
    memset(row, 0, sizeof(*row));
    row->state = ROW_CLAIMED;
    return row;
}

/*
 * A fresh arena's first chunk is small, each next one twice its
 * predecessor up to ARENA_CHUNK: a lean join's batch holds a row or two,
 * and sixteen of them took 64 KiB each per transaction, which glibc gave
 * back to the kernel at every transaction's end and faulted in again at
 * the next (a quarter of the worker thread's CPU at 200 events/s).
 */
static size_t
chunk_size(const struct arena_chunk *head, size_t n)
{
    size_t size = head != NULL ? head->size * 2 : ARENA_FIRST_CHUNK;
    if (size > ARENA_CHUNK)
        size = ARENA_CHUNK;
    return size < n ? ARENA_CHUNK : size;
}

/* The head chunk is the one being filled; full ones sit behind it. */
static void *
arena_alloc(struct arena_chunk **head, size_t n, bool map_large)
{
    n = (n + 7) & ~(size_t)7;
    struct arena_chunk *c = *head;
    if (c == NULL || c->size - c->used < n) {
        bool large = n > ARENA_CHUNK;
        c = chunk_new(large ? n : chunk_size(c, n), large && map_large);
        c->next = *head;
        *head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static char *
arena_memdup(struct arena_chunk **head, const void *p, size_t n, bool map)
{
    char *s = arena_alloc(head, n + 1, map);
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

char *
batch_memdup(struct outbox_batch *b, const void *p, size_t n)
{
    return arena_memdup(&b->arena, p, n, false);
}

/* NUL-terminated too: headers are parsed as text. */
char *
batch_bulkdup(struct outbox_batch *b, const void *p, size_t n)
{
    b->bulk_bytes += n;
    return arena_memdup(&b->bulk, p, n, true);
}

char *
batch_strdup(struct outbox_batch *b, const char *s)
{
    return s ? batch_memdup(b, s, strlen(s)) : NULL;
}

char *
batch_sprintf(struct outbox_batch *b, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return batch_strdup(b, buf);
}

int
row_enter_state(struct outbox_batch *b, struct outbox_row *row,
                enum row_state to, const char *error)
{
    if (to >= ROW_STATE_COUNT || !(allowed[row->state] & BIT(to))) {
        log_error(LOG_KV("event_id", row->event_id),
                  "bug: row %llu cannot go from %s to %s",
                  (unsigned long long)row->id, row_state_name(row->state),
                  row_state_name(to));
        return -1;
    }
    log_debug(LOG_KV("event_id", row->event_id), "row %llu: %s -> %s%s%s",
              (unsigned long long)row->id, row_state_name(row->state),
              row_state_name(to), error ? ": " : "", error ? error : "");
    row->state = to;
    if (error != NULL)
        row->error = batch_strdup(b, error);
    return 0;
}

size_t
batch_count_state(const struct outbox_batch *b, enum row_state s)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
        n += b->rows[i].state == s;
    return n;
}

int64_t
batch_expiry_ms_left(int64_t expires_in_us, uint64_t elapsed_ms)
{
    int64_t us = expires_in_us - (int64_t)elapsed_ms * 1000;
    /* Floor, not truncation: -0.5 ms left is expired. */
    return us >= 0 ? us / 1000 : -((-us + 999) / 1000);
}

void
batch_format_expiry(char *buf, size_t len, const char *expires_at,
                    const char *when, int64_t late_us)
{
    /* Tenths of a second in integers: no locale, no float rounding. */
    long long tenths = late_us > 0 ? (late_us + 50000) / 100000 : 0;
    snprintf(buf, len, "expired at %s UTC, %s %lld.%lld s later",
             expires_at ? expires_at : "?", when, tenths / 10, tenths % 10);
}

void
batch_expire_row(struct outbox_batch *b, struct outbox_row *row,
                 const char *error, bool recorded)
{
    if (row_enter_state(b, row, ROW_REJECTED, error) < 0)
        return;
    row->dead = row->expired = true;
    row->recorded = recorded;
}
