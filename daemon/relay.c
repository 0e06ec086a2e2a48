/*
 * relay: one cycle of one outbox.  Claim a batch, publish it in waves so
 * that the n-th event of an aggregate goes out only after its (n-1)-th
 * was confirmed (relay_wave.c), then finalize every outcome in a few
 * statements, on the helper thread beside the next batch's publishing.
 */
#define _GNU_SOURCE /* qsort_r */
#include "relay.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper.h"
#include "log.h"
#include "outbox_log.h"
#include "relay_int.h"
#include "util.h"

/* AMQP short strings (exchange, routing key) hold at most 255 bytes. */
#define SHORTSTR_MAX 255

void
relay_init(struct relay *r, const struct outbox_config *ob,
           const char *relay_id, const struct relay_backend *backend)
{
    memset(r, 0, sizeof(*r));
    r->outbox = ob;
    r->relay_id = relay_id;
    r->backend = *backend;
    for (int i = 0; i < RELAY_SLOTS; i++)
        batch_init(&r->slot[i]);
    r->batch = &r->slot[0];
    r->scratch = xcalloc(1, sizeof(*r->scratch));
    helper_init(&r->helper, backend->thread_begin, backend->thread_end);
    r->helper_in_use = &r->helper;
    r->claim_ahead = true;
    pthread_mutex_init(&r->stats.waits.lock, NULL);
    histogram_init(&r->stats.commit_to_confirm, metrics_latency_bounds_us,
                   metrics_latency_nbounds);
    histogram_init(&r->stats.batch_duration, metrics_batch_bounds_us,
                   metrics_batch_nbounds);
}

void
relay_share_helper(struct relay *r, struct helper *h)
{
    assert(!r->job.running);
    r->helper_in_use = h;
}

static void
scratch_free(struct relay_scratch *s)
{
    free(s->order);
    free(s->place);
    free(s->blocked);
    free(s->group_len);
    free(s->wave_start);
    free(s->wave);
    free(s->marks);
    *s = (struct relay_scratch){0};
}

/*
 * A relay between batches keeps no batch memory: a thousand idle
 * tenants would otherwise each hold their high-water mark of rows and
 * arenas.  What a refusing server left unrecorded stays.
 */
static void
relay_trim(struct relay *r)
{
    if (r->prev != NULL || r->next != NULL || r->unrecorded[0] != NULL ||
        r->unrecorded[1] != NULL)
        return;
    scratch_free(r->scratch);
    for (int i = 0; i < RELAY_SLOTS; i++) {
        batch_free(&r->slot[i]);
        batch_init(&r->slot[i]);
    }
}

void
relay_fini(struct relay *r)
{
    relay_job_wait(r);
    helper_fini(&r->helper);
    if (r->scratch != NULL)
        scratch_free(r->scratch);
    free(r->scratch);
    for (int i = 0; i < RELAY_SLOTS; i++)
        batch_free(&r->slot[i]);
    pthread_mutex_destroy(&r->stats.waits.lock);
}

static void
scratch_reserve(struct relay_scratch *s, size_t n)
{
    if (n <= s->cap)
        return;
    s->cap = n;
    s->order = xrealloc(s->order, n * sizeof(*s->order));
    s->place = xrealloc(s->place, n * sizeof(*s->place));
    s->blocked = xrealloc(s->blocked, n * sizeof(*s->blocked));
    s->group_len = xrealloc(s->group_len, n * sizeof(*s->group_len));
    s->wave_start = xrealloc(s->wave_start, (n + 1) * sizeof(*s->wave_start));
    s->wave = xrealloc(s->wave, n * sizeof(*s->wave));
    s->marks = xrealloc(s->marks, n * sizeof(*s->marks));
}

/* ---- preparing rows: bad rows, exchange and routing key ---- */

struct lookup_ctx {
    const struct outbox_config *ob;
    const struct outbox_row *row;
    char id[24];
};

