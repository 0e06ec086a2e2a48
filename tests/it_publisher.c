/* it_publisher: integration tests of publisher against the real servers (to come). */
#include "itest.h"

Suite *it_publisher_suite(void);

START_TEST(test_placeholder)
{
    ck_assert_int_eq(1, 1);
}
END_TEST

Suite *
it_publisher_suite(void)
{
    Suite *s = suite_create("it_publisher");
    TCase *tc = tcase_create("main");
    tcase_add_test(tc, test_placeholder);
    suite_add_tcase(s, tc);
    return s;
}
