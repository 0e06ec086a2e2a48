/*
 * told: the commits a binlog stream's thread tells one outbox of, taken
 * by the thread that claims its rows, which may sleep until the next.
 */
#ifndef OUTBOXD_TOLD_H
#define OUTBOXD_TOLD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct told {
    _Atomic uint64_t commits; /* told so far */
    uint64_t taken;           /* commits at the last told_take */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic bool waiting; /* a told_wait sleeps: told_commit signals */
};

void told_init(struct told *t);
void told_free(struct told *t);
/* The stream's thread: one more commit. */
void told_commit(struct told *t);
/* The taker's thread: the commits told since the last take. */
uint64_t told_take(struct told *t);
/* The same, first sleeping until one is told or until_ms (clock_ms)
 * when none was since the last take. */
uint64_t told_wait(struct told *t, uint64_t until_ms);
/* Whether a commit was told since the last take. */
bool told_pending(const struct told *t);

#endif
