/*
 * metrics_group: past relay.metrics_outbox_series, the outboxes of a group
 * (a pattern database's tenants) become one series per metric, combined
 * so that an alert that one member would raise still fires.
 */
#include <stdlib.h>
#include <string.h>

#include "metrics_int.h"
#include "util.h"

/* A histogram as plain numbers: its buckets' counts, then its sum. */
#define HIST_VALUES (HISTOGRAM_MAX_BOUNDS + 2)
#define HIST_SUM (HIST_VALUES - 1)
/* The values that only grow: counters, the two waits, two histograms. */
#define MONOTONIC (METRICS_NCOUNTERS + 2 + 2 * HIST_VALUES)

/* One group being folded. */
struct fold {
    struct outbox_metrics m;
    size_t members, live;
    const struct histogram *shape[2]; /* the first member's buckets */
    uint64_t hist[2][HIST_VALUES];
};

struct group_memory {
    char *name;
    uint64_t last[MONOTONIC]; /* the members' sum at the last scrape */
    uint64_t off[MONOTONIC];  /* what left with members or restarts */
};

struct metrics_groups {
    struct group_memory *g;
    size_t n;
};

struct metrics_groups *
metrics_groups_new(void)
{
    return xcalloc(1, sizeof(struct metrics_groups));
}

void
metrics_groups_free(struct metrics_groups *mg)
{
    if (mg == NULL)
        return;
    for (size_t i = 0; i < mg->n; i++)
        free(mg->g[i].name);
    free(mg->g);
    free(mg);
}

/* Adds h into the fold's buckets; a member whose buckets differ (none
 * do today) lands each count in the first bucket that holds it. */
static void
fold_histogram(uint64_t *acc, const struct histogram **shape,
               const struct histogram *h)
{
    if (*shape == NULL)
        *shape = h;
    const struct histogram *s = *shape;
    size_t j = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        if (i == h->nbounds)
            j = s->nbounds;
        while (j < s->nbounds && s->bounds_us[j] < h->bounds_us[i])
            j++;
        acc[j] += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    }
    acc[HIST_SUM] += atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}

static void
fold_u64(struct outbox_metrics *acc, const struct outbox_metrics *o, size_t off)
{
    uint64_t a, b;
    memcpy(&a, (const char *)acc + off, sizeof(a));
    memcpy(&b, (const char *)o + off, sizeof(b));
    a += b;
    memcpy((char *)acc + off, &a, sizeof(a));
}

static double
max_d(double a, double b)
{
    return a > b ? a : b;
}

/* Rows and holds: the members counted so far; a backlog's age is the
 * oldest member's, so that the backlog alert sees the worst tenant. */
static void
fold_rows(struct outbox_metrics *acc, const struct outbox_metrics *o)
{
    if (o->rows_known) {
        acc->rows_known = true;
        for (int s = 0; s < OUTBOX_STATUS_COUNT; s++) {
            if (!o->rows_counted[s])
                continue;
            acc->rows_counted[s] = true;
            acc->rows[s] += o->rows[s];
        }
        acc->oldest_pending_age_s =
            max_d(acc->oldest_pending_age_s, o->oldest_pending_age_s);
    }
    if (o->holds_known) {
        acc->holds_known = true;
        acc->held_aggregates += o->held_aggregates;
        acc->oldest_hold_s = max_d(acc->oldest_hold_s, o->oldest_hold_s);
    }
}

/*
 * Counters add up; a link is up only while every member's is (so that
 * the disconnected alerts fire for one tenant), blocked while any is;
 * the poll wait is the longest, the delay a new event may see.
 */
static void
fold_add(struct fold *f, const struct outbox_metrics *o)
{
    struct outbox_metrics *acc = &f->m;
    for (size_t c = 0; c < METRICS_NCOUNTERS; c++)
        fold_u64(acc, o, metrics_counters[c].off);
    acc->wait_broker_us += o->wait_broker_us;
    acc->wait_database_us += o->wait_database_us;
    acc->db_up = acc->db_up && o->db_up;
    acc->broker_up = acc->broker_up && o->broker_up;
    acc->broker_blocked = acc->broker_blocked || o->broker_blocked;
    f->members++;
    f->live += o->wake_live;
    acc->wake_live = f->live == f->members;
    acc->poll_wait_s = max_d(acc->poll_wait_s, o->poll_wait_s);
    fold_rows(acc, o);
    fold_histogram(f->hist[0], &f->shape[0], o->commit_to_confirm);
    fold_histogram(f->hist[1], &f->shape[1], o->batch_duration);
}

/* A fold for one more group: a few groups however many members, so the
 * array grows rather than being sized by the outboxes. */
static struct fold *
fold_new(struct fold **folds, size_t *nf, size_t *cap, const char *group)
{
    if (*nf == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        *folds = xrealloc(*folds, *cap * sizeof(**folds));
    }
    struct fold *f = &(*folds)[(*nf)++];
    memset(f, 0, sizeof(*f));
    f->m.outbox = f->m.group = group;
    f->m.db_up = f->m.broker_up = true; /* until a member's is down */
    return f;
}

