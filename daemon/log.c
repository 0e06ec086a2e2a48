/*
 * log: logfmt or JSON lines on stderr, each written with one write(2) so
 * that lines of concurrent threads never interleave.
 */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_min_level = LOG_INFO;
static _Atomic int log_fmt = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

struct line {
    char buf[4096];
    size_t len;
};

void
log_init(enum log_level level, enum log_format format)
{
    log_min_level = level;
    log_fmt = format;
}

bool
log_enabled(enum log_level level)
{
    return (int)level <= log_min_level;
}

int
log_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

static void
line_putc(struct line *l, char c)
{
    if (l->len < sizeof(l->buf) - 2)
        l->buf[l->len++] = c;
}

static void
line_puts(struct line *l, const char *s)
{
    while (*s)
        line_putc(l, *s++);
}

/* Quotes a value for logfmt when it holds spaces, quotes or '='. */
static void
line_put_text_value(struct line *l, const char *v)
{
    bool quote = *v == '\0' || strpbrk(v, " \"=\t\n\\") != NULL;
    if (quote)
        line_putc(l, '"');
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            line_putc(l, '\\');
        if (*v == '\n')
            line_puts(l, "\\n");
        else
            line_putc(l, *v);
    }
    if (quote)
        line_putc(l, '"');
}

static void
line_put_json_string(struct line *l, const char *v)
{
    line_putc(l, '"');
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        if (c == '"' || c == '\\') {
            line_putc(l, '\\');
            line_putc(l, (char)c);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            line_puts(l, esc);
        } else {
            line_putc(l, (char)c);
        }
    }
    line_putc(l, '"');
}

static void
line_put_field(struct line *l, const char *key, const char *value, bool first)
{
    if (log_fmt == LOG_FORMAT_JSON) {
        if (!first)
            line_putc(l, ',');
        line_put_json_string(l, key);
        line_putc(l, ':');
        line_put_json_string(l, value);
    } else {
        if (!first)
            line_putc(l, ' ');
        line_puts(l, key);
        line_putc(l, '=');
        line_put_text_value(l, value);
    }
}

static void
timestamp(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void
log_msg(enum log_level level, const char *const *kv, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    struct line l = {.len = 0};
    char ts[40], msg[2048];
    va_list ap;

    timestamp(ts, sizeof(ts));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (log_fmt == LOG_FORMAT_JSON)
        line_putc(&l, '{');
    line_put_field(&l, "ts", ts, true);
    line_put_field(&l, "level", level_names[level], false);
    line_put_field(&l, "msg", msg, false);
    /* A NULL value leaves its key out: no empty trace_id="" noise. */
    for (; kv != NULL && kv[0] != NULL; kv += 2)
        if (kv[1] != NULL)
            line_put_field(&l, kv[0], kv[1], false);
    if (log_fmt == LOG_FORMAT_JSON)
        line_putc(&l, '}');
    l.buf[l.len++] = '\n';
    ssize_t rc = write(STDERR_FILENO, l.buf, l.len);
    (void)rc; /* nowhere left to report a failed log write */
}
