/*
 * fuzz_template: routing-key and exchange templates.  The first line is
 * compiled; the other lines are the values the columns render to (by the
 * column name's length, a NUL line standing for SQL NULL).  Rendering
 * into every buffer size must either fail or give a prefix-exact copy of
 * the full rendering.
 */
#include <stdbool.h>
#include <stdio.h>

#include "fuzz.h"
#include "template.h"

struct values {
    char **v;
    size_t n;
};

static const char *
lookup_cb(const char *column, void *arg)
{
    const struct values *vals = arg;
    if (vals->n == 0)
        return NULL;
    const char *v = vals->v[strlen(column) % vals->n];
    return v[0] == '\0' ? NULL : v;
}

/* What rendering must give, built without the template's code. */
static size_t
expected_len(const struct template *t, struct values *vals)
{
    size_t len = 0;
    for (size_t i = 0; i < t->nparts; i++) {
        const char *text = t->parts[i].is_column
                               ? lookup_cb(t->parts[i].text, vals)
                               : t->parts[i].text;
        len += text ? strlen(text) : 0;
    }
    return len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    struct values vals = {0};
    char *nl = strchr(text, '\n');
    for (char *line = nl; line != NULL; line = strchr(line, '\n')) {
        *line++ = '\0';
        vals.v = realloc(vals.v, (vals.n + 1) * sizeof(*vals.v));
        vals.v[vals.n++] = line;
    }
    /* Values end at the next line: cut them there. */
    for (size_t i = 0; i + 1 < vals.n; i++)
        vals.v[i][strcspn(vals.v[i], "\n")] = '\0';

    struct template t;
    char err[256];
    if (template_compile(text, &t, err, sizeof(err)) == 0) {
        size_t want = expected_len(&t, &vals);
        char *full = malloc(want + 1);
        FUZZ_ASSERT(template_render(&t, lookup_cb, &vals, full, want + 1) == 0);
        FUZZ_ASSERT(strlen(full) == want);
        for (size_t cap = 0; cap <= want && cap < 64; cap++) {
            char *small = malloc(cap ? cap : 1);
            FUZZ_ASSERT(template_render(&t, lookup_cb, &vals, small, cap) ==
                        -1);
            free(small);
        }
        bool constant = template_is_constant(&t);
        for (size_t i = 0; i < t.nparts; i++)
            FUZZ_ASSERT(!constant || !t.parts[i].is_column);
        free(full);
        template_free(&t);
    } else {
        FUZZ_ASSERT(err[0] != '\0');
    }
    free(vals.v);
    free(text);
    return 0;
}
