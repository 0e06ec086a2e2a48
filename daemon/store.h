/*
 * store: one outbox table on a MySQL/MariaDB session, its own or shared
 * (dbsession.h) with other tables of the same server: connect
 * and check the table, claim a batch under a fenced lease, record its
 * outcomes (finalize, mark sent early) and delete old SENT rows
 * (retention).  Library style: returns -1 and fills err; the caller
 * decides what to do.  The files: store.c (session), store_sql.c,
 * store_schema.c (the claim plan), store_claim.c, store_ordering.c,
 * store_finalize.c, store_purge.c, store_stats.c, sharing store_int.h.
 */
#ifndef OUTBOXD_STORE_H
#define OUTBOXD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <mysql.h>

#include "batch.h"
#include "config.h"
#include "dbsession.h"
#include "told.h"

struct store;
struct strbuf;

/* Minimum versions with SKIP LOCKED (docs/contract.md section 5). */
#define STORE_MIN_MYSQL DBSESSION_MIN_MYSQL
#define STORE_MIN_MARIADB DBSESSION_MIN_MARIADB

/*
 * A store of ob's table on shared, a session to ob's server
 * (dbsession_serves) that the caller frees after every store on it; NULL:
 * the store makes its own, with ob's database as the default schema too
 * (outboxctl's admin statements name the table alone).  Either way the
 * store's statements name `schema`.`table`.
 */
struct store *store_new(const struct outbox_config *ob,
                        struct dbsession *shared);
/* Frees the scratch that grows to the largest batch (the plan stays):
 * between the batches of one of a thousand tenants. */
void store_trim(struct store *st);
void store_free(struct store *st);
/* Frees the client library's per-thread state; call as a thread ends. */
void store_thread_end(void);

/*
 * Opens the session if it is closed (the database's timeouts, the server
 * version, READ COMMITTED, UTC, autocommit off, no auto-reconnect), then
 * checks the outbox table and its columns if it was not checked under
 * this session's generation (a reconnect by any store on a shared session
 * has each check again).  Error messages name the server version, table
 * or column at fault.  A failure of the table leaves a shared session
 * open for the other stores; a lost session is lost for all of them.
 */
int store_connect(struct store *st, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Closes the store's own session; lets go of a shared one (which stays
 * open for the others) after ending the store's transaction. */
void store_disconnect(struct store *st);
/*
 * store_connect refuses a server with read_only on (a replica, a demoted
 * primary), so that a relay does not settle there; outboxctl, which may
 * only read, calls this first to connect anyway.  On a shared session it
 * holds for every store on it.
 */
void store_allow_read_only(struct store *st);
/* The session is open and the table checked under its generation. */
bool store_is_connected(const struct store *st);
/*
 * True when the last failure was about the table, its columns, a
 * privilege or the server version, not the connection: retry slowly.
 * After a table or column error the session stays open and idle, and
 * the next store_connect only checks the table again.
 */
bool store_last_error_is_schema(const struct store *st);
/*
 * True when the last failure was the server refusing writes (read_only
 * or super_read_only on, errors 1290 and 1836, or a Galera node that is
 * not primary, 1047): the session is closed, so that the next
 * store_connect resolves the host again and can reach a new primary.
 */
bool store_last_error_is_read_only(const struct store *st);
/*
 * True when the last failure was a lock wait that ran out (1205):
 * somebody else holds the table or the rows (an ALTER TABLE, LOCK
 * TABLES), nothing was written, and the session goes on.
 */
bool store_last_error_is_lock_wait(const struct store *st);
/* The last claim failed because every attempt lost a race (1213): to
 * another relay's lock or, on Galera, at certification. */
bool store_claim_lost_race(const struct store *st);
/* Claim attempts that lost such a race, since store_new (any thread). */
uint64_t store_claim_conflicts(struct store *st);
/* Lean joins since store_new, those by the id the binlog told
 * (store_told_ids), and of those the ones without the head of the
 * aggregate (store_join.c), from any thread. */
void store_joins(struct store *st, uint64_t *joins, uint64_t *by_id,
                 uint64_t *head_free);
/* Statements this store sent since store_new (the claim's cost, for
 * tests); the session's own setup counts in dbsession_statement_count. */
