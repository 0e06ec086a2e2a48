/*
 * util: allocation that never returns NULL, the one string builder,
 * bounded string copies, clocks and the duration and size syntax shared
 * by config, relay and outboxctl.
 */
#ifndef OUTBOXD_UTIL_H
#define OUTBOXD_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define OUTBOXD_VERSION "0.3.0"

/* sysexits.h values used by both programs (docs/contract.md section 3). */
#define EXIT_USAGE 64
#define EXIT_UNAVAILABLE 69
#define EXIT_CONFIG 78

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));

/*
 * The one growable string: SQL statements, the metrics page, admin
 * statements.  p is always NUL-terminated once anything was added (or
 * after strbuf_reset).  Like xmalloc it never fails: running out of
 * memory aborts, and so does a vsnprintf failure, which only a bad
 * format or a single piece over INT_MAX bytes causes, a bug rather than
 * an input.  Zero-initialise, free with strbuf_free.
 */
struct strbuf {
    char *p;
    size_t len, cap;
};

/* Makes room for more bytes and the terminating NUL. */
void strbuf_reserve(struct strbuf *b, size_t more);
/* Empties the string, keeping its memory. */
void strbuf_reset(struct strbuf *b);
void strbuf_add(struct strbuf *b, const char *s, size_t n);
void strbuf_adds(struct strbuf *b, const char *s);
void strbuf_addf(struct strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void strbuf_vaddf(struct strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
void strbuf_free(struct strbuf *b);

/*
 * The size of every error buffer (char err[ERR_LEN], passed on as err,
 * errlen): room for a server's message and what the caller adds to it.
 */
#define ERR_LEN 512

/* Copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t str_copy(char *dst, const char *src, size_t size);
/* s is not empty and holds only ASCII letters, digits and chars of extra. */
bool str_is_word(const char *s, const char *extra);
/* A TCP port written whole in at most 5 digits, 1 to 65535; else 0. */
unsigned port_parse(const char *s);
/* snprintf into an error buffer; tolerates a NULL or zero-sized buffer. */
void err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic clock in milliseconds, for deadlines and backoff. */
uint64_t clock_ms(void);
/* A condition variable whose timed waits are on CLOCK_MONOTONIC, and
 * such a wait's deadline ms from now: the wall clock may jump. */
void monotonic_cond_init(pthread_cond_t *cond);
struct timespec monotonic_in_ms(uint64_t ms);
/* Wall clock in microseconds since the epoch. */
int64_t wall_us(void);

/*
 * Parses "250ms", "30s", "5m", "2h", "7d" into milliseconds.  A number
 * without a unit, a negative or fractional number, an unknown unit or an
 * overflow returns -1 and explains why in err.
 */
int duration_parse(const char *text, uint64_t *ms, char *err, size_t errlen);
/* Formats ms back into the shortest exact unit ("1500ms", "2m"). */
void duration_format(uint64_t ms, char *buf, size_t size);

/*
 * Parses a size in bytes: a whole number, alone or with a unit B, KiB,
 * MiB or GiB ("16MiB", "65536").  A negative or fractional number, an
 * unknown unit (16MB: say MiB) or an overflow returns -1 and explains why.
 */
int size_parse(const char *text, uint64_t *bytes, char *err, size_t errlen);
/* Formats bytes back into the largest exact unit ("16MiB", "1000B"). */
void size_format(uint64_t bytes, char *buf, size_t size);

/* Capped exponential backoff with jitter in [half, full]: for reconnects. */
uint64_t backoff_ms(unsigned attempt, uint64_t initial, uint64_t max);
/* ms less a random part of at most ms / spread: the periodic work of
 * outboxes started together (a thousand tenants found at once) drifts
 * apart instead of reaching the database in one burst. */
uint64_t spread_ms(uint64_t ms, unsigned spread);

#endif
