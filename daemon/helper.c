/*
 * helper: a long-lived thread fed one job at a time through a slot
 * guarded by a mutex and two condition variables, instead of a thread
 * created and joined per job.
 */
#include "helper.h"

#include <assert.h>
#include <stddef.h>

static int
spawn_thread(pthread_t *thread, void *(*start)(void *), void *arg)
{
    return pthread_create(thread, NULL, start, arg);
}

void
helper_init(struct helper *h, void (*thread_begin)(void),
            void (*thread_end)(void))
{
    *h = (struct helper){.thread_begin = thread_begin,
                         .thread_end = thread_end,
                         .spawn = spawn_thread};
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->work, NULL);
    pthread_cond_init(&h->done, NULL);
}

/* Runs the slot's jobs until stop is asked and the slot is empty: a job
 * submitted before the stop still runs, none is lost. */
static void *
helper_main(void *arg)
{
    struct helper *h = arg;
    if (h->thread_begin != NULL)
        h->thread_begin();
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->fn == NULL && !h->stopping)
            pthread_cond_wait(&h->work, &h->lock);
        if (h->fn == NULL)
            break;
        void (*fn)(void *) = h->fn;
        void *fn_arg = h->arg;
        pthread_mutex_unlock(&h->lock);
        fn(fn_arg);
        pthread_mutex_lock(&h->lock);
        h->fn = NULL;
        h->arg = NULL;
        pthread_cond_signal(&h->done);
    }
    pthread_mutex_unlock(&h->lock);
    if (h->thread_end != NULL)
        h->thread_end();
    return NULL;
}

/* Only the owner's thread starts it, so started needs no lock. */
static bool
helper_start(struct helper *h)
{
    if (!h->started)
        h->started = h->spawn(&h->thread, helper_main, h) == 0;
    return h->started;
}

bool
helper_submit(struct helper *h, void (*fn)(void *), void *arg)
{
    if (!helper_start(h)) {
        fn(arg); /* no thread to be had: do it now, in line */
        return false;
    }
    pthread_mutex_lock(&h->lock);
    assert(h->fn == NULL && "one job in flight at most");
    assert(!h->stopping);
    h->fn = fn;
    h->arg = arg;
    pthread_cond_signal(&h->work);
    pthread_mutex_unlock(&h->lock);
    return true;
}

void
helper_wait(struct helper *h)
{
    pthread_mutex_lock(&h->lock);
    while (h->fn != NULL)
        pthread_cond_wait(&h->done, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

void
helper_fini(struct helper *h)
{
    if (h->started) {
        pthread_mutex_lock(&h->lock);
        h->stopping = true;
        pthread_cond_signal(&h->work);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
        h->started = false;
    }
    pthread_cond_destroy(&h->done);
    pthread_cond_destroy(&h->work);
    pthread_mutex_destroy(&h->lock);
}
