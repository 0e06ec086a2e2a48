/*
 * util: allocation that never returns NULL, the one string builder,
 * bounded string copies, clocks and the duration and size syntax.
 */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

static void
oom(size_t size)
{
    log_plain(LOG_ERROR, "outboxd: out of memory allocating %zu bytes\n", size);
    abort();
}

void *
xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (p == NULL)
        oom(size);
    return p;
}

void *
xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        oom(n * size);
    return p;
}

void *
xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (p == NULL)
        oom(size);
    return p;
}

char *
xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* A vsnprintf failure is a bad format or a piece over INT_MAX: a bug. */
static void
format_failed(const char *fmt)
{
    log_plain(LOG_ERROR, "outboxd: cannot format \"%s\"\n", fmt);
    abort();
}

char *
xvasprintf(const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int len = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (len < 0)
        format_failed(fmt);
    char *p = xmalloc((size_t)len + 1);
    vsnprintf(p, (size_t)len + 1, fmt, ap);
    return p;
}

char *
xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = xvasprintf(fmt, ap);
    va_end(ap);
    return p;
}

void
strbuf_reserve(struct strbuf *b, size_t more)
{
    if (b->cap > b->len && b->cap - b->len > more)
        return;
    if (more >= SIZE_MAX / 2 - b->len)
        oom(more);
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= more)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

void
strbuf_reset(struct strbuf *b)
{
    b->len = 0;
    strbuf_reserve(b, 0);
    b->p[0] = '\0';
}

void
strbuf_add(struct strbuf *b, const char *s, size_t n)
{
    strbuf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void
strbuf_adds(struct strbuf *b, const char *s)
{
    strbuf_add(b, s, strlen(s));
}

void
strbuf_vaddf(struct strbuf *b, const char *fmt, va_list ap)
{
    strbuf_reserve(b, strlen(fmt));
    for (;;) {
        size_t room = b->cap - b->len;
        va_list copy;
        va_copy(copy, ap);
        int n = vsnprintf(b->p + b->len, room, fmt, copy);
        va_end(copy);
        if (n < 0)
            format_failed(fmt);
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        strbuf_reserve(b, (size_t)n);
    }
}

void
strbuf_addf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strbuf_vaddf(b, fmt, ap);
    va_end(ap);
}

void
strbuf_free(struct strbuf *b)
{
    free(b->p);
    *b = (struct strbuf){0};
}

unsigned
port_parse(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 5 || strspn(s, "0123456789") != len)
        return 0;
    unsigned long v = strtoul(s, NULL, 10);
    return v <= 65535 ? (unsigned)v : 0;
}

bool
str_is_word(const char *s, const char *extra)
{
    size_t len = strlen(s);
    if (len == 0)
        return false;
    for (const char *c = s; *c; c++) {
        bool alnum = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                     (*c >= '0' && *c <= '9');
        if (!alnum && strchr(extra, *c) == NULL)
            return false;
    }
    return true;
}

size_t
str_copy(char *dst, const char *src, size_t size)
{
    size_t len = strlen(src);
    if (size > 0) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

void
err_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

uint64_t
clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void
monotonic_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec
monotonic_in_ms(uint64_t ms)
{
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += (time_t)(ms / 1000);
    at.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    return at;
}

int64_t
wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const struct {
    const char *name;
    uint64_t ms;
} duration_units[] = {
    {"ms", 1},
    {"s", 1000},
    {"m", 60 * 1000},
    {"h", 3600 * 1000},
    {"d", 86400ULL * 1000},
};

int
duration_parse(const char *text, uint64_t *ms, char *err, size_t errlen)
{
    const char *p = text;
    uint64_t value = 0;

    if (*p < '0' || *p > '9') {
        err_set(err, errlen,
                "invalid duration \"%s\": expected a whole number and a "
                "unit (ms, s, m, h, d)",
                text);
        return -1;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (UINT64_MAX - 9) / 10) {
            err_set(err, errlen, "duration \"%s\" is too large", text);
            return -1;
        }
        value = value * 10 + (uint64_t)(*p - '0');
    }
    for (size_t i = 0; i < sizeof(duration_units) / sizeof(*duration_units);
         i++) {
        if (strcmp(p, duration_units[i].name) != 0)
            continue;
        if (value > UINT64_MAX / duration_units[i].ms / 1000) {
            err_set(err, errlen, "duration \"%s\" is too large", text);
            return -1;
        }
        *ms = value * duration_units[i].ms;
        return 0;
    }
    err_set(err, errlen,
            *p == '\0' ? "duration \"%s\" has no unit (ms, s, m, h, d)"
                       : "invalid duration \"%s\": unknown unit (ms, s, m, "
                         "h, d)",
            text);
    return -1;
}

