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

struct pool_thread {
    struct pool *pool;
    struct event_base *base;
    struct event *stop; /* pool_stop: leave the loop */
    pthread_t thread;
    bool started;
    struct helper helper;
    size_t load; /* outboxes placed here; main thread only */
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

static void *
thread_main(void *arg)
{
    struct pool_thread *t = arg;
    if (t->pool->hooks.thread_begin)
        t->pool->hooks.thread_begin();
    t->pool->running++;
    /* Outboxes come and go: an empty loop waits for the next one. */
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
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
