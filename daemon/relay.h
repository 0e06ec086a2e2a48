/*
 * relay: one cycle of one outbox, claim -> publish in waves -> finalize,
 * against narrow store and publisher interfaces so that unit tests can
 * drive it with fakes and the daemon with the real servers.
 */
#ifndef OUTBOXD_RELAY_H
#define OUTBOXD_RELAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "config.h"
#include "helper.h"
#include "metrics.h"
#include "util.h"

struct relay_backend {
    void *store;
    void *publisher;
    int (*claim)(void *store, const char *relay_id, struct outbox_batch *b,
                 char *err, size_t errlen);
    int (*finalize)(void *store, struct outbox_batch *b, size_t *lost,
                    char *err, size_t errlen);
    int (*publish)(void *publisher, struct outbox_batch *b,
                   struct outbox_row **rows, size_t n, bool mandatory,
                   uint64_t deadline_ms, char *err, size_t errlen);
    /* Records ACKED rows SENT mid-batch and flags them recorded, so that
     * finalize leaves them out; NULL: everything waits for finalize. */
    int (*mark_sent)(void *store, struct outbox_batch *b,
                     struct outbox_row **rows, size_t n, size_t *lost,
                     char *err, size_t errlen);
    /* The broker blocks publishing (connection.blocked); NULL: never. */
    bool (*is_blocked)(void *publisher);
    /* Waits until it unblocks or deadline_ms; -1: the connection died. */
    int (*wait_unblocked)(void *publisher, uint64_t deadline_ms, char *err,
                          size_t errlen);
    /* Where a record that just failed may still land, in words for the
     * log, or NULL: it wrote nothing and the rows keep their lease, as
     * when the server refused writes (the next session records) or a
     * lock wait ran out (the next cycle does).  NULL callback: never. */
    const char *(*record_later)(void *store);
    /* A lean batch's transaction takes the rows of commits told since
     * its claim, before it commits (relay.c extend_lean): claim_more
     * locks them into b; take_told says how many commits were told since
     * it was last asked (owner: the worker).  NULL: never. */
    int (*claim_more)(void *store, const struct outbox_batch *first,
                      struct outbox_batch *b, char *err, size_t errlen);
    uint64_t (*take_told)(void *owner);
    /* The same, sleeping until one is told or until_ms (clock_ms) when
     * none was.  NULL: the relay does not wait. */
    uint64_t (*wait_told)(void *owner, uint64_t until_ms);
    void *owner;
    /* Run once first and once last on the relay's helper thread, which
     * claims and records beside publishing: the database client's
     * per-thread state.  NULL: nothing to do. */
    void (*thread_begin)(void);
    void (*thread_end)(void);
};

/* The server a relay waits on (metrics: which one is a drain's pace). */
enum relay_wait {
    WAIT_BROKER,   /* a batch's publishing until its last confirm */
    WAIT_DATABASE, /* claims and records that publishing did not overlap */
    WAIT_COUNT,
};

/*
 * Time waited per server, read by metrics while it grows: a wait still
 * in progress counts up to now, so a claim stuck on a lock shows at the
 * next scrape rather than when it ends.  A mutex, taken twice per wait:
 * a reader must never see a wait both in progress and already added.
 */
struct relay_waits {
    pthread_mutex_t lock;
    uint64_t done_us[WAIT_COUNT];
    uint64_t since_us; /* metrics_clock_us at the start; 0: none */
    enum relay_wait on;
};

/* Counters since start, read by metrics. */
struct relay_stats {
    _Atomic uint64_t published; /* confirmed by the broker */
    _Atomic uint64_t failed;    /* publish attempts that failed */
    _Atomic uint64_t retried;   /* rows moved to RETRY */
    _Atomic uint64_t dead;      /* rows moved to DEAD */
    _Atomic uint64_t expired;   /* rows DEAD past expires_at, not in dead */
    _Atomic uint64_t released;  /* rows given back unattempted */
    _Atomic uint64_t lost;      /* rows whose lease another relay took */
    _Atomic uint64_t batches;
    _Atomic uint64_t lean_batches; /* of them, lean (store.h) */
    struct relay_waits waits;
    struct histogram commit_to_confirm; /* created_at -> ack, per event */
    struct histogram batch_duration;    /* claim -> finalize */
};

