/*
 * log: logfmt or JSON lines on stderr, each written with one write(2) so
 * that lines of concurrent threads never interleave.
 */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_min_level = LOG_INFO;
static _Atomic int log_fmt = LOG_FORMAT_TEXT;
/* stderr is systemd's journal stream: 1 or 0, -1 until first asked, so
 * that lines written before log_init carry their priority too. */
static _Atomic int log_journal = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* syslog(3) priorities of the levels: err, warning, info, debug. */
static const char *const journal_prefixes[] = {"<3>", "<4>", "<6>", "<7>"};

/* A long line is cut rather than overflowing, and these bytes stay free
 * for what closes it (a quote, a brace, the newline). */
#define LINE_RESERVE 8

struct line {
    char buf[4096];
    size_t len;
    bool full; /* a value was cut: the fields after it are left out */
};

/*
 * Under systemd, stderr is the journal's stream when JOURNAL_STREAM names
 * its device and inode (systemd.exec(5)).  A "<N>" prefix then gives
 * each line its priority (sd-daemon(3)), so that `journalctl -p err`
 * finds the errors; anywhere else lines stay as they are.
 */
static bool
stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
        fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

/* Asked once; the threads that log start after the first line. */
static bool
journal(void)
{
    int j = log_journal;
    if (j < 0) {
        j = stderr_is_journal();
        log_journal = j;
    }
    return j == 1;
}

void
log_init(enum log_level level, enum log_format format)
{
    log_min_level = level;
    log_fmt = format;
    log_journal = stderr_is_journal();
}

const char *
log_journal_prefix(enum log_level level)
{
    return journal() ? journal_prefixes[level] : "";
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

/* Appends s[0..n) whole, or nothing once the line is full: a cut never
 * splits an escape or a UTF-8 sequence. */
static bool
line_put(struct line *l, const char *s, size_t n)
{
    if (l->full || l->len + n > sizeof(l->buf) - LINE_RESERVE) {
        l->full = true;
        return false;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    return true;
}

static bool
line_puts(struct line *l, const char *s)
{
    return line_put(l, s, strlen(s));
}

/* Closing quotes, braces and the newline use the reserve. */
static void
line_close(struct line *l, char c)
{
    l->buf[l->len++] = c;
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629), 0 if none. */
static size_t
utf8_len(const unsigned char *s)
{
    size_t n = s[0] < 0x80                    ? 1
               : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                              : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* also stops at the terminating NUL */
    if ((s[0] == 0xe0 && n == 3 && s[1] < 0xa0) ||
        (s[0] == 0xed && s[1] > 0x9f) || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] > 0x8f))
        return 0; /* overlong, a UTF-16 surrogate, or past U+10FFFF */
    return n;
}

/*
 * Outside text (row values, server messages) may hold any byte: a line
 * stays one line of valid UTF-8.  In logfmt a value is quoted when it
 * holds spaces, quotes, '=' or control bytes, which are escaped.
 */
static bool
text_needs_quotes(const char *v)
{
    if (*v == '\0')
        return true;
    for (; *v; v++)
        if ((unsigned char)*v <= ' ' || *v == '"' || *v == '=' || *v == '\\' ||
            *v == 0x7f)
            return true;
    return false;
}

static void
line_put_text_value(struct line *l, const char *v)
{
    bool quote = text_needs_quotes(v);
    if (quote && !line_put(l, "\"", 1))
        return;
    while (*v && !l->full) {
        unsigned char c = (unsigned char)*v;
        char esc[8];
        size_t n = utf8_len((const unsigned char *)v);
        if (c == '"' || c == '\\')
            line_put(l, (char[]){'\\', (char)c}, 2);
        else if (c == '\n' || c == '\r' || c == '\t')
            line_puts(l, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t");
        else if (c < 0x20 || c == 0x7f || n == 0)
            line_put(l, esc, (size_t)snprintf(esc, sizeof(esc), "\\x%02x", c));
        else
            line_put(l, v, n);
        v += n ? n : 1;
    }
    if (quote)
        line_close(l, '"');
}

static void
line_put_json_string(struct line *l, const char *v)
{
    if (!line_put(l, "\"", 1))
        return;
    while (*v && !l->full) {
        unsigned char c = (unsigned char)*v;
        char esc[8];
        size_t n = utf8_len((const unsigned char *)v);
        if (c == '"' || c == '\\')
            line_put(l, (char[]){'\\', (char)c}, 2);
        else if (c < 0x20)
            line_put(l, esc, (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c));
        else if (n == 0)
            line_puts(l, "\\ufffd"); /* not UTF-8: the replacement char */
        else
            line_put(l, v, n);
        v += n ? n : 1;
    }
    line_close(l, '"');
}

/* A field whose key does not fit whole is left out, with the rest. */
static void
line_put_field(struct line *l, const char *key, const char *value, bool first)
{
    if (l->len + 6 * strlen(key) + 8 > sizeof(l->buf) - LINE_RESERVE)
        l->full = true;
    if (l->full)
        return;
    if (log_fmt == LOG_FORMAT_JSON) {
        if (!first)
            line_put(l, ",", 1);
        line_put_json_string(l, key);
        line_put(l, ":", 1);
        line_put_json_string(l, value);
    } else {
        if (!first)
            line_put(l, " ", 1);
        line_puts(l, key);
        line_put(l, "=", 1);
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

/* A NULL value leaves its key out: no empty trace_id="" noise. */
static void
line_put_pairs(struct line *l, const char *const *kv)
{
    for (; kv != NULL && kv[0] != NULL; kv += 2)
        if (kv[1] != NULL)
            line_put_field(l, kv[0], kv[1], false);
}

void
log_vmsg(enum log_level level, const char *const *lead, const char *const *kv,
         const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    struct line l = {.len = 0, .full = false};
    char ts[40], msg[2048];

    timestamp(ts, sizeof(ts));
    vsnprintf(msg, sizeof(msg), fmt, ap);

    line_puts(&l, log_journal_prefix(level));
    if (log_fmt == LOG_FORMAT_JSON)
        line_put(&l, "{", 1);
    line_put_field(&l, "ts", ts, true);
    line_put_field(&l, "level", level_names[level], false);
    line_put_field(&l, "msg", msg, false);
    line_put_pairs(&l, lead);
    line_put_pairs(&l, kv);
    if (log_fmt == LOG_FORMAT_JSON)
        line_close(&l, '}');
    line_close(&l, '\n');
    ssize_t rc = write(STDERR_FILENO, l.buf, l.len);
    (void)rc; /* nowhere left to report a failed log write */
}

void
log_msg(enum log_level level, const char *const *kv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, NULL, kv, fmt, ap);
    va_end(ap);
}

/* Each line of text, led by prefix, in one write(2) when it fits. */
static void
write_prefixed(const char *prefix, const char *text)
{
    while (*text != '\0') {
        const char *nl = strchr(text, '\n');
        size_t n = nl != NULL ? (size_t)(nl - text) + 1 : strlen(text);
        struct line l = {.len = 0, .full = false};
        line_puts(&l, prefix);
        if (!line_put(&l, text, n) || nl == NULL)
            line_close(&l, '\n');
        ssize_t rc = write(STDERR_FILENO, l.buf, l.len);
        (void)rc; /* nowhere left to report it */
        text += n;
    }
}

void
log_plain(enum log_level level, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    write_prefixed(log_journal_prefix(level), buf);
}
