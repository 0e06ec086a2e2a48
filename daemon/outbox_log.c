/*
 * outbox_log: log lines about one outbox, and about one of its events,
 * that write the outbox's name and the event's ids themselves.  Each
 * asks the level first: below it, no read of the outbox, as log_debug
 * evaluates nothing (a binlog stream's thread logs about a worker).
 */
#include "outbox_log.h"

#include <stdarg.h>

void
outbox_log_kv(enum log_level level, const struct outbox_config *ob,
              const char *const *kv, const char *fmt, ...)
{
    va_list ap;
    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    log_vmsg(level, LOG_KV("outbox", ob->name), kv, fmt, ap);
    va_end(ap);
}

void
outbox_log_row(enum log_level level, const struct outbox_config *ob,
               const struct outbox_row *row, const char *const *kv,
               const char *fmt, ...)
{
    va_list ap;
    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    log_vmsg(level,
             LOG_KV("outbox", ob->name, "event_id", row->event_id,
                    "aggregate_id", row->aggregate_id),
             kv, fmt, ap);
    va_end(ap);
}