static const char *
row_lookup(const char *column, void *arg)
{
    struct lookup_ctx *c = arg;
    const struct outbox_row *row = c->row;
    if (strcmp(column, "event_id") == 0)
        return row->event_id;
    if (strcmp(column, "aggregate_type") == 0)
        return row->aggregate_type;
    if (strcmp(column, "aggregate_id") == 0)
        return row->aggregate_id;
    if (strcmp(column, "event_type") == 0)
        return row->event_type;
    if (strcmp(column, "id") == 0)
        return c->id;
    for (size_t i = 0; i < c->ob->ncolumns; i++)
        if (strcmp(column, c->ob->columns[i]) == 0)
            return row->columns ? row->columns[i] : NULL;
    return NULL;
}

static const char *
override_value(const struct outbox_config *ob, const struct outbox_row *row,
               const char *column)
{
    if (column == NULL || row->columns == NULL)
        return NULL;
    for (size_t i = 0; i < ob->ncolumns; i++)
        if (strcmp(column, ob->columns[i]) == 0)
            return row->columns[i];
    return NULL;
}

/* Resolves one of exchange or routing key; NULL when it is too long. */
static const char *
resolve_target(struct relay *r, struct outbox_row *row,
               const struct template *tpl, const char *override_column)
{
    const char *v = override_value(r->outbox, row, override_column);
    if (v != NULL)
        return strlen(v) <= SHORTSTR_MAX ? v : NULL;
    if (template_is_constant(tpl))
        return tpl->nparts ? tpl->parts[0].text : "";
    struct lookup_ctx ctx = {.ob = r->outbox, .row = row};
    char buf[SHORTSTR_MAX + 1];
    snprintf(ctx.id, sizeof(ctx.id), "%llu", (unsigned long long)row->id);
    if (template_render(tpl, row_lookup, &ctx, buf, sizeof(buf)) < 0)
        return NULL;
    return batch_strdup(r->batch, buf);
}

static void
reject(struct relay *r, struct outbox_row *row, const char *why)
{
    row_enter_state(r->batch, row, ROW_REJECTED, why);
    row->dead = true; /* the row itself is wrong: retrying cannot help */
}

static int
cmp_event_id(const void *a, const void *b, void *arg)
{
    const struct outbox_row *rows = arg;
    return strcmp(rows[*(const size_t *)a].event_id,
                  rows[*(const size_t *)b].event_id);
}

/* Rejects every row whose event_id another row of the batch also has. */
static void
reject_duplicates(struct relay *r)
{
    struct outbox_batch *b = r->batch;
    size_t *idx = r->scratch->order, n = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].state == ROW_CLAIMED)
            idx[n++] = i;
    qsort_r(idx, n, sizeof(*idx), cmp_event_id, b->rows);
    for (size_t i = 1; i < n; i++) {
        struct outbox_row *prev = &b->rows[idx[i - 1]], *row = &b->rows[idx[i]];
        if (strcmp(prev->event_id, row->event_id) != 0)
            continue;
        /* idx is sorted by event_id only: reject the later id of the pair */
        struct outbox_row *later = row->id > prev->id ? row : prev;
        struct outbox_row *first = later == row ? prev : row;
        if (later->state == ROW_CLAIMED)
            reject(r, later,
                   batch_sprintf(b, "duplicate event_id \"%s\" (also row %llu)",
                                 later->event_id,
                                 (unsigned long long)first->id));
    }
}

