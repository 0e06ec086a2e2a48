/*
 * relay_int: what relay.c shares with relay_wave.c, which publishes a
 * claimed batch in waves: the scratch arrays, and from relay_wait.c below
 * both the wait clocks and the database job that a wave's SENT marks must
 * wait for.
 */
#ifndef OUTBOXD_RELAY_INT_H
#define OUTBOXD_RELAY_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "relay.h"

struct row_place {
    size_t group; /* index of the row's aggregate within the batch */
    size_t pos;   /* its rank among the batch's events of that aggregate */
};

/* Scratch arrays reused by every cycle: no allocation per event. */
struct relay_scratch {
    size_t *order;
    struct row_place *place;
    bool *blocked;     /* per group: an earlier event did not get through */
    size_t *group_len; /* per group: its events in the batch */
    size_t *wave_start;
    struct outbox_row **wave;
    struct outbox_row **marks; /* a wave's rows to record before the next */
    size_t cap;
};

/* relay_wait.c: the relay starts, and stops, waiting on a server
 * (struct relay_waits). */
void relay_wait_begin(struct relay *r, enum relay_wait on);
void relay_wait_end(struct relay *r);
/* Waits for the database job; the store is the caller's again. */
void relay_job_wait(struct relay *r);
/* Publishes every wave of r->batch; false when the broker connection
 * died. */
bool relay_publish_waves(struct relay *r);

#endif
