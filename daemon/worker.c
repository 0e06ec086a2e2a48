/*
 * worker: one outbox's relay on a thread of the pool (pool.h), beside
 * the other outboxes placed there: its timers on that thread's event
 * loop, when to claim, heartbeats, reloads and a clean stop.  The main
 * thread only starts, watches and stops workers.  Its links and their
 * backoff are in worker_link.c, its store, publisher and relay_backend
 * in worker_backend.c, the binlog's side in worker_wake.c, the gauges
 * and retention in worker_gauges.c (worker_int.h).
 */
#include "worker_int.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "log.h"
#include "outbox_log.h"
#include "pacer.h"
#include "pool.h"
#include "publisher.h"
#include "store.h"
#include "util.h"

/* While the broker blocks publishing, how often its unblock is looked
 * for (the poll reads it and keeps the heartbeats). */
#define BLOCKED_POLL_MS 100

static struct pacer_limits
pace_limits(const struct worker *w)
{
    return (struct pacer_limits){.min_ms = w->ob->poll_min_ms,
                                 .poll_ms = w->ob->poll_interval_ms,
                                 .woken_ms = w->ob->wake_poll_interval_ms};
}

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
    told_init(&w->told);
    w->relay_id = relay_id;
    worker_backend_open(w);
    worker_link_init(w);
    struct pacer_limits lim = pace_limits(w);
    pacer_init(&w->pacer, &lim);
    return w;
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
    worker_timer_add_ms(w->tick, delay_ms);
    return delay_ms;
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
    outbox_log(LOG_DEBUG, w->ob, "claim lost a race: %s", w->relay.last_error);
    schedule(w, w->ob->poll_min_ms);
}

/* Whether this cycle's lean read leaves out its looks (store_set_quiet),
 * said at debug when that changes. */
static void
set_claims_quiet(struct worker *w)
{
    bool quiet = worker_rows_unchanged(w, w->told_in_cycle);
    if (quiet != w->claims_quiet)
        outbox_log(LOG_DEBUG, w->ob, "%s",
                   quiet ? "lean reads leave out their looks: no write "
                           "unaccounted for"
                         : "lean reads look for expired leases and due "
                           "delayed rows again");
    w->claims_quiet = quiet;
    store_set_quiet(w->store, quiet);
}

static void
run_cycle(struct worker *w)
{
    char err[ERR_LEN];
    if (publisher_poll(w->pub, err, sizeof(err)) < 0) {
        relay_flush(&w->relay); /* give back what was claimed ahead */
        worker_link_failed(w, &w->broker, "broker", err);
        schedule(w, worker_reconnect_delay(w));
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
    store_set_woken(w->store, w->wake_live && worker_take_told(w) > 0);
    set_claims_quiet(w);
    enum relay_result rc = relay_cycle(&w->relay);
    worker_note_id_column(w);
    pool_thread_set_busy(w->thread, &w->busy, rc == RELAY_FULL);
    /* Each commit told is one change of the table, and so is this
     * cycle's record of them, one COMMIT: the gauges need no count. */
    if (rc == RELAY_PARTIAL && all_told_found(w) && w->relay.last.sent_all)
        w->stats_explained += w->told_in_cycle + 1;
    /* Nothing carried to the next cycle (the relay trimmed its batches
     * too): a thousand tenants between turns hold no scratch, nor a
     * channel; an outbox alone on its thread keeps its channel open. */
    if (rc != RELAY_FULL) {
        store_trim(w->store);
        if (pool_thread_load(w->thread) > 1)
            publisher_park(w->pub);
    }
    if (rc != RELAY_STORE_DOWN && rc != RELAY_BROKER_DOWN) {
        worker_link_clear(w, &w->db, "database");
        worker_link_clear(w, &w->broker, "broker");
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
            worker_link_failed(w, &w->db, "database", w->relay.last_error);
            schedule(w, worker_reconnect_delay(w));
            break;
        }
        worker_link_failure(w, &w->db, "database", w->relay.last_error);
        schedule(w, store_last_error_is_lock_wait(w->store)
                        ? worker_lock_backoff(w)
                        : w->ob->poll_interval_ms);
        break;
    case RELAY_BROKER_DOWN:
        publisher_disconnect(w->pub);
        worker_link_failed(w, &w->broker, "broker", w->relay.last_error);
        schedule(w, worker_reconnect_delay(w));
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
    worker_connect_db(w);
    worker_connect_broker(w);
    w->db_up = store_is_connected(w->store);
    w->broker_up = publisher_is_connected(w->pub);
    if (!w->db_up || !w->broker_up) {
        schedule(w, worker_reconnect_delay(w));
        return;
    }
    /* A count met the lock since: one reading of the clock, as a second
     * one past the pause's end would make the delay wrap. */
    uint64_t paused = worker_lock_pause_left_ms(w);
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
    outbox_log(LOG_DEBUG, w->ob, "adopted the reloaded settings: batch_size %u",
               w->ob->batch_size);
    /* A shorter poll_interval applies now, not after the old one. */
    schedule(w, 0);
}

/* From the binlog stream: a commit to claim, or a new ceiling. */
static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping || worker_lock_backing_off(w))
        return;
    /* The commits told were taken by the cycle that ran meanwhile (a
     * lean batch they joined): nothing is left to claim. */
    if (!atomic_exchange(&w->kick_state, false) && !told_pending(&w->told))
        return;
    struct pacer_limits lim = pace_limits(w);
    pacer_woken(&w->pacer, &lim);
    schedule(w, 0);
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
    outbox_log(LOG_DEBUG, w->ob, "worker stopped");
    w->done = true;
}

int
worker_start(struct worker *w)
{
    w->tick = evtimer_new(w->base, tick_cb, w);
    w->wake = event_new(w->base, -1, 0, wake_cb, w);
    w->kick = event_new(w->base, -1, 0, kick_cb, w);
    w->reload = event_new(w->base, -1, 0, reload_cb, w);
    w->stats = evtimer_new(w->base, worker_stats_cb, w);
    w->retention = evtimer_new(w->base, worker_retention_cb, w);
    if (w->tick == NULL || w->wake == NULL || w->kick == NULL ||
        w->reload == NULL || w->stats == NULL || w->retention == NULL)
        return -1;
    /* The loop may run these at once: the worker is complete by now. */
    w->started = true;
    worker_stats_schedule(w);
    worker_retention_schedule(w, spread_ms(w->ob->retention_interval_ms, 2));
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
    worker_backend_close(w);
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
    told_free(&w->told);
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
