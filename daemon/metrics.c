/*
 * metrics: atomic histograms for the relay's latencies and the Prometheus
 * text exposition (format 0.0.4) that the HTTP handler serves, of the
 * series metrics_group.c makes of the outboxes.
 */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"
#include "metrics_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define MSEC 1000ULL
#define SEC 1000000ULL

const uint64_t metrics_latency_bounds_us[] = {
    5 * MSEC,   10 * MSEC, 25 * MSEC,   50 * MSEC,  100 * MSEC, 250 * MSEC,
    500 * MSEC, 1 * SEC,   2500 * MSEC, 5 * SEC,    10 * SEC,   30 * SEC,
    60 * SEC,   300 * SEC, 900 * SEC,   3600 * SEC,
};
const size_t metrics_latency_nbounds =
    sizeof(metrics_latency_bounds_us) / sizeof(metrics_latency_bounds_us[0]);

const uint64_t metrics_batch_bounds_us[] = {
    1 * MSEC,    2500,       5 * MSEC,   10 * MSEC,  25 * MSEC,
    50 * MSEC,   100 * MSEC, 250 * MSEC, 500 * MSEC, 1 * SEC,
    2500 * MSEC, 5 * SEC,    10 * SEC,   30 * SEC,   60 * SEC,
};
const size_t metrics_batch_nbounds =
    sizeof(metrics_batch_bounds_us) / sizeof(metrics_batch_bounds_us[0]);

void
histogram_init(struct histogram *h, const uint64_t *bounds_us, size_t nbounds)
{
    if (nbounds > HISTOGRAM_MAX_BOUNDS)
        nbounds = HISTOGRAM_MAX_BOUNDS;
    h->bounds_us = bounds_us;
    h->nbounds = nbounds;
    for (size_t i = 0; i <= HISTOGRAM_MAX_BOUNDS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum_us, 0);
}

void
histogram_observe_us(struct histogram *h, int64_t us)
{
    uint64_t v = us > 0 ? (uint64_t)us : 0;
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds_us[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, v, memory_order_relaxed);
}

uint64_t
histogram_count(const struct histogram *h)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= h->nbounds; i++)
        n += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return n;
}

uint64_t
metrics_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec / 1000;
}

/* ---- the exposition text ---- */

static void
family(struct strbuf *o, const char *name, const char *type, const char *help)
{
    strbuf_addf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values escape backslash, quote and newline (format 0.0.4). */
static void
label_value(struct strbuf *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            strbuf_addf(o, "\\%c", *v);
        else if (*v == '\n')
            strbuf_adds(o, "\\n");
        else
            strbuf_add(o, v, 1);
    }
}

static void
sample_start(struct strbuf *o, const char *name, const char *outbox)
{
    strbuf_addf(o, "%s{outbox=\"", name);
    label_value(o, outbox);
    strbuf_adds(o, "\"");
}

static void
sample_u64(struct strbuf *o, const char *name, const char *outbox, uint64_t v)
{
    sample_start(o, name, outbox);
    strbuf_addf(o, "} %llu\n", (unsigned long long)v);
}

/* Seconds from microseconds, exact to the microsecond. */
static void
print_seconds(struct strbuf *o, uint64_t us)
{
    strbuf_addf(o, "%llu.%06llu", (unsigned long long)(us / SEC),
                (unsigned long long)(us % SEC));
}

static void
histogram_samples(struct strbuf *o, const char *name, const char *outbox,
                  const struct histogram *h)
{
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        cumulative += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        strbuf_addf(o, "%s_bucket{outbox=\"", name);
        label_value(o, outbox);
        if (i < h->nbounds) {
            /* %g prints the bounds as 0.005, 2.5, 3600: short and exact */
            strbuf_addf(o, "\",le=\"%g\"} %llu\n",
                        (double)h->bounds_us[i] / (double)SEC,
                        (unsigned long long)cumulative);
        } else {
            strbuf_addf(o, "\",le=\"+Inf\"} %llu\n",
                        (unsigned long long)cumulative);
        }
    }
    char sub[128];
    snprintf(sub, sizeof(sub), "%s_sum", name);
    sample_start(o, sub, outbox);
    strbuf_adds(o, "} ");
    print_seconds(o, atomic_load_explicit(&h->sum_us, memory_order_relaxed));
    strbuf_adds(o, "\n");
    /* The count is the +Inf bucket read above, so the two always agree. */
    snprintf(sub, sizeof(sub), "%s_count", name);
    sample_u64(o, sub, outbox, cumulative);
}

