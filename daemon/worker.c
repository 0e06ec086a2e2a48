/*
 * worker: one thread per outbox with its own event loop and its own
 * database and broker connections, so that a hung server blocks only
 * that outbox and never the main loop that answers signals and health.
 */
#include "worker.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "publisher.h"
#include "store.h"
#include "util.h"

/* Reconnect backoff: 1s doubling to 30s, with jitter. */
#define RECONNECT_INITIAL_MS 1000
#define RECONNECT_MAX_MS 30000

struct link_state {
    unsigned failures;
    uint64_t retry_at_ms;
    char last_error[512];
};

struct worker {
    const struct outbox_config *ob;
    const char *relay_id;
    pthread_t thread;
    bool started;
    struct event_base *base;
    struct event *tick;
    struct event *wake;
    struct store *store;
    struct publisher *pub;
    struct relay relay;
    struct link_state db, broker;
    _Atomic bool stopping;
    _Atomic bool done;
    _Atomic bool db_up;
    _Atomic bool broker_up;
};

static int
claim_fn(void *store, const char *relay_id, struct outbox_batch *b, char *err,
         size_t errlen)
{
    return store_claim_batch(store, relay_id, b, err, errlen);
}

static int
finalize_fn(void *store, struct outbox_batch *b, size_t *lost, char *err,
            size_t errlen)
{
    return store_finalize_batch(store, b, lost, err, errlen);
}

static int
publish_fn(void *pub, struct outbox_batch *b, struct outbox_row **rows,
           size_t n, bool mandatory, uint64_t deadline_ms, char *err,
           size_t errlen)
{
    return publisher_publish_wave(pub, b, rows, n, mandatory, deadline_ms, err,
                                  errlen);
}

struct worker *
worker_new(const struct outbox_config *ob, const char *relay_id)
{
    struct worker *w = xcalloc(1, sizeof(*w));
    w->ob = ob;
    w->relay_id = relay_id;
    w->store = store_new(ob);
    char *name = xasprintf("outboxd %s %s", relay_id, ob->name);
    w->pub = publisher_new(ob->broker, name);
    free(name);
    struct relay_backend backend = {
        .store = w->store,
        .publisher = w->pub,
        .claim = claim_fn,
        .finalize = finalize_fn,
        .publish = publish_fn,
    };
    relay_init(&w->relay, ob, relay_id, &backend);
    return w;
}

/* Logs a link failure when it is new or changed, not on every retry. */
static void
link_failed(struct worker *w, struct link_state *l, const char *what,
            const char *err)
{
    uint64_t delay =
        backoff_ms(l->failures++, RECONNECT_INITIAL_MS, RECONNECT_MAX_MS);
    l->retry_at_ms = clock_ms() + delay;
    if (strcmp(l->last_error, err) != 0 || l->failures == 1)
        log_error(LOG_KV("outbox", w->ob->name), "%s unavailable: %s", what,
                  err);
    else
        log_debug(LOG_KV("outbox", w->ob->name), "%s still unavailable: %s",
                  what, err);
    str_copy(l->last_error, err, sizeof(l->last_error));
}

static void
link_ok(struct worker *w, struct link_state *l, const char *what,
        const char *detail)
{
    log_info(LOG_KV("outbox", w->ob->name), "%s connected%s%s", what,
             detail[0] ? ": " : "", detail);
    l->failures = 0;
    l->retry_at_ms = 0;
    l->last_error[0] = '\0';
}

static void
connect_db(struct worker *w)
{
    char err[512];
    if (store_is_connected(w->store) || clock_ms() < w->db.retry_at_ms)
        return;
    if (store_connect(w->store, err, sizeof(err)) < 0) {
        link_failed(w, &w->db, "database", err);
        return;
    }
    link_ok(w, &w->db, "database", "");
}

static void
connect_broker(struct worker *w)
{
    char err[512];
    if (publisher_is_connected(w->pub) || clock_ms() < w->broker.retry_at_ms)
        return;
    if (publisher_connect(w->pub, err, sizeof(err)) < 0) {
        link_failed(w, &w->broker, "broker", err);
        return;
    }
    link_ok(w, &w->broker, "broker", publisher_url(w->pub));
}

static void
schedule(struct worker *w, uint64_t delay_ms)
{
    /* Heartbeats are serviced only inside library calls: come back in
     * time for them even with a long poll interval. */
    uint64_t beat = w->ob->broker->heartbeat_ms / 2;
    if (beat > 0 && delay_ms > beat)
        delay_ms = beat;
    struct timeval tv = {(time_t)(delay_ms / 1000),
                         (suseconds_t)(delay_ms % 1000) * 1000};
    evtimer_add(w->tick, &tv);
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

static void
run_cycle(struct worker *w)
{
    char err[512];
    if (publisher_poll(w->pub, err, sizeof(err)) < 0) {
        link_failed(w, &w->broker, "broker", err);
        schedule(w, reconnect_delay(w));
        return;
    }
    switch (relay_cycle(&w->relay)) {
    case RELAY_FULL:
        schedule(w, 0);
        break;
    case RELAY_PARTIAL:
    case RELAY_IDLE:
        schedule(w, w->ob->poll_interval_ms);
        break;
    case RELAY_STORE_DOWN:
        if (store_is_connected(w->store))
            log_error(LOG_KV("outbox", w->ob->name), "database error: %s",
                      w->relay.last_error);
        else
            link_failed(w, &w->db, "database", w->relay.last_error);
        schedule(w, store_is_connected(w->store) ? w->ob->poll_interval_ms
                                                 : reconnect_delay(w));
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
    if (w->stopping) {
        event_base_loopbreak(w->base);
        return;
    }
    connect_db(w);
    connect_broker(w);
    w->db_up = store_is_connected(w->store);
    w->broker_up = publisher_is_connected(w->pub);
    if (!w->db_up || !w->broker_up) {
        schedule(w, reconnect_delay(w));
        return;
    }
    run_cycle(w);
    w->db_up = store_is_connected(w->store);
    w->broker_up = publisher_is_connected(w->pub);
}

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    event_base_loopbreak(w->base);
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    schedule(w, 0);
    event_base_dispatch(w->base);
    store_disconnect(w->store);
    store_thread_end();
    publisher_disconnect(w->pub);
    w->db_up = false;
    w->broker_up = false;
    log_debug(LOG_KV("outbox", w->ob->name), "worker stopped");
    w->done = true;
    return NULL;
}

int
worker_start(struct worker *w)
{
    w->base = event_base_new();
    if (w->base == NULL)
        return -1;
    w->tick = evtimer_new(w->base, tick_cb, w);
    w->wake = event_new(w->base, -1, 0, wake_cb, w);
    if (w->tick == NULL || w->wake == NULL)
        return -1;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return -1;
    w->started = true;
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

void
worker_join(struct worker *w)
{
    if (w->started)
        pthread_join(w->thread, NULL);
    w->started = false;
}

void
worker_free(struct worker *w)
{
    if (w == NULL)
        return;
    worker_join(w);
    relay_fini(&w->relay);
    store_free(w->store);
    publisher_free(w->pub);
    if (w->tick)
        event_free(w->tick);
    if (w->wake)
        event_free(w->wake);
    if (w->base)
        event_base_free(w->base);
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
    return w->ob;
}
