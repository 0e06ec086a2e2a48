/*
 * worker_wake: what the binlog stream tells a worker, from the stream's
 * thread (commits, the stream going up or down), and the commits told
 * that a claim takes.
 */
#include "worker_int.h"

#include "log.h"
#include "outbox_log.h"
#include "store.h"

/* The ids the commits told inserted go to the store, for its next
 * join. */
static void
take_told_ids(struct worker *w)
{
    struct told_ids ids = {0};
    told_take_ids(&w->told, &ids);
    if (ids.n > 0 || ids.lost || ids.doubt)
        store_told_ids(w->store, &ids);
}

/* Commits the binlog told since the last call: the claims of this cycle
 * take them (run_cycle, and relay.c extend_lean). */
uint64_t
worker_take_told(struct worker *w)
{
    uint64_t told = told_take(&w->told);
    take_told_ids(w);
    w->told_in_cycle += told;
    return told;
}

/* A wait on a condition where the linger polled every 250 us: 4,000
 * wakes a second at 200 events/s, each a context switch on the cores
 * that the database may share. */
uint64_t
worker_wait_told(struct worker *w, uint64_t until_ms)
{
    uint64_t told = told_wait(&w->told, until_ms);
    take_told_ids(w);
    w->told_in_cycle += told;
    return told;
}

static void
binlog_commit_cb(void *arg, bool inserted, const struct binlog_ids *ids)
{
    struct worker *w = arg;
    w->changes++;
    if (ids->reopens)
        told_doubt(&w->told);
    if (!inserted)
        return;
    told_commit(&w->told, ids->id, ids->n, ids->known);
    event_active(w->kick, 0, 0);
}

/* The stream's thread asks where the table keeps its id: as the last
 * cycle's schema check found it (worker_note_id_column). */
static int
binlog_id_column_cb(void *arg, unsigned *ncolumns)
{
    struct worker *w = arg;
    uint64_t v = atomic_load_explicit(&w->id_column, memory_order_relaxed);
    *ncolumns = (unsigned)(v >> 32);
    return (int)(v & 0xffffffffu) - 1;
}

void
worker_note_id_column(struct worker *w)
{
    unsigned ncolumns;
    int col = store_id_column(w->store, &ncolumns);
    uint64_t v =
        col < 0 ? 0 : (uint64_t)ncolumns << 32 | (uint64_t)(unsigned)col;
    atomic_store_explicit(&w->id_column, col < 0 ? 0 : v + 1,
                          memory_order_relaxed);
}

static void
binlog_state_cb(void *arg, bool live)
{
    struct worker *w = arg;
    /* A stream starts at the binlog's end: what was written while it was
     * down is one change unaccounted for (worker_rows_unchanged). */
    if (live) {
        w->changes++;
        told_doubt(&w->told); /* and commits untold: no join heads-free */
    }
    w->wake_live = live;
    w->kick_state = true;
    outbox_log(LOG_DEBUG, w->ob, "woken by %s",
               live ? "the binlog stream" : "the poll alone");
    /* Up: claim what came while it was down.  Down: the poll's ceiling
     * replaces the stream's, now rather than after a long wait. */
    event_active(w->kick, 0, 0);
}

static uint64_t
binlog_failovers_cb(void *arg)
{
    struct worker *w = arg;
    return w->failovers;
}

struct binlog_client
worker_binlog_client(struct worker *w)
{
    return (struct binlog_client){.commit = binlog_commit_cb,
                                  .id_column = binlog_id_column_cb,
                                  .state = binlog_state_cb,
                                  .failovers = binlog_failovers_cb,
                                  .arg = w};
}

bool
worker_wake_live(const struct worker *w)
{
    return w->wake_live;
}
