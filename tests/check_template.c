/* check_template: routing-key templates compile, render and fail well. */
#include <check.h>
#include <string.h>

#include "template.h"
#include "util.h"

Suite *template_suite(void);

static const char *
lookup(const char *column, void *arg)
{
    (void)arg;
    if (strcmp(column, "aggregate_type") == 0)
        return "Order";
    if (strcmp(column, "event_type") == 0)
        return "OrderPaid";
    return NULL; /* SQL NULL renders as "" */
}

static const struct {
    const char *src, *out;
} renders[] = {
    {"{aggregate_type}.{event_type}", "Order.OrderPaid"},
    {"orders", "orders"},
    {"", ""},
    {"x.{missing}.y", "x..y"},
    {"{{literal}}", "{literal}"},
    {"a{{{event_type}}}b", "a{OrderPaid}b"},
};

static const struct {
    const char *src, *why;
} bad[] = {
    {"{aggregate_type", "unterminated"},
    {"}", "unmatched"},
    {"{}", "empty"},
    {"{bad-name}", "invalid column name"},
    {"{a b}", "invalid column name"},
};

START_TEST(test_render)
{
    struct template t;
    char err[ERR_LEN], out[256];
    ck_assert_int_eq(template_compile(renders[_i].src, &t, err, sizeof(err)),
                     0);
    ck_assert_int_eq(template_render(&t, lookup, NULL, out, sizeof(out)), 0);
    ck_assert_str_eq(out, renders[_i].out);
    template_free(&t);
}
END_TEST

START_TEST(test_bad)
{
    struct template t;
    char err[ERR_LEN] = "";
    ck_assert_int_eq(template_compile(bad[_i].src, &t, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, bad[_i].why) != NULL, "error for %s: %s",
                  bad[_i].src, err);
}
END_TEST

START_TEST(test_too_long)
{
    struct template t;
    char err[ERR_LEN], out[8];
    ck_assert_int_eq(template_compile("{event_type}", &t, err, sizeof(err)), 0);
    ck_assert_int_eq(template_render(&t, lookup, NULL, out, sizeof(out)), -1);
    template_free(&t);
}
END_TEST

START_TEST(test_constant)
{
    struct template t;
    char err[ERR_LEN];
    ck_assert_int_eq(template_compile("orders.{{x}}", &t, err, sizeof(err)), 0);
    ck_assert(template_is_constant(&t));
    template_free(&t);
    ck_assert_int_eq(template_compile("o.{id}", &t, err, sizeof(err)), 0);
    ck_assert(!template_is_constant(&t));
    template_free(&t);
}
END_TEST

Suite *
template_suite(void)
{
    Suite *s = suite_create("template");
    TCase *tc = tcase_create("template");
    tcase_add_loop_test(tc, test_render, 0, sizeof(renders) / sizeof(*renders));
    tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(*bad));
    tcase_add_test(tc, test_too_long);
    tcase_add_test(tc, test_constant);
    suite_add_tcase(s, tc);
    return s;
}