void
relay_prepare_rows(struct relay *r)
{
    struct outbox_batch *b = r->batch;
    const struct outbox_config *ob = r->outbox;
    scratch_reserve(r->scratch, b->n);
    for (size_t i = 0; i < b->n; i++) {
        struct outbox_row *row = &b->rows[i];
        if (row->state != ROW_CLAIMED)
            continue;
        if (row->event_id == NULL || row->event_id[0] == '\0') {
            reject(r, row, "event_id is NULL or empty");
            continue;
        }
        if (row->duplicate_of != 0) {
            reject(r, row,
                   batch_sprintf(b, "duplicate event_id \"%s\" (also row %llu)",
                                 row->event_id,
                                 (unsigned long long)row->duplicate_of));
            continue;
        }
        row->exchange =
            resolve_target(r, row, &ob->exchange, ob->exchange_column);
        row->routing_key =
            resolve_target(r, row, &ob->routing_key, ob->routing_key_column);
        if (row->exchange == NULL)
            reject(r, row, "exchange name longer than 255 bytes");
        else if (row->routing_key == NULL)
            reject(r, row, "routing key longer than 255 bytes");
    }
    reject_duplicates(r);
}

/* ---- outcomes ---- */

static void
decide_outcomes(struct relay *r, struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        struct outbox_row *row = &b->rows[i];
        if (row->state == ROW_CLAIMED)
            row_enter_state(b, row, ROW_RELEASED, "not attempted");
        else if (row->state == ROW_FAILED)
            row->dead = row->retry_count + 1 > r->outbox->max_retries;
        else if (row->state == ROW_REJECTED)
            row->dead = true;
    }
}

static void
log_dead_row(struct relay *r, const struct outbox_row *row)
{
    outbox_log_row(
        LOG_WARN, r->outbox, row,
        LOG_KV("trace_id", row->trace_id ? row->trace_id : row->traceparent),
        "event %llu is DEAD after %u attempts: %s", (unsigned long long)row->id,
        row->retry_count + 1, row->error);
}

/* Expired rows: one line per batch, as after an outage they come in
 * numbers, and a count of their own beside the DEAD one. */
static void
count_expired(struct relay *r, const struct outbox_batch *b)
{
    const struct outbox_row *first = NULL;
    uint64_t expired = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].expired && expired++ == 0)
            first = &b->rows[i];
    if (first == NULL)
        return;
    outbox_log_row(LOG_WARN, r->outbox, first, NULL,
                   "%llu events DEAD unpublished, past their expires_at: %s",
                   (unsigned long long)expired, first->error);
    r->stats.expired += expired;
}

/* One line per batch for retries, one per event for dead letters. */
static void
count_and_log(struct relay *r, struct outbox_batch *b)
{
    const struct outbox_row *first_retry = NULL;
    uint64_t acked = 0, failed = 0, retried = 0, dead = 0, released = 0;
    count_expired(r, b);
    for (size_t i = 0; i < b->n; i++) {
        const struct outbox_row *row = &b->rows[i];
        acked += row->state == ROW_ACKED;
        released += row->state == ROW_RELEASED;
        failed += row->state == ROW_FAILED;
        if ((row->state != ROW_FAILED && row->state != ROW_REJECTED) ||
            row->expired)
            continue;
        if (row->dead) {
            dead++;
            log_dead_row(r, row);
        } else if (retried++ == 0) {
            first_retry = row;
        }
    }
    if (first_retry != NULL)
        outbox_log_row(LOG_WARN, r->outbox, first_retry, NULL,
                       "%llu events to RETRY: %s", (unsigned long long)retried,
                       first_retry->error);
    r->stats.published += acked;
    r->stats.failed += failed;
    r->stats.retried += retried;
    r->stats.dead += dead;
    r->stats.released += released;
}

/*
 * A server that refused writes (a demoted primary) wrote nothing of b,
 * and its session is gone: the next one records b, on the new primary
 * where b's rows replicated with its token, instead of publishing them
 * all again after their lease (docs/contract.md section 9).  So does a
 * lock wait that ran out: the next cycle records b, once the lock is
 * gone.  NULL when b is not kept; else where its record waits.
 */
