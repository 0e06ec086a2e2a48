/*
 * worker: one outbox's relay on a thread of the pool (pool.h), beside
 * the other outboxes placed there: its timers on that thread's event
 * loop, its database and broker links, reconnects with capped backoff,
 * heartbeats, and a clean stop.  The main thread only starts, watches
 * and stops workers.
 */
#include "worker.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqpconn.h"
#include "dbsession.h"
#include "log.h"
#include "logrepeat.h"
#include "pacer.h"
#include "pool.h"
#include "publisher.h"
#include "stats_sql.h"
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
/* How often the rows and oldest-pending gauges are counted. */
#define STATS_INTERVAL_MS 5000
/* The periodic work of outboxes started together (a thousand tenants
 * found at once) is spread (util.h spread_ms): counts and idle looks by
 * up to a quarter of their period each time, the first retention run
 * over the second half of its interval.  In step, each worker thread
 * ran its outboxes' counts or looks back to back, and an event behind
 * them waited 100-260 ms (docs/performance.md). */
#define PERIOD_SPREAD 4
/* With a live wake stream and nothing changed in the table, the counts
 * cannot have changed either: they are read again this often anyway. */
#define STATS_QUIET_MS 60000
/* While the broker blocks publishing, how often its unblock is looked
 * for (the poll reads it and keeps the heartbeats). */
#define BLOCKED_POLL_MS 100
/* Retention shares this thread with the relay: each run stops after its
 * budget, and one cut short comes back soon rather than an interval
 * later, so a backlog of old rows drains without stalling the relay. */
#define RETENTION_BUDGET_MS 500
#define RETENTION_CATCHUP_MS 1000

struct link_state {
    unsigned failures;
    uint64_t retry_at_ms;
    struct logrepeat log; /* which of its failures reach the log */
    bool read_only;       /* the last failure: the server refused writes */
};

struct worker {
    /*
     * This thread's own copies of its outbox and broker settings: a
     * reload writes them here, between cycles, so nothing another thread
     * does changes a value in the middle of a batch.  Their strings stay
     * those of the running config (cfg_ob), which outlives the worker.
     */
    const struct outbox_config *ob; /* &ob_live */
    struct outbox_config ob_live;
    struct broker_config broker_live;
    const struct outbox_config *cfg_ob;
    const char *relay_id;
    struct pool_thread *thread; /* whose loop runs this outbox */
    bool started;
    struct event_base *base; /* the thread's */
    struct event *tick;
    struct event *wake;
    struct event *kick;   /* the binlog stream: claim now, or re-pace */
    struct event *reload; /* main asks: adopt the pending settings */
    struct event *stats;  /* counts rows for the gauges */
    /* Deletes old SENT rows. */
    struct event *retention;
    pthread_mutex_t pending_lock;
    struct outbox_config pending_ob;
    struct broker_config pending_broker;
    bool pending;
    struct store *store;
    struct dbsession *session; /* the thread's, for this server */
    struct publisher *pub;
    struct amqpconn *conn; /* the thread's, for this broker */
    struct relay relay;
    bool busy; /* the last cycle was full: pool_thread_busy counts it */
    struct link_state db, broker;
    /* Lock waits that ran out in a row, and until when the table is left
     * alone after the last (LOCK_BACKOFF_MAX_MS). */
    unsigned lock_waits;
    uint64_t lock_backoff_until_ms;
    struct pacer pacer;
    /* Set by the binlog stream's thread (binlog.h). */
    _Atomic bool wake_live;
    _Atomic bool kick_state;  /* the kick is the stream's going up or down */
    _Atomic uint64_t wakes;   /* committed inserts told */
    uint64_t wakes_claimed;   /* wakes when the last claim began */
    uint64_t told_in_cycle;   /* commits told that this cycle's claims took */
    _Atomic uint64_t changes; /* committed writes of any kind told */
    uint64_t stats_changes;   /* changes at the last count */
    uint64_t stats_ms;        /* clock_ms of the last count */
    _Atomic uint64_t empty_claims;
    /* Every failure, whatever the log said of it. */
    _Atomic uint64_t db_errors, db_read_only, broker_errors;
    /* Runs of read-only refusals that ended on a writable server. */
    _Atomic uint64_t failovers;
    _Atomic uint64_t poll_wait_ms; /* the wait before the next claim */
    _Atomic bool stopping;
    _Atomic bool done;
    _Atomic bool db_up;
    _Atomic bool broker_up;
    _Atomic bool broker_blocked;
    /* The last count of stats_sql, for the gauges; rows_known false
     * until one succeeded and after one failed. */
    _Atomic bool rows_known;
    _Atomic uint64_t rows[OUTBOX_STATUS_COUNT];
    _Atomic unsigned rows_counted; /* bit per status */
    _Atomic int64_t oldest_pending_us;
    /* on_dead: hold: the last count of held aggregates, and on this
     * host's monotonic clock since when the oldest hold, so that its age
     * grows between counts; holds_known false as rows_known. */
    _Atomic bool holds_known;
    _Atomic uint64_t held_aggregates;
    _Atomic uint64_t hold_since_ms;
};

