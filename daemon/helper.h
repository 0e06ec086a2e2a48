/*
 * helper: one long-lived thread that runs its owner's jobs one at a
 * time beside the owner's own work, fed through a single job slot
 * (redis bio.c's shape; the relay's database side runs on one).
 */
#ifndef OUTBOXD_HELPER_H
#define OUTBOXD_HELPER_H

#include <pthread.h>
#include <stdbool.h>

struct helper {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job was submitted, or stop was asked */
    pthread_cond_t done; /* the job finished */
    pthread_t thread;
    bool started;  /* the thread runs and must be joined */
    bool stopping; /* the thread exits once the slot is empty */
    /* The slot: the job submitted and not yet finished, or NULL.  At
     * most one is ever in flight (asserted by helper_submit). */
    void (*fn)(void *arg);
    void *arg;
    /* Run first and last on the thread (a client library's per-thread
     * state); NULL: nothing. */
    void (*thread_begin)(void);
    void (*thread_end)(void);
    /* Creates the thread: pthread_create unless a test fakes a failure. */
    int (*spawn)(pthread_t *thread, void *(*start)(void *), void *arg);
};

/* No thread yet: the first helper_submit starts it. */
void helper_init(struct helper *h, void (*thread_begin)(void),
                 void (*thread_end)(void));

/*
 * Runs fn(arg) on the thread, starting it if it is not running yet.
 * true: queued, collect it with helper_wait.  false: no thread could be
 * had, fn(arg) already ran here, in line.  Only one job may be in
 * flight: call helper_wait before the next submit.
 */
bool helper_submit(struct helper *h, void (*fn)(void *), void *arg);

/* Waits until the submitted job finished; at once when there is none. */
void helper_wait(struct helper *h);

/* Finishes the job in flight, then ends and joins the thread; frees
 * what helper_init set up. */
void helper_fini(struct helper *h);

#endif
