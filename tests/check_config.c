/* check_config: unit tests of config (to come). */
#include <check.h>

Suite *config_suite(void);

START_TEST(test_placeholder)
{
    ck_assert_int_eq(1, 1);
}
END_TEST

Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("main");
    tcase_add_test(tc, test_placeholder);
    suite_add_tcase(s, tc);
    return s;
}
