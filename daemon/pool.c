/*
 * pool: relay.workers event loops on their own threads, each with one
 * helper, that outboxes are placed on for their lifetime.
 */
#include "pool.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "util.h"

/* One shared object and how many outboxes use it. */
struct share {
    const struct pool_share_kind *kind;
    void *obj;
    size_t users;
};

struct pool_thread {
    struct pool *pool;
    pthread_mutex_t shares_lock; /* main places, the thread reads */
    struct share *shares;
    size_t nshares;
    struct event_base *base;
    struct event *stop; /* pool_stop: leave the loop */
    pthread_t thread;
    bool started;
    struct helper helper;
    _Atomic size_t load; /* outboxes placed here, by the main thread */
    size_t busy;         /* pool_thread_busy: this thread only */
};

struct pool {
    struct pool_hooks hooks;
    struct pool_thread *threads;
    unsigned n;
    _Atomic unsigned running;
};

static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct pool_thread *t = arg;
    (void)fd;
    (void)what;
    event_base_loopbreak(t->base);
}

struct pool *
pool_new(unsigned nthreads, const struct pool_hooks *hooks)
{
    struct pool *p = xcalloc(1, sizeof(*p));
    p->hooks = *hooks;
    p->threads = xcalloc(nthreads, sizeof(*p->threads));
    p->n = nthreads;
    for (unsigned i = 0; i < nthreads; i++) {
        struct pool_thread *t = &p->threads[i];
        t->pool = p;
        pthread_mutex_init(&t->shares_lock, NULL);
        helper_init(&t->helper, hooks->thread_begin, hooks->thread_end);
        t->base = event_base_new();
        if (t->base != NULL)
            t->stop = event_new(t->base, -1, 0, stop_cb, t);
        if (t->stop == NULL) {
            pool_free(p);
            return NULL;
        }
    }
    return p;
}

static void
close_shares(struct pool_thread *t)
{
    pthread_mutex_lock(&t->shares_lock);
    for (size_t i = 0; i < t->nshares; i++)
        if (t->shares[i].kind->close != NULL)
            t->shares[i].kind->close(t->shares[i].obj);
    pthread_mutex_unlock(&t->shares_lock);
}

static void *
thread_main(void *arg)
{
    struct pool_thread *t = arg;
    if (t->pool->hooks.thread_begin)
        t->pool->hooks.thread_begin();
    t->pool->running++;
    /* Outboxes come and go: an empty loop waits for the next one. */
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
    close_shares(t);
    t->pool->running--;
    if (t->pool->hooks.thread_end)
        t->pool->hooks.thread_end();
    return NULL;
}

int
pool_start(struct pool *p)
{
    for (unsigned i = 0; i < p->n; i++) {
        struct pool_thread *t = &p->threads[i];
        if (pthread_create(&t->thread, NULL, thread_main, t) != 0)
            return -1;
        t->started = true;
    }
    return 0;
}

void
pool_stop(struct pool *p)
{
    for (unsigned i = 0; i < p->n; i++)
        if (p->threads[i].started)
            event_active(p->threads[i].stop, 0, 0);
    for (unsigned i = 0; i < p->n; i++) {
        struct pool_thread *t = &p->threads[i];
        if (t->started)
            pthread_join(t->thread, NULL);
        t->started = false;
    }
}

void
pool_free(struct pool *p)
{
    if (p == NULL)
        return;
    pool_stop(p);
    for (unsigned i = 0; i < p->n; i++) {
        struct pool_thread *t = &p->threads[i];
        helper_fini(&t->helper);
        for (size_t k = 0; k < t->nshares; k++)
            t->shares[k].kind->drop(t->shares[k].obj);
        free(t->shares);
        pthread_mutex_destroy(&t->shares_lock);
        if (t->stop)
            event_free(t->stop);
        if (t->base)
            event_base_free(t->base);
    }
    free(p->threads);
    free(p);
}

unsigned
pool_size(const struct pool *p)
{
    return p->n;
}

struct pool_thread *
pool_assign(struct pool *p)
{
    struct pool_thread *best = &p->threads[0];
    for (unsigned i = 1; i < p->n; i++)
        if (p->threads[i].load < best->load)
            best = &p->threads[i];
    best->load++;
    return best;
}

void
pool_unassign(struct pool_thread *t)
{
    if (t->load > 0)
        t->load--;
}

size_t
pool_thread_load(const struct pool_thread *t)
{
    return t->load;
}

struct event_base *
pool_thread_base(struct pool_thread *t)
{
    return t->base;
}

size_t
pool_thread_busy(const struct pool_thread *t)
{
    return t->busy;
}

void
pool_thread_set_busy(struct pool_thread *t, bool *flag, bool busy)
{
    if (*flag == busy)
        return;
    *flag = busy;
    if (busy)
        t->busy++;
    else
        t->busy--;
}

struct helper *
pool_thread_helper(struct pool_thread *t)
{
    return &t->helper;
}

unsigned
pool_threads_running(const struct pool *p)
{
    return p->running;
}

void *
pool_thread_share(struct pool_thread *t, const struct pool_share_kind *k,
                  const void *key)
{
    pthread_mutex_lock(&t->shares_lock);
    struct share *sh = NULL;
    for (size_t i = 0; i < t->nshares && sh == NULL; i++)
        if (t->shares[i].kind == k && k->serves(t->shares[i].obj, key))
            sh = &t->shares[i];
    if (sh == NULL) {
        t->shares = xrealloc(t->shares, (t->nshares + 1) * sizeof(*sh));
        sh = &t->shares[t->nshares++];
        *sh = (struct share){.kind = k, .obj = k->make(key)};
    }
    sh->users++;
    void *obj = sh->obj;
    pthread_mutex_unlock(&t->shares_lock);
    return obj;
}

void
pool_thread_unshare(struct pool_thread *t, const struct pool_share_kind *k,
                    void *obj)
{
    pthread_mutex_lock(&t->shares_lock);
    for (size_t i = 0; i < t->nshares; i++) {
        struct share *sh = &t->shares[i];
        if (sh->kind != k || sh->obj != obj)
            continue;
        if (--sh->users == 0) {
            k->drop(obj);
            t->shares[i] = t->shares[--t->nshares];
        }
        break;
    }
    pthread_mutex_unlock(&t->shares_lock);
}

size_t
pool_thread_shared(struct pool_thread *t, const struct pool_share_kind *k)
{
    pthread_mutex_lock(&t->shares_lock);
    size_t n = 0;
    for (size_t i = 0; i < t->nshares; i++)
        n += t->shares[i].kind == k;
    pthread_mutex_unlock(&t->shares_lock);
    return n;
}
