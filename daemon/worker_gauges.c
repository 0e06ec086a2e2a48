/*
 * worker_gauges: a worker's gauges (rows per status, the oldest pending
 * age, the holds) counted between cycles, retention, and the snapshot of
 * its counters and gauges for /metrics.
 */
#include "worker_int.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "outbox_log.h"
#include "publisher.h"
#include "stats_sql.h"
#include "store.h"
#include "util.h"

/* How often the rows and oldest-pending gauges are counted. */
#define STATS_INTERVAL_MS 5000
/* With a live wake stream and nothing changed in the table, the counts
 * cannot have changed either: they are read again this often anyway. */
#define STATS_QUIET_MS 60000
/* Retention shares this thread with the relay: each run stops after its
 * budget, and one cut short comes back soon rather than an interval
 * later, so a backlog of old rows drains without stalling the relay. */
#define RETENTION_BUDGET_MS 500
#define RETENTION_CATCHUP_MS 1000

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
 * the relay's own included: when nothing was pending or leased at the
 * last count, and every write since is one the relay accounts for (an
 * event it found, sent and wrote SENT or deleted, or its own record of
 * them, which the counts leave out), no count can have moved, and the
 * oldest pending age is still none.  So a small outbox does not count
 * its rows after every event: a thousand tenants at an event a second
 * each paid three statements per event for it.  Any other write (a
 * RETRY, a DEAD, another relay, an operator) is one more change than
 * accounted for, and counts.  Writes the binlog leaves out (a session
 * with sql_log_bin off) show within STATS_QUIET_MS, as would the rare
 * other write that matched a record of the relay's not yet told.  The
 * lean read's looks rest on the same (store_set_quiet): with nothing
 * leased and nothing delayed, none can have run out or fallen due.  A
 * claim asks with the inserts told that woke it (told_unclaimed), which
 * it is about to account for; one that finds them not all leaves them
 * unaccounted, and the next claim looks.
 */
bool
worker_rows_unchanged(const struct worker *w, uint64_t told_unclaimed)
{
    return w->wake_live && w->rows_known &&
           w->changes - w->stats_changes ==
               w->stats_explained + told_unclaimed &&
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
            outbox_log(LOG_WARN, w->ob, "%s", err);
        w->holds_known = false;
        return;
    }
    w->held_aggregates = h.aggregates;
    uint64_t now = clock_ms(), age = (uint64_t)h.oldest_us / 1000;
    w->hold_since_ms = h.aggregates > 0 && age < now ? now - age : now;
    w->holds_known = true;
}

void
worker_stats_schedule(struct worker *w)
{
    worker_timer_add_ms(w->stats, spread_ms(STATS_INTERVAL_MS, PERIOD_SPREAD));
}

void
worker_stats_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct outbox_counts counts;
    char err[ERR_LEN];
    (void)fd;
    (void)what;
    if (!w->stopping)
        worker_stats_schedule(w);
    if (store_session(w->store) == NULL || w->stopping) {
        w->rows_known = false;
        return;
    }
    if (worker_rows_unchanged(w, 0)) {
        outbox_log(LOG_DEBUG, w->ob,
                   "rows not counted: no change unaccounted for");
        return;
    }
    if (worker_lock_backing_off(w))
        return;
    outbox_log(LOG_DEBUG, w->ob, "rows counted");
    w->stats_changes = w->changes;
    w->stats_explained = 0;
    w->stats_ms = clock_ms();
    if (stats_sql_count(w->store, &counts, err, sizeof(err)) < 0) {
        /* The claim that follows meets the same fault and handles it. */
        if (w->rows_known)
            outbox_log(LOG_WARN, w->ob, "%s", err);
        w->rows_known = false;
        if (counts.errnum == ERRNO_LOCK_WAIT_TIMEOUT)
            (void)worker_lock_backoff(w);
        return;
    }
    stats_publish(w, &counts);
    stats_holds(w);
}

void
worker_retention_schedule(struct worker *w, uint64_t delay_ms)
{
    worker_timer_add_ms(w->retention, delay_ms);
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
        outbox_log(LOG_WARN, ob, "retention: %s", err);
        return true;
    }
    if (res.deleted > 0) {
        duration_format(ob->retention_sent_ms, age, sizeof(age));
        snprintf(deleted, sizeof(deleted), "%llu",
                 (unsigned long long)res.deleted);
        snprintf(batches, sizeof(batches), "%u", res.batches);
        outbox_log_kv(LOG_INFO, ob,
                      LOG_KV("deleted", deleted, "batches", batches),
                      "retention deleted SENT rows older than %s", age);
    }
    return res.done;
}

/*
 * Between cycles, on the relay's own session; retention.sent 0s keeps
 * SENT rows for good.  on_sent: delete tables run it too: it costs one
 * short read, and clears what a former on_sent: mark left behind.
 */
void
worker_retention_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->stopping)
        return;
    uint64_t next = w->ob->retention_interval_ms;
    if (w->ob->retention_sent_ms > 0 && store_is_connected(w->store) &&
        !worker_lock_backing_off(w) && !retention_run(w) &&
        next > RETENTION_CATCHUP_MS)
        next = RETENTION_CATCHUP_MS;
    worker_retention_schedule(w, next);
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
    m->wakes = atomic_load(&w->told.commits);
    m->empty_claims = w->empty_claims;
    m->db_errors = w->db_errors;
    m->db_read_only = w->db_read_only;
    m->claim_conflicts = store_claim_conflicts(w->store);
    store_joins(w->store, &m->joins, &m->joins_by_id, &m->joins_head_free);
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
