/*
 * publisher_encode: a row's values as the properties and headers of its
 * AMQP message (docs/contract.md section 7), checked against what the
 * broker can take, before anything is sent.
 */
#include <amqp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "json.h"
#include "publisher_int.h"
#include "util.h"

/* AMQP shortstr fields (message_id, type, exchange, routing key, keys). */
#define SHORTSTR_MAX 255
/* The CloudEvents AMQP binding's application property prefix, with the
 * '_' separator it prefers (JMS selectors refuse ':'). */
#define CE_PREFIX "cloudEvents_"

/* ---- headers ---- */

static amqp_table_entry_t *
header_slot(struct publisher *p, size_t i)
{
    if (i >= p->headers_cap) {
        p->headers_cap = p->headers_cap ? p->headers_cap * 2 : 32;
        p->headers = xrealloc(p->headers, p->headers_cap * sizeof(*p->headers));
    }
    return &p->headers[i];
}

struct header_ctx {
    struct publisher *p;
    size_t n;     /* entries filled */
    size_t fixed; /* the first ones are built-in */
    bool forged;  /* stopped at a CloudEvents attribute, not bad JSON */
    char *err;
    size_t errlen;
};

/*
 * A row header that a CloudEvents consumer would read as an attribute,
 * under either separator of the binding and in any case (some consumers
 * match the prefix so): it could forge or contradict the event's own.
 */
static bool
ce_forged(const struct publisher *p, const char *key, size_t keylen)
{
    size_t n = strlen(CE_PREFIX);
    return p->envelope == ENVELOPE_CLOUDEVENTS && keylen >= n &&
           strncasecmp(key, "cloudEvents", n - 1) == 0 &&
           (key[n - 1] == '_' || key[n - 1] == ':');
}

/* Later duplicates win, as in most JSON readers; built-ins always win. */
static int
add_header_cb(void *arg, const char *key, size_t keylen,
              const struct json_value *v)
{
    struct header_ctx *c = arg;
    if (keylen > SHORTSTR_MAX) {
        err_set(c->err, c->errlen, "key \"%.40s...\" longer than %d bytes", key,
                SHORTSTR_MAX);
        return -1;
    }
    if (ce_forged(c->p, key, keylen)) {
        err_set(c->err, c->errlen,
                "key \"%.*s\" would set a CloudEvents attribute (envelope "
                "cloudevents: outboxd sets those)",
                (int)(keylen > 60 ? 60 : keylen), key);
        c->forged = true;
        return -1;
    }
    if (v->type == JSON_NULL)
        return 0;
    amqp_field_value_t val = {0};
    switch (v->type) {
    case JSON_STRING:
    case JSON_OBJECT:
    case JSON_ARRAY:
        val.kind = AMQP_FIELD_KIND_UTF8;
        val.value.bytes.bytes = (void *)v->str;
        val.value.bytes.len = v->len;
        break;
    case JSON_INT:
        val.kind = AMQP_FIELD_KIND_I64;
        val.value.i64 = v->i;
        break;
    case JSON_DOUBLE:
        val.kind = AMQP_FIELD_KIND_F64;
        val.value.f64 = v->d;
        break;
    case JSON_BOOL:
        val.kind = AMQP_FIELD_KIND_BOOLEAN;
        val.value.boolean = v->b;
        break;
    case JSON_NULL:
        break;
    }
    for (size_t i = 0; i < c->n; i++) {
        amqp_table_entry_t *e = &c->p->headers[i];
        if (e->key.len == keylen && memcmp(e->key.bytes, key, keylen) == 0) {
            if (i >= c->fixed)
                e->value = val;
            return 0;
        }
    }
    amqp_table_entry_t *e = header_slot(c->p, c->n++);
    e->key.bytes = (void *)key;
    e->key.len = keylen;
    e->value = val;
    return 0;
}

static void
fixed_header(struct publisher *p, size_t i, const char *key, const char *val)
{
    amqp_table_entry_t *e = header_slot(p, i);
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(val ? val : "");
}

