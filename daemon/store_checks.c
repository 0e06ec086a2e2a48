/*
 * store_checks: which CHECK constraints a status update can leave
 * unevaluated (see store_checks.h).
 */
#include "store_checks.h"

#include <string.h>
#include <strings.h>

const char *const store_written_columns[] = {
    "status",       "retry_count", "next_retry_at", "locked_by",
    "locked_until", "sent_at",     "last_error"};
const size_t store_nwritten_columns =
    sizeof(store_written_columns) / sizeof(store_written_columns[0]);

static bool
is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80; /* part of a non-ASCII name */
}

static bool
word_is_column(const char *word, size_t len, const char *const *columns,
               size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(columns[i]) == len &&
            strncasecmp(word, columns[i], len) == 0)
            return true;
    return false;
}

/* Whether the n bytes at s hold a word naming one of the columns. */
static bool
span_names(const char *s, size_t n, const char *const *columns, size_t ncolumns)
{
    const char *c = s, *end = s + n;
    while (c < end) {
        if (!is_word_char(*c)) {
            c++;
            continue;
        }
        const char *start = c;
        while (c < end && is_word_char(*c))
            c++;
        if (word_is_column(start, (size_t)(c - start), columns, ncolumns))
            return true;
    }
    return false;
}

bool
check_clause_may_read(const char *clause, const char *const *columns, size_t n)
{
    if (clause == NULL)
        return true; /* unknown: assume the worst */
    return span_names(clause, strlen(clause), columns, n);
}

static const char *const check_word[] = {"CHECK"};

enum store_checks
store_checks_judge(const char *create_table, const char *const *generated,
                   size_t ngenerated)
{
    if (create_table == NULL)
        return CHECKS_NEEDED;
    enum store_checks verdict = CHECKS_NONE;
    for (const char *s = create_table; *s != '\0';) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        if (span_names(s, n, check_word, 1)) {
            if (span_names(s, n, store_written_columns,
                           store_nwritten_columns) ||
                span_names(s, n, generated, ngenerated))
                return CHECKS_NEEDED;
            verdict = CHECKS_SKIPPABLE;
        }
        s += n + (s[n] == '\n');
    }
    return verdict;
}
