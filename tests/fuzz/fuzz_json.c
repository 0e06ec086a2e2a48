/*
 * fuzz_json: the headers-column reader on any bytes.  Each member it
 * reports must lie within the input or the scratch buffer; containers
 * come back as raw text that is itself valid JSON.
 */
#include <stdbool.h>
#include <stdio.h>

#include "fuzz.h"
#include "json.h"

struct walk {
    const char *text, *scratch;
    size_t len;
    size_t members;
};

static bool
within(const char *p, size_t n, const char *base, size_t len)
{
    return p >= base && p + n <= base + len + 1;
}

static int
nested_cb(void *arg, const char *key, size_t keylen, const struct json_value *v)
{
    (void)arg;
    (void)key;
    (void)keylen;
    (void)v;
    return 0;
}

static int
member_cb(void *arg, const char *key, size_t keylen, const struct json_value *v)
{
    struct walk *w = arg;
    w->members++;
    FUZZ_ASSERT(within(key, keylen, w->scratch, w->len));
    switch (v->type) {
    case JSON_STRING:
        FUZZ_ASSERT(within(v->str, v->len, w->scratch, w->len));
        break;
    case JSON_OBJECT: {
        FUZZ_ASSERT(within(v->str, v->len, w->text, w->len));
        FUZZ_ASSERT(v->str[0] == '{' && v->str[v->len - 1] == '}');
        /* A nested object must read as an object on its own. */
        char *scratch = malloc(v->len + 1);
        char err[128];
        FUZZ_ASSERT(json_object_foreach(v->str, v->len, scratch, nested_cb,
                                        NULL, err, sizeof(err)) == 0);
        free(scratch);
        break;
    }
    case JSON_ARRAY:
        FUZZ_ASSERT(within(v->str, v->len, w->text, w->len));
        FUZZ_ASSERT(v->str[0] == '[' && v->str[v->len - 1] == ']');
        break;
    default:
        break;
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees any read past the end. */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    char *scratch = malloc(size + 1);
    char err[128] = "";
    struct walk w = {text, scratch, size, 0};
    int rc = json_object_foreach(text, size, scratch, member_cb, &w, err,
                                 sizeof(err));
    FUZZ_ASSERT(rc == 0 || (rc == -1 && strstr(err, "at offset") != NULL));
    free(scratch);
    free(text);
    return 0;
}