static const char *
keep_unrecorded(struct relay *r, struct outbox_batch *b)
{
    if (b->lean)
        return NULL; /* its transaction is gone: nothing left to record */
    const char *later = r->backend.record_later != NULL
                            ? r->backend.record_later(r->backend.store)
                            : NULL;
    if (later == NULL)
        return NULL;
    for (int i = 0; i < 2; i++)
        if (r->unrecorded[i] == NULL || r->unrecorded[i] == b) {
            r->unrecorded[i] = b;
            return later;
        }
    return NULL;
}

/* Logs and counts what finalize of batch b returned. */
static bool
finalize_done(struct relay *r, struct outbox_batch *b, int rc, size_t lost,
              const char *err)
{
    const char *later = rc < 0 ? keep_unrecorded(r, b) : NULL;
    if (later != NULL) {
        outbox_log(LOG_WARN, r->outbox,
                   "the outcome of %zu events waits for %s; else they are "
                   "retried after their lease: %s",
                   b->n, later, err);
        str_copy(r->last_error, err, sizeof(r->last_error));
        return false;
    }
    if (rc < 0 && b->lean) {
        /* The rollback left them PENDING and unlocked: no loss. */
        outbox_log(LOG_ERROR, r->outbox,
                   "could not record the outcome of %zu events: their "
                   "transaction was rolled back, they will be published "
                   "again: %s",
                   b->n, err);
        str_copy(r->last_error, err, sizeof(r->last_error));
        return false;
    }
    if (rc < 0) {
        /* The rows keep their lease and come back after it: no loss. */
        outbox_log(LOG_ERROR, r->outbox,
                   "could not record the outcome of %zu events, they will be "
                   "retried after their lease: %s",
                   b->n, err);
        str_copy(r->last_error, err, sizeof(r->last_error));
        return false;
    }
    if (lost > 0) {
        r->stats.lost += lost;
        outbox_log(LOG_WARN, r->outbox,
                   "lost the lease on %zu events: another relay reclaimed "
                   "them after the lease expired, their outcome is theirs",
                   lost);
    }
    for (struct outbox_batch *x = b; x != NULL; x = x->lean_next)
        count_and_log(r, x);
    return true;
}

static bool
finalize(struct relay *r, struct outbox_batch *b)
{
    char err[ERR_LEN];
    size_t lost = 0;
    relay_wait_begin(r, WAIT_DATABASE);
    int rc = r->backend.finalize(r->backend.store, b, &lost, err, sizeof(err));
    relay_wait_end(r);
    return finalize_done(r, b, rc, lost, err);
}

/* ---- the database side, run beside publishing ---- */

/*
 * While a batch is being published the database connection is idle: the
 * relay's helper thread records the previous batch's outcome and claims the
 * next one meanwhile, so that a drain costs max(database, broker) per batch
 * rather than their sum.  Safe for ordering: the batch in flight is
 * PROCESSING, so the claim cannot take a later event of its aggregates,
 * and the previous batch is recorded before the claim reads.
 */
static void
job_run(void *arg)
{
    struct relay *r = arg;
    struct relay_job *j = &r->job;
    if (j->prev != NULL)
        j->fin_rc = r->backend.finalize(r->backend.store, j->prev, &j->lost,
                                        j->fin_err, sizeof(j->fin_err));
    if (j->next != NULL && j->fin_rc == 0) {
        batch_reset(j->next);
        j->next->lean_allowed = false; /* the session serves a publish */
        j->next_claim_ms = clock_ms();
        j->claim_rc = r->backend.claim(r->backend.store, r->relay_id, j->next,
                                       j->claim_err, sizeof(j->claim_err));
    }
}

/* Hands the job to the relay's helper thread (started on first use). */
static void
job_start(struct relay *r, struct outbox_batch *prev, struct outbox_batch *next)
{
    struct relay_job *j = &r->job;
    assert(!j->running); /* job_collect or relay_flush took the last one */
    *j = (struct relay_job){.prev = prev, .next = next, .claim_rc = -1};
    if (prev == NULL && next == NULL)
        return;
    /* false: no thread to be had, the job already ran here, in line */
    j->running = helper_submit(r->helper_in_use, job_run, r);
}

