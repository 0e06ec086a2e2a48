/*
 * relay_wave: one claimed batch published in waves, so that the n-th
 * event of an aggregate goes out only once its (n-1)-th was confirmed
 * and marked SENT, within the lease and past no expires_at.
 */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "outbox_log.h"
#include "relay_int.h"
#include "util.h"

/* A blocked broker is asked this often whether a stop request came. */
#define BLOCKED_CHECK_MS 100

static int
cmp_aggregate(const void *a, const void *b, void *arg)
{
    const struct outbox_row *rows = arg;
    const struct outbox_row *x = &rows[*(const size_t *)a];
    const struct outbox_row *y = &rows[*(const size_t *)b];
    int c = strcmp(x->aggregate_type, y->aggregate_type);
    if (c == 0)
        c = strcmp(x->aggregate_id, y->aggregate_id);
    if (c == 0)
        c = x->id < y->id ? -1 : x->id > y->id;
    return c;
}

static bool
same_aggregate(const struct outbox_row *x, const struct outbox_row *y)
{
    return strcmp(x->aggregate_type, y->aggregate_type) == 0 &&
           strcmp(x->aggregate_id, y->aggregate_id) == 0;
}

/*
 * Gives each row its aggregate group and its rank in that group, and
 * returns the number of waves.  With ordering: none every row is in
 * wave 0 and a group of its own.
 */
static size_t
place_rows(struct relay *r)
{
    struct outbox_batch *b = r->batch;
    struct relay_scratch *s = r->scratch;
    size_t waves = b->n ? 1 : 0;
    if (r->outbox->ordering == ORDERING_NONE) {
        for (size_t i = 0; i < b->n; i++) {
            s->place[i] = (struct row_place){.group = i, .pos = 0};
            s->group_len[i] = 1;
        }
        return waves;
    }
    for (size_t i = 0; i < b->n; i++)
        s->order[i] = i;
    qsort_r(s->order, b->n, sizeof(*s->order), cmp_aggregate, b->rows);
    size_t group = 0, pos = 0;
    for (size_t k = 0; k < b->n; k++) {
        size_t i = s->order[k];
        if (k > 0 && !same_aggregate(&b->rows[s->order[k - 1]], &b->rows[i])) {
            group++;
            pos = 0;
        }
        s->place[i] = (struct row_place){.group = group, .pos = pos++};
        s->group_len[group] = pos;
        if (pos > waves)
            waves = pos;
    }
    return waves;
}

/* Buckets row indexes by wave, each wave in id order (counting sort). */
static void
bucket_waves(struct relay *r, size_t waves)
{
    struct relay_scratch *s = r->scratch;
    struct outbox_batch *b = r->batch;
    memset(s->wave_start, 0, (waves + 1) * sizeof(*s->wave_start));
    for (size_t i = 0; i < b->n; i++)
        s->wave_start[s->place[i].pos + 1]++;
    for (size_t w = 0; w < waves; w++)
        s->wave_start[w + 1] += s->wave_start[w];
    size_t *fill = s->order; /* reused: per-wave cursor */
    memcpy(fill, s->wave_start, waves * sizeof(*fill));
    for (size_t i = 0; i < b->n; i++)
        s->wave[fill[s->place[i].pos]++] = &b->rows[i];
}

static void
release(struct relay *r, struct outbox_row *row, const char *why)
{
    row_enter_state(r->batch, row, ROW_RELEASED, why);
}

/*
 * Publishing must end well inside the lease: past it another relay may
 * claim the same rows and a late publish of ours could overtake its
 * newer events of the aggregate.  A fifth of the lease (at least 100 ms)
 * is kept for recording the outcomes.
 */
static uint64_t
lease_deadline(const struct relay *r)
{
    uint64_t lease = r->outbox->lease_ms;
    uint64_t margin = lease / 5 > 100 ? lease / 5 : 100;
    return r->claim_ms + (lease > margin ? lease - margin : 0);
}

static uint64_t
wave_deadline(struct relay *r)
{
    uint64_t deadline = clock_ms() + r->outbox->broker->confirm_timeout_ms;
    uint64_t stop = r->stop_deadline_ms, lease = lease_deadline(r);
    if (stop != 0 && stop < deadline)
        deadline = stop;
    return lease < deadline ? lease : deadline;
}

