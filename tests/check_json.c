/* check_json: the headers-column JSON reader, good and hostile input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

Suite *json_suite(void);

/* Members seen by collect(), rendered as "key=type:value" lines. */
struct seen {
    char buf[4096];
    size_t len;
    int count;
    int stop_after; /* 0: never stop */
};

static int
collect(void *ctx, const char *key, size_t keylen, const struct json_value *v)
{
    struct seen *s = ctx;
    char val[1024];
    switch (v->type) {
    case JSON_STRING:
        snprintf(val, sizeof(val), "s:%.*s", (int)v->len, v->str);
        break;
    case JSON_INT:
        snprintf(val, sizeof(val), "i:%lld", (long long)v->i);
        break;
    case JSON_DOUBLE:
        snprintf(val, sizeof(val), "d:%g", v->d);
        break;
    case JSON_BOOL:
        snprintf(val, sizeof(val), "b:%d", v->b);
        break;
    case JSON_NULL:
        snprintf(val, sizeof(val), "null");
        break;
    case JSON_OBJECT:
    case JSON_ARRAY:
        snprintf(val, sizeof(val), "%s:%.*s",
                 v->type == JSON_OBJECT ? "o" : "a", (int)v->len, v->str);
        break;
    }
    s->len += (size_t)snprintf(s->buf + s->len, sizeof(s->buf) - s->len,
                               "%.*s=%s\n", (int)keylen, key, val);
    s->count++;
    return s->stop_after && s->count >= s->stop_after ? 7 : 0;
}

static int
parse(const char *text, struct seen *s, char *err, size_t errlen)
{
    size_t len = strlen(text);
    char *scratch = malloc(len + 1);
    memset(s, 0, sizeof(*s));
    err[0] = '\0';
    int rc = json_object_foreach(text, len, scratch, collect, s, err, errlen);
    free(scratch);
    return rc;
}

static const struct {
    const char *text, *expect;
} good[] = {
    {"{}", ""},
    {" \t\r\n{ } \n", ""},
    {"{\"a\":\"x\"}", "a=s:x\n"},
    {"{\"n\":42,\"neg\":-7,\"zero\":0,\"mz\":-0}",
     "n=i:42\nneg=i:-7\nzero=i:0\nmz=i:0\n"},
    {"{\"big\":9223372036854775807,\"min\":-9223372036854775808}",
     "big=i:9223372036854775807\nmin=i:-9223372036854775808\n"},
    {"{\"over\":9223372036854775808}", "over=d:9.22337e+18\n"},
    {"{\"f\":1.5,\"e\":1e3,\"E\":-2.5E-1}", "f=d:1.5\ne=d:1000\nE=d:-0.25\n"},
    {"{\"t\":true,\"f\":false,\"z\":null}", "t=b:1\nf=b:0\nz=null\n"},
    {"{\"o\":{\"x\":[1,{\"y\":null}]},\"a\":[ ]}",
     "o=o:{\"x\":[1,{\"y\":null}]}\na=a:[ ]\n"},
    {"{\"esc\":\"q\\\"b\\\\s\\/n\\nt\\tr\\rb\\bf\\f\"}",
     "esc=s:q\"b\\s/n\nt\tr\rb\bf\f\n"},
    {"{\"u\":\"\\u00e9\\u20ac\\ud83d\\ude00\"}",
     "u=s:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n"},
    {"{\"raw\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"}",
     "raw=s:h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\n"},
    {"{\"k\\u0041y\":1}", "kAy=i:1\n"},
    {"{\"dup\":1,\"dup\":2}", "dup=i:1\ndup=i:2\n"},
    {"{ \"a\" : 1 , \"b\" : \"2\" }", "a=i:1\nb=s:2\n"},
};

static const char *const bad[] = {
    "",
    "   ",
    "[]",
    "\"str\"",
    "42",
    "null",
    "{",
    "}",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\":1,}",
    "{,}",
    "{\"a\":1 \"b\":2}",
    "{a:1}",
    "{'a':1}",
    "{\"a\":1}}",
    "{\"a\":1} x",
    "{\"a\":1}{}",
    "{\"a\":01}",
    "{\"a\":+1}",
    "{\"a\":.5}",
    "{\"a\":1.}",
    "{\"a\":1e}",
    "{\"a\":-}",
    "{\"a\":NaN}",
    "{\"a\":Infinity}",
    "{\"a\":tru}",
    "{\"a\":nul}",
    "{\"a\":True}",
    "{\"a\":\"unterminated}",
    "{\"a\":\"bad \\x escape\"}",
    "{\"a\":\"\\u12\"}",
    "{\"a\":\"\\u12G4\"}",
    "{\"a\":\"\\ud83d\"}",
    "{\"a\":\"\\ud83d\\u0041\"}",
    "{\"a\":\"\\ude00\"}",
    "{\"a\":\"tab\there\"}",
    "{\"a\":\"nl\nhere\"}",
    "{\"a\":\"\xff\"}",
    "{\"a\":\"\xc0\xaf\"}",
    "{\"a\":\"\xe0\x80\xaf\"}",
    "{\"a\":\"\xed\xa0\x80\"}",
    "{\"a\":\"\xf4\x90\x80\x80\"}",
    "{\"a\":\"\xe2\x82\"}",
    "{\"a\":[1,2}",
    "{\"a\":[1,]}",
    "{\"a\":{\"b\":1,}}",
    "{\"a\":{\"b\"}}",
    "{\"a\":[}",
    "{\"a\":{}",
};

