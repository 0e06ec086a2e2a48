/*
 * template: "{column}" substitution for routing keys and exchanges,
 * compiled once so that rendering per row does no parsing or allocation.
 */
#include "template.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static bool
is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

static void
add_part(struct template *t, bool is_column, const char *text, size_t len)
{
    if (!is_column && len == 0)
        return;
    /* Merge adjacent literals, which "{{" and "}}" produce. */
    if (!is_column && t->nparts > 0 && !t->parts[t->nparts - 1].is_column) {
        struct template_part *last = &t->parts[t->nparts - 1];
        size_t old = strlen(last->text);
        last->text = xrealloc(last->text, old + len + 1);
        memcpy(last->text + old, text, len);
        last->text[old + len] = '\0';
        return;
    }
    t->parts = xrealloc(t->parts, (t->nparts + 1) * sizeof(*t->parts));
    t->parts[t->nparts].is_column = is_column;
    t->parts[t->nparts].text = xstrndup(text, len);
    t->nparts++;
}

/* Parses "{name}" at p; returns the length consumed or -1. */
static int
compile_column(struct template *t, const char *p, char *err, size_t errlen)
{
    const char *name = p + 1;
    size_t len = 0;
    while (is_name_char(name[len]))
        len++;
    if (name[len] != '}') {
        err_set(err, errlen,
                name[len] == '\0'
                    ? "unterminated \"{\" in template \"%s\""
                    : "invalid column name in template \"%s\": use "
                      "letters, digits and _",
                t->source);
        return -1;
    }
    if (len == 0) {
        err_set(err, errlen, "empty \"{}\" in template \"%s\"", t->source);
        return -1;
    }
    add_part(t, true, name, len);
    return (int)len + 2;
}

int
template_compile(const char *src, struct template *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    t->source = xstrdup(src);
    for (const char *p = src; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            add_part(t, false, p, 1);
            p += 2;
        } else if (*p == '}') {
            err_set(err, errlen, "unmatched \"}\" in template \"%s\"", src);
            template_free(t);
            return -1;
        } else if (*p == '{') {
            int used = compile_column(t, p, err, errlen);
            if (used < 0) {
                template_free(t);
                return -1;
            }
            p += used;
        } else {
            size_t len = strcspn(p, "{}");
            add_part(t, false, p, len);
            p += len;
        }
    }
    return 0;
}

void
template_free(struct template *t)
{
    for (size_t i = 0; i < t->nparts; i++)
        free(t->parts[i].text);
    free(t->parts);
    free(t->source);
    memset(t, 0, sizeof(*t));
}

bool
template_is_constant(const struct template *t)
{
    for (size_t i = 0; i < t->nparts; i++)
        if (t->parts[i].is_column)
            return false;
    return true;
}

int
template_render(const struct template *t, template_lookup_fn lookup, void *arg,
                char *out, size_t outlen)
{
    size_t len = 0;
    if (outlen == 0)
        return -1;
    for (size_t i = 0; i < t->nparts; i++) {
        const char *text = t->parts[i].text;
        if (t->parts[i].is_column)
            text = lookup(text, arg);
        size_t n = text ? strlen(text) : 0;
        if (len + n >= outlen)
            return -1;
        if (n > 0) /* text may be NULL: memcpy must not see it */
            memcpy(out + len, text, n);
        len += n;
    }
    out[len] = '\0';
    return 0;
}
