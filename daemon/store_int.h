/*
 * store_int: what the store's files share and nothing outside them sees:
 * struct store, the claim plan's names, and the statement helpers.
 */
#ifndef OUTBOXD_STORE_INT_H
#define OUTBOXD_STORE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <mysql.h>

#include "batch.h"
#include "config.h"
#include "dbsession.h"
#include "store.h"
#include "store_plan.h"
#include "util.h"

#define STORE_ATTEMPTS 3 /* a claim, finalize or purge retried on deadlock */
#define STORE_ERROR_CHARS 1024 /* last_error cap, the column's size */
#define TOKEN_MIN_CHARS 24     /* room for some relay id, '/', 16 hex */
#define TOKEN_MAX_CHARS (sizeof(((struct outbox_batch *)0)->token) - 1)

/* Where claim candidates come from, in the order they are taken:
 * SRC_DELAYED, PENDING rows whose available_at has come, only on a table
 * with that column. */
enum claim_source {
    SRC_EXPIRED,
    SRC_RETRY,
    SRC_DELAYED,
    SRC_PENDING,
    SRC_COUNT
};

/* What makes a row a candidate of each source (store_claim.c), and of
 * SRC_PENDING on a table with available_at: the undelayed rows. */
extern const char *const store_claim_cond[SRC_COUNT];
extern const char *const store_undelayed_cond;

/* Columns of the claim's select list, in order; optional ones follow. */
enum {
    COL_ID,
    COL_EVENT_ID,
    COL_AGGREGATE_TYPE,
    COL_AGGREGATE_ID,
    COL_EVENT_TYPE,
    COL_PAYLOAD,
    COL_CREATED,
    COL_RETRY_COUNT,
    COL_FIXED
};

/* OPT_EXPIRES_AT takes two places in the select list: the microseconds
 * left by the database clock, then the time as UTC text. */
enum { OPT_HEADERS, OPT_TRACE_ID, OPT_TRACEPARENT, OPT_EXPIRES_AT, NOPTIONAL };

struct fin_item {
    enum fin_kind kind;
    const char *error; /* NULL for SENT and RELEASE */
    uint64_t id;
};

/* An unfinished row of the candidates' aggregate groups[g]. */
struct earlier {
    size_t g;
    uint64_t id;
};

/* This store's use of its session, shared or its own, and how its last
 * statement failed. */
struct store_conn {
    struct dbsession *sess; /* shared, or made by store_new (own) */
    bool own;
    bool ready;           /* table checked, claim statements built... */
    uint64_t checked_gen; /* ...under this generation of the session */
    bool checking;        /* in the schema check: leave checks as they are */
    bool schema_error;    /* last failure: schema, version or privilege */
    bool read_only;       /* last failure: the server refuses writes */
    bool checks_off;      /* this table's verdict: check_constraint_checks
                             may be 0 for its updates */
    unsigned last_errno;
    uint64_t statements; /* sent since store_new */
};

/* What the schema check found and the claim statements derived from it
 * (store_schema.c): rebuilt at every check, read by every claim. */
struct claim_plan {
    uint64_t schema_checked_ms;   /* when the table was last checked */
    bool schema_stale;            /* store_recheck_schema: check it now */
    char *count_sql;              /* ordering: unfinished earlier events,
                                     "IN (" */
    char *select_list;            /* claim: "SELECT" and the columns */
    char *claim_where[SRC_COUNT]; /* candidates: index hint and WHERE */
    /* Each source's condition, store_claim_cond's or the undelayed one;
     * NULL: the table has no such source (no available_at). */
    const char *claim_cond[SRC_COUNT];
    char *claim_order[SRC_COUNT]; /* their ORDER BY */
    char *unblocked_sql;          /* ordering: skip aggregates held back */
    char *hold_sql;  /* its on_dead: hold part alone, for the lean reads */
    char *head_sql;  /* ordering: ", candidate is its aggregate's first" */
    bool unfinished; /* ordering reads `unfinished` = 1, not status IN */
    bool held;       /* on_dead: hold reads `held` = 1 (store_hold.c) */
    char *held_cond; /* "a DEAD row not released", by `held` or not */
    /* Both aggregate columns compare as bytes (a _bin collation): the
     * server tells apart what strcmp does, but for trailing spaces. */
    bool binary_aggregate;
    char *retry_index; /* an index led by next_retry_at, quoted, or NULL */
    bool available_at; /* the optional column: rows delayed until then */
    char *delay_index; /* an index led by (status, available_at), quoted */
    bool id_primary;   /* the primary key is led by id: fetch_candidates */
    int pos_optional[NOPTIONAL]; /* select list positions, -1 if absent */
    int pos_columns;
    enum dup_check dup_check;
    unsigned token_chars, error_chars;
    enum text_charset error_charset;
};