#define OM(f) offsetof(struct outbox_metrics, f)
const struct counter_family metrics_counters[] = {
    {"outboxd_events_published_total", "Events confirmed by the broker.",
     OM(published)},
    {"outboxd_events_failed_total",
     "Publish attempts that failed: nack, unroutable, confirm timeout, "
     "channel or connection lost.",
     OM(failed)},
    {"outboxd_events_retried_total", "Events moved to RETRY.", OM(retried)},
    {"outboxd_events_dead_total",
     "Events moved to DEAD (those past expires_at counted apart).", OM(dead)},
    {"outboxd_events_expired_total",
     "Events moved to DEAD unpublished, claimed or due at or after their "
     "expires_at.",
     OM(expired)},
    {"outboxd_events_released_total",
     "Claimed events given back unattempted (an earlier event of their "
     "aggregate failed, or shutdown).",
     OM(released)},
    {"outboxd_leases_lost_total",
     "Events whose lease another relay took before their outcome was "
     "recorded.",
     OM(lost)},
    {"outboxd_batches_total", "Claimed batches.", OM(batches)},
    {"outboxd_batches_lean_total",
     "Batches claimed lean: locked while published, one write per row.",
     OM(lean_batches)},
    {"outboxd_joins_total",
     "Reads that joined the commits the binlog told of to the open lean "
     "transaction.",
     OM(joins)},
    {"outboxd_joins_by_id_total",
     "Of those, the ones that locked the one row told by its id, read from "
     "the binlog, rather than reading the range past the transaction's rows.",
     OM(joins_by_id)},
    {"outboxd_joins_head_free_total",
     "Of those, the ones that left out the read of the aggregate's earlier "
     "events: the transaction held every unfinished row.",
     OM(joins_head_free)},
    {"outboxd_wakes_total",
     "Committed inserts into the outbox table told by the binlog stream.",
     OM(wakes)},
    {"outboxd_claims_empty_total", "Claims that found no row to publish.",
     OM(empty_claims)},
    {"outboxd_database_errors_total",
     "Failed database connects, claims and records, each one, however "
     "few of them the log shows.",
     OM(db_errors)},
    {"outboxd_database_read_only_total",
     "Of those, the server refusing writes (read_only, super_read_only, a "
     "Galera node not primary): each ends the session.",
     OM(db_read_only)},
    {"outboxd_claim_conflicts_total",
     "Claim attempts that lost a race for their rows to another relay: a "
     "deadlock, or on Galera a certification conflict at COMMIT (1213). "
     "Retried at once; not a database error.",
     OM(claim_conflicts)},
    {"outboxd_broker_errors_total",
     "Failed broker connects and broker connections lost.", OM(broker_errors)},
    {"outboxd_confirms_late_total",
     "Broker confirms (basic.ack or basic.nack frames) that came after "
     "their wave had given up waiting (confirm_timeout): its rows were "
     "already retried, so they go out again.",
     OM(late_confirms)},
};
_Static_assert(sizeof(metrics_counters) / sizeof(*metrics_counters) ==
                   METRICS_NCOUNTERS,
               "METRICS_NCOUNTERS counts the table");

static void
render_counters(struct strbuf *o, const struct outbox_metrics *obs, size_t n)
{
    for (size_t c = 0; c < METRICS_NCOUNTERS; c++) {
        const struct counter_family *cf = &metrics_counters[c];
        family(o, cf->name, "counter", cf->help);
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&obs[i] + cf->off, sizeof(v));
            sample_u64(o, cf->name, obs[i].outbox, v);
        }
    }
}

/*
 * Which server is the pace: the rates of the two samples, in seconds per
 * second, tell where a drain's time goes.  Work the database does while
 * the broker confirms is not waited for and not counted.
 */
static void
render_waits(struct strbuf *o, const struct outbox_metrics *obs, size_t n)
{
    static const char name[] = "outboxd_wait_seconds_total";
    family(o, name, "counter",
           "Time the relay waited, by server: the broker (a batch's "
           "publishing until its last confirm), the database (claims and "
           "records that publishing did not overlap, idle polls too).");
    for (size_t i = 0; i < n; i++) {
        const char *on[2] = {"broker", "database"};
        uint64_t us[2] = {obs[i].wait_broker_us, obs[i].wait_database_us};
        for (int k = 0; k < 2; k++) {
            sample_start(o, name, obs[i].outbox);
            strbuf_addf(o, ",on=\"%s\"} ", on[k]);
            print_seconds(o, us[k]);
            strbuf_adds(o, "\n");
        }
    }
}