/*
 * docs/contract.md sections 6 and 7: a row is never published at or
 * after its expires_at.  The time left is the database's at the claim
 * less this host's monotonic time since the claim began, so it is never
 * more than the database clock gives.  A row with no whole millisecond
 * left goes DEAD (no attempt counted: it was never published); the
 * others carry it as the AMQP expiration when the outbox asks for that.
 */
static bool
expire_if_due(struct relay *r, struct outbox_row *row)
{
    if (!row->has_expiry)
        return false;
    uint64_t now = clock_ms();
    uint64_t elapsed = now > r->claim_ms ? now - r->claim_ms : 0;
    int64_t left = batch_expiry_ms_left(row->expires_in_us, elapsed);
    if (left <= 0) {
        char why[256];
        batch_format_expiry(why, sizeof(why), row->expires_at,
                            "due to be published", -left * 1000);
        batch_expire_row(r->batch, row, why, false);
        return true;
    }
    row->expiration = r->outbox->expiration_from_expires_at
                          ? batch_sprintf(r->batch, "%lld", (long long)left)
                          : NULL;
    return false;
}

/*
 * Collects the rows of wave w that may go out now: still claimed, and no
 * earlier event of their aggregate failed or was held back.
 */
static size_t
collect_wave(struct relay *r, size_t w, struct outbox_row **out)
{
    struct relay_scratch *s = r->scratch;
    size_t n = 0;
    for (size_t k = s->wave_start[w]; k < s->wave_start[w + 1]; k++) {
        struct outbox_row *row = s->wave[k];
        size_t i = (size_t)(row - r->batch->rows);
        if (row->state != ROW_CLAIMED)
            continue;
        if (s->blocked[s->place[i].group])
            release(r, row, "an earlier event of its aggregate is not sent");
        else
            out[n++] = row;
    }
    return n;
}

/*
 * After a wave: every aggregate whose event did not get through stops,
 * but for a row the claim already made DEAD (past expires_at): the
 * table holds it finished, so the events behind it may go.
 */
static void
block_failed_groups(struct relay *r)
{
    struct relay_scratch *s = r->scratch;
    for (size_t i = 0; i < r->batch->n; i++) {
        const struct outbox_row *row = &r->batch->rows[i];
        enum row_state st = row->state;
        if ((st == ROW_FAILED || st == ROW_REJECTED || st == ROW_RELEASED) &&
            !row->recorded)
            s->blocked[s->place[i].group] = true;
    }
}

/* No new wave after a stop request's deadline or near the lease's end. */
static bool
stop_due(struct relay *r)
{
    uint64_t stop = r->stop_deadline_ms, now = clock_ms();
    if (now >= lease_deadline(r)) {
        outbox_log(LOG_WARN, r->outbox,
                   "batch of %zu events ran out of its lease while publishing; "
                   "the rest go back unattempted (raise lease or lower "
                   "batch_size)",
                   r->batch->n);
        return true;
    }
    return stop != 0 && now >= stop;
}

/* The wave's confirms arrived by now: latency from the row's commit. */
static void
observe_acks(struct relay *r, struct outbox_row **rows, size_t n)
{
    int64_t now = wall_us();
    for (size_t i = 0; i < n; i++)
        if (rows[i]->state == ROW_ACKED && rows[i]->created_us > 0)
            histogram_observe_us(&r->stats.commit_to_confirm,
                                 now - rows[i]->created_us);
}

/*
 * The confirmed events of a wave whose aggregate has a later event in the
 * batch are marked SENT before that one goes out: an event is never
 * published while an earlier one of its aggregate is neither SENT nor
 * DEAD, so a crash cannot make the broker see an event again after a
 * later one.  false when publishing must stop: the database failed or
 * another relay holds the lease now.
 */