static struct pacer_limits
pace_limits(const struct worker *w)
{
    return (struct pacer_limits){.min_ms = w->ob->poll_min_ms,
                                 .poll_ms = w->ob->poll_interval_ms,
                                 .woken_ms = w->ob->wake_poll_interval_ms};
}

static int
claim_fn(void *store, const char *relay_id, struct outbox_batch *b, char *err,
         size_t errlen)
{
    return store_claim_batch(store, relay_id, b, err, errlen);
}

static int
claim_more_fn(void *store, const struct outbox_batch *first,
              struct outbox_batch *b, char *err, size_t errlen)
{
    return store_claim_more(store, first, b, err, errlen);
}

/* Commits the binlog told since the last call: the claims of this cycle
 * take them (run_cycle, and relay.c extend_lean). */
static uint64_t
take_told_fn(void *owner)
{
    struct worker *w = owner;
    uint64_t wakes = w->wakes;
    uint64_t told = wakes - w->wakes_claimed;
    w->wakes_claimed = wakes;
    w->told_in_cycle += told;
    return told;
}

static int
finalize_fn(void *store, struct outbox_batch *b, size_t *lost, char *err,
            size_t errlen)
{
    return store_finalize_batch(store, b, lost, err, errlen);
}

static int
mark_sent_fn(void *store, struct outbox_batch *b, struct outbox_row **rows,
             size_t n, size_t *lost, char *err, size_t errlen)
{
    return store_mark_sent(store, b, rows, n, lost, err, errlen);
}

static int
publish_fn(void *pub, struct outbox_batch *b, struct outbox_row **rows,
           size_t n, bool mandatory, uint64_t deadline_ms, char *err,
           size_t errlen)
{
    return publisher_publish_wave(pub, b, rows, n, mandatory, deadline_ms, err,
                                  errlen);
}

static const char *
record_later_fn(void *store)
{
    if (store_last_error_is_read_only(store))
        return "the next session (on a new primary that holds their rows)";
    if (store_last_error_is_lock_wait(store))
        return "the next cycle (another session holds a lock on the table)";
    return NULL;
}

/* The relay's helper thread uses the session this thread opened: the
 * client library's per-thread state, which MySQL's library needs and
 * MariaDB Connector/C keeps none of. */
static void
db_thread_begin_fn(void)
{
    mysql_thread_init();
}

struct pool_hooks
worker_pool_hooks(void)
{
    return (struct pool_hooks){.thread_begin = db_thread_begin_fn,
                               .thread_end = store_thread_end};
}

static bool
is_blocked_fn(void *pub)
{
    return publisher_is_blocked(pub);
}

static int
wait_unblocked_fn(void *pub, uint64_t deadline_ms, char *err, size_t errlen)
{
    return publisher_wait_unblocked(pub, deadline_ms, err, errlen);
}

/* The outboxes of a thread share a session per server (dbsession.h). */
static bool
session_serves(const void *obj, const void *key)
{
    return dbsession_serves(obj, key);
}

static void *
session_make(const void *key)
{
    return dbsession_new(key);
}

static void
session_drop(void *obj)
{
    dbsession_free(obj);
}

static void
session_close(void *obj)
{
    dbsession_close(obj);
}

static const struct pool_share_kind session_kind = {
    session_serves, session_make, session_drop, session_close};

/* And a broker connection per broker, named after the relay. */
struct conn_key {
    const struct broker_config *broker;
    const char *relay_id;
};