static void
render_flag(struct strbuf *o, const struct outbox_metrics *obs, size_t n,
            const char *name, const char *help, size_t off)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < n; i++) {
        bool v;
        memcpy(&v, (const char *)&obs[i] + off, sizeof(v));
        sample_u64(o, name, obs[i].outbox, v ? 1 : 0);
    }
}

static void
render_rows(struct strbuf *o, const struct outbox_metrics *obs, size_t n)
{
    family(o, "outboxd_rows", "gauge",
           "Rows of the outbox table per status, counted every few seconds "
           "(SENT is not counted: that would scan the retention window).");
    for (size_t i = 0; i < n; i++) {
        if (!obs[i].rows_known)
            continue;
        for (int s = 0; s < OUTBOX_STATUS_COUNT; s++) {
            if (!obs[i].rows_counted[s])
                continue;
            sample_start(o, "outboxd_rows", obs[i].outbox);
            strbuf_addf(o, ",status=\"%s\"} %llu\n",
                        outbox_status_name((enum outbox_status)s),
                        (unsigned long long)obs[i].rows[s]);
        }
    }
    family(o, "outboxd_oldest_pending_age_seconds", "gauge",
           "Age of the PENDING event next in line (lowest id), 0 when none "
           "is pending.");
    for (size_t i = 0; i < n; i++) {
        if (!obs[i].rows_known)
            continue;
        sample_start(o, "outboxd_oldest_pending_age_seconds", obs[i].outbox);
        strbuf_addf(o, "} %.6f\n", obs[i].oldest_pending_age_s);
    }
}

/* on_dead: hold: every counted outbox, 0 for those that do not hold. */
static void
render_holds(struct strbuf *o, const struct outbox_metrics *obs, size_t n)
{
    family(o, "outboxd_held_aggregates", "gauge",
           "Aggregates whose later events wait behind a DEAD event (on_dead: "
           "hold) until outboxctl dead retry or dead release.");
    for (size_t i = 0; i < n; i++)
        if (obs[i].holds_known)
            sample_u64(o, "outboxd_held_aggregates", obs[i].outbox,
                       obs[i].held_aggregates);
    family(o, "outboxd_oldest_hold_seconds", "gauge",
           "How long the oldest held aggregate has been held, 0 when none "
           "is.");
    for (size_t i = 0; i < n; i++) {
        if (!obs[i].holds_known)
            continue;
        sample_start(o, "outboxd_oldest_hold_seconds", obs[i].outbox);
        strbuf_addf(o, "} %.3f\n", obs[i].oldest_hold_s);
    }
}

/* Which source wakes each outbox: one sample per source, 1 for the one
 * in force, so that a dashboard can count outboxes by source.  A group
 * counts its members by source: summed, the count stays right, and a
 * member left to the poll shows as poll above 0. */
static void
render_pacing(struct strbuf *o, const struct metrics_view *v)
{
    const struct outbox_metrics *obs = v->obs;
    size_t n = v->n;
    family(o, "outboxd_wake_source", "gauge",
           "1 for what wakes the outbox now (for a group, how many of its "
           "members each wakes): binlog (a live binlog stream) or poll (the "
           "poll alone, up to poll_interval).");
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            sample_start(o, "outboxd_wake_source", obs[i].outbox);
            strbuf_addf(o, ",source=\"%s\"} %zu\n", k ? "poll" : "binlog",
                        k ? v->members[i] - v->live[i] : v->live[i]);
        }
    family(o, "outboxd_poll_interval_seconds", "gauge",
           "The wait before the outbox's next claim (a group's longest): 0 "
           "while claims fill batches, up to the ceiling while they find "
           "nothing.");
    for (size_t i = 0; i < n; i++) {
        sample_start(o, "outboxd_poll_interval_seconds", obs[i].outbox);
        strbuf_addf(o, "} %.3f\n", obs[i].poll_wait_s);
    }
}

static void
render_histograms(struct strbuf *o, const struct outbox_metrics *obs, size_t n)
{
    family(o, "outboxd_commit_to_confirm_seconds", "histogram",
           "From the row's created_at to the broker's confirm, per event.");
    for (size_t i = 0; i < n; i++)
        histogram_samples(o, "outboxd_commit_to_confirm_seconds", obs[i].outbox,
                          obs[i].commit_to_confirm);
    family(o, "outboxd_batch_duration_seconds", "histogram",
           "One batch from its claim to its finalize.");
    for (size_t i = 0; i < n; i++)
        histogram_samples(o, "outboxd_batch_duration_seconds", obs[i].outbox,
                          obs[i].batch_duration);
}

