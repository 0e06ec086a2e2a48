/*
 * it_main: the integration runner.  Suites need the servers that
 * tests/servers.sh starts; `make check` starts them first.
 */
#include <check.h>
#include <stdlib.h>

Suite *it_store_suite(void);
Suite *it_publisher_suite(void);
Suite *it_relay_suite(void);
Suite *it_pool_suite(void);
Suite *it_leaks_suite(void);
Suite *it_tls_suite(void);
Suite *it_secrets_suite(void);
Suite *it_privileges_suite(void);
Suite *it_ops_suite(void);
Suite *it_outboxctl_suite(void);
Suite *it_retention_suite(void);
Suite *it_faults_suite(void);
Suite *it_ordering_suite(void);
Suite *it_cluster_suite(void);
Suite *it_wake_suite(void);
Suite *it_failover_suite(void);
Suite *it_galera_suite(void);
Suite *it_bytes_suite(void);
Suite *it_cloudevents_suite(void);
Suite *it_hold_suite(void);
Suite *it_expiry_suite(void);
Suite *it_delay_suite(void);
Suite *it_discover_suite(void);
Suite *it_tenants_suite(void);

int
main(void)
{
    SRunner *sr = srunner_create(it_store_suite());
    srunner_add_suite(sr, it_publisher_suite());
    srunner_add_suite(sr, it_relay_suite());
    srunner_add_suite(sr, it_pool_suite());
    srunner_add_suite(sr, it_leaks_suite());
    srunner_add_suite(sr, it_tls_suite());
    srunner_add_suite(sr, it_secrets_suite());
    srunner_add_suite(sr, it_privileges_suite());
    srunner_add_suite(sr, it_ops_suite());
    srunner_add_suite(sr, it_outboxctl_suite());
    srunner_add_suite(sr, it_retention_suite());
    srunner_add_suite(sr, it_faults_suite());
    srunner_add_suite(sr, it_ordering_suite());
    srunner_add_suite(sr, it_cluster_suite());
    srunner_add_suite(sr, it_wake_suite());
    srunner_add_suite(sr, it_failover_suite());
    srunner_add_suite(sr, it_galera_suite());
    srunner_add_suite(sr, it_bytes_suite());
    srunner_add_suite(sr, it_cloudevents_suite());
    srunner_add_suite(sr, it_hold_suite());
    srunner_add_suite(sr, it_expiry_suite());
    srunner_add_suite(sr, it_delay_suite());
    srunner_add_suite(sr, it_discover_suite());
    srunner_add_suite(sr, it_tenants_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
