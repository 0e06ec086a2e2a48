/*
 * check_version: `outboxd -V` names every library by the version that
 * is loaded, one greppable line each.
 */
#include <amqp.h>
#include <check.h>
#include <event2/event.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"
#include "version.h"

Suite *version_suite(void);

static void
assert_line(const char *report, const char *name, const char *version)
{
    char want[256];
    snprintf(want, sizeof(want), "\n%s %s", name, version);
    ck_assert_msg(strstr(report, want) != NULL, "no \"%s %s\" in:\n%s", name,
                  version, report);
}

START_TEST(test_report_names_loaded_versions)
{
    char *r = version_report();
    ck_assert_msg(strncmp(r, "outboxd " OUTBOXD_VERSION "\n", 14) == 0, "%s",
                  r);
#ifdef MARIADB_PACKAGE_VERSION_ID
    assert_line(r, "libmariadb", mysql_get_client_info());
#else
    assert_line(r, "libmysqlclient", mysql_get_client_info());
#endif
    assert_line(r, "librabbitmq", amqp_version());
    assert_line(r, "libevent", event_get_version());
    assert_line(r, "libyaml", yaml_get_version_string());
    ck_assert_ptr_nonnull(strstr(r, "\nOpenSSL "));
    /* Six lines, each "name version". */
    size_t lines = 0;
    for (const char *p = r; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    ck_assert_uint_eq(lines, 6);
    free(r);
}
END_TEST

Suite *
version_suite(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, test_report_names_loaded_versions);
    suite_add_tcase(s, tc);
    return s;
}