static bool
conn_serves(const void *obj, const void *key)
{
    return amqpconn_serves(obj, ((const struct conn_key *)key)->broker);
}

static void *
conn_make(const void *key)
{
    const struct conn_key *k = key;
    char *name = xasprintf("outboxd %s", k->relay_id);
    struct amqpconn *c = amqpconn_new(k->broker, name);
    free(name);
    return c;
}

static void
conn_drop(void *obj)
{
    amqpconn_free(obj);
}

static void
conn_close(void *obj)
{
    amqpconn_disconnect(obj);
}

static const struct pool_share_kind conn_kind = {conn_serves, conn_make,
                                                 conn_drop, conn_close};

struct worker *
worker_new(const struct outbox_config *ob, const char *relay_id,
           struct pool_thread *thread)
{
    struct worker *w = xcalloc(1, sizeof(*w));
    w->thread = thread;
    w->base = pool_thread_base(thread);
    w->cfg_ob = ob;
    w->broker_live = *ob->broker;
    w->ob_live = *ob;
    w->ob_live.broker = &w->broker_live;
    w->ob = &w->ob_live;
    w->pending_ob = w->ob_live;
    w->pending_broker = w->broker_live;
    pthread_mutex_init(&w->pending_lock, NULL);
    w->relay_id = relay_id;
    w->session = pool_thread_share(thread, &session_kind, ob->database);
    w->store = store_new(w->ob, w->session);
    /* The connection reads the running config's broker, whose keys it
     * uses never change live; the channel, this worker's live copy. */
    struct conn_key key = {ob->broker, relay_id};
    w->conn = pool_thread_share(thread, &conn_kind, &key);
    w->pub = publisher_new_shared(w->conn, w->ob->broker);
    publisher_set_envelope(w->pub, w->ob->envelope, w->ob->cloudevents_source);
    struct relay_backend backend = {
        .store = w->store,
        .publisher = w->pub,
        .claim = claim_fn,
        .finalize = finalize_fn,
        .publish = publish_fn,
        .mark_sent = mark_sent_fn,
        .is_blocked = is_blocked_fn,
        .wait_unblocked = wait_unblocked_fn,
        .record_later = record_later_fn,
        .claim_more = claim_more_fn,
        .take_told = take_told_fn,
        .thread_begin = db_thread_begin_fn,
        .thread_end = store_thread_end,
    };
    backend.owner = w;
    relay_init(&w->relay, w->ob, relay_id, &backend);
    relay_share_helper(&w->relay, pool_thread_helper(thread));
    logrepeat_init(&w->db.log, RECONNECT_INITIAL_MS, LOG_REPEAT_MAX_MS);
    logrepeat_init(&w->broker.log, RECONNECT_INITIAL_MS, LOG_REPEAT_MAX_MS);
    struct pacer_limits lim = pace_limits(w);
    pacer_init(&w->pacer, &lim);
    /* A shutdown cuts the publisher's waits short, not only the relay's. */
    publisher_set_stop_deadline(w->pub, &w->relay.stop_deadline_ms);
    return w;
}