/* The claim's scratch (store_claim.c, store_ordering.c): arrays that grow
 * to the largest batch seen, and what one claim tells the next. */
struct claim_scratch {
    uint64_t expired_none_ms; /* when the last look for expired leases
                                 found none */
    bool probe_first;         /* the last claim did not fill its batch */
    /* The lean claim (lean_applies): allowed once a leased claim has
     * committed in this process; this claim is lean while lean_now
     * holds; woken: the binlog told of new rows, no probe needed;
     * quiet: nothing for the looks to find (store_set_quiet). */
    bool lean_ok, lean_now, woken, quiet;
    uint64_t lean_gen; /* the session generation of the open lean claim */
    /* lock_lean's read: columns after the select list (0: none), and
     * which of them it asked for. */
    unsigned lean_extras;
    /* store_claim_more's read: a join, past the transaction's last id,
     * and the ids the binlog told since the last read (store_told_ids),
     * which it locks by primary key where there is one. */
    bool lean_join;
    uint64_t lean_after;
    struct told_ids told;
    /* The head-free join (store_join.c): how far its proof stands in the
     * open transaction (enum head_proof); unheld, the ids told since its
     * claim that it has not locked (all of them while they fit and no
     * doubt came).  join_form: the read this join makes. */
    int proof;
    bool tail_known; /* the last commit told, as told_ids.tail */
    uint64_t tail;
    uint64_t unheld[TOLD_IDS];
    size_t nunheld;
    int join_form;
    uint64_t join_point;
    bool lean_heads, lean_expired_look, lean_delayed_look;
    /* A RETRY or delayed row may hold an aggregate back: the lean read
     * filters past them.  Cleared by a probe that saw neither. */
    bool held_possible;
    uint64_t delayed_none_ms; /* when the last look for due delayed rows
                                 found none */
    unsigned char *drop;      /* candidates dropped by ordering */
    size_t drop_cap;
    struct outbox_row **byagg; /* candidates by aggregate, id */
    size_t byagg_cap;
    size_t *groups; /* where each aggregate starts in byagg */
    size_t groups_cap, ngroups;
    struct earlier *earlier; /* unfinished rows of those aggregates */
    size_t earlier_cap;
    uint64_t *located; /* candidate ids, then those locked */
    size_t located_cap;
    /* The claim stopped short of its row limit on purpose (batch_bytes,
     * or the window): more rows may wait. */
    bool cut_short;
    /* Payload and headers per locked row: the mean of the last claim
     * that locked any (0: none yet), and this claim's sums; they size
     * the next claim's window. */
    uint64_t row_bytes_est, seen_bytes, seen_rows;
    uint64_t *heads; /* located ids that lead their aggregate's
                        unfinished events, sorted when used */
    size_t heads_cap, nheads;
};

/* A lean join's reads: past the transaction's last row, or the one row
 * the binlog told of, by primary key, with the head of its aggregate or,
 * proven needless, without. */
enum join_form { JOIN_RANGE, JOIN_POINT, JOIN_POINT_FREE, JOIN_FORMS };
/* The head-free join's proof in the open lean transaction: none (its
 * joins read the head), due (the claim held the last commit told; the
 * read of the unfinished rows waits for the first join that needs it),
 * held (that read found only rows the transaction holds). */
enum head_proof { PROOF_NONE, PROOF_DUE, PROOF_HELD };

/* The lean join's prepared reads on this store's session (store_join.c),
 * each: its name, unique in the process; the session generation it was
 * prepared under (0: none, or the plan rebuilt since: its text is the
 * plan's and the config's, which changes only with a restart); a
 * session that refused to prepare it; joins sent as text so far. */
struct join_form_prep {
    char name[40];
    uint64_t prepared_gen, refused_gen, texts_gen;
    unsigned texts;
};
struct join_prep {
    struct join_form_prep form[JOIN_FORMS];
};

/* Finalize's scratch (store_finalize.c). */
struct fin_scratch {
    struct strbuf text;     /* sanitized error text */
    struct fin_item *items; /* the outcomes to record, sorted */
    size_t items_cap;
};

/* Where the retention walk stands (store_purge.c). */
struct purge_cursor {
    uint64_t *ids; /* the expired ids of one step */
    size_t cap;
    uint64_t from; /* the walk resumes after this id */
};