void
duration_format(uint64_t ms, char *buf, size_t size)
{
    for (size_t i = sizeof(duration_units) / sizeof(*duration_units); i-- > 1;)
        if (ms != 0 && ms % duration_units[i].ms == 0) {
            snprintf(buf, size, "%llu%s",
                     (unsigned long long)(ms / duration_units[i].ms),
                     duration_units[i].name);
            return;
        }
    snprintf(buf, size, "%llums", (unsigned long long)ms);
}

static const struct {
    const char *name;
    uint64_t bytes;
} size_units[] = {
    {"B", 1},
    {"KiB", 1024},
    {"MiB", 1024 * 1024},
    {"GiB", 1024 * 1024 * 1024},
};
#define NSIZE_UNITS (sizeof(size_units) / sizeof(*size_units))

/* The multiplier of unit ("" is bytes); 0 if unknown. */
static uint64_t
size_unit(const char *unit)
{
    if (*unit == '\0')
        return 1;
    for (size_t i = 0; i < NSIZE_UNITS; i++)
        if (strcmp(unit, size_units[i].name) == 0)
            return size_units[i].bytes;
    return 0;
}

int
size_parse(const char *text, uint64_t *bytes, char *err, size_t errlen)
{
    const char *p = text;
    uint64_t value = 0;
    if (*p < '0' || *p > '9') {
        err_set(err, errlen,
                "invalid size \"%s\": expected a whole number of bytes, "
                "alone or with a unit (B, KiB, MiB, GiB)",
                text);
        return -1;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (UINT64_MAX - 9) / 10) {
            err_set(err, errlen, "size \"%s\" is too large", text);
            return -1;
        }
        value = value * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        err_set(err, errlen,
                "invalid size \"%s\": expected a whole number (512KiB, not "
                "0.5MiB)",
                text);
        return -1;
    }
    uint64_t unit = size_unit(p);
    if (unit == 0) {
        err_set(err, errlen,
                "invalid size \"%s\": unknown unit (B, KiB, MiB, GiB; "
                "1 MiB is 1048576 bytes)",
                text);
        return -1;
    }
    if (value > UINT64_MAX / unit) {
        err_set(err, errlen, "size \"%s\" is too large", text);
        return -1;
    }
    *bytes = value * unit;
    return 0;
}

void
size_format(uint64_t bytes, char *buf, size_t size)
{
    for (size_t i = NSIZE_UNITS; i-- > 1;)
        if (bytes != 0 && bytes % size_units[i].bytes == 0) {
            snprintf(buf, size, "%llu%s",
                     (unsigned long long)(bytes / size_units[i].bytes),
                     size_units[i].name);
            return;
        }
    snprintf(buf, size, "%lluB", (unsigned long long)bytes);
}

uint64_t
backoff_ms(unsigned attempt, uint64_t initial, uint64_t max)
{
    uint64_t delay = initial;
    for (unsigned i = 0; i < attempt && delay < max; i++)
        delay *= 2;
    if (delay > max)
        delay = max;
    /* Jitter in [delay/2, delay] so that relays do not retry in step. */
    uint64_t half = delay / 2;
    return half + (half ? (uint64_t)random() % (half + 1) : 0);
}

uint64_t
spread_ms(uint64_t ms, unsigned spread)
{
    uint64_t part = spread ? ms / spread : 0;
    return ms - (part ? (uint64_t)random() % (part + 1) : 0);
}
