/*
 * pool: the relay's fixed set of worker threads (relay.workers).  Each
 * runs one event loop that serves any number of outboxes in turn, and
 * one helper thread for their database side; the outboxes of a thread
 * share its sessions and connections, so neither threads nor
 * connections grow with the number of outboxes.
 */
#ifndef OUTBOXD_POOL_H
#define OUTBOXD_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "helper.h"

struct event_base;
struct pool;
struct pool_thread;

/* Run first and last on every thread of the pool, its helpers' too (a
 * client library's per-thread state); either may be NULL. */
struct pool_hooks {
    void (*thread_begin)(void);
    void (*thread_end)(void);
};

/* nthreads loops, not running yet; NULL when one cannot be set up. */
struct pool *pool_new(unsigned nthreads, const struct pool_hooks *hooks);
int pool_start(struct pool *p);
/* Ends every loop once what runs now returns, and joins the threads. */
void pool_stop(struct pool *p);
void pool_free(struct pool *p);

unsigned pool_size(const struct pool *p);
/* The thread with the fewest outboxes, counted as one more. */
struct pool_thread *pool_assign(struct pool *p);
/* One outbox less on t: a later pool_assign may pick it again. */
void pool_unassign(struct pool_thread *t);
/* Outboxes on t now; from any thread. */
size_t pool_thread_load(const struct pool_thread *t);

struct event_base *pool_thread_base(struct pool_thread *t);
/*
 * Outboxes of t with more rows waiting (their last cycle was full); on
 * t's own thread.  A relay claims its next batch ahead only while it is
 * the only one: with others waiting, the batch would sit in memory
 * through their turns, a batch per busy tenant.
 */
size_t pool_thread_busy(const struct pool_thread *t);
void pool_thread_set_busy(struct pool_thread *t, bool *flag, bool busy);
/* The helper its outboxes' relays share: one job in flight at a time is
 * enough, for only one outbox's cycle runs on the thread at a time. */
struct helper *pool_thread_helper(struct pool_thread *t);
/*
 * What the outboxes of one thread share: a database session per server,
 * a broker connection per broker.  serves says whether obj may serve
 * key (a struct database_config, say), make makes one for key, drop
 * frees it once its last user let go.
 */
struct pool_share_kind {
    bool (*serves)(const void *obj, const void *key);
    void *(*make)(const void *key);
    void (*drop)(void *obj);
    /* Run on the thread as its loop ends, every thread at once, so that
     * closing a thousand outboxes' links costs one close per thread, in
     * parallel; drop comes later.  NULL: nothing. */
    void (*close)(void *obj);
};

/* t's object of kind k that serves key, made if none does; counted as
 * one more user.  From any thread. */
void *pool_thread_share(struct pool_thread *t, const struct pool_share_kind *k,
                        const void *key);
/* One user of obj less; the last one drops it.  Only with no outbox of
 * t using obj at that moment: after its worker is done. */
void pool_thread_unshare(struct pool_thread *t, const struct pool_share_kind *k,
                         void *obj);
/* How many objects of kind k the thread holds now. */
size_t pool_thread_shared(struct pool_thread *t,
                          const struct pool_share_kind *k);

/* Threads the pool holds (its loops and their helpers): for /metrics. */
unsigned pool_threads_running(const struct pool *p);

#endif
