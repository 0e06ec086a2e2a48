/*
 * batch: the rows of one claim and the fate of each, the state machine
 * that relay drives and store finalizes.  Row strings live in the
 * batch's arena, reset (not freed) between batches; payloads and headers
 * in its bulk store, released as soon as the batch is published.
 */
#ifndef OUTBOXD_BATCH_H
#define OUTBOXD_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Status values stored in the outbox table (docs/contract.md section 6). */
enum outbox_status {
    OUTBOX_PENDING,
    OUTBOX_PROCESSING,
    OUTBOX_SENT,
    OUTBOX_RETRY,
    OUTBOX_DEAD,
    OUTBOX_STATUS_COUNT
};

const char *outbox_status_name(enum outbox_status s);
int outbox_status_parse(const char *name); /* -1 if unknown */

/*
 * In-memory life of a claimed row.  CLAIMED -> PUBLISHED -> ACKED |
 * FAILED; CLAIMED -> REJECTED (bad row, never published) | RELEASED
 * (not attempted: an earlier event of its aggregate failed, or shutdown);
 * PUBLISHED -> RELEASED when the outcome is unknown through no fault of
 * the row (the broker blocked publishing, or closed the channel for
 * another message): back to the table with no attempt counted.
 */
enum row_state {
    ROW_CLAIMED,
    ROW_PUBLISHED,
    ROW_ACKED,
    ROW_FAILED,
    ROW_REJECTED,
    ROW_RELEASED,
    ROW_STATE_COUNT
};

const char *row_state_name(enum row_state s);

struct outbox_row {
    uint64_t id;
    const char *event_id; /* NULL when the column is NULL */
    const char *aggregate_type;
    const char *aggregate_id;
    const char *event_type;
    const char *payload; /* NULL when the column is NULL; bulk */
    size_t payload_len;
    const char *headers;     /* JSON object text, NULL if absent; bulk */
    const char *traceparent; /* NULL if absent */
    const char *trace_id;    /* NULL if absent */
    const char **columns;    /* values of outbox_config.columns */
    int64_t created_us;      /* created_at, microseconds since epoch */
    unsigned retry_count;    /* attempts already failed, as claimed */
    enum outbox_status claimed_from;
    unsigned earlier_unfinished; /* unfinished events before it */
    uint64_t duplicate_of; /* an earlier row with this event_id, 0 if none */
    /* expires_at (docs/contract.md section 6), by the database clock:
     * expires_at - NOW(6) at the claim, and expires_at as UTC text. */
    bool has_expiry;
    int64_t expires_in_us;
    const char *expires_at;
    const char *expiration; /* the AMQP expiration property, NULL: none */

    enum row_state state;
    const char *error; /* why FAILED or REJECTED */
    bool dead;         /* FAILED/REJECTED past max_retries: goes DEAD */
    bool expired;      /* REJECTED past expires_at: DEAD, no attempt */
    /* The outcome is in the table already: ACKED and marked SENT
     * (store_mark_sent), or expired and made DEAD by the claim. */
    bool recorded;
    const char *exchange; /* resolved at publish time */
    const char *routing_key;
};

struct arena_chunk;

struct outbox_batch {
    struct outbox_row *rows; /* sorted by id */
    size_t n, cap;
    char token[96]; /* claim token written to locked_by */
    /* A lean claim: the rows are locked by the session's open
     * transaction, still PENDING, and no token was written; finalize
     * records them and commits (store_claim.c). */
    bool lean;
    /* Set by the relay, kept by batch_reset: this claim may be lean (not
     * one claimed ahead, which shares the session with a publish). */
    bool lean_allowed;
    /* A batch claimed into this lean batch's transaction after it was
     * published (store_claim_more): finalize records both, commits once. */
    struct outbox_batch *lean_next;
    /* Candidates the claim read before the ordering check dropped any:
     * as many as batch_size means more rows were waiting. */
    size_t candidates;
    /* An empty claim's look ahead: in how many ms the next row falls due
     * (a RETRY backoff ending, a lease expiring); UINT64_MAX: none. */
    uint64_t due_in_ms;
    struct arena_chunk *arena;
    /* Payloads and headers: the bytes that scale with the rows, kept
     * apart so that they go once published (batch_release_bulk). */
    struct arena_chunk *bulk;
    size_t bulk_bytes; /* held there now */
};

void batch_init(struct outbox_batch *b);
/* Drops the rows and their strings; keeps the memory for the next claim. */
void batch_reset(struct outbox_batch *b);
void batch_free(struct outbox_batch *b);
struct outbox_row *batch_add(struct outbox_batch *b);
/* Copies into the batch's arena; valid until batch_reset. */
char *batch_strdup(struct outbox_batch *b, const char *s);
char *batch_memdup(struct outbox_batch *b, const void *p, size_t n);
char *batch_sprintf(struct outbox_batch *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Copies a payload or headers into the bulk store; valid until
 * batch_release_bulk or batch_reset. */
char *batch_bulkdup(struct outbox_batch *b, const void *p, size_t n);
/* Frees every payload and headers of the batch: publishing is over, and
 * only ids, states and errors are left to record. */
void batch_release_bulk(struct outbox_batch *b);

/* Large payloads' mappings kept for the next claims (batch.c), each for
 * at most a second unused: one default batch_bytes of payloads, with room
 * for their headers and the pages' rounding. */
#define BATCH_SPARE_BYTES ((size_t)24 * 1024 * 1024)
#define BATCH_SPARE_IDLE_MS 1000
/* Unmaps the spares unused since before now_ms - BATCH_SPARE_IDLE_MS. */
void batch_spares_expire(uint64_t now_ms);
size_t batch_spare_bytes(void);

/*
 * Moves a row to a new state; returns -1 (and changes nothing) on a
 * transition the machine does not have.  error is copied.
 */
int row_enter_state(struct outbox_batch *b, struct outbox_row *row,
                    enum row_state to, const char *error);

size_t batch_count_state(const struct outbox_batch *b, enum row_state s);

/*
 * Expiry (docs/contract.md section 6).  The whole milliseconds left
 * before expires_at, elapsed_ms after a claim that read expires_in_us
 * (floored: never more than the database clock gives); 0 or less means
 * expired.
 */
int64_t batch_expiry_ms_left(int64_t expires_in_us, uint64_t elapsed_ms);
/* "expired at <expires_at> UTC, <when> 12.3 s later" into buf. */
void batch_format_expiry(char *buf, size_t len, const char *expires_at,
                         const char *when, int64_t late_us);
/* REJECTED as expired with that error: DEAD, no attempt counted;
 * recorded when the claim wrote it so. */
void batch_expire_row(struct outbox_batch *b, struct outbox_row *row,
                      const char *error, bool recorded);

#endif
