/*
 * store_checks: which CHECK constraints a status update can leave
 * unevaluated (see store_checks.h).
 */
#include "store_checks.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

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

bool
check_clause_may_read(const char *clause, const char *const *columns, size_t n)
{
    if (clause == NULL)
        return true; /* unknown: assume the worst */
    const char *c = clause;
    while (*c != '\0') {
        if (!is_word_char(*c)) {
            c++;
            continue;
        }
        const char *start = c;
        while (is_word_char(*c))
            c++;
        if (word_is_column(start, (size_t)(c - start), columns, n))
            return true;
    }
    return false;
}

/* The length of the line at s, without its newline. */
static size_t
line_len(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl ? (size_t)(nl - s) : strlen(s);
}

/* Whether the n bytes at s hold word (case-insensitive, whole). */
static bool
has_word(const char *s, size_t n, const char *word)
{
    char *line = xstrndup(s, n);
    const char *const words[] = {word};
    bool found = check_clause_may_read(line, words, 1);
    free(line);
    return found;
}

static bool
line_may_read(const char *s, size_t n, const char *const *generated,
              size_t ngenerated)
{
    char *line = xstrndup(s, n);
    bool may = check_clause_may_read(line, store_written_columns,
                                     store_nwritten_columns) ||
               check_clause_may_read(line, generated, ngenerated);
    free(line);
    return may;
}

enum store_checks
store_checks_judge(const char *create_table, const char *const *generated,
                   size_t ngenerated)
{
    if (create_table == NULL)
        return CHECKS_NEEDED;
    enum store_checks verdict = CHECKS_NONE;
    for (const char *s = create_table; *s != '\0';) {
        size_t n = line_len(s);
        if (has_word(s, n, "CHECK")) {
            if (line_may_read(s, n, generated, ngenerated))
                return CHECKS_NEEDED;
            verdict = CHECKS_SKIPPABLE;
        }
        s += n + (s[n] == '\n');
    }
    return verdict;
}
