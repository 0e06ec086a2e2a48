/*
 * worker_link: a worker's database and broker links: connecting, each
 * failure counted and logged as logrepeat decides, reconnects with capped
 * backoff, and the pause after a lock wait ran out.
 */
#include "worker_int.h"

#include <stdio.h>

#include "log.h"
#include "outbox_log.h"
#include "publisher.h"
#include "store.h"
#include "util.h"

/* Reconnect backoff: 1s doubling to 30s, with jitter. */
#define RECONNECT_INITIAL_MS 1000
#define RECONNECT_MAX_MS 30000
/*
 * After a lock wait that ran out, somebody holds the table for as long as
 * their work takes (a dump's LOCK TABLES, an ALTER TABLE that copies),
 * and every try costs the thread's other outboxes a lock wait: the
 * outbox leaves its table alone, claims, counts and retention alike, for
 * 1 s doubling to this.  A wake does not cut the pause short: commits go
 * on under a lock on some rows, and each would cost another wait.
 */
#define LOCK_BACKOFF_MAX_MS 16000
/* A failure that goes on is logged again after 1 s, 2 s, 4 s... with
 * its count: as often as the reconnects at first, at most every 10 min
 * for one that lasts hours. */
#define LOG_REPEAT_MAX_MS 600000

/* A link's repeated failures are logged as often as it reconnects at
 * first, then less often, up to LOG_REPEAT_MAX_MS apart. */
void
worker_link_init(struct worker *w)
{
    logrepeat_init(&w->db.log, RECONNECT_INITIAL_MS, LOG_REPEAT_MAX_MS);
    logrepeat_init(&w->broker.log, RECONNECT_INITIAL_MS, LOG_REPEAT_MAX_MS);
}

/*
 * A server that keeps refusing is logged at its first failure, then at
 * most once per backoff step with the count since, and once when it
 * clears (worker_link_clear); the metrics count every failure.
 */
static void
link_log(struct worker *w, struct link_state *l, const char *what,
         const char *err)
{
    uint64_t since;
    /* failing: the session stays (a lock timeout, say); unavailable: it
     * is gone, a reconnect follows. */
    const char *state = "unavailable";
    if (l->read_only)
        state = "refuses writes (read-only)";
    else if (l == &w->db && store_is_connected(w->store))
        state = "failing";
    switch (logrepeat_failure(&l->log, err, clock_ms(), &since)) {
    case LOGREPEAT_FIRST:
        outbox_log(LOG_ERROR, w->ob, "%s %s%s: %s", what, state,
                   l->read_only ? ": reconnecting" : "", err);
        break;
    case LOGREPEAT_REPEAT:
        outbox_log(LOG_ERROR, w->ob,
                   "%s still %s, %llu failure%s since the last report: %s",
                   what, state, (unsigned long long)since,
                   since == 1 ? "" : "s", err);
        break;
    case LOGREPEAT_QUIET:
        outbox_log(LOG_DEBUG, w->ob, "%s still %s: %s", what, state, err);
        break;
    }
}

/* A failure of the link: counted, logged as link_log decides. */
void
worker_link_failure(struct worker *w, struct link_state *l, const char *what,
                    const char *err)
{
    if (l == &w->db) {
        w->db_errors++;
        l->read_only = store_last_error_is_read_only(w->store);
        w->db_read_only += l->read_only;
    } else {
        w->broker_errors++;
    }
    link_log(w, l, what, err);
}

/* A failure that closed the link: reconnect after the backoff. */
void
worker_link_failed(struct worker *w, struct link_state *l, const char *what,
                   const char *err)
{
    uint64_t delay =
        backoff_ms(l->failures++, RECONNECT_INITIAL_MS, RECONNECT_MAX_MS);
    l->retry_at_ms = clock_ms() + delay;
    worker_link_failure(w, l, what, err);
}

static void
link_ok(struct worker *w, struct link_state *l, const char *what,
        const char *detail)
{
    outbox_log(LOG_INFO, w->ob, "%s connected%s%s", what, detail[0] ? ": " : "",
               detail);
    l->failures = 0;
    l->retry_at_ms = 0;
}

/* After a cycle that worked: the end of a run of failures, if any. */
void
worker_link_clear(struct worker *w, struct link_state *l, const char *what)
{
    uint64_t ms, n;
    char took[32];
    if (!logrepeat_success(&l->log, clock_ms(), &ms, &n))
        return;
    duration_format(ms < 1000 ? ms : ms / 1000 * 1000, took, sizeof(took));
    outbox_log(
        LOG_INFO, w->ob, "%s %s again after %s, %llu %s%s", what,
        l->read_only ? "writable" : "available", took, (unsigned long long)n,
        l == &w->db ? "failed attempt" : "failed connect", n == 1 ? "" : "s");
    if (l->read_only)
        w->failovers++; /* the binlog stream follows (binlog_client) */
    l->read_only = false;
}

void
worker_connect_db(struct worker *w)
{
    char err[ERR_LEN];
    if (store_is_connected(w->store) || clock_ms() < w->db.retry_at_ms)
        return;
    if (store_connect(w->store, err, sizeof(err)) < 0) {
        worker_link_failed(w, &w->db, "database", err);
        return;
    }
    link_ok(w, &w->db, "database", "");
    /* Fill the gauges now rather than a whole interval later. */
    event_active(w->stats, EV_TIMEOUT, 0);
}

void
worker_connect_broker(struct worker *w)
{
    char err[ERR_LEN];
    if (publisher_is_connected(w->pub) || clock_ms() < w->broker.retry_at_ms)
        return;
    if (publisher_connect(w->pub, err, sizeof(err)) < 0) {
        worker_link_failed(w, &w->broker, "broker", err);
        return;
    }
    link_ok(w, &w->broker, "broker", publisher_url(w->pub));
}

uint64_t
worker_reconnect_delay(struct worker *w)
{
    uint64_t now = clock_ms(), at = UINT64_MAX;
    if (!store_is_connected(w->store))
        at = w->db.retry_at_ms;
    if (!publisher_is_connected(w->pub) && w->broker.retry_at_ms < at)
        at = w->broker.retry_at_ms;
    return at > now ? at - now : 0;
}

/* A lock wait ran out: the delay before the table is tried again. */
uint64_t
worker_lock_backoff(struct worker *w)
{
    uint64_t delay =
        backoff_ms(w->lock_waits++, RECONNECT_INITIAL_MS, LOCK_BACKOFF_MAX_MS);
    w->lock_backoff_until_ms = clock_ms() + delay;
    return delay;
}

/* What is left of the pause after a lock wait; 0 once it is over. */
uint64_t
worker_lock_pause_left_ms(const struct worker *w)
{
    uint64_t now = clock_ms(), until = w->lock_backoff_until_ms;
    return now < until ? until - now : 0;
}

bool
worker_lock_backing_off(const struct worker *w)
{
    return worker_lock_pause_left_ms(w) > 0;
}
