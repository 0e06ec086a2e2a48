/*
 * outbox_log: log lines about one outbox that name it themselves, as
 * pgbouncer's slog_error(sk, ...) takes its connection: outbox=<name>
 * first, then the event_id and aggregate_id of the event concerned.
 */
#ifndef OUTBOXD_OUTBOX_LOG_H
#define OUTBOXD_OUTBOX_LOG_H

#include "batch.h"
#include "config.h"
#include "log.h"

/* A line about ob with more context after its name: LOG_KV("broker", b). */
void outbox_log_kv(enum log_level level, const struct outbox_config *ob,
                   const char *const *kv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A line about ob: outbox_log(LOG_WARN, ob, "retention: %s", err). */
#define outbox_log(level, ob, ...) outbox_log_kv(level, ob, NULL, __VA_ARGS__)
/* A line about one event of ob, or the first of several: its event_id
 * and aggregate_id after the outbox's name, then kv (NULL for none). */
void outbox_log_row(enum log_level level, const struct outbox_config *ob,
                    const struct outbox_row *row, const char *const *kv,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