/* The groups in order of their first member; *nf of them, malloc'd. */
static struct fold *
fold_groups(const struct outbox_metrics *obs, size_t n, size_t *nf)
{
    struct fold *folds = NULL;
    size_t cap = 0;
    *nf = 0;
    for (size_t i = 0; i < n; i++) {
        if (obs[i].group == NULL)
            continue;
        size_t k = 0;
        while (k < *nf && strcmp(folds[k].m.outbox, obs[i].group) != 0)
            k++;
        struct fold *f =
            k < *nf ? &folds[k] : fold_new(&folds, nf, &cap, obs[i].group);
        fold_add(f, &obs[i]);
    }
    return folds;
}

/* Copies the fold's monotonic values to v, or back from v when store. */
static void
fold_values(struct fold *f, uint64_t *v, bool store)
{
    uint64_t *p[MONOTONIC];
    size_t k = 0;
    for (size_t c = 0; c < METRICS_NCOUNTERS; c++)
        p[k++] = (uint64_t *)((char *)&f->m + metrics_counters[c].off);
    p[k++] = &f->m.wait_broker_us;
    p[k++] = &f->m.wait_database_us;
    for (size_t h = 0; h < 2; h++)
        for (size_t i = 0; i < HIST_VALUES; i++)
            p[k++] = &f->hist[h][i];
    for (k = 0; k < MONOTONIC; k++) {
        if (store)
            *p[k] = v[k];
        else
            v[k] = *p[k];
    }
}

static struct group_memory *
memory_find(struct metrics_groups *mg, const char *name)
{
    for (size_t i = 0; i < mg->n; i++)
        if (strcmp(mg->g[i].name, name) == 0)
            return &mg->g[i];
    mg->g = xrealloc(mg->g, (mg->n + 1) * sizeof(*mg->g));
    struct group_memory *gm = &mg->g[mg->n++];
    memset(gm, 0, sizeof(*gm));
    gm->name = xstrdup(name);
    return gm;
}

/* A value below the last scrape's lost what a member took with it:
 * that much is carried on, so the folded counter never goes down.  What
 * the others added in the same interval is missed, never counted twice. */
static void
fold_remember(struct fold *f, struct metrics_groups *mg)
{
    struct group_memory *gm = memory_find(mg, f->m.outbox);
    uint64_t v[MONOTONIC];
    fold_values(f, v, false);
    for (size_t k = 0; k < MONOTONIC; k++) {
        if (v[k] < gm->last[k])
            gm->off[k] += gm->last[k] - v[k];
        gm->last[k] = v[k];
        v[k] += gm->off[k];
    }
    fold_values(f, v, true);
}

static void
hist_from_fold(struct histogram *h, const struct histogram *shape,
               const uint64_t *acc)
{
    histogram_init(h, shape->bounds_us, shape->nbounds);
    for (size_t i = 0; i <= shape->nbounds; i++)
        atomic_store_explicit(&h->counts[i], acc[i], memory_order_relaxed);
    atomic_store_explicit(&h->sum_us, acc[HIST_SUM], memory_order_relaxed);
}

static void
view_push(struct metrics_view *v, const struct outbox_metrics *m,
          size_t members, size_t live)
{
    v->obs[v->n] = *m;
    v->members[v->n] = members;
    v->live[v->n] = live;
    v->n++;
}

static void
view_push_fold(struct metrics_view *v, struct fold *f, struct histogram *h)
{
    hist_from_fold(&h[0], f->shape[0], f->hist[0]);
    hist_from_fold(&h[1], f->shape[1], f->hist[1]);
    f->m.commit_to_confirm = &h[0];
    f->m.batch_duration = &h[1];
    view_push(v, &f->m, f->members, f->live);
}

void
metrics_view_build(struct metrics_view *v, const struct outbox_metrics *obs,
                   size_t n, unsigned limit, struct metrics_groups *mg)
{
    size_t nf, grouped = 0;
    struct fold *folds = fold_groups(obs, n, &nf);
    for (size_t k = 0; k < nf; k++) {
        grouped += folds[k].members;
        if (mg != NULL)
            fold_remember(&folds[k], mg);
    }
    bool folding = grouped > limit;
    size_t cap = n + nf + 1; /* ample for either way */
    v->obs = xcalloc(cap, sizeof(*v->obs));
    v->members = xcalloc(cap, sizeof(*v->members));
    v->live = xcalloc(cap, sizeof(*v->live));
    v->hists = xcalloc(2 * nf + 1, sizeof(*v->hists));
    v->n = 0;
    for (size_t i = 0; i < n; i++)
        if (!folding || obs[i].group == NULL)
            view_push(v, &obs[i], 1, obs[i].wake_live);
    for (size_t k = 0; folding && k < nf; k++)
        view_push_fold(v, &folds[k], &v->hists[2 * k]);
    free(folds);
}

void
metrics_view_free(struct metrics_view *v)
{
    free(v->obs);
    free(v->members);
    free(v->live);
    free(v->hists);
}
