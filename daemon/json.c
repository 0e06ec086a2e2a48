/*
 * json: a strict recursive-descent reader for one JSON object, enough to
 * turn the outbox's headers column into AMQP headers.  Rejects anything
 * RFC 8259 rejects, and invalid UTF-8, with the byte offset.
 */
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct parser {
    const char *start, *s, *end;
    char *out; /* scratch cursor for unescaped strings */
    char *err;
    size_t errlen;
};

static int skip_value(struct parser *p, int depth);

static int
fail(struct parser *p, const char *what)
{
    err_set(p->err, p->errlen, "%s at offset %zu", what,
            (size_t)(p->s - p->start));
    return -1;
}

static void
skip_ws(struct parser *p)
{
    while (p->s < p->end &&
           (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static bool
eat(struct parser *p, char c)
{
    skip_ws(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return true;
    }
    return false;
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629), 0 if none. */
static size_t
utf8_len(const unsigned char *s, const unsigned char *end)
{
    size_t n = end - s;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (s[0] >= 0xe0 && s[0] <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f))
            return 0; /* overlong, or a UTF-16 surrogate */
        return 3;
    }
    if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
            (s[3] & 0xc0) != 0x80)
            return 0;
        if ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
            return 0; /* overlong, or past U+10FFFF */
        return 4;
    }
    return 0;
}

static int
hex4(struct parser *p, unsigned *cp)
{
    if (p->end - p->s < 4)
        return fail(p, "truncated \\u escape");
    *cp = 0;
    for (int i = 0; i < 4; i++) {
        char c = *p->s++;
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d == 16) {
            p->s--;
            return fail(p, "bad hex digit in \\u escape");
        }
        *cp = *cp << 4 | d;
    }
    return 0;
}

static void
put_utf8(char **out, unsigned cp)
{
    unsigned char *o = (unsigned char *)*out;
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xc0 | cp >> 6);
        *o++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xe0 | cp >> 12);
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        *o++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (unsigned char)(0xf0 | cp >> 18);
        *o++ = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        *o++ = (unsigned char)(0x80 | (cp & 0x3f));
    }
    *out = (char *)o;
}

/* A \uXXXX escape (p->s just past the 'u'), pairing UTF-16 surrogates. */
static int
unicode_escape(struct parser *p, unsigned *cp)
{
    if (hex4(p, cp) < 0)
        return -1;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return fail(p, "unpaired low surrogate in \\u escape");
    if (*cp < 0xd800 || *cp > 0xdbff)
        return 0;
    unsigned lo;
    if (p->end - p->s < 2 || p->s[0] != '\\' || p->s[1] != 'u')
        return fail(p, "unpaired high surrogate in \\u escape");
    p->s += 2;
    if (hex4(p, &lo) < 0)
        return -1;
    if (lo < 0xdc00 || lo > 0xdfff)
        return fail(p, "unpaired high surrogate in \\u escape");
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return 0;
}

static int
escape(struct parser *p, char **out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (p->s >= p->end)
        return fail(p, "unterminated string");
    char c = *p->s++;
    const char *hit = c != '\0' ? strchr(from, c) : NULL;
    if (hit != NULL) {
        if (out)
            *(*out)++ = to[hit - from];
        return 0;
    }
    if (c != 'u') {
        p->s--;
        return fail(p, "invalid escape in string");
    }
    unsigned cp;
    if (unicode_escape(p, &cp) < 0)
        return -1;
    if (out)
        put_utf8(out, cp);
    return 0;
}

/*
 * A string (p->s at the opening quote).  With out, writes the unescaped
 * bytes there and advances it; without, only validates.
 */
static int
string(struct parser *p, char **out)
{
    p->s++;
    for (;;) {
        if (p->s >= p->end)
            return fail(p, "unterminated string");
        unsigned char c = (unsigned char)*p->s;
        if (c == '"') {
            p->s++;
            return 0;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c == '\\') {
            p->s++;
            if (escape(p, out) < 0)
                return -1;
            continue;
        }
        size_t n = utf8_len((const unsigned char *)p->s,
                            (const unsigned char *)p->end);
        if (n == 0)
            return fail(p, "invalid UTF-8 in string");
        if (out) {
            memcpy(*out, p->s, n);
            *out += n;
        }
        p->s += n;
    }
}

static bool
is_digit(const struct parser *p)
{
    return p->s < p->end && *p->s >= '0' && *p->s <= '9';
}

