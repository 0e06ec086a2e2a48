/*
 * metrics: lock-free histograms that worker threads observe into, and the
 * Prometheus text rendering of every outbox's numbers for GET /metrics.
 */
#ifndef OUTBOXD_METRICS_H
#define OUTBOXD_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"

#define HISTOGRAM_MAX_BOUNDS 20

/*
 * Buckets hold plain (not cumulative) counts, each an atomic that one
 * thread adds to and another reads: no lock on the relay's path.
 */
struct histogram {
    const uint64_t *bounds_us; /* upper bounds, ascending, inclusive */
    size_t nbounds;
    _Atomic uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1]; /* last: +Inf */
    _Atomic uint64_t sum_us;
};

/* Bucket sets: event latency spans ms to an hour, a batch ms to a minute. */
extern const uint64_t metrics_latency_bounds_us[];
extern const size_t metrics_latency_nbounds;
extern const uint64_t metrics_batch_bounds_us[];
extern const size_t metrics_batch_nbounds;

void histogram_init(struct histogram *h, const uint64_t *bounds_us,
                    size_t nbounds);
/* Negative durations (clock skew between hosts) count as zero. */
void histogram_observe_us(struct histogram *h, int64_t us);
/* Observations so far (the +Inf bucket's cumulative count). */
uint64_t histogram_count(const struct histogram *h);

/* Monotonic microseconds, for durations measured on this host. */
uint64_t metrics_clock_us(void);

/* One outbox's numbers as read at scrape time. */
struct outbox_metrics {
    const char *outbox; /* "<database>.<table>" */
    /* NULL: always its own series.  Else its group (the outboxes found
     * by one database_like entry), whose members are folded into one series
     * labelled with it once more than outbox_series outboxes have a group;
     * never an outbox's name. */
    const char *group;
    uint64_t published, failed, retried, dead, released, lost, batches;
    uint64_t lean_batches;
    uint64_t expired; /* DEAD past expires_at, not counted in dead */
    /* Time the relay waited on each server (relay.h, enum relay_wait). */
    uint64_t wait_broker_us, wait_database_us;
    bool db_up, broker_up, broker_blocked;
    /* Pacing (pacer.h): woken by a live binlog stream, or polling. */
    bool wake_live;
    uint64_t wakes, empty_claims;
    /* Failed connects, claims and records; those refused as read-only;
     * failed broker connects and connections lost. */
    uint64_t db_errors, db_read_only, broker_errors;
    /* Claim attempts that lost a race (store_claim_conflicts). */
    uint64_t claim_conflicts;
    /* Lean joins, those that locked the row told by its id, and of those
     * the ones without the head of the aggregate (store_joins). */
    uint64_t joins, joins_by_id, joins_head_free;
    /* Broker confirms that came after their wave gave up (publisher.h). */
    uint64_t late_confirms;
    double poll_wait_s; /* the wait before the next claim */
    /* From the worker's periodic count; false until one succeeded. */
    bool rows_known;
    uint64_t rows[OUTBOX_STATUS_COUNT];
    bool rows_counted[OUTBOX_STATUS_COUNT]; /* false: not counted at all */
    double oldest_pending_age_s;            /* 0 with nothing pending */
    /* Aggregates held by a DEAD event and how long the oldest has been
     * (0 for an outbox without on_dead: hold); false: not counted yet. */
    bool holds_known;
    uint64_t held_aggregates;
    double oldest_hold_s;
    const struct histogram *commit_to_confirm;
    const struct histogram *batch_duration;
};

/* One binlog stream's numbers (binlog.h), by its server. */
struct binlog_metrics {
    const char *server; /* "host:port" or the socket */
    uint64_t unreadable;
};

/* Process-wide numbers. */
struct daemon_metrics {
    const char *version;
    bool last_reload_ok;
    uint64_t reloads_ok, reloads_failed;
    /* database_like entries: discoveries run and failed, tenants found
     * and gone (tenants.h). */
    uint64_t discoveries, discovery_failures, tenants_added, tenants_removed;
    unsigned outbox_series;               /* relay.metrics_outbox_series */
    const struct binlog_metrics *binlogs; /* one per stream */
    size_t nbinlogs;
    /* What the folded counters remember between scrapes; NULL: none. */
    struct metrics_groups *groups;
};

/*
 * Remembers, per group, what its members' counters added up to at the
 * last scrape, so that a folded counter never goes down when a member
 * leaves or restarts (Prometheus would read that as a reset and count
 * the whole sum again).  One per process, used by one thread.
 */
struct metrics_groups *metrics_groups_new(void);
void metrics_groups_free(struct metrics_groups *mg);

/* The whole exposition; malloc'd, *len set.  Never fails (xmalloc). */
char *metrics_render(const struct daemon_metrics *dm,
                     const struct outbox_metrics *obs, size_t n, size_t *len);

#endif
