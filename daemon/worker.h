/*
 * worker: one outbox's relay, run by a thread of the pool beside the
 * other outboxes placed there: a poll timer, reconnects with capped
 * backoff, heartbeats, and a clean stop.  The main thread only starts,
 * watches and stops workers.
 */
#ifndef OUTBOXD_WORKER_H
#define OUTBOXD_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "binlog.h"
#include "config.h"
#include "metrics.h"
#include "pool.h"
#include "relay.h"

struct worker;

/* ob's relay on thread, which pool_assign picked; worker_free gives it
 * back. */
struct worker *worker_new(const struct outbox_config *ob, const char *relay_id,
                          struct pool_thread *thread);
int worker_start(struct worker *w);
/* What each thread of the workers' pool runs first and last. */
struct pool_hooks worker_pool_hooks(void);
/* Asks the worker to stop claiming and finish by deadline_ms (clock_ms). */
void worker_stop(struct worker *w, uint64_t deadline_ms);
/* True once the worker has recorded what it had and left its links. */
bool worker_done(const struct worker *w);
/* Once worker_done, or with the pool stopped; also never started. */
void worker_free(struct worker *w);

bool worker_db_connected(const struct worker *w);
bool worker_broker_connected(const struct worker *w);
const struct relay_stats *worker_stats(const struct worker *w);
/* The running config's outbox: its name and other fixed keys. */
const struct outbox_config *worker_outbox(const struct worker *w);
/*
 * From the main thread after a reload: ob's live-changeable values (and
 * its broker's) are handed over; the worker adopts them between cycles.
 */
void worker_reload(struct worker *w, const struct outbox_config *ob);
/* What a binlog stream calls to wake this worker (binlog_stream_add). */
struct binlog_client worker_binlog_client(struct worker *w);
/* True while a binlog stream serves the outbox. */
bool worker_wake_live(const struct worker *w);
/* A snapshot of the worker's counters and gauges, for /metrics. */
void worker_metrics(struct worker *w, struct outbox_metrics *m);

#endif
