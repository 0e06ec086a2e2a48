/*
 * fuzz_row: a row's values into AMQP properties and headers, as a publish
 * sends them (publisher_encode_row: the headers column's JSON, built-in
 * headers, the 255-byte limits, the frame-size estimate).  Fields are
 * separated by NUL bytes: event_id, aggregate_type, aggregate_id,
 * event_type, traceparent, headers, exchange, routing_key; "~" is SQL
 * NULL.  Whatever is accepted must encode within the frame and decode
 * back to the same headers.
 */
#include <amqp.h>
#include <amqp_framing.h>
#include <stdbool.h>
#include <stdio.h>

#include "fuzz.h"
#include "publisher.h"

enum {
    F_EVENT_ID,
    F_AGG_TYPE,
    F_AGG_ID,
    F_TYPE,
    F_TRACE,
    F_HEADERS,
    F_EXCHANGE,
    F_KEY,
    NFIELDS
};

/* The frame header (7), its end byte, and the content header's fixed
 * class, weight and body size (12). */
#define FRAME_OVERHEAD (8 + 12)

static struct publisher *pub;
static struct broker_config broker = {.name = "fuzz"};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pub = publisher_new(&broker, "fuzz");
    return 0;
}

static bool
bytes_eq(amqp_bytes_t a, amqp_bytes_t b)
{
    return a.len == b.len &&
           (a.len == 0 || memcmp(a.bytes, b.bytes, a.len) == 0);
}

static void
check_encoding(amqp_basic_properties_t *props, size_t frame_max)
{
    size_t cap = 4 * frame_max + 65536;
    char *buf = malloc(cap);
    int n = amqp_encode_properties(AMQP_BASIC_CLASS, props,
                                   (amqp_bytes_t){cap, buf});
    FUZZ_ASSERT(n >= 0);
    if ((size_t)n + FRAME_OVERHEAD > frame_max) {
        fprintf(stderr, "encoded %d bytes, frame_max %zu\n", n, frame_max);
        FUZZ_ASSERT(!"accepted properties do not fit in one frame");
    }
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_basic_properties_t *back = NULL;
    FUZZ_ASSERT(amqp_decode_properties(AMQP_BASIC_CLASS, &pool,
                                       (amqp_bytes_t){(size_t)n, buf},
                                       (void **)&back) == 0);
    FUZZ_ASSERT(bytes_eq(back->message_id, props->message_id));
    FUZZ_ASSERT(back->headers.num_entries == props->headers.num_entries);
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *a = &props->headers.entries[i];
        const amqp_table_entry_t *b = &back->headers.entries[i];
        FUZZ_ASSERT(bytes_eq(a->key, b->key));
        FUZZ_ASSERT(a->value.kind == b->value.kind);
        if (a->value.kind == AMQP_FIELD_KIND_UTF8)
            FUZZ_ASSERT(bytes_eq(a->value.value.bytes, b->value.value.bytes));
    }
    empty_amqp_pool(&pool);
    free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    const char *field[NFIELDS] = {0};
    size_t i = 0;
    for (char *p = text; i < NFIELDS && p <= text + size; i++) {
        field[i] = strcmp(p, "~") == 0 ? NULL : p;
        p += strlen(p) + 1;
    }
    struct outbox_row row = {
        .id = size,
        .event_id = field[F_EVENT_ID],
        .aggregate_type = field[F_AGG_TYPE],
        .aggregate_id = field[F_AGG_ID],
        .event_type = field[F_TYPE],
        .traceparent = field[F_TRACE],
        .headers = field[F_HEADERS],
        .exchange = i > F_EXCHANGE ? field[F_EXCHANGE] : "",
        .routing_key = i > F_KEY ? field[F_KEY] : "key",
        .created_us = (int64_t)size * 1000003,
    };
    static const size_t frames[] = {4096, 131072};
    for (size_t f = 0; f < sizeof(frames) / sizeof(*frames); f++) {
        amqp_basic_properties_t props;
        char why[300] = "";
        if (publisher_encode_row(pub, &row, frames[f], &props, why,
                                 sizeof(why)) == 0)
            check_encoding(&props, frames[f]);
        else
            FUZZ_ASSERT(why[0] != '\0');
    }
    free(text);
    return 0;
}