/*
 * A server that keeps refusing is logged at its first failure, then at
 * most once per backoff step with the count since, and once when it
 * clears (link_clear); the metrics count every failure.
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
        log_error(LOG_KV("outbox", w->ob->name), "%s %s%s: %s", what, state,
                  l->read_only ? ": reconnecting" : "", err);
        break;
    case LOGREPEAT_REPEAT:
        log_error(LOG_KV("outbox", w->ob->name),
                  "%s still %s, %llu failure%s since the last report: %s", what,
                  state, (unsigned long long)since, since == 1 ? "" : "s", err);
        break;
    case LOGREPEAT_QUIET:
        log_debug(LOG_KV("outbox", w->ob->name), "%s still %s: %s", what, state,
                  err);
        break;
    }
}

/* A failure of the link: counted, logged as link_log decides. */
static void
link_failure(struct worker *w, struct link_state *l, const char *what,
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
static void
link_failed(struct worker *w, struct link_state *l, const char *what,
            const char *err)
{
    uint64_t delay =
        backoff_ms(l->failures++, RECONNECT_INITIAL_MS, RECONNECT_MAX_MS);
    l->retry_at_ms = clock_ms() + delay;
    link_failure(w, l, what, err);
}

static void
link_ok(struct worker *w, struct link_state *l, const char *what,
        const char *detail)
{
    log_info(LOG_KV("outbox", w->ob->name), "%s connected%s%s", what,
             detail[0] ? ": " : "", detail);
    l->failures = 0;
    l->retry_at_ms = 0;
}

/* After a cycle that worked: the end of a run of failures, if any. */
static void
link_clear(struct worker *w, struct link_state *l, const char *what)
{
    uint64_t ms, n;
    char took[32];
    if (!logrepeat_success(&l->log, clock_ms(), &ms, &n))
        return;
    duration_format(ms < 1000 ? ms : ms / 1000 * 1000, took, sizeof(took));
    log_info(
        LOG_KV("outbox", w->ob->name), "%s %s again after %s, %llu %s%s", what,
        l->read_only ? "writable" : "available", took, (unsigned long long)n,
        l == &w->db ? "failed attempt" : "failed connect", n == 1 ? "" : "s");
    if (l->read_only)
        w->failovers++; /* the binlog stream follows (binlog_client) */
    l->read_only = false;
}

static void
connect_db(struct worker *w)
{
    char err[ERR_LEN];
    if (store_is_connected(w->store) || clock_ms() < w->db.retry_at_ms)
        return;
    if (store_connect(w->store, err, sizeof(err)) < 0) {
        link_failed(w, &w->db, "database", err);
        return;
    }
    link_ok(w, &w->db, "database", "");
    /* Fill the gauges now rather than a whole interval later. */
    event_active(w->stats, EV_TIMEOUT, 0);
}

static void
connect_broker(struct worker *w)
{
    char err[ERR_LEN];
    if (publisher_is_connected(w->pub) || clock_ms() < w->broker.retry_at_ms)
        return;
    if (publisher_connect(w->pub, err, sizeof(err)) < 0) {
        link_failed(w, &w->broker, "broker", err);
        return;
    }
    link_ok(w, &w->broker, "broker", publisher_url(w->pub));
}

/* Arms a one-shot timer ms from now. */
static void
timer_add_ms(struct event *ev, uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* Returns the delay in force, which the gauge shows. */
static uint64_t
schedule(struct worker *w, uint64_t delay_ms)
{
    /* Heartbeats are serviced only inside library calls: come back in
     * time for them even with a long poll interval. */
    uint64_t beat = w->ob->broker->heartbeat_ms / 2;
    if (beat > 0 && delay_ms > beat)
        delay_ms = beat;
    w->poll_wait_ms = delay_ms;
    timer_add_ms(w->tick, delay_ms);
    return delay_ms;
}

static uint64_t
reconnect_delay(struct worker *w)
{
    uint64_t now = clock_ms(), at = UINT64_MAX;
    if (!store_is_connected(w->store))
        at = w->db.retry_at_ms;
    if (!publisher_is_connected(w->pub) && w->broker.retry_at_ms < at)
        at = w->broker.retry_at_ms;
    return at > now ? at - now : 0;
}

/* A lock wait ran out: the delay before the table is tried again. */
static uint64_t
lock_backoff(struct worker *w)
{
    uint64_t delay =
        backoff_ms(w->lock_waits++, RECONNECT_INITIAL_MS, LOCK_BACKOFF_MAX_MS);
    w->lock_backoff_until_ms = clock_ms() + delay;
    return delay;
}

/* What is left of the pause after a lock wait; 0 once it is over. */
static uint64_t
lock_pause_left_ms(const struct worker *w)
{
    uint64_t now = clock_ms(), until = w->lock_backoff_until_ms;
    return now < until ? until - now : 0;
}

static bool
lock_backing_off(const struct worker *w)
{
    return lock_pause_left_ms(w) > 0;
}

/* Schedules the next claim after one with this outcome. */
static void
pace(struct worker *w, enum pacer_outcome out, uint64_t due_in_ms)
{
    struct pacer_limits lim = pace_limits(w);
    uint64_t wait = pacer_next(&w->pacer, &lim, out, w->wake_live, due_in_ms);
    if (wait == pacer_ceiling(&lim, w->wake_live))
        wait = spread_ms(wait, PERIOD_SPREAD);
    schedule(w, wait);
}

/*
 * A lean batch that published, confirmed and recorded at least one row
 * per commit the binlog told of: nothing told is left unseen, and no
 * RETRY row of its own falls due, so no look follows it (a row of each
 * commit is visible once one is: a commit's rows show at once).  Fewer
 * rows than commits: one may have been told before it was visible.
 */
static bool
all_told_found(const struct worker *w)
{
    const struct relay_last *last = &w->relay.last;
    uint64_t told = w->told_in_cycle;
    return w->wake_live && last->lean && last->clean && told > 0 &&
           last->rows >= told;
}

/* Another relay won the rows (store_claim_lost_race): not a failure,
 * counted by the store; the next claim finds the rows left. */
static void
claim_lost_race(struct worker *w)
{
    log_debug(LOG_KV("outbox", w->ob->name), "claim lost a race: %s",
              w->relay.last_error);
    schedule(w, w->ob->poll_min_ms);
}

static void
run_cycle(struct worker *w)
{
    char err[ERR_LEN];
    if (publisher_poll(w->pub, err, sizeof(err)) < 0) {
        relay_flush(&w->relay); /* give back what was claimed ahead */
        link_failed(w, &w->broker, "broker", err);
        schedule(w, reconnect_delay(w));
        return;
    }
    /* Claiming now would only hold rows behind the alarm: record what is
     * pending, give back what was claimed ahead, and wait it out (the
     * poll above reads the unblock and keeps the heartbeats). */
    if (publisher_is_blocked(w->pub)) {
        relay_flush(&w->relay);
        schedule(w, BLOCKED_POLL_MS);
        return;
    }
    w->relay.claim_ahead = pool_thread_busy(w->thread) <= (w->busy ? 1 : 0);
    w->relay.linger = w->wake_live && pool_thread_load(w->thread) == 1;
    w->told_in_cycle = 0;
    store_set_woken(w->store, w->wake_live && take_told_fn(w) > 0);
    enum relay_result rc = relay_cycle(&w->relay);
    pool_thread_set_busy(w->thread, &w->busy, rc == RELAY_FULL);
    /* Nothing carried to the next cycle (the relay trimmed its batches
     * too): a thousand tenants between turns hold no scratch, nor a
     * channel; an outbox alone on its thread keeps its channel open. */
    if (rc != RELAY_FULL) {
        store_trim(w->store);
        if (pool_thread_load(w->thread) > 1)
            publisher_park(w->pub);
    }
    if (rc != RELAY_STORE_DOWN && rc != RELAY_BROKER_DOWN) {
        link_clear(w, &w->db, "database");
        link_clear(w, &w->broker, "broker");
        w->lock_waits = 0;
    }
    switch (rc) {
    case RELAY_FULL:
        pace(w, PACER_FULL, PACER_NOT_DUE);
        break;
    case RELAY_PARTIAL:
        pace(w, all_told_found(w) ? PACER_FOUND_ALL : PACER_FOUND,
             PACER_NOT_DUE);
        break;
    case RELAY_IDLE:
        w->empty_claims++;
        pace(w, PACER_EMPTY, w->relay.idle_due_ms);
        break;
    case RELAY_STORE_DOWN:
        if (store_claim_lost_race(w->store)) {
            claim_lost_race(w);
            break;
        }
        if (!store_is_connected(w->store)) {
            link_failed(w, &w->db, "database", w->relay.last_error);
            schedule(w, reconnect_delay(w));
            break;
        }
        link_failure(w, &w->db, "database", w->relay.last_error);
        schedule(w, store_last_error_is_lock_wait(w->store)
                        ? lock_backoff(w)
                        : w->ob->poll_interval_ms);
        break;
    case RELAY_BROKER_DOWN:
        publisher_disconnect(w->pub);
        link_failed(w, &w->broker, "broker", w->relay.last_error);
        schedule(w, reconnect_delay(w));
        break;
    }
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    connect_db(w);
    connect_broker(w);
    w->db_up = store_is_connected(w->store);
    w->broker_up = publisher_is_connected(w->pub);
    if (!w->db_up || !w->broker_up) {
        schedule(w, reconnect_delay(w));
        return;
    }
    /* A count met the lock since: one reading of the clock, as a second
     * one past the pause's end would make the delay wrap. */
    uint64_t paused = lock_pause_left_ms(w);
    if (paused > 0) {
        schedule(w, paused);
        return;
    }
    run_cycle(w);
    w->db_up = store_is_connected(w->store);
    w->broker_up = publisher_is_connected(w->pub);
    /* Read here, by this thread: the publisher is not thread-safe. */
    w->broker_blocked = w->broker_up && publisher_is_blocked(w->pub);
}

/* Runs between cycles: a batch never sees its settings change. */
static void
reload_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&w->pending_lock);
    bool adopt = w->pending;
    if (adopt) {
        config_outbox_adopt(&w->ob_live, &w->pending_ob);
        config_broker_adopt(&w->broker_live, &w->pending_broker);
        w->pending = false;
    }
    pthread_mutex_unlock(&w->pending_lock);
    if (!adopt || w->stopping)
        return;
    log_debug(LOG_KV("outbox", w->ob->name),
              "adopted the reloaded settings: batch_size %u",
              w->ob->batch_size);
    /* A shorter poll_interval applies now, not after the old one. */
    schedule(w, 0);
}

