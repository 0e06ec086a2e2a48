/*
 * store_checks: which CHECK constraints of an outbox table a status
 * update can leave unevaluated.  MariaDB evaluates every constraint of a
 * table on every UPDATE, so a JSON payload (a LONGTEXT with CHECK
 * (json_valid(payload))) is parsed again on each status change; a
 * constraint that names none of the columns an update writes cannot
 * change its verdict, and evaluating it is pure cost.
 */
#ifndef OUTBOXD_STORE_CHECKS_H
#define OUTBOXD_STORE_CHECKS_H

#include <stdbool.h>
#include <stddef.h>

/* The columns the store's claim, finalize and SENT marking write. */
extern const char *const store_written_columns[];
extern const size_t store_nwritten_columns;

/*
 * True when clause (as information_schema.CHECK_CONSTRAINTS prints it)
 * may read one of the n columns named: any word of letters, digits, '_'
 * and '$' equal to one of them, case-insensitive, wherever it stands,
 * quoted or not, in a string literal too.  It errs only towards true:
 * the one mistake that matters is missing a column.
 */
bool check_clause_may_read(const char *clause, const char *const *columns,
                           size_t n);

/* What a table's CHECK constraints allow, read from SHOW CREATE TABLE. */
enum store_checks {
    CHECKS_NONE,      /* the table has none */
    CHECKS_SKIPPABLE, /* none reads a written or generated column */
    CHECKS_NEEDED,    /* one may: keep evaluating them */
};

/*
 * Judges each line of create_table (one column or constraint per line,
 * as the server prints it) that holds the word CHECK: a column-level
 * constraint stands on its column's line, a table-level one on its own.
 * generated: the table's generated columns, whose values follow the
 * written ones.
 */
enum store_checks store_checks_judge(const char *create_table,
                                     const char *const *generated,
                                     size_t ngenerated);

#endif
