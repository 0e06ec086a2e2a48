/*
 * worker_int: what the worker's files share and nothing outside them
 * sees: struct worker, its links' state, and the family's functions.
 */
#ifndef OUTBOXD_WORKER_INT_H
#define OUTBOXD_WORKER_INT_H

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "logrepeat.h"
#include "pacer.h"
#include "pool.h"
#include "relay.h"
#include "told.h"
#include "worker.h"

/* The periodic work of outboxes started together (a thousand tenants
 * found at once) is spread (util.h spread_ms): counts and idle looks by
 * up to a quarter of their period each time, the first retention run
 * over the second half of its interval.  In step, each worker thread
 * ran its outboxes' counts or looks back to back, and an event behind
 * them waited 100-260 ms (docs/performance.md). */
#define PERIOD_SPREAD 4

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
    struct told told;         /* committed inserts told, and taken */
    uint64_t told_in_cycle;   /* commits told that this cycle's claims took */
    _Atomic uint64_t changes; /* committed writes of any kind told */
    /* The table's id column for the stream's thread (worker_wake.c):
     * its count of columns above 32 bits, its position plus one below;
     * 0 while not known. */
    _Atomic uint64_t id_column;
    uint64_t stats_changes; /* changes at the last count */
    /* Changes since the last count that the relay's own lean cycles
     * account for: the commits each sent in full, and its record. */
    uint64_t stats_explained;
    uint64_t stats_ms; /* clock_ms of the last count */
    bool claims_quiet; /* the last claim left out its looks */
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

/* Arms a one-shot timer ms from now. */
static inline void
worker_timer_add_ms(struct event *ev, uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* worker_link.c: the database and broker links, their reconnects with
 * backoff, and the pause after a lock wait ran out. */
void worker_link_init(struct worker *w);
void worker_link_failure(struct worker *w, struct link_state *l,
                         const char *what, const char *err);
void worker_link_failed(struct worker *w, struct link_state *l,
                        const char *what, const char *err);
void worker_link_clear(struct worker *w, struct link_state *l,
                       const char *what);
void worker_connect_db(struct worker *w);
void worker_connect_broker(struct worker *w);
uint64_t worker_reconnect_delay(struct worker *w);
uint64_t worker_lock_backoff(struct worker *w);
uint64_t worker_lock_pause_left_ms(const struct worker *w);
bool worker_lock_backing_off(const struct worker *w);

/* worker_backend.c: the store, publisher and relay of a worker, on its
 * thread's shared session and connection. */
void worker_backend_open(struct worker *w);
/* The relay, store and publisher freed, then the worker's share of the
 * thread's session and connection given back. */
void worker_backend_close(struct worker *w);

/* worker_wake.c: the binlog stream's side (worker_binlog_client), and
 * the commits it told since the last call, which this cycle's claims
 * take. */
uint64_t worker_take_told(struct worker *w);
/* The same, sleeping until one is told or until_ms (clock_ms) when none
 * was: a lean transaction's linger (relay.c told_until). */
uint64_t worker_wait_told(struct worker *w, uint64_t until_ms);
/* After a cycle: where the table keeps its id, as its schema check
 * found it, for the stream to read the ids of its inserts by. */
void worker_note_id_column(struct worker *w);

/* worker_gauges.c: the gauges' counts and retention, each on a timer of
 * its own between cycles. */
void worker_stats_schedule(struct worker *w);
/* No write told since the last count but the relay's own lean events
 * and told_unclaimed inserts more, and that count found nothing PENDING
 * or PROCESSING. */
bool worker_rows_unchanged(const struct worker *w, uint64_t told_unclaimed);
void worker_stats_cb(evutil_socket_t fd, short what, void *arg);
void worker_retention_schedule(struct worker *w, uint64_t delay_ms);
void worker_retention_cb(evutil_socket_t fd, short what, void *arg);

#endif
