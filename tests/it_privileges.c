/*
 * it_privileges: the relay with exactly the grants of sql/grants.sql
 * (and nothing global) drains, marks and deletes; without UPDATE, or
 * without DELETE where on_sent: delete needs it, it says which privilege
 * is missing, stays not ready, publishes nothing, and recovers once the
 * grant is given.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_privileges_suite(void);

/* The shared fixture, its HTTP endpoints on and a consumer of all. */
static void
fx_open(struct it_fx *f, const char *outbox_keys)
{
    it_fx_open(f, "it_priv", "sql/outbox.sql");
    it_fx_write_config(f, outbox_keys);
    it_fx_listen(f);
    f->consumer = it_consumer_new(f->ex, "#");
}

/* Runs a statement on both of the account's hosts. */
static void
fx_grant(struct it_fx *f, const char *verb, const char *privs)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    for (int i = 0; i < 2; i++)
        it_db_exec(f->sql, "%s %s ON `%s`.`outbox_event` %s '%s'@'%s'", verb,
                   privs, f->db, strcmp(verb, "GRANT") == 0 ? "TO" : "FROM",
                   f->user, hosts[i]);
}

static void
wait_log(struct it_fx *f, const char *what)
{
    if (!IT_WAIT(30000, it_file_has(f->d.log_path, what))) {
        it_daemon_dump_log(&f->d);
        ck_abort_msg("the log never said \"%s\"", what);
    }
}

/* Not ready for a while, and nothing published or claimed meanwhile. */
static void
assert_stays_not_ready(struct it_fx *f, int n)
{
    for (int i = 0; i < 6; i++) {
        char *body;
        int status = it_http_get(f->port, "/readyz", &body);
        ck_assert_msg(status == 503, "/readyz answered %d: %s", status, body);
        free(body);
        it_sleep_ms(500);
    }
    ck_assert(it_daemon_alive(&f->d));
    ck_assert_int_eq(it_db_count_status(f->sql, "PENDING"), n);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f->consumer, &m, 200), 0);
}

/* The account holds the one table-level grant and nothing else. */
static int
lines_with(const char *path, const char *needle)
{
    char *text = it_file_read(path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        n += strstr(line, needle) != NULL;
    free(text);
    return n;
}

START_TEST(test_grants_exactly)
{
    struct it_fx f;
    fx_open(&f, "        on_sent: delete\n");
    char *grants = it_db_str(f.sql,
                             "SELECT GROUP_CONCAT(PRIVILEGE_TYPE ORDER BY "
                             "PRIVILEGE_TYPE) FROM information_schema."
                             "TABLE_PRIVILEGES WHERE GRANTEE = "
                             "\"'%s'@'127.0.0.1'\"",
                             f.user);
    ck_assert_str_eq(grants, "DELETE,SELECT,UPDATE");
    free(grants);
    ck_assert_int_eq(it_db_int(f.sql,
                               "SELECT COUNT(*) FROM information_schema."
                               "SCHEMA_PRIVILEGES WHERE GRANTEE = "
                               "\"'%s'@'127.0.0.1'\"",
                               f.user),
                     0);
    grants = it_db_str(f.sql,
                       "SELECT GROUP_CONCAT(PRIVILEGE_TYPE) FROM "
                       "information_schema.USER_PRIVILEGES WHERE GRANTEE = "
                       "\"'%s'@'127.0.0.1'\"",
                       f.user);
    ck_assert_str_eq(grants, "USAGE");
    free(grants);
    /* ... and with it the relay drains and deletes (on_sent: delete). */
    it_db_insert_events(f.sql, "outbox_event", "gr", 300, 10, 64);
    it_fx_start(&f);
    struct it_message *msgs;
    size_t got = it_consumer_drain(f.consumer, &msgs, 300, 5000, 60000);
    for (size_t i = 0; i < got; i++)
        it_message_free(&msgs[i]);
    free(msgs);
    ck_assert_int_eq(got, 300);
    ck_assert(IT_WAIT(20000, it_db_int(f.sql, "SELECT COUNT(*) FROM "
                                              "outbox_event") == 0));
    ck_assert(IT_WAIT(10000, it_http_get(f.port, "/readyz", NULL) == 200));
    /* Nothing was denied; this server keeps no binlog, and one line says
     * the relay polls. */
    ck_assert(!it_file_has(f.d.log_path, "denied"));
    ck_assert_int_eq(lines_with(f.d.log_path, "no binlog wake"), 1);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_missing_update)
{
    struct it_fx f;
    fx_open(&f, NULL);
    fx_grant(&f, "REVOKE", "UPDATE");
    it_db_insert_events(f.sql, "outbox_event", "nu", 5, 5, 64);
    it_fx_start(&f);
    wait_log(&f, "lacks the UPDATE privilege");
    ck_assert(it_file_has(f.d.log_path, "sql/grants.sql"));
    assert_stays_not_ready(&f, 5);
    /* Logged once, not on every retry: then only with a count, after
     * 1 s, 2 s, 4 s... (daemon/logrepeat.h). */
    ck_assert_int_eq(it_sh("test $(grep -c 'level=error msg=\"database "
                           "unavailable: .*lacks the UPDATE' '%s') -eq 1",
                           f.d.log_path),
                     0);
    ck_assert_int_eq(it_sh("test $(grep -c 'level=error.*lacks the UPDATE' "
                           "'%s') -le 4",
                           f.d.log_path),
                     0);
    /* The grant given, it recovers on its own. */
    fx_grant(&f, "GRANT", "UPDATE");
    ck_assert(IT_WAIT(60000, it_db_count_status(f.sql, "SENT") == 5));
    ck_assert(IT_WAIT(10000, it_http_get(f.port, "/readyz", NULL) == 200));
    it_fx_close(&f);
}
END_TEST

START_TEST(test_missing_delete_for_on_sent_delete)
{
    struct it_fx f;
    fx_open(&f, "        on_sent: delete\n");
    fx_grant(&f, "REVOKE", "DELETE");
    it_db_insert_events(f.sql, "outbox_event", "nd", 3, 3, 64);
    it_fx_start(&f);
    wait_log(&f, "lacks the DELETE privilege");
    ck_assert(it_file_has(f.d.log_path, "on_sent: delete"));
    assert_stays_not_ready(&f, 3);
    /* The idle session holds no metadata lock that would block DDL (its
     * EXPLAIN UPDATE passed before the DELETE one failed). */
    it_db_exec(f.sql, "SET SESSION lock_wait_timeout = 5");
    it_db_exec(f.sql, "ALTER TABLE outbox_event COMMENT 'altered'");
    it_fx_close(&f);
}
END_TEST

Suite *
it_privileges_suite(void)
{
    Suite *s = suite_create("it_privileges");
    TCase *tc = tcase_create("grants");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_grants_exactly);
    tcase_add_test(tc, test_missing_update);
    tcase_add_test(tc, test_missing_delete_for_on_sent_delete);
    suite_add_tcase(s, tc);
    return s;
}
