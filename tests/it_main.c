/*
 * it_main: the integration runner.  Suites need the servers that
 * tests/servers.sh starts; `make check` starts them first.
 */
#include <check.h>
#include <stdlib.h>

Suite *it_store_suite(void);
Suite *it_publisher_suite(void);
Suite *it_relay_suite(void);

int
main(void)
{
    SRunner *sr = srunner_create(it_store_suite());
    srunner_add_suite(sr, it_publisher_suite());
    srunner_add_suite(sr, it_relay_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
