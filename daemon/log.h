/*
 * log: one line per event worth an operator's attention, on stderr, as
 * logfmt (default) or JSON, with key/value context such as outbox and
 * event_id.  Thread-safe: each line is written with one write(2).
 */
#ifndef OUTBOXD_LOG_H
#define OUTBOXD_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

/* A NULL-terminated list of key, value pairs: LOG_KV("broker", name).
 * A pair whose value is NULL is left out of the line.  A line about an
 * outbox, or one of its events, goes through outbox_log.h, which names
 * them itself. */
#define LOG_KV(...) ((const char *[]){__VA_ARGS__, NULL})

void log_init(enum log_level level, enum log_format format);
bool log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *const *kv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* log_msg with lead's pairs before kv's: what the line is about comes
 * first, written by a helper that takes the object (outbox_log.h). */
void log_vmsg(enum log_level level, const char *const *lead,
              const char *const *kv, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/*
 * What is not a log line but goes to stderr all the same (configuration
 * errors as file:line:column, usage, running out of memory): each line
 * of it led by its priority when stderr is systemd's journal, as log
 * lines are, so that `journalctl -p err` shows why a start failed.  Also
 * before log_init.
 */
void log_plain(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "<3>" and so on when stderr is the journal, else "". */
const char *log_journal_prefix(enum log_level level);

/* Parses "error", "warn", "info", "debug"; -1 on anything else. */
int log_level_parse(const char *name);

#define log_error(kv, ...) log_msg(LOG_ERROR, kv, __VA_ARGS__)
#define log_warn(kv, ...) log_msg(LOG_WARN, kv, __VA_ARGS__)
#define log_info(kv, ...) log_msg(LOG_INFO, kv, __VA_ARGS__)
#define log_debug(kv, ...)                                                     \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG))                                            \
            log_msg(LOG_DEBUG, kv, __VA_ARGS__);                               \
    } while (0)

#endif
