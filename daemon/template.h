/*
 * template: "{aggregate_type}.{event_type}" routing-key and exchange
 * templates, compiled once at config load and rendered per row.
 */
#ifndef OUTBOXD_TEMPLATE_H
#define OUTBOXD_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

struct template_part {
    bool is_column; /* text is a column name, else a literal */
    char *text;
};

struct template
{
    char *source;
    struct template_part *parts;
    size_t nparts;
};

/* Returns a column's value for a row; NULL for SQL NULL (renders as ""). */
typedef const char *(*template_lookup_fn)(const char *column, void *arg);

/*
 * Compiles src.  "{{" and "}}" are literal braces.  A lone "}", an
 * unterminated "{", an empty name or a name outside [A-Za-z0-9_] is an
 * error explained in err.
 */
int template_compile(const char *src, struct template *t, char *err,
                     size_t errlen);
void template_free(struct template *t);
bool template_is_constant(const struct template *t);
/* Renders into out; -1 when the result does not fit in outlen - 1 bytes. */
int template_render(const struct template *t, template_lookup_fn lookup,
                    void *arg, char *out, size_t outlen);

#endif
