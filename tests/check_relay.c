/* check_relay: unit tests of relay (to come). */
#include <check.h>

Suite *relay_suite(void);

START_TEST(test_placeholder)
{
    ck_assert_int_eq(1, 1);
}
END_TEST

Suite *
relay_suite(void)
{
    Suite *s = suite_create("relay");
    TCase *tc = tcase_create("main");
    tcase_add_test(tc, test_placeholder);
    suite_add_tcase(s, tc);
    return s;
}