static void
stats_publish(struct worker *w, const struct outbox_counts *c)
{
    unsigned mask = 0;
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++) {
        w->rows[s] = c->rows[s];
        mask |= c->counted[s] ? 1u << s : 0;
    }
    w->rows_counted = mask;
    w->oldest_pending_us = c->oldest_pending_us;
    w->rows_known = true;
}

/*
 * With a live wake stream every committed write of the table is told,
 * the relay's own included: when none came and nothing was pending or
 * leased at the last count, no count can have moved (and the oldest
 * pending age is still none).  Writes the binlog leaves out (a session
 * with sql_log_bin off) show within STATS_QUIET_MS.
 */
static bool
stats_unchanged(const struct worker *w)
{
    return w->wake_live && w->rows_known && w->changes == w->stats_changes &&
           w->rows[OUTBOX_PENDING] == 0 && w->rows[OUTBOX_PROCESSING] == 0 &&
           clock_ms() - w->stats_ms < STATS_QUIET_MS;
}

/* The hold gauges, after the row counts, on the same session. */
static void
stats_holds(struct worker *w)
{
    const char *held = store_hold_cond(w->store);
    struct outbox_holds h;
    char err[ERR_LEN];
    if (held == NULL)
        return;
    if (stats_sql_holds(w->store, &h, err, sizeof(err)) < 0) {
        if (w->holds_known)
            log_warn(LOG_KV("outbox", w->ob->name), "%s", err);
        w->holds_known = false;
        return;
    }
    w->held_aggregates = h.aggregates;
    uint64_t now = clock_ms(), age = (uint64_t)h.oldest_us / 1000;
    w->hold_since_ms = h.aggregates > 0 && age < now ? now - age : now;
    w->holds_known = true;
}