struct store {
    const struct outbox_config *ob;
    char *where;       /* "schema.table" for messages */
    char *table;       /* `schema`.`table`, quoted */
    struct strbuf sql; /* the statement being built, reused */
    struct store_conn conn;
    struct claim_plan plan;
    struct claim_scratch claim;
    struct join_prep join;
    struct fin_scratch fin;
    struct purge_cursor purge;
    /* Claims that lost a race at a lock or at certification (1213), each
     * attempt; read by the metrics thread.  lost_race: the last claim
     * failed so, every attempt (store_claim_lost_race). */
    _Atomic uint64_t conflicts;
    bool lost_race;
    /* Where the table's id is among its ncolumns (store_id_column);
     * -1: not known. */
    int id_column;
    unsigned ncolumns;
    /* Lean joins read, by form (store_joins). */
    _Atomic uint64_t joins[JOIN_FORMS];
};

/* The session's connection: NULL while it is closed. */
static inline MYSQL *
store_db(const struct store *st)
{
    return dbsession_db(st->conn.sess);
}

/* store_schema.c: what store_id_column answers. */
void store_set_id_column(struct store *st, int id_column, unsigned ncolumns);

/* store_sql.c: scratch arrays, building (on util's strbuf) and running
 * statements (the runners and commit: store.h). */
void *store_grow(void *p, size_t *cap, size_t n, size_t size);
int store_u64_cmp(const void *a, const void *b);
int store_strcmp_null(const char *a, const char *b);
void sql_add_ident(struct strbuf *q, const char *name);
void sql_add_string(struct store *st, const char *s);
void sql_add_id(struct strbuf *q, uint64_t id, bool first);
bool store_errno_is_connection(unsigned code);
/* A deadlock (1213) is the one failure worth trying again at once: the
 * server rolled back the victim and the other transaction goes on.  A
 * lock wait that ran out (1205) means somebody holds the table or rows
 * (an ALTER TABLE, LOCK TABLES): trying again would hold the thread's
 * other outboxes for another wait, so the outbox backs off (worker_link.c). */
bool store_errno_is_deadlock(unsigned code);
void store_close(struct store *st);
void sql_add_schema(struct store *st);
int store_fail(struct store *st, const char *what, char *err, size_t errlen);
int store_run_query(struct store *st, const char *sql, size_t len,
                    const char *what, char *err, size_t errlen);
int store_run_text(struct store *st, const char *sql, const char *what,
                   char *err, size_t errlen);

/* store.c: the session. */
int store_refuse_read_only(struct store *st, char *err, size_t errlen);
int store_require_ready(struct store *st, const char *what, char *err,
                        size_t errlen);
int store_require_session(struct store *st, const char *what, char *err,
                          size_t errlen);

/* store_schema.c: the schema check and the claim plan derived from it. */
int store_check_schema(struct store *st, char *err, size_t errlen);
int store_refresh_schema(struct store *st, char *err, size_t errlen);
const char *store_unfinished_cond(const struct store *st);

/* store_claim.c.  A lean claim takes only rows created this recently
 * (add_lean_columns). */
#define STORE_LEAN_YOUNG_S 2
int store_row_cmp_id(const void *a, const void *b);
struct outbox_row *store_find_row(struct outbox_batch *b, uint64_t id);

/* store_join.c: a lean join's read, in st->sql: the row the binlog told
 * of (st->claim.told), or the rows past after, at most window; prepared
 * once it joins often (EXECUTE).  -1 when the PREPARE failed the session
 * or the table; forget deallocates them from a session that stays open
 * for others. */
void store_join_init(struct store *st);
void store_join_plan_changed(struct store *st);
/* Whether the lean claim's transaction may join head-free; the form of
 * the next join, with the proof's read where it is due; what its read
 * held. */
void store_join_open(struct store *st, const struct outbox_batch *b);
int store_join_pick(struct store *st, const struct outbox_batch *first,
                    uint64_t after, char *err, size_t errlen);
void store_join_read(struct store *st, const struct outbox_batch *first,
                     const struct outbox_batch *b);
int store_join_sql(struct store *st, uint64_t after, size_t window, char *err,
                   size_t errlen);
void store_join_forget(struct store *st);

/* store_hold.c: on_dead: hold.  Each is a no-op (or "", or its input)
 * for an outbox that does not hold. */
void store_hold_plan(struct store *st, bool held_column);
char *store_hold_filter(const struct store *st, char *unblocked);
char *store_hold_count_term(const struct store *st);
void store_hold_add_earlier(struct store *st, const struct outbox_batch *b);
const char *store_dead_locked_until(const struct store *st);
const char *store_expired_locked_by(const struct store *st);

/* store_ordering.c */
bool store_aggregate_alone(const struct store *st, const struct outbox_row *row,
                           const struct outbox_batch *first);
int store_ordering_filter(struct store *st, struct outbox_batch *b, char *err,
                          size_t errlen);

#endif