static struct outbox_batch *
free_slot(struct relay *r, const struct outbox_batch *a,
          const struct outbox_batch *b)
{
    for (int i = 0; i < RELAY_SLOTS; i++)
        if (&r->slot[i] != a && &r->slot[i] != b)
            return &r->slot[i];
    return NULL;
}

/* Gives back a claimed-ahead batch unattempted (stop, connection lost). */
static void
release_next(struct relay *r)
{
    if (r->next == NULL)
        return;
    decide_outcomes(r, r->next);
    finalize(r, r->next);
    r->next = NULL;
}

/* Records first what a refusing server or a lock left unrecorded; false
 * if the database failed again. */
static bool
record_unrecorded(struct relay *r)
{
    for (int i = 0; i < 2; i++) {
        struct outbox_batch *b = r->unrecorded[i];
        if (b == NULL)
            continue;
        r->unrecorded[i] = NULL;
        if (!finalize(r, b))
            return false;
    }
    return true;
}

void
relay_flush(struct relay *r)
{
    relay_job_wait(r);
    record_unrecorded(r); /* kept again if the server still refuses */
    if (r->prev != NULL)
        finalize(r, r->prev);
    r->prev = NULL;
    release_next(r);
}

/*
 * Collects the job: the previous batch's outcome and the claim ahead.
 * false when the database failed; *claim_failed when only the claim did.
 */
static bool
job_collect(struct relay *r, bool *claim_failed)
{
    struct relay_job *j = &r->job;
    relay_job_wait(r);
    bool ok = true;
    if (j->prev != NULL)
        ok = finalize_done(r, j->prev, j->fin_rc, j->lost, j->fin_err);
    r->prev = NULL;
    *claim_failed = j->next != NULL && j->claim_rc < 0 && ok;
    if (*claim_failed) {
        str_copy(r->last_error, j->claim_err, sizeof(r->last_error));
        ok = false;
    }
    r->next = ok && j->next != NULL && j->next->n > 0 ? j->next : NULL;
    r->next_claim_ms = j->next_claim_ms;
    *j = (struct relay_job){0};
    return ok;
}

/*
 * Also when only the claim ahead failed (a lock, a column dropped under
 * us) the batch in flight is recorded: its confirmed events are SENT now
 * rather than sent again after their lease.  A session that is gone
 * refuses at once; the claim's error stays the one reported.
 */
static void
finalize_after_failed_claim(struct relay *r, struct outbox_batch *b)
{
    char cause[sizeof(r->last_error)];
    str_copy(cause, r->last_error, sizeof(cause));
    finalize(r, b);
    str_copy(r->last_error, cause, sizeof(r->last_error));
}

/* A row whose lease expired may be what killed the last relay. */
static bool
has_reclaimed_row(const struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].claimed_from == OUTBOX_PROCESSING)
            return true;
    return false;
}

/* Every row confirmed (or made DEAD by the claim): no RETRY row to wait
 * for, no row released for later. */
static bool
all_acked(const struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].state != ROW_ACKED && !b->rows[i].recorded)
            return false;
    return true;
}

/* Every row confirmed, so written SENT or deleted by its record: none
 * made DEAD by the claim. */
static bool
all_sent(const struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].state != ROW_ACKED || b->rows[i].recorded)
            return false;
    return true;
}

/* How long a lean batch's transaction waits, its rows confirmed, for
 * the next commit to join it (relay.linger), and how many may; a commit
 * is told a moment before its rows show, so a join first waits
 * LEAN_SETTLE_US, and looks again once if they do not show yet. */
#define LEAN_LINGER_MS 20
#define LEAN_JOINS (RELAY_SLOTS - 1)
#define LEAN_SETTLE_US 500
#define LEAN_LOOKS 2