/* created_at in RFC 3339, UTC, to the microsecond as the column keeps it. */
static const char *
ce_time(struct publisher *p, int64_t created_us)
{
    time_t secs = (time_t)(created_us / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n =
        strftime(p->ce_time, sizeof(p->ce_time), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(p->ce_time + n, sizeof(p->ce_time) - n, ".%06dZ",
             (int)(created_us % 1000000));
    return p->ce_time;
}

/*
 * docs/contract.md section 7: the CloudEvents 1.0 attributes in binary
 * content mode, as application properties named by the AMQP binding;
 * datacontenttype is the content_type property.  Optional ones are left
 * out when the row has nothing to say (the spec forbids empty ones).
 */
static size_t
ce_headers(struct publisher *p, const struct outbox_row *row, size_t n)
{
    fixed_header(p, n++, CE_PREFIX "specversion", "1.0");
    fixed_header(p, n++, CE_PREFIX "id", row->event_id);
    fixed_header(p, n++, CE_PREFIX "source", p->ce_source);
    fixed_header(p, n++, CE_PREFIX "type", row->event_type);
    if (row->aggregate_id != NULL && row->aggregate_id[0] != '\0')
        fixed_header(p, n++, CE_PREFIX "subject", row->aggregate_id);
    if (row->created_us > 0)
        fixed_header(p, n++, CE_PREFIX "time", ce_time(p, row->created_us));
    return n;
}

/* Fills p->headers for row; -1 with the reason when its JSON is bad. */
static int
build_headers(struct publisher *p, const struct outbox_row *row, size_t *count,
              char *err, size_t errlen)
{
    fixed_header(p, 0, "aggregate_type", row->aggregate_type);
    fixed_header(p, 1, "aggregate_id", row->aggregate_id);
    amqp_table_entry_t *e = header_slot(p, 2);
    e->key = amqp_cstring_bytes("outbox_id");
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = (int64_t)row->id;
    size_t n = 3;
    if (row->traceparent != NULL)
        fixed_header(p, n++, "traceparent", row->traceparent);
    if (p->envelope == ENVELOPE_CLOUDEVENTS)
        n = ce_headers(p, row, n);
    *count = n;
    if (row->headers == NULL)
        return 0;
    size_t len = strlen(row->headers);
    if (len + 1 > p->scratch_cap) {
        p->scratch_cap = len + 1 > 4096 ? len + 1 : 4096;
        p->scratch = xrealloc(p->scratch, p->scratch_cap);
    }
    char jerr[200] = "";
    struct header_ctx c = {p, n, n, false, jerr, sizeof(jerr)};
    if (json_object_foreach(row->headers, len, p->scratch, add_header_cb, &c,
                            jerr, sizeof(jerr)) != 0) {
        err_set(err, errlen, "%s: %s",
                c.forged ? "headers refused" : "invalid headers JSON", jerr);
        return -1;
    }
    *count = c.n;
    return 0;
}

/* Upper bound of the encoded content header, to keep it in one frame. */
static size_t
properties_size(const struct outbox_row *row, const amqp_table_entry_t *h,
                size_t n)
{
    size_t size = 64 + strlen(row->event_id) +
                  (row->event_type ? strlen(row->event_type) : 0) +
                  (row->expiration ? 1 + strlen(row->expiration) : 0);
    for (size_t i = 0; i < n; i++)
        size += 1 + h[i].key.len + 1 + 8 +
                (h[i].value.kind == AMQP_FIELD_KIND_UTF8
                     ? h[i].value.value.bytes.len
                     : 0);
    return size;
}

static bool
too_long(const char *s)
{
    return s != NULL && strlen(s) > SHORTSTR_MAX;
}

/* A CloudEvent must have a non-empty id and type (its spec, section 3.1). */
static const char *
ce_problem(const struct outbox_row *row)
{
    if (row->event_id[0] == '\0')
        return "event_id is empty: a CloudEvent needs an id";
    if (row->event_type == NULL || row->event_type[0] == '\0')
        return "event_type is empty: a CloudEvent needs a type";
    return NULL;
}

/* Rows the broker could not take as they are; NULL when fine. */
static const char *
row_problem(const struct publisher *p, const struct outbox_row *row)
{
    if (row->event_id == NULL)
        return "event_id is NULL";
    if (row->exchange == NULL || row->routing_key == NULL)
        return "exchange or routing key not resolved";
    if (too_long(row->event_id))
        return "event_id longer than 255 bytes";
    if (too_long(row->event_type))
        return "event_type longer than 255 bytes";
    if (too_long(row->exchange))
        return "exchange longer than 255 bytes";
    if (too_long(row->routing_key))
        return "routing key longer than 255 bytes";
    return p->envelope == ENVELOPE_CLOUDEVENTS ? ce_problem(row) : NULL;
}

static void
fill_properties(amqp_basic_properties_t *props, const struct outbox_row *row,
                amqp_table_entry_t *headers, size_t nheaders)
{
    memset(props, 0, sizeof(*props));
    props->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG |
                    AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG |
                    AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
                    AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_APP_ID_FLAG;
    props->content_type = amqp_cstring_bytes("application/json");
    props->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props->headers.num_entries = (int)nheaders;
    props->headers.entries = headers;
    props->message_id = amqp_cstring_bytes(row->event_id);
    props->timestamp =
        row->created_us > 0 ? (uint64_t)(row->created_us / 1000000) : 0;
    props->type = amqp_cstring_bytes(row->event_type ? row->event_type : "");
    props->app_id = amqp_cstring_bytes("outboxd");
    /* RabbitMQ's per-message TTL, milliseconds as text: the relay sets
     * it from expires_at (docs/contract.md section 7). */
    if (row->expiration != NULL) {
        props->_flags |= AMQP_BASIC_EXPIRATION_FLAG;
        props->expiration = amqp_cstring_bytes(row->expiration);
    }
}

int
publisher_encode_row(struct publisher *p, const struct outbox_row *row,
                     size_t frame_max, amqp_basic_properties_t *props,
                     char *err, size_t errlen)
{
    size_t nheaders;
    const char *problem = row_problem(p, row);
    if (problem != NULL) {
        err_set(err, errlen, "%s", problem);
        return -1;
    }
    if (build_headers(p, row, &nheaders, err, errlen) < 0)
        return -1;
    size_t size = properties_size(row, p->headers, nheaders);
    size_t limit = frame_max > 8 ? frame_max - 8 : 0;
    if (size > limit) {
        err_set(err, errlen,
                "message properties too large: about %zu bytes, the frame "
                "limit is %zu",
                size, limit);
        return -1;
    }
    fill_properties(props, row, p->headers, nheaders);
    return 0;
}