enum relay_result {
    RELAY_IDLE,        /* nothing to claim */
    RELAY_PARTIAL,     /* claimed fewer than batch_size */
    RELAY_FULL,        /* more rows wait: claim again at once */
    RELAY_STORE_DOWN,  /* the database failed: reconnect */
    RELAY_BROKER_DOWN, /* the broker connection was lost: reconnect */
};

struct relay_scratch;

/* The database work done while a batch is published (see relay.c). */
struct relay_job {
    bool running; /* on the helper thread: job_wait before reading */
    struct outbox_batch *prev; /* to finalize, or NULL */
    struct outbox_batch *next; /* to claim into, or NULL */
    int fin_rc, claim_rc;
    size_t lost;
    uint64_t next_claim_ms;
    char fin_err[ERR_LEN], claim_err[ERR_LEN];
};

/* The batch in flight, the one being recorded, the one claimed ahead;
 * or a lean batch and those that joined its transaction (relay.c
 * extend_lean), each holding ids and states once published.  At a
 * steady 200 events/s a chain of 16 records 16 events per commit where
 * 8 recorded 8: the relay's server threads cost about a seventh less per
 * event (docs/performance.md). */
#define RELAY_SLOTS 16

struct relay {
    const struct outbox_config *outbox;
    const char *relay_id;
    struct relay_backend backend;
    struct outbox_batch slot[RELAY_SLOTS];
    struct outbox_batch *batch; /* being published */
    struct outbox_batch *prev;  /* published, outcome not yet recorded */
    struct outbox_batch *next;  /* claimed ahead, not yet published */
    /* Published, their record refused by a server that went read-only:
     * recorded on the next session, before any claim. */
    struct outbox_batch *unrecorded[2];
    uint64_t next_claim_ms;
    /* The owner's say: claim the next batch while this one publishes
     * (true unless other outboxes wait for the same thread). */
    bool claim_ahead;
    /* The owner's say: a lean batch's transaction may wait a few ms for
     * the next commit to join it (relay.c extend_lean). */
    bool linger;
    struct relay_job job;
    struct helper helper; /* runs job, started by the first one */
    /* &helper, or the one its pool thread's relays share (relay_share_helper)
     */
    struct helper *helper_in_use;
    struct relay_stats stats;
    /* Set by another thread: stop waiting for confirms by this time. */
    _Atomic uint64_t stop_deadline_ms;
    uint64_t claim_ms; /* clock_ms when this cycle's claim began */
    /* After RELAY_IDLE: in how many ms the empty claim saw the next row
     * fall due, UINT64_MAX if it saw none (struct outbox_batch). */
    uint64_t idle_due_ms;
    /* The last batch published: lean (its rows locked, not leased), how
     * many rows it held, whether every one was confirmed and recorded;
     * lean_cut: later events of an aggregate were left for the next. */
    struct relay_last {
        bool lean, clean, lean_cut;
        bool sent_all; /* every row confirmed and written SENT or deleted */
        size_t rows;
    } last;
    char last_error[ERR_LEN];
    struct relay_scratch *scratch;
};

/* The helper thread starts with the first job and ends in relay_fini. */
void relay_init(struct relay *r, const struct outbox_config *ob,
                const char *relay_id, const struct relay_backend *backend);
/* Runs the jobs on h, shared with other relays whose cycles never
 * overlap this one's (one pool thread's), rather than a thread of its
 * own; before the first cycle. */
void relay_share_helper(struct relay *r, struct helper *h);
/* Time waited so far per server, in microseconds by enum relay_wait,
 * the wait in progress included; from any thread. */
void relay_waits_read(struct relay *r, uint64_t us[WAIT_COUNT]);
void relay_fini(struct relay *r);

/*
 * Runs one claim-publish-finalize cycle.  After RELAY_FULL a batch may be
 * claimed ahead and the last one's outcome not yet recorded: call
 * relay_cycle again at once, or relay_flush.
 */
enum relay_result relay_cycle(struct relay *r);
/* Records what is pending and gives back what was claimed ahead. */
void relay_flush(struct relay *r);

/* Resolves exchange and routing key of each row, rejects bad rows. */
void relay_prepare_rows(struct relay *r);

#endif
