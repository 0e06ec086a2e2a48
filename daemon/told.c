/*
 * told: a count of commits told, and a wait for the next one that costs
 * the telling thread a lock only while someone waits; and the ids those
 * commits inserted, under a lock of their own that nobody holds long.
 */
#include "told.h"

#include <time.h>

#include "util.h"

void
told_init(struct told *t)
{
    atomic_init(&t->commits, 0);
    t->taken = 0;
    atomic_init(&t->waiting, false);
    pthread_mutex_init(&t->lock, NULL);
    monotonic_cond_init(&t->cond);
    pthread_mutex_init(&t->ids_lock, NULL);
    t->ids = (struct told_ids){0};
}

void
told_free(struct told *t)
{
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->ids_lock);
}

void
told_ids_add(struct told_ids *to, const uint64_t *ids, size_t n, bool known)
{
    if (!known || n > TOLD_IDS - to->n) {
        to->lost = true;
        return;
    }
    for (size_t i = 0; i < n; i++)
        to->id[to->n++] = ids[i];
}

void
told_take_ids(struct told *t, struct told_ids *out)
{
    pthread_mutex_lock(&t->ids_lock);
    told_ids_add(out, t->ids.id, t->ids.n, !t->ids.lost);
    out->doubt = out->doubt || t->ids.doubt;
    if (t->ids.n > 0 || t->ids.lost || t->ids.doubt) { /* told since */
        out->tail_known = t->ids.tail_known;
        out->tail = t->ids.tail;
    }
    t->ids = (struct told_ids){0};
    pthread_mutex_unlock(&t->ids_lock);
}

void
told_doubt(struct told *t)
{
    pthread_mutex_lock(&t->ids_lock);
    t->ids.doubt = true;
    t->ids.tail_known = false;
    pthread_mutex_unlock(&t->ids_lock);
}

/*
 * commits is bumped before waiting is read, and told_wait sets waiting
 * before it reads commits (both sequentially consistent): one of the two
 * sees the other's write.  The signal is sent under the lock, which the
 * waiter holds from its read until it sleeps, so it cannot fall between.
 */
void
told_commit(struct told *t, const uint64_t *ids, size_t n, bool known)
{
    /* The ids first: a taker that sees the commit finds them. */
    pthread_mutex_lock(&t->ids_lock);
    /* A commit that inserted rows names one at least, or they are lost. */
    told_ids_add(&t->ids, ids, n, known && n > 0);
    t->ids.tail_known = known && n > 0;
    if (t->ids.tail_known)
        t->ids.tail = ids[n - 1];
    pthread_mutex_unlock(&t->ids_lock);
    atomic_fetch_add(&t->commits, 1);
    if (atomic_load(&t->waiting)) {
        pthread_mutex_lock(&t->lock);
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->lock);
    }
}

uint64_t
told_take(struct told *t)
{
    uint64_t now = atomic_load(&t->commits);
    uint64_t n = now - t->taken;
    t->taken = now;
    return n;
}

bool
told_pending(const struct told *t)
{
    return atomic_load(&t->commits) != t->taken;
}

uint64_t
told_wait(struct told *t, uint64_t until_ms)
{
    uint64_t now = clock_ms();
    if (now >= until_ms || told_pending(t))
        return told_take(t);
    struct timespec at = monotonic_in_ms(until_ms - now);
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->waiting, true);
    while (!told_pending(t) &&
           pthread_cond_timedwait(&t->cond, &t->lock, &at) == 0)
        ;
    atomic_store(&t->waiting, false);
    pthread_mutex_unlock(&t->lock);
    return told_take(t);
}