/* Checks the number grammar; sets *integral when it has no '.' or 'e'. */
static int
scan_number(struct parser *p, bool *integral)
{
    *integral = true;
    if (p->s < p->end && *p->s == '-')
        p->s++;
    if (!is_digit(p))
        return fail(p, "invalid number");
    if (*p->s++ != '0')
        while (is_digit(p))
            p->s++;
    if (p->s < p->end && *p->s == '.') {
        *integral = false;
        p->s++;
        if (!is_digit(p))
            return fail(p, "invalid number");
        while (is_digit(p))
            p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        *integral = false;
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-'))
            p->s++;
        if (!is_digit(p))
            return fail(p, "invalid number");
        while (is_digit(p))
            p->s++;
    }
    return 0;
}

/* Converts through the scratch cursor, which has room (see header). */
static int
number(struct parser *p, struct json_value *v)
{
    const char *begin = p->s;
    bool integral;
    if (scan_number(p, &integral) < 0)
        return -1;
    size_t n = (size_t)(p->s - begin);
    memcpy(p->out, begin, n);
    p->out[n] = '\0';
    if (integral) {
        errno = 0;
        long long i = strtoll(p->out, NULL, 10);
        if (errno == 0) {
            v->type = JSON_INT;
            v->i = i;
            return 0;
        }
    }
    v->type = JSON_DOUBLE;
    v->d = strtod(p->out, NULL);
    return 0;
}

static int
literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return fail(p, "invalid literal");
    p->s += n;
    return 0;
}

/* The members or elements of a nested object or array, validated only. */
static int
skip_container(struct parser *p, int depth, bool object)
{
    char close = object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH)
        return fail(p, "nesting too deep");
    p->s++;
    if (eat(p, close))
        return 0;
    do {
        if (object) {
            skip_ws(p);
            if (p->s >= p->end || *p->s != '"')
                return fail(p, "expected string key");
            if (string(p, NULL) < 0)
                return -1;
            if (!eat(p, ':'))
                return fail(p, "expected ':'");
        }
        if (skip_value(p, depth + 1) < 0)
            return -1;
    } while (eat(p, ','));
    if (!eat(p, close))
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    return 0;
}

static int
skip_value(struct parser *p, int depth)
{
    bool integral;
    skip_ws(p);
    if (p->s >= p->end)
        return fail(p, "expected a value");
    switch (*p->s) {
    case '{':
        return skip_container(p, depth, true);
    case '[':
        return skip_container(p, depth, false);
    case '"':
        return string(p, NULL);
    case 't':
        return literal(p, "true");
    case 'f':
        return literal(p, "false");
    case 'n':
        return literal(p, "null");
    default:
        return scan_number(p, &integral);
    }
}

/* A member's value at depth 1: scalars decoded, containers kept raw. */
static int
member_value(struct parser *p, struct json_value *v)
{
    memset(v, 0, sizeof(*v));
    skip_ws(p);
    if (p->s >= p->end)
        return fail(p, "expected a value");
    const char *begin = p->s;
    switch (*p->s) {
    case '{':
    case '[':
        v->type = *p->s == '{' ? JSON_OBJECT : JSON_ARRAY;
        if (skip_value(p, 1) < 0)
            return -1;
        v->str = begin;
        v->len = (size_t)(p->s - begin);
        return 0;
    case '"':
        v->type = JSON_STRING;
        v->str = p->out;
        if (string(p, &p->out) < 0)
            return -1;
        v->len = (size_t)(p->out - v->str);
        return 0;
    case 't':
    case 'f':
        v->type = JSON_BOOL;
        v->b = *p->s == 't';
        return literal(p, v->b ? "true" : "false");
    case 'n':
        v->type = JSON_NULL;
        return literal(p, "null");
    default:
        return number(p, v);
    }
}

static int
member(struct parser *p, json_member_cb cb, void *ctx)
{
    skip_ws(p);
    if (p->s >= p->end || *p->s != '"')
        return fail(p, "expected string key");
    const char *key = p->out;
    if (string(p, &p->out) < 0)
        return -1;
    size_t keylen = (size_t)(p->out - key);
    if (!eat(p, ':'))
        return fail(p, "expected ':'");
    struct json_value v;
    if (member_value(p, &v) < 0)
        return -1;
    return cb(ctx, key, keylen, &v);
}

int
json_object_foreach(const char *text, size_t len, char *scratch,
                    json_member_cb cb, void *ctx, char *err, size_t errlen)
{
    struct parser p = {text, text, text + len, scratch, err, errlen};
    if (!eat(&p, '{'))
        return fail(&p, "expected a JSON object");
    if (!eat(&p, '}')) {
        do {
            int rc = member(&p, cb, ctx);
            if (rc != 0)
                return rc;
        } while (eat(&p, ','));
        if (!eat(&p, '}'))
            return fail(&p, "expected ',' or '}'");
    }
    skip_ws(&p);
    if (p.s != p.end)
        return fail(&p, "trailing characters after the object");
    return 0;
}