/* Whether the binlog told of a commit since the last look, waiting for
 * one until until_ms when the relay may linger. */
static bool
told_until(struct relay *r, uint64_t until_ms)
{
    if (r->backend.take_told(r->backend.owner) > 0)
        return true;
    if (!r->linger || r->stop_deadline_ms != 0 || r->backend.wait_told == NULL)
        return false;
    return r->backend.wait_told(r->backend.owner, until_ms) > 0;
}

/* A slot that holds none of the open lean transaction's batches, first
 * and its lean_next chain: each waits for the one record of them all.
 * A chain of LEAN_JOINS + 1 batches fills every slot. */
static struct outbox_batch *
free_slot_past_chain(struct relay *r, const struct outbox_batch *first)
{
    for (int i = 0; i < RELAY_SLOTS; i++) {
        const struct outbox_batch *x = first;
        while (x != NULL && x != &r->slot[i])
            x = x->lean_next;
        if (x == NULL)
            return &r->slot[i];
    }
    return NULL;
}

/* Claims the rows of told commits into the open transaction after
 * tail, and publishes them; NULL when none could be taken. */
static struct outbox_batch *
join_lean(struct relay *r, struct outbox_batch *tail, bool *broker_ok)
{
    struct outbox_batch *more = free_slot_past_chain(r, r->batch);
    batch_reset(more);
    char err[ERR_LEN];
    relay_wait_begin(r, WAIT_DATABASE);
    int rc = r->backend.claim_more(r->backend.store, r->batch, more, err,
                                   sizeof(err));
    relay_wait_end(r);
    if (rc < 0 || more->n == 0)
        return NULL; /* the first batch's record meets any fault itself */
    tail->lean_next = more;
    struct outbox_batch *first = r->batch;
    r->batch = more;
    r->stats.batches++;
    r->stats.lean_batches++;
    relay_prepare_rows(r);
    *broker_ok = relay_publish_waves(r);
    decide_outcomes(r, more);
    r->last.rows += more->n;
    r->last.clean = r->last.clean && all_acked(more);
    r->last.sent_all = r->last.sent_all && all_sent(more);
    batch_release_bulk(more);
    r->batch = first;
    return more;
}

/*
 * Commits told while a lean batch was published, or within
 * LEAN_LINGER_MS after the confirms of the last batch to join it, join
 * its transaction before it commits: their rows are locked, published
 * at once, and recorded with the first batch's in one statement and one
 * commit, where each would have cost a record and a commit of its own.  They go
 * out when they would have; only the first batch's record waits, a few ms.  The
 * lingering is the worker's call: never while the thread serves other
 * outboxes, which would wait for it.
 */
static bool
extend_lean(struct relay *r)
{
    bool broker_ok = true;
    if (r->backend.claim_more == NULL || r->backend.take_told == NULL)
        return true;
    uint64_t until = clock_ms() + LEAN_LINGER_MS;
    struct outbox_batch *tail = r->batch;
    for (int joins = 0, looks = 0; joins < LEAN_JOINS && looks < LEAN_LOOKS &&
                                   broker_ok && !r->last.lean_cut &&
                                   r->last.clean;) {
        if (looks == 0 && !told_until(r, until))
            break;
        usleep(LEAN_SETTLE_US);
        struct outbox_batch *more = join_lean(r, tail, &broker_ok);
        looks = more == NULL ? looks + 1 : 0;
        if (more != NULL) {
            tail = more;
            joins++;
            until = clock_ms() + LEAN_LINGER_MS; /* from its confirms */
        }
    }
    return broker_ok;
}