/* A counter of two series that differ by one label's value. */
static void
counter_pair(struct strbuf *o, const char *name, const char *help,
             const char *label, const char *a, uint64_t va, const char *b,
             uint64_t vb)
{
    family(o, name, "counter", help);
    strbuf_addf(o, "%s{%s=\"%s\"} %llu\n", name, label, a,
                (unsigned long long)va);
    strbuf_addf(o, "%s{%s=\"%s\"} %llu\n", name, label, b,
                (unsigned long long)vb);
}

/* The database_like entries' discovery, across all of them. */
static void
render_discovery(struct strbuf *o, const struct daemon_metrics *dm)
{
    counter_pair(o, "outboxd_discoveries_total",
                 "Times a database_like entry's server was asked for its "
                 "tenants, by result.",
                 "result", "success", dm->discoveries - dm->discovery_failures,
                 "failure", dm->discovery_failures);
    counter_pair(o, "outboxd_tenants_changed_total",
                 "Tenant schemas found (added) and gone (removed) since "
                 "start.",
                 "change", "added", dm->tenants_added, "removed",
                 dm->tenants_removed);
}

/* Per binlog stream: what it could not read woke every outbox. */
static void
render_binlogs(struct strbuf *o, const struct daemon_metrics *dm)
{
    static const char name[] = "outboxd_binlog_unreadable_total";
    family(o, name, "counter",
           "Transactions a binlog stream could not read whole (an event "
           "type it does not know, a compressed transaction it cannot "
           "open), by server: each woke every outbox of the server.");
    for (size_t i = 0; i < dm->nbinlogs; i++) {
        strbuf_addf(o, "%s{server=\"", name);
        label_value(o, dm->binlogs[i].server);
        strbuf_addf(o, "\"} %llu\n",
                    (unsigned long long)dm->binlogs[i].unreadable);
    }
}

static void
render_daemon(struct strbuf *o, const struct daemon_metrics *dm)
{
    family(o, "outboxd_build_info", "gauge",
           "Always 1; the version is in the label.");
    strbuf_adds(o, "outboxd_build_info{version=\"");
    label_value(o, dm->version);
    strbuf_adds(o, "\"} 1\n");
    family(o, "outboxd_config_last_reload_successful", "gauge",
           "1 unless the last SIGHUP reload failed and the old "
           "configuration is still running.");
    strbuf_addf(o, "outboxd_config_last_reload_successful %d\n",
                dm->last_reload_ok ? 1 : 0);
    counter_pair(o, "outboxd_config_reloads_total",
                 "SIGHUP reloads, by result.", "result", "success",
                 dm->reloads_ok, "failure", dm->reloads_failed);
    render_discovery(o, dm);
    render_binlogs(o, dm);
}

/* How many outboxes each series stands for: sum() counts them all. */
static void
render_outboxes(struct strbuf *o, const struct metrics_view *v, size_t total)
{
    family(o, "outboxd_outboxes_running", "gauge",
           "Outboxes this process relays, each group's members included.");
    strbuf_addf(o, "outboxd_outboxes_running %zu\n", total);
    family(o, "outboxd_outboxes", "gauge",
           "Outboxes in the series: 1, or a group's members once its "
           "outboxes are folded into one series.");
    for (size_t i = 0; i < v->n; i++)
        sample_u64(o, "outboxd_outboxes", v->obs[i].outbox, v->members[i]);
}

static void
render_series(struct strbuf *o, const struct metrics_view *v)
{
    const struct outbox_metrics *obs = v->obs;
    size_t n = v->n;
    render_counters(o, obs, n);
    render_waits(o, obs, n);
    render_rows(o, obs, n);
    render_holds(o, obs, n);
    render_flag(o, obs, n, "outboxd_database_connected",
                "1 while the outbox's database session is up (a group's: "
                "every member's).",
                OM(db_up));
    render_flag(o, obs, n, "outboxd_broker_connected",
                "1 while the outbox's broker connection is up (a group's: "
                "every member's).",
                OM(broker_up));
    render_flag(o, obs, n, "outboxd_broker_blocked",
                "1 while the broker blocks publishing (memory or disk "
                "alarm; a group's: any member's).",
                OM(broker_blocked));
    render_pacing(o, v);
    render_histograms(o, obs, n);
}

char *
metrics_render(const struct daemon_metrics *dm,
               const struct outbox_metrics *obs, size_t n, size_t *len)
{
    struct strbuf o = {0};
    struct metrics_view v;
    metrics_view_build(&v, obs, n, dm->outbox_series, dm->groups);
    strbuf_reserve(&o, 8192);
    render_daemon(&o, dm);
    render_outboxes(&o, &v, n);
    render_series(&o, &v);
    metrics_view_free(&v);
    *len = o.len;
    return o.p;
}