uint64_t store_statement_count(const struct store *st);
/*
 * The open session while connected, else NULL.  Whoever uses it must end
 * the transaction its statements open; statements on the table go
 * through the door below instead.
 */
MYSQL *store_session(struct store *st);
/* The table as statements on store_session must name it, quoted:
 * `schema`.`table`. */
const char *store_table_sql(const struct store *st);
/* The session the store runs on (its own or the shared one). */
struct dbsession *store_dbsession(const struct store *st);

/*
 * A DEAD row released by `outboxctl dead release` keeps its status and
 * last_error and has this in locked_by, which no claim token can equal
 * (a token ends in '/' and 16 hex digits): it holds its aggregate no
 * more (docs/design.md, The state machine).
 */
#define STORE_RELEASED "released"
/*
 * With on_dead: hold, the WHERE condition of the DEAD rows that hold
 * their aggregate, by the table's `held` column or without it; NULL for
 * an outbox that does not hold.  Valid after store_connect.
 */
const char *store_hold_cond(const struct store *st);

/* The binlog told of rows committed since the last claim: a lean claim
 * need not probe for them.  Called before each claim, on the thread of
 * store_told_ids: the ids told so far are the claim's to read. */
void store_set_woken(struct store *st, bool woken);

/* The ids of the rows the binlog told inserted since the store's last
 * read (told.h): a lean join locks them by primary key rather than
 * reading the range past its transaction's last row. */
void store_told_ids(struct store *st, const struct told_ids *ids);

/* Where the table's id is among its *ncolumns columns (0: the first),
 * as the last schema check found it; -1 before one did.  Not while a
 * claim may run beside (the relay's job). */
int store_id_column(const struct store *st, unsigned *ncolumns);

/* Since a count found nothing PENDING or PROCESSING, the binlog told of
 * no write to the table but the relay's own lean events: no lease can
 * have run out and no delayed row fallen due, so a lean read need not
 * look for either (worker_rows_unchanged). */
void store_set_quiet(struct store *st, bool quiet);

/*
 * The one door for statements on the table from outside the store
 * (admin.c, stats_sql.c): store_sql_begin resets the store's statement
 * to head, the table as SQL names it (store_table_sql) and tail;
 * strbuf_* and store_sql_add_string add to it; store_run_select and
 * store_run_update send it, counted and its error sorted as the store's
 * own (a schema error has the next store_connect check the table
 * again).  The caller ends the transaction: store_commit, or
 * store_rollback after a failure.  For statements between the relay's
 * cycles, on the thread that runs them.
 */
struct strbuf *store_sql_begin(struct store *st, const char *head,
                               const char *tail);
/* 'text', quoted and escaped for the session's character set. */
void store_sql_add_string(struct store *st, const char *text);
MYSQL_RES *store_run_select(struct store *st, const char *what, char *err,
                            size_t errlen);
int store_run_update(struct store *st, const char *what, uint64_t *affected,
                     char *err, size_t errlen);
int store_commit(struct store *st, const char *what, char *err, size_t errlen);
void store_rollback(struct store *st);

/*
 * store_stats.c: the table's counts that are not the relay's, for
 * outboxctl status and the gauges alike, on the table as the schema
 * check found it (with available_at or without).  Each leaves its
 * transaction open for the caller to end.
 *
 * Rows per status into rows[] (a status outboxd does not know into
 * *other), SENT only when with_sent.
 */
