/*
 * relay_wait: how long a relay waits on each server, and its wait for the
 * database job; below relay.c and relay_wave.c, which both wait.
 */
#include <pthread.h>
#include <string.h>

#include "helper.h"
#include "relay_int.h"

/* The relay starts waiting on a server (see struct relay_waits). */
void
relay_wait_begin(struct relay *r, enum relay_wait on)
{
    struct relay_waits *w = &r->stats.waits;
    pthread_mutex_lock(&w->lock);
    w->since_us = metrics_clock_us();
    w->on = on;
    pthread_mutex_unlock(&w->lock);
}

void
relay_wait_end(struct relay *r)
{
    struct relay_waits *w = &r->stats.waits;
    pthread_mutex_lock(&w->lock);
    w->done_us[w->on] += metrics_clock_us() - w->since_us;
    w->since_us = 0;
    pthread_mutex_unlock(&w->lock);
}

void
relay_waits_read(struct relay *r, uint64_t us[WAIT_COUNT])
{
    struct relay_waits *w = &r->stats.waits;
    pthread_mutex_lock(&w->lock);
    memcpy(us, w->done_us, sizeof(w->done_us));
    if (w->since_us != 0)
        us[w->on] += metrics_clock_us() - w->since_us;
    pthread_mutex_unlock(&w->lock);
}

/* Waits for the job; the store is ours again. */
void
relay_job_wait(struct relay *r)
{
    if (r->job.running) {
        relay_wait_begin(r, WAIT_DATABASE);
        helper_wait(r->helper_in_use);
        relay_wait_end(r);
    }
    r->job.running = false;
}
