/*
 * check_dbsession: which databases one session may serve, and which
 * errors end it for every store on it (no server needed).
 */
#include <check.h>
#include <string.h>

#include "dbsession.h"

Suite *dbsession_suite(void);

static struct database_config
tenant(const char *database)
{
    return (struct database_config){.name = "tenants",
                                    .host = "db1",
                                    .port = 3306,
                                    .user = "relay",
                                    .password = "pw",
                                    .database = (char *)database,
                                    .connect_timeout_ms = 5000};
}

/* Another schema on the same server and account shares the session;
 * another server, port, account, password or TLS setting does not. */
START_TEST(test_serves_same_server_only)
{
    struct database_config a = tenant("tenant_0001"), b = tenant("tenant_0002");
    struct dbsession *s = dbsession_new(&a);
    ck_assert(dbsession_serves(s, &a));
    ck_assert(dbsession_serves(s, &b));
    struct database_config c = b;
    c.host = "db2";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.port = 3307;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.user = "other";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.password = "changed";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.tls.enabled = true;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.socket = "/run/mysqld/mysqld.sock";
    ck_assert(!dbsession_serves(s, &c));
    ck_assert(!dbsession_is_open(s));
    ck_assert_uint_eq(dbsession_generation(s), 0);
    ck_assert_uint_eq(dbsession_connection_id(s), 0);
    dbsession_free(s);
}
END_TEST

/* A private session has its database as the default schema: it serves
 * that database alone. */
START_TEST(test_private_serves_its_own)
{
    struct database_config a = tenant("tenant_0001"), b = tenant("tenant_0002");
    struct dbsession *s = dbsession_new_private(&a, "tenant_0001.outbox");
    ck_assert(dbsession_serves(s, &a));
    ck_assert(!dbsession_serves(s, &b));
    dbsession_free(s);
}
END_TEST

/* What ends the session for all its stores, and what is one table's. */
START_TEST(test_errors_that_end_the_session)
{
    static const unsigned ends[] = {2006, 2013, 2055, 1053, 1927,
                                    4031, 1290, 1836, 1047};
    static const unsigned stays[] = {1054, 1146, 1142, 1143,
                                     1205, 1213, 4025, 1064};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
        ck_assert_msg(dbsession_errno_ends_session(ends[i]), "%u", ends[i]);
    for (size_t i = 0; i < sizeof(stays) / sizeof(stays[0]); i++)
        ck_assert_msg(!dbsession_errno_ends_session(stays[i]), "%u", stays[i]);
    ck_assert(dbsession_errno_is_read_only(1290));
    ck_assert(!dbsession_errno_is_read_only(2013));
}
END_TEST

/* A closed session records the failure without a connection to close. */
START_TEST(test_fail_records_class)
{
    struct database_config a = tenant("tenant_0001");
    struct dbsession *s = dbsession_new(&a);
    ck_assert(!dbsession_fail(s, 1054));
    ck_assert_uint_eq(dbsession_last_errno(s), 1054);
    ck_assert(!dbsession_last_error_is_read_only(s));
    ck_assert(dbsession_fail(s, 1836));
    ck_assert(dbsession_last_error_is_read_only(s));
    ck_assert(!dbsession_is_open(s));
    dbsession_free(s);
}
END_TEST

START_TEST(test_parse_version)
{
    ck_assert_uint_eq(dbsession_parse_version("10.11.6-MariaDB"), 101106);
    ck_assert_uint_ge(dbsession_parse_version("10.6.0"), DBSESSION_MIN_MARIADB);
    ck_assert_uint_lt(dbsession_parse_version("8.0.0"), DBSESSION_MIN_MYSQL);
}
END_TEST

Suite *
dbsession_suite(void)
{
    Suite *s = suite_create("dbsession");
    TCase *tc = tcase_create("dbsession");
    tcase_add_test(tc, test_serves_same_server_only);
    tcase_add_test(tc, test_private_serves_its_own);
    tcase_add_test(tc, test_errors_that_end_the_session);
    tcase_add_test(tc, test_fail_records_class);
    tcase_add_test(tc, test_parse_version);
    suite_add_tcase(s, tc);
    return s;
}
