/*
 * json: a small strict JSON (RFC 8259) reader for the outbox's headers
 * column.  Walks the members of one object without allocating.
 */
#ifndef OUTBOXD_JSON_H
#define OUTBOXD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Nesting deeper than this is refused, so hostile input cannot overflow
 * the stack. */
#define JSON_MAX_DEPTH 64

enum json_type {
    JSON_STRING,
    JSON_INT,    /* an integer that fits int64_t */
    JSON_DOUBLE, /* a fraction, an exponent, or an integer too large */
    JSON_BOOL,
    JSON_NULL,
    JSON_OBJECT, /* nested: str/len is its raw JSON text */
    JSON_ARRAY,
};

struct json_value {
    enum json_type type;
    const char *str; /* STRING: unescaped (may hold NUL); OBJECT/ARRAY: raw */
    size_t len;
    int64_t i;
    double d;
    bool b;
};

/*
 * Called once per member, in document order.  key and str point into the
 * caller's scratch buffer or the text itself and stay valid until
 * json_object_foreach returns.  Returning non-zero stops the walk.
 */
typedef int (*json_member_cb)(void *ctx, const char *key, size_t keylen,
                              const struct json_value *value);

/*
 * Parses text[0..len) as exactly one JSON object and calls cb for each
 * member.  Unescaped strings are written into scratch, which must hold
 * len + 1 bytes.  Returns 0; -1 with the reason and byte offset in err
 * when the text is not a valid JSON object (or not valid UTF-8); or
 * whatever non-zero value cb returned.
 */
int json_object_foreach(const char *text, size_t len, char *scratch,
                        json_member_cb cb, void *ctx, char *err, size_t errlen);

#endif