int store_count_statuses(struct store *st, bool with_sent,
                         uint64_t rows[OUTBOX_STATUS_COUNT], uint64_t *other,
                         char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* The age of the next PENDING row to be claimed, 0 or more; -1 when no
 * PENDING row is claimable now. */
int store_oldest_pending(struct store *st, int64_t *age_us, char *err,
                         size_t errlen) __attribute__((warn_unused_result));
/* on_dead: hold: the aggregates held by a DEAD event and the age of the
 * oldest hold (0 with none); both 0 for an outbox that does not hold. */
int store_count_holds(struct store *st, uint64_t *aggregates,
                      int64_t *oldest_us, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Claims up to batch_size rows in one short transaction: due PENDING and
 * RETRY rows, or else one PROCESSING row whose lease expired, alone, so
 * that a row that crashes the relay takes no other row down with it (the
 * reclaim counts as an attempt; past max_retries the row goes DEAD
 * here).  With
 * ordering: aggregate a row is kept only when every unfinished earlier
 * event of its aggregate is in the batch too.  Rows come back sorted by
 * id, in state ROW_CLAIMED, with b->token in their locked_by; in a table
 * without a unique key on event_id but with an index on it, a row whose
 * event_id an earlier row has comes back with duplicate_of set.
 * A lean claim (b->lean, when b->lean_allowed: docs/design.md, The lean
 * steady state) leaves its rows PENDING, locked by the session's open
 * transaction, with no token: store_finalize_batch must follow before
 * anything else runs on the session.
 */
int store_claim_batch(struct store *st, const char *relay_id,
                      struct outbox_batch *b, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/*
 * Locks more PENDING rows into the open transaction of the lean batch
 * first, just published, as a lean claim would, into b (lean, no commit);
 * store_finalize_batch of the first batch, with b as its lean_next,
 * records both and commits.  b->n is 0 when no row may be taken so
 * (one old enough to need a lease, an expired lease seen).
 */
int store_claim_more(struct store *st, const struct outbox_batch *first,
                     struct outbox_batch *b, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/*
 * Has the next claim check the table again, as claims do every minute
 * on their own (an ALTER TABLE does not end the session).
 */
void store_recheck_schema(struct store *st);

/*
 * Writes every outcome of the batch, one statement per outcome, each
 * conditioned on the claim token: ACKED -> SENT (or deleted), FAILED or
 * REJECTED -> RETRY with backoff or DEAD, RELEASED and still CLAIMED ->
 * claimable again with no attempt counted; rows already recorded by
 * store_mark_sent are left out.  *lost counts rows whose lease another
 * relay had taken.  On -1 nothing was committed.  A lean batch (and its
 * lean_next chain) is conditioned on its open transaction instead, rows
 * never attempted need no statement, and it commits once; on -1 it was
 * rolled back, its rows PENDING and free again.
 */
int store_finalize_batch(struct store *st, struct outbox_batch *b, size_t *lost,
                         char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Marks n ACKED rows of the batch SENT (or deletes them) now, in one
 * fenced statement and commit, and flags them recorded so that
 * store_finalize_batch leaves them out.  The relay does this before it
 * publishes the next event of their aggregates: once that one is out, a
 * crash must not make the broker see these again after it.
 */
int store_mark_sent(struct store *st, struct outbox_batch *b,
                    struct outbox_row **rows, size_t n, size_t *lost, char *err,
                    size_t errlen) __attribute__((warn_unused_result));

/* What one store_purge_sent call did. */
struct store_purge {
    uint64_t deleted;  /* SENT rows deleted */
    unsigned batches;  /* DELETE statements that removed rows */
    uint64_t examined; /* rows read to find them */
    bool done;         /* false: deadline_ms came first, rows may be left */
};

/*
 * Retention (docs/contract.md section 8): deletes the SENT rows whose sent_at
 * is more than older_than_ms ago, DEAD and unfinished rows never.  Walks the
 * table by primary key, batch rows at a time, each step its own short
 * transaction that locks only the rows it deletes.  Stops where rows were
 * created after the cutoff (none of them can be old enough), or at deadline_ms
 * (clock_ms; 0 for none), and then resumes there on the next call.  On -1 the
 * committed steps stay counted in *res.
 */
int store_purge_sent(struct store *st, uint64_t older_than_ms, unsigned batch,
                     uint64_t deadline_ms, struct store_purge *res, char *err,
                     size_t errlen) __attribute__((warn_unused_result));

/*
 * outboxctl purge: one step of the same walk (one transaction), deleting
 * at most max rows (0: up to batch), so that the caller can show
 * progress, honour a limit and stop between transactions.  Adds to *res
 * (zero it first); res->done once the walk reached its end, and the next
 * call starts a new walk.
 */
int store_purge_sent_step(struct store *st, uint64_t older_than_ms,
                          unsigned batch, uint64_t max, struct store_purge *res,
                          char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
