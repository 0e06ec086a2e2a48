/*
 * check_main: the unit-test runner, one Check suite per module.
 */
#include <check.h>
#include <stdlib.h>

Suite *util_suite(void);
Suite *template_suite(void);
Suite *batch_suite(void);
Suite *config_suite(void);
Suite *relay_suite(void);
Suite *helper_suite(void);
Suite *pool_suite(void);
Suite *json_suite(void);
Suite *metrics_suite(void);
Suite *reload_suite(void);
Suite *notify_suite(void);
Suite *http_suite(void);
Suite *publisher_suite(void);
Suite *log_suite(void);
Suite *pacer_suite(void);
Suite *logrepeat_suite(void);
Suite *binlog_suite(void);
Suite *config_dump_suite(void);
Suite *version_suite(void);
Suite *store_checks_suite(void);
Suite *store_suite(void);
Suite *discover_suite(void);
Suite *dbsession_suite(void);
Suite *schema_cache_suite(void);
Suite *told_suite(void);

int
main(void)
{
    SRunner *sr = srunner_create(util_suite());
    srunner_add_suite(sr, template_suite());
    srunner_add_suite(sr, batch_suite());
    srunner_add_suite(sr, config_suite());
    srunner_add_suite(sr, relay_suite());
    srunner_add_suite(sr, helper_suite());
    srunner_add_suite(sr, pool_suite());
    srunner_add_suite(sr, json_suite());
    srunner_add_suite(sr, metrics_suite());
    srunner_add_suite(sr, reload_suite());
    srunner_add_suite(sr, notify_suite());
    srunner_add_suite(sr, http_suite());
    srunner_add_suite(sr, publisher_suite());
    srunner_add_suite(sr, log_suite());
    srunner_add_suite(sr, pacer_suite());
    srunner_add_suite(sr, logrepeat_suite());
    srunner_add_suite(sr, binlog_suite());
    srunner_add_suite(sr, config_dump_suite());
    srunner_add_suite(sr, version_suite());
    srunner_add_suite(sr, store_checks_suite());
    srunner_add_suite(sr, dbsession_suite());
    srunner_add_suite(sr, store_suite());
    srunner_add_suite(sr, discover_suite());
    srunner_add_suite(sr, schema_cache_suite());
    srunner_add_suite(sr, told_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