static void
stats_schedule(struct worker *w)
{
    timer_add_ms(w->stats, spread_ms(STATS_INTERVAL_MS, PERIOD_SPREAD));
}

static void
stats_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct outbox_counts counts;
    char err[ERR_LEN];
    (void)fd;
    (void)what;
    if (!w->stopping)
        stats_schedule(w);
    if (store_session(w->store) == NULL || w->stopping) {
        w->rows_known = false;
        return;
    }
    if (stats_unchanged(w) || lock_backing_off(w))
        return;
    w->stats_changes = w->changes;
    w->stats_ms = clock_ms();
    if (stats_sql_count(w->store, &counts, err, sizeof(err)) < 0) {
        /* The claim that follows meets the same fault and handles it. */
        if (w->rows_known)
            log_warn(LOG_KV("outbox", w->ob->name), "%s", err);
        w->rows_known = false;
        if (counts.errnum == ERRNO_LOCK_WAIT_TIMEOUT)
            (void)lock_backoff(w);
        return;
    }
    stats_publish(w, &counts);
    stats_holds(w);
}

static void
retention_schedule(struct worker *w, uint64_t delay_ms)
{
    timer_add_ms(w->retention, delay_ms);
}

/* One bounded run; false when the budget ran out with rows left. */
static bool
retention_run(struct worker *w)
{
    const struct outbox_config *ob = w->ob;
    struct store_purge res;
    char err[ERR_LEN], age[32], deleted[24], batches[16];
    if (store_purge_sent(w->store, ob->retention_sent_ms, ob->retention_batch,
                         clock_ms() + RETENTION_BUDGET_MS, &res, err,
                         sizeof(err)) < 0) {
        log_warn(LOG_KV("outbox", ob->name), "retention: %s", err);
        return true;
    }
    if (res.deleted > 0) {
        duration_format(ob->retention_sent_ms, age, sizeof(age));
        snprintf(deleted, sizeof(deleted), "%llu",
                 (unsigned long long)res.deleted);
        snprintf(batches, sizeof(batches), "%u", res.batches);
        log_info(
            LOG_KV("outbox", ob->name, "deleted", deleted, "batches", batches),
            "retention deleted SENT rows older than %s", age);
    }
    return res.done;
}