static bool
record_wave(struct relay *r, struct outbox_row **rows, size_t n)
{
    struct relay_scratch *s = r->scratch;
    size_t k = 0, lost = 0;
    char err[ERR_LEN];
    if (r->backend.mark_sent == NULL)
        return true;
    for (size_t i = 0; i < n; i++) {
        const struct row_place *pl = &s->place[rows[i] - r->batch->rows];
        if (rows[i]->state == ROW_ACKED &&
            s->group_len[pl->group] > pl->pos + 1)
            s->marks[k++] = rows[i];
    }
    if (k == 0)
        return true;
    relay_job_wait(r); /* the store is the job's until it is done */
    relay_wait_begin(r, WAIT_DATABASE);
    int rc = r->backend.mark_sent(r->backend.store, r->batch, s->marks, k,
                                  &lost, err, sizeof(err));
    relay_wait_end(r);
    if (rc < 0) {
        outbox_log(LOG_ERROR, r->outbox,
                   "could not record %zu confirmed events, their aggregates' "
                   "later events wait for the next claim: %s",
                   k, err);
        str_copy(r->last_error, err, sizeof(r->last_error));
        return false;
    }
    if (lost == 0)
        return true;
    r->stats.lost += lost;
    outbox_log(LOG_WARN, r->outbox,
               "lost the lease on %zu events mid-batch: another relay "
               "reclaimed them, this batch publishes no more",
               lost);
    return false;
}

/*
 * A broker that blocks publishing (memory or disk alarm) holds a wave
 * unconfirmed until it times out: no wave starts while it blocks, so
 * that an alarm costs no row an attempt.  The wait ends with the lease
 * or at a stop request, and what is left goes back unattempted.  false
 * when publishing must stop.
 */
static bool
await_unblocked(struct relay *r, bool *broker_ok)
{
    void *pub = r->backend.publisher;
    char err[ERR_LEN];
    if (r->backend.is_blocked == NULL || !r->backend.is_blocked(pub))
        return true;
    while (r->backend.is_blocked(pub)) {
        uint64_t now = clock_ms(), until = lease_deadline(r);
        if (r->stop_deadline_ms != 0)
            return false;
        if (now >= until) {
            outbox_log(LOG_INFO, r->outbox,
                       "the broker still blocks publishing at the end of the "
                       "lease: the batch's unpublished events go back "
                       "unattempted");
            return false;
        }
        if (until - now > BLOCKED_CHECK_MS)
            until = now + BLOCKED_CHECK_MS;
        if (r->backend.wait_unblocked(pub, until, err, sizeof(err)) < 0) {
            str_copy(r->last_error, err, sizeof(r->last_error));
            *broker_ok = false;
            return false;
        }
    }
    return true;
}

/* Drops from rows those past expires_at now, keeping their order. */
static size_t
drop_expired(struct relay *r, struct outbox_row **rows, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!expire_if_due(r, rows[i]))
            rows[k++] = rows[i];
    return k;
}

/*
 * One wave out until its last confirm, the time counted as the broker's;
 * false when no wave may start (see await_unblocked).  Expiry is judged
 * after any wait for a blocked broker, just before the publish; *n is
 * what is left to publish.
 */
static bool
send_wave(struct relay *r, struct outbox_row **rows, size_t *n, bool *broker_ok)
{
    char err[ERR_LEN];
    relay_wait_begin(r, WAIT_BROKER);
    bool go = await_unblocked(r, broker_ok);
    if (go)
        *n = drop_expired(r, rows, *n);
    if (go && *n > 0 &&
        r->backend.publish(r->backend.publisher, r->batch, rows, *n,
                           r->outbox->mandatory, wave_deadline(r), err,
                           sizeof(err)) < 0) {
        str_copy(r->last_error, err, sizeof(r->last_error));
        *broker_ok = false;
    }
    relay_wait_end(r);
    return go;
}

/* Publishes every wave; returns false when the broker connection died. */
bool
relay_publish_waves(struct relay *r)
{
    struct relay_scratch *s = r->scratch;
    size_t waves = place_rows(r);
    bool broker_ok = true;

    memset(s->blocked, 0, r->batch->n * sizeof(*s->blocked));
    bucket_waves(r, waves);
    /* A lean batch's rows are locked, not leased: marking a wave SENT
     * would commit and free the rest.  Its first wave goes; the later
     * events stay PENDING and the next claim, at once, takes them. */
    if (r->batch->lean && waves > 1) {
        waves = 1;
        r->last.lean_cut = true;
    }
    for (size_t w = 0; w < waves && broker_ok && !stop_due(r); w++) {
        block_failed_groups(r);
        struct outbox_row **rows = s->wave + s->wave_start[w];
        size_t n = collect_wave(r, w, rows);
        if (n == 0)
            continue;
        if (!send_wave(r, rows, &n, &broker_ok))
            break;
        observe_acks(r, rows, n);
        if (broker_ok && w + 1 < waves && !record_wave(r, rows, n))
            break;
    }
    return broker_ok;
}
