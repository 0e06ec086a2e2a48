/*
 * store_plan: the store's functions that need no server, apart so that
 * tests/check_store.c can drive them: the claim plan picked from the
 * table's indexes, reading what the server reports, and how an outcome
 * and its error text are recorded.
 */
#ifndef OUTBOXD_STORE_PLAN_H
#define OUTBOXD_STORE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "util.h"

/* What last_error can hold: invalid or unstorable characters become '?'. */
enum text_charset { TEXT_UTF8MB4, TEXT_UTF8MB3, TEXT_ASCII };

/*
 * Whether a claimed row's event_id may repeat one claimed before: not
 * with a unique key on it; with a plain index each claim looks (cheaply);
 * with none it cannot afford to, and only a batch's own rows are compared.
 */
enum dup_check { DUP_IMPOSSIBLE, DUP_INDEXED, DUP_UNINDEXED };

/* What finalize does with a row; FIN_EXPIRED: DEAD with no attempt
 * counted, for a row found past expires_at when due to be published. */
enum fin_kind { FIN_SENT, FIN_RETRY, FIN_DEAD, FIN_RELEASE, FIN_EXPIRED };

/*
 * One column of one index, a row of information_schema.STATISTICS; the
 * planners take them ordered by index, then position in the index.
 */
struct index_column {
    const char *index;  /* INDEX_NAME, "PRIMARY" for the primary key */
    const char *column; /* COLUMN_NAME; NULL for an expression */
    bool prefix;        /* SUB_PART set: only a prefix of the column */
    bool unique;        /* NON_UNIQUE is 0 */
};

/* store_schema.c.  The claim's ORDER BY, quoted ("`id`" or the columns
 * of the first index led by status, then `id`); never NULL. */
char *store_pick_claim_order(const struct index_column *ix, size_t n);
/* IMPOSSIBLE with a unique key on event_id alone, INDEXED with an index
 * led by it, else UNINDEXED. */
enum dup_check store_pick_dup_check(const struct index_column *ix, size_t n);
/* The first index led by next_retry_at, quoted, or NULL. */
char *store_pick_retry_index(const struct index_column *ix, size_t n);
/* The first index led by (status, available_at) and then id or nothing,
 * quoted, or NULL: it serves both delayed claims (build_claim_sql). */
char *store_pick_delay_index(const struct index_column *ix, size_t n);
/* The primary key is led by id, so a claim can lock the rows it located
 * by id through it. */
bool store_pick_id_primary(const struct index_column *ix, size_t n);
/* A CHARACTER_SET_NAME as last_error's charset; unknown or NULL: ASCII. */
enum text_charset store_parse_charset(const char *name);
/* A GENERATION_EXPRESSION that is sql/outbox.sql's `unfinished`. */
bool store_is_unfinished_expression(const char *expr);
/* store_hold.c.  A GENERATION_EXPRESSION that is sql/outbox.sql's
 * `held`. */
bool store_is_held_expression(const char *expr);
/* A COLLATION_NAME that compares as bytes (ends in _bin). */
bool store_is_binary_collation(const char *collation);

/* store.c.  A server version ("10.11.6-MariaDB") as 101106. */
unsigned long store_parse_version(const char *s);

/* store_claim.c.  UNIX_TIMESTAMP's "1718000000.123456" (or no fraction)
 * as microseconds; NULL is 0. */
int64_t store_parse_us(const char *s);

/* store_finalize.c.  The length of the valid UTF-8 sequence at s (n > 0
 * bytes left); 0 for an invalid, overlong or surrogate one, or one past
 * U+10FFFF. */
size_t store_utf8_len(const unsigned char *s, size_t n);
/*
 * text as last_error can store it, in out: at most max_chars characters,
 * anything invalid or outside charset as '?'.  Returns out->p.
 */
const char *store_clean_text(struct strbuf *out, const char *text,
                             unsigned max_chars, enum text_charset charset);
/* What finalize does with row, and the error it records (else NULL). */
enum fin_kind store_classify(const struct outbox_row *row, unsigned max_retries,
                             const char **error);

#endif