/*
 * Between cycles, on the relay's own session; retention.sent 0s keeps
 * SENT rows for good.  on_sent: delete tables run it too: it costs one
 * short read, and clears what a former on_sent: mark left behind.
 */
static void
retention_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    uint64_t next = w->ob->retention_interval_ms;
    if (w->ob->retention_sent_ms > 0 && store_is_connected(w->store) &&
        !lock_backing_off(w) && !retention_run(w) &&
        next > RETENTION_CATCHUP_MS)
        next = RETENTION_CATCHUP_MS;
    retention_schedule(w, next);
}

/* From the binlog stream: a commit to claim, or a new ceiling. */
static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping || lock_backing_off(w))
        return;
    /* The commits told were taken by the cycle that ran meanwhile (a
     * lean batch they joined): nothing is left to claim. */
    if (!atomic_exchange(&w->kick_state, false) && w->wakes == w->wakes_claimed)
        return;
    struct pacer_limits lim = pace_limits(w);
    pacer_woken(&w->pacer, &lim);
    schedule(w, 0);
}

static void
binlog_commit_cb(void *arg, bool inserted)
{
    struct worker *w = arg;
    w->changes++;
    if (!inserted)
        return;
    w->wakes++;
    event_active(w->kick, 0, 0);
}

static void
binlog_state_cb(void *arg, bool live)
{
    struct worker *w = arg;
    w->wake_live = live;
    w->kick_state = true;
    log_debug(LOG_KV("outbox", w->ob->name), "woken by %s",
              live ? "the binlog stream" : "the poll alone");
    /* Up: claim what came while it was down.  Down: the poll's ceiling
     * replaces the stream's, now rather than after a long wait. */
    event_active(w->kick, 0, 0);
}

static uint64_t
binlog_failovers_cb(void *arg)
{
    struct worker *w = arg;
    return w->failovers;
}

struct binlog_client
worker_binlog_client(struct worker *w)
{
    return (struct binlog_client){.commit = binlog_commit_cb,
                                  .state = binlog_state_cb,
                                  .failovers = binlog_failovers_cb,
                                  .arg = w};
}

bool
worker_wake_live(const struct worker *w)
{
    return w->wake_live;
}

/* Every event of the worker, for its last act on its thread. */
static void
events_del(struct worker *w)
{
    struct event *evs[] = {w->tick, w->kick, w->reload, w->stats, w->retention};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        event_del(evs[i]);
}

/* worker_stop, on the worker's thread, between two of its cycles. */
static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    events_del(w);
    pool_thread_set_busy(w->thread, &w->busy, false);
    /* A batch claimed ahead goes back, the last outcome is recorded. */
    if (store_is_connected(w->store))
        relay_flush(&w->relay);
    store_disconnect(w->store);
    publisher_disconnect(w->pub);
    w->db_up = false;
    w->broker_up = false;
    w->broker_blocked = false;
    w->rows_known = false;
    log_debug(LOG_KV("outbox", w->ob->name), "worker stopped");
    w->done = true;
}

int
worker_start(struct worker *w)
{
    w->tick = evtimer_new(w->base, tick_cb, w);
    w->wake = event_new(w->base, -1, 0, wake_cb, w);
    w->kick = event_new(w->base, -1, 0, kick_cb, w);
    w->reload = event_new(w->base, -1, 0, reload_cb, w);
    w->stats = evtimer_new(w->base, stats_cb, w);
    w->retention = evtimer_new(w->base, retention_cb, w);
    if (w->tick == NULL || w->wake == NULL || w->kick == NULL ||
        w->reload == NULL || w->stats == NULL || w->retention == NULL)
        return -1;
    /* The loop may run these at once: the worker is complete by now. */
    w->started = true;
    stats_schedule(w);
    retention_schedule(w, spread_ms(w->ob->retention_interval_ms, 2));
    schedule(w, 0);
    return 0;
}