/* Publishes a claimed batch while the job records and claims beside it. */
static enum relay_result
relay_batch(struct relay *r)
{
    size_t claimed = r->batch->n;
    /* A claim that read a full window of candidates and kept some was
     * cut short by ordering, not by an empty table: more rows wait. */
    bool more = claimed >= r->outbox->batch_size ||
                r->batch->candidates >= r->outbox->batch_size;
    /* The store reclaims such a row alone; publish it with nothing else
     * in flight either, so that if it kills us again it costs no other
     * row an attempt. */
    bool suspect = has_reclaimed_row(r->batch);
    bool ahead = more && !suspect && r->stop_deadline_ms == 0 &&
                 r->claim_ahead && !r->batch->lean;
    if (suspect && r->prev != NULL) {
        relay_job_wait(r);
        finalize(r, r->prev);
        r->prev = NULL;
    }
    r->stats.batches++;
    r->stats.lean_batches += r->batch->lean;
    relay_prepare_rows(r);
    job_start(r, r->prev, ahead ? free_slot(r, r->batch, r->prev) : NULL);
    r->last = (struct relay_last){.lean = r->batch->lean, .rows = claimed};
    bool broker_ok = relay_publish_waves(r);
    decide_outcomes(r, r->batch);
    r->last.clean = all_acked(r->batch);
    r->last.sent_all = all_sent(r->batch);
    /* Only ids, states and errors are left to record: the payloads go
     * now, so that what is in memory is the batch in flight and the one
     * claimed ahead (docs/contract.md section 1.6). */
    batch_release_bulk(r->batch);
    if (broker_ok && r->batch->lean && !more && !r->last.lean_cut)
        broker_ok = extend_lean(r);
    more = more || r->last.lean_cut;
    bool claim_failed;
    bool store_ok = job_collect(r, &claim_failed);
    if (!store_ok || !broker_ok || r->next == NULL) {
        /* Nothing to overlap with: record this batch now. */
        release_next(r);
        if (store_ok)
            store_ok = finalize(r, r->batch);
        else if (claim_failed)
            finalize_after_failed_claim(r, r->batch);
        else
            keep_unrecorded(r, r->batch); /* the record of prev failed */
    } else {
        r->prev = r->batch;
    }
    if (!store_ok)
        return RELAY_STORE_DOWN;
    if (!broker_ok)
        return RELAY_BROKER_DOWN;
    return more ? RELAY_FULL : RELAY_PARTIAL;
}

/* The batch to publish: the one claimed ahead, or a claim now. */
static int
take_batch(struct relay *r)
{
    char err[ERR_LEN];
    if (r->next != NULL) {
        r->batch = r->next;
        r->next = NULL;
        r->claim_ms = r->next_claim_ms;
        return 0;
    }
    r->batch = free_slot(r, r->prev, NULL);
    batch_reset(r->batch);
    r->batch->lean_allowed =
        r->prev == NULL && r->unrecorded[0] == NULL && r->unrecorded[1] == NULL;
    r->claim_ms = clock_ms();
    relay_wait_begin(r, WAIT_DATABASE);
    int rc = r->backend.claim(r->backend.store, r->relay_id, r->batch, err,
                              sizeof(err));
    relay_wait_end(r);
    if (rc < 0) {
        str_copy(r->last_error, err, sizeof(r->last_error));
        return -1;
    }
    return 0;
}

enum relay_result
relay_cycle(struct relay *r)
{
    uint64_t t0 = metrics_clock_us();
    if (!record_unrecorded(r) || take_batch(r) < 0)
        return RELAY_STORE_DOWN;
    if (r->batch->n == 0) {
        r->idle_due_ms = r->batch->due_in_ms;
        relay_flush(r);
        relay_trim(r);
        return RELAY_IDLE;
    }
    enum relay_result rc = relay_batch(r);
    histogram_observe_us(&r->stats.batch_duration,
                         (int64_t)(metrics_clock_us() - t0));
    /* Nothing carried to the next cycle: a thousand tenants that each
     * drained a short batch keep no batch memory while their turns come
     * round, where a drain that pipelines keeps its slots. */
    if (rc != RELAY_FULL)
        relay_trim(r);
    return rc;
}