START_TEST(test_good)
{
    struct seen s;
    char err[ERR_LEN];
    int rc = parse(good[_i].text, &s, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s: %s", good[_i].text, err);
    ck_assert_str_eq(s.buf, good[_i].expect);
}
END_TEST

START_TEST(test_bad)
{
    struct seen s;
    char err[ERR_LEN];
    int rc = parse(bad[_i], &s, err, sizeof(err));
    ck_assert_msg(rc == -1, "accepted: %s", bad[_i]);
    ck_assert_msg(strstr(err, "at offset") != NULL, "vague error: %s", err);
}
END_TEST

START_TEST(test_error_offset)
{
    struct seen s;
    char err[ERR_LEN];
    ck_assert_int_eq(parse("{\"a\":1,\"b\":x}", &s, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "invalid number at offset 11");
    ck_assert_int_eq(parse("{\"a\":1} junk", &s, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "trailing characters after the object at offset 8");
}
END_TEST

static int
capture_len(void *ctx, const char *key, size_t keylen,
            const struct json_value *v)
{
    (void)key;
    (void)keylen;
    memcpy(ctx, v->str, v->len);
    return (int)v->len;
}

/* An embedded NUL from \u0000 keeps its length; nothing is truncated. */
START_TEST(test_embedded_nul)
{
    const char *text = "{\"a\":\"x\\u0000y\"}";
    char scratch[32], got[32], err[ERR_LEN];
    int rc = json_object_foreach(text, strlen(text), scratch, capture_len, got,
                                 err, sizeof(err));
    ck_assert_int_eq(rc, 3);
    ck_assert_int_eq(memcmp(got, "x\0y", 3), 0);
}
END_TEST

/* Text that is not NUL-terminated: only len bytes are read. */
START_TEST(test_length_bounded)
{
    const char text[] = "{\"a\":1}GARBAGE";
    char scratch[16];
    struct seen s;
    char err[ERR_LEN] = "";
    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(
        json_object_foreach(text, 7, scratch, collect, &s, err, sizeof(err)),
        0);
    ck_assert_str_eq(s.buf, "a=i:1\n");
    memset(&s, 0, sizeof(s));
    ck_assert_int_eq(
        json_object_foreach(text, 6, scratch, collect, &s, err, sizeof(err)),
        -1);
}
END_TEST

START_TEST(test_callback_stops)
{
    struct seen s;
    char err[ERR_LEN];
    size_t len = strlen("{\"a\":1,\"b\":2,\"c\":3}");
    char scratch[64];
    memset(&s, 0, sizeof(s));
    s.stop_after = 2;
    ck_assert_int_eq(json_object_foreach("{\"a\":1,\"b\":2,\"c\":3}", len,
                                         scratch, collect, &s, err,
                                         sizeof(err)),
                     7);
    ck_assert_int_eq(s.count, 2);
}
END_TEST

static char *
nested(int depth)
{
    char *t = malloc((size_t)depth * 2 + 16);
    size_t n = (size_t)sprintf(t, "{\"a\":");
    for (int i = 0; i < depth; i++)
        t[n++] = '[';
    for (int i = 0; i < depth; i++)
        t[n++] = ']';
    t[n++] = '}';
    t[n] = '\0';
    return t;
}

START_TEST(test_depth_limit)
{
    struct seen s;
    char err[ERR_LEN];
    char *ok = nested(JSON_MAX_DEPTH - 1);
    ck_assert_msg(parse(ok, &s, err, sizeof(err)) == 0, "%s", err);
    free(ok);
    char *deep = nested(100000);
    ck_assert_int_eq(parse(deep, &s, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "nesting too deep") != NULL, "%s", err);
    free(deep);
}
END_TEST

/* Every prefix of a valid document is rejected, never read past. */
START_TEST(test_truncations)
{
    const char *doc = "{\"s\":\"\\u00e9\\ud83d\\ude00x\",\"n\":-1.5e+3,"
                      "\"o\":{\"a\":[true,false,null]},\"i\":12}";
    size_t len = strlen(doc);
    struct seen s;
    char err[ERR_LEN];
    for (size_t cut = 0; cut < len; cut++) {
        char *t = malloc(cut ? cut : 1);
        memcpy(t, doc, cut);
        char *scratch = malloc(cut + 1);
        memset(&s, 0, sizeof(s));
        int rc =
            json_object_foreach(t, cut, scratch, collect, &s, err, sizeof(err));
        ck_assert_msg(rc == -1, "prefix of %zu bytes accepted", cut);
        free(scratch);
        free(t);
    }
}
END_TEST

/* Random bytes and random mutations: no crash, no read past len. */
START_TEST(test_random_input)
{
    const char *seed = "{\"a\":\"b\\n\",\"c\":[1,2.5,{\"d\":null}],\"e\":true}";
    size_t len = strlen(seed);
    struct seen s;
    char err[ERR_LEN];
    srand(12345);
    for (int round = 0; round < 20000; round++) {
        char *t = malloc(len);
        memcpy(t, seed, len);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            t[rand() % len] = (char)(rand() % 256);
        char *scratch = malloc(len + 1);
        memset(&s, 0, sizeof(s));
        int rc =
            json_object_foreach(t, len, scratch, collect, &s, err, sizeof(err));
        ck_assert(rc == 0 || rc == -1);
        free(scratch);
        free(t);
    }
}
END_TEST

Suite *
json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("main");
    tcase_add_loop_test(tc, test_good, 0, sizeof(good) / sizeof(good[0]));
    tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(bad[0]));
    tcase_add_test(tc, test_error_offset);
    tcase_add_test(tc, test_embedded_nul);
    tcase_add_test(tc, test_length_bounded);
    tcase_add_test(tc, test_callback_stops);
    tcase_add_test(tc, test_depth_limit);
    tcase_add_test(tc, test_truncations);
    tcase_add_test(tc, test_random_input);
    suite_add_tcase(s, tc);
    return s;
}
