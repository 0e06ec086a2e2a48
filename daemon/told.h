/*
 * told: the commits a binlog stream's thread tells one outbox of, and
 * the ids of the rows they inserted, taken by the thread that claims its
 * rows, which may sleep until the next.
 */
#ifndef OUTBOXD_TOLD_H
#define OUTBOXD_TOLD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Enough for the commits of a few milliseconds at a thousand a second;
 * more, and a claim does without them. */
#define TOLD_IDS 16

/* The ids of the rows the commits told inserted, as a taker holds them. */
struct told_ids {
    uint64_t id[TOLD_IDS];
    size_t n;
    bool lost; /* some commit's ids were not all known, or did not fit */
    /* Some commit may have made a row unfinished other than by the
     * inserts told (an update, a statement), or some may have gone
     * untold (the stream restarted at the binlog's end). */
    bool doubt;
    /* The last thing told was a commit whose ids were all read, tail the
     * last of them: no doubt and no commit of ids unknown came after. */
    bool tail_known;
    uint64_t tail;
};

struct told {
    _Atomic uint64_t commits; /* told so far */
    uint64_t taken;           /* commits at the last told_take */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic bool waiting; /* a told_wait sleeps: told_commit signals */
    pthread_mutex_t ids_lock;
    struct told_ids ids; /* told since the last told_take_ids */
};

void told_init(struct told *t);
void told_free(struct told *t);
/* The stream's thread: one more commit, which inserted the n rows of
 * ids when known (else ids are not all known). */
void told_commit(struct told *t, const uint64_t *ids, size_t n, bool known);
/* The stream's thread: a doubt (struct told_ids) for the next take. */
void told_doubt(struct told *t);
/* The taker's thread: the ids told since the last call, added to out. */
void told_take_ids(struct told *t, struct told_ids *out);
/* Adds n ids to to, or, when they are not known or do not fit, marks
 * to's ids lost. */
void told_ids_add(struct told_ids *to, const uint64_t *ids, size_t n,
                  bool known);
/* The taker's thread: the commits told since the last take. */
uint64_t told_take(struct told *t);
/* The same, first sleeping until one is told or until_ms (clock_ms)
 * when none was since the last take. */
uint64_t told_wait(struct told *t, uint64_t until_ms);
/* Whether a commit was told since the last take. */
bool told_pending(const struct told *t);

#endif