void
worker_stop(struct worker *w, uint64_t deadline_ms)
{
    w->relay.stop_deadline_ms = deadline_ms;
    w->stopping = true;
    if (w->started)
        event_active(w->wake, 0, 0);
}

bool
worker_done(const struct worker *w)
{
    return !w->started || w->done;
}

/* After worker_done, or with the pool's threads stopped. */
void
worker_free(struct worker *w)
{
    if (w == NULL)
        return;
    pool_unassign(w->thread);
    relay_fini(&w->relay);
    store_free(w->store); /* before its session, which it may be last on */
    pool_thread_unshare(w->thread, &session_kind, w->session);
    publisher_free(w->pub); /* before its connection */
    pool_thread_unshare(w->thread, &conn_kind, w->conn);
    if (w->tick)
        event_free(w->tick);
    if (w->wake)
        event_free(w->wake);
    if (w->kick)
        event_free(w->kick);
    if (w->reload)
        event_free(w->reload);
    if (w->stats)
        event_free(w->stats);
    if (w->retention)
        event_free(w->retention);
    pthread_mutex_destroy(&w->pending_lock);
    free(w);
}

bool
worker_db_connected(const struct worker *w)
{
    return w->db_up;
}

bool
worker_broker_connected(const struct worker *w)
{
    return w->broker_up;
}

const struct relay_stats *
worker_stats(const struct worker *w)
{
    return &w->relay.stats;
}

const struct outbox_config *
worker_outbox(const struct worker *w)
{
    return w->cfg_ob;
}

void
worker_reload(struct worker *w, const struct outbox_config *ob)
{
    pthread_mutex_lock(&w->pending_lock);
    config_outbox_adopt(&w->pending_ob, ob);
    config_broker_adopt(&w->pending_broker, ob->broker);
    w->pending = true;
    pthread_mutex_unlock(&w->pending_lock);
    if (w->started)
        event_active(w->reload, 0, 0);
}

void
worker_metrics(struct worker *w, struct outbox_metrics *m)
{
    const struct relay_stats *st = &w->relay.stats;
    memset(m, 0, sizeof(*m));
    m->outbox = w->cfg_ob->name;
    m->published = st->published;
    m->failed = st->failed;
    m->retried = st->retried;
    m->dead = st->dead;
    m->expired = st->expired;
    m->released = st->released;
    m->lost = st->lost;
    m->batches = st->batches;
    m->lean_batches = st->lean_batches;
    uint64_t waits[WAIT_COUNT];
    relay_waits_read(&w->relay, waits);
    m->wait_broker_us = waits[WAIT_BROKER];
    m->wait_database_us = waits[WAIT_DATABASE];
    m->wake_live = w->wake_live;
    m->wakes = w->wakes;
    m->empty_claims = w->empty_claims;
    m->db_errors = w->db_errors;
    m->db_read_only = w->db_read_only;
    m->claim_conflicts = store_claim_conflicts(w->store);
    m->broker_errors = w->broker_errors;
    m->late_confirms = publisher_late_confirms(w->pub);
    m->poll_wait_s = (double)w->poll_wait_ms / 1e3;
    m->db_up = w->db_up;
    m->broker_up = w->broker_up;
    m->broker_blocked = w->broker_blocked;
    m->rows_known = w->rows_known;
    unsigned mask = w->rows_counted;
    for (int s = 0; s < OUTBOX_STATUS_COUNT; s++) {
        m->rows[s] = w->rows[s];
        m->rows_counted[s] = (mask >> s) & 1u;
    }
    m->oldest_pending_age_s = (double)w->oldest_pending_us / 1e6;
    /* An outbox without hold holds nothing: 0, known once its rows are,
     * so that every outbox has the series the alert rules read. */
    bool hold = w->ob->on_dead == ON_DEAD_HOLD;
    m->holds_known = w->rows_known && (!hold || w->holds_known);
    m->held_aggregates = hold ? w->held_aggregates : 0;
    m->oldest_hold_s = m->held_aggregates > 0
                           ? (double)(clock_ms() - w->hold_since_ms) / 1e3
                           : 0;
    m->commit_to_confirm = &st->commit_to_confirm;
    m->batch_duration = &st->batch_duration;
}
