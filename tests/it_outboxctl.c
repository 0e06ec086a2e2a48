/*
 * it_outboxctl: the operator's tool against the real MariaDB (and
 * RabbitMQ where a retried row must arrive): status, dead list, dead
 * retry, purge, exit codes, --help, --dry-run, --limit, progress on a
 * terminal, SIGINT mid-walk; and sql/inbox.sql's idempotency recipe.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_outboxctl_suite(void);

/* outboxctl's output of one run. */
static void
fx_open(struct it_fx *f, const char *schema)
{
    it_fx_open(f, "it_ctl", schema);
    it_fx_write_config(f, "        max_retries: 10\n");
}

/*
 * Every status, each row its own aggregate so that ordering holds none
 * back: PENDING 2 (the oldest 90 s old), PROCESSING 1 under a live
 * lease, SENT 5 (3 sent two hours ago), RETRY 1 due in an hour, DEAD 3.
 */
static void
insert_every_status(struct it_fx *f)
{
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, retry_count, "
               "next_retry_at, locked_by, locked_until, created_at, sent_at, "
               "last_error) VALUES "
               "('p-1','Order','o-p1','OrderCreated','{\"n\":1}','PENDING',0,"
               " NULL,NULL,NULL,NOW(6) - INTERVAL 90 SECOND,NULL,NULL),"
               "('p-2','Order','o-p2','OrderCreated','{\"n\":2}','PENDING',0,"
               " NULL,NULL,NULL,NOW(6),NULL,NULL),"
               "('w-1','Order','o-w1','OrderCreated','{}','PROCESSING',0,"
               " NULL,'other-relay/0123456789abcdef',NOW(6) + INTERVAL 1 HOUR,"
               " NOW(6),NULL,NULL),"
               "('s-old-1','Order','o-s1','OrderCreated','{}','SENT',0,NULL,"
               " NULL,NULL,NOW(6) - INTERVAL 7201 SECOND,"
               " NOW(6) - INTERVAL 7200 SECOND,NULL),"
               "('s-old-2','Order','o-s2','OrderCreated','{}','SENT',0,NULL,"
               " NULL,NULL,NOW(6) - INTERVAL 7201 SECOND,"
               " NOW(6) - INTERVAL 7200 SECOND,NULL),"
               "('s-old-3','Order','o-s3','OrderCreated','{}','SENT',0,NULL,"
               " NULL,NULL,NOW(6) - INTERVAL 7201 SECOND,"
               " NOW(6) - INTERVAL 7200 SECOND,NULL),"
               "('s-new-1','Order','o-s4','OrderCreated','{}','SENT',0,NULL,"
               " NULL,NULL,NOW(6) - INTERVAL 7201 SECOND,"
               " NOW(6) - INTERVAL 10 MINUTE,NULL),"
               "('s-new-2','Order','o-s5','OrderCreated','{}','SENT',0,NULL,"
               " NULL,NULL,NOW(6),NOW(6),NULL),"
               "('r-1','Order','o-r1','OrderCreated','{}','RETRY',2,"
               " NOW(6) + INTERVAL 1 HOUR,NULL,NULL,NOW(6),NULL,"
               " 'broker nack'),"
               "('d-1','Order','o-d1','OrderCreated','{\"n\":11}','DEAD',11,"
               " NOW(6) - INTERVAL 1 MINUTE,NULL,NULL,NOW(6),NULL,"
               " 'NO_ROUTE: exchange ex, routing key Order.OrderCreated'),"
               "('d-2','Invoice','i-d2','InvoiceSent','{\"n\":12}','DEAD',3,"
               " NULL,NULL,NULL,NOW(6),NULL,"
               " 'channel closed: 404 NOT_FOUND - no exchange'),"
               "('d-3','Order','o-d3','OrderPaid','{\"n\":13}','DEAD',11,"
               " NULL,NULL,NULL,NOW(6),NULL,'payload too large')");
    it_db_exec(f->sql, "COMMIT");
}

/* The numbers of the table row for outbox name in `status` output. */
static void
parse_status_line(const char *out, const char *name, long long *v, int n,
                  char *age, size_t agelen)
{
    const char *line = strstr(out, name);
    ck_assert_msg(line != NULL, "no line for %s in:\n%s", name, out);
    const char *p = line + strlen(name);
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtoll(p, &end, 10);
        ck_assert_msg(end != p, "column %d missing in:\n%s", i, out);
        p = end;
    }
    ck_assert_int_eq(sscanf(p, " %31s", age), 1);
    (void)agelen;
}

START_TEST(test_status)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_every_status(&f);
    struct it_ctl_run r = it_ctl(f.conf, "status");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "PENDING  PROCESSING  RETRY  DEAD  SENT  "
                                "OLDEST PENDING") != NULL,
                  "header: %s", r.out);
    char name[160], age[32];
    long long v[5];
    snprintf(name, sizeof(name), "%s.outbox_event", f.db);
    parse_status_line(r.out, name, v, 5, age, sizeof(age));
    ck_assert_int_eq(v[0], 2); /* PENDING */
    ck_assert_int_eq(v[1], 1); /* PROCESSING */
    ck_assert_int_eq(v[2], 1); /* RETRY */
    ck_assert_int_eq(v[3], 3); /* DEAD */
    ck_assert_int_eq(v[4], 5); /* SENT */
    ck_assert_msg(strncmp(age, "1m", 2) == 0, "oldest pending age %s", age);
    it_ctl_free(&r);

    r = it_ctl(f.conf, "--json status");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "\"rows\":{\"PENDING\":2,\"PROCESSING\":1,"
                                "\"RETRY\":1,\"DEAD\":3,\"SENT\":5}") &&
                      strstr(r.out, "\"dead\":3") && strstr(r.out, name),
                  "json: %s", r.out);
    const char *age_json = strstr(r.out, "\"oldest_pending_age_seconds\":");
    ck_assert_ptr_nonnull(age_json);
    double secs =
        strtod(age_json + strlen("\"oldest_pending_age_seconds\":"), NULL);
    ck_assert_msg(secs >= 90 && secs < 150, "oldest pending %f s", secs);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_dead_list)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_every_status(&f);
    struct it_ctl_run r = it_ctl(f.conf, "dead list");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(
        strstr(r.out, ": 3 DEAD rows") && strstr(r.out, "LAST_ERROR") &&
            strstr(r.out, "d-1") && strstr(r.out, "Order:o-d1") &&
            strstr(r.out, "NO_ROUTE: exchange ex, routing key "
                          "Order.OrderCreated") &&
            strstr(r.out, "Invoice:i-d2") && strstr(r.out, "InvoiceSent") &&
            strstr(r.out, "404 NOT_FOUND") &&
            strstr(r.out, "payload too large"),
        "dead list:\n%s", r.out);
    ck_assert_msg(!strstr(r.out, "p-1") && !strstr(r.out, "r-1") &&
                      !strstr(r.out, "s-old"),
                  "not DEAD rows listed:\n%s", r.out);
    it_ctl_free(&r);

    r = it_ctl(f.conf, "dead list --limit 2");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "d-1") && strstr(r.out, "d-2") &&
                      !strstr(r.out, "d-3") &&
                      strstr(r.out, "the oldest 2 of 3"),
                  "--limit 2:\n%s", r.out);
    it_ctl_free(&r);

    r = it_ctl(f.conf, "dead list --json --outbox %s.outbox_event", f.db);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "\"total\":3") &&
                      strstr(r.out, "\"event_id\":\"d-1\",\"aggregate\":"
                                    "\"Order:o-d1\"") &&
                      strstr(r.out, "\"retry_count\":11") &&
                      strstr(r.out, "\"last_error\":\"NO_ROUTE: exchange ex, "
                                    "routing key Order.OrderCreated\""),
                  "json:\n%s", r.out);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

/* Receives until every id in want arrived; fails on any id in never. */
static void
receive_ids(struct it_fx *f, const char *const *want, int nwant,
            const char *never, int timeout_ms)
{
    int got = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (got < nwant && it_now_ms() < deadline) {
        if (it_consumer_next(f->consumer, &m, 500) == 0)
            continue;
        ck_assert_msg(never == NULL || strstr(never, m.message_id) == NULL,
                      "%s arrived but was not retried", m.message_id);
        for (int i = 0; i < nwant; i++)
            got += strcmp(m.message_id, want[i]) == 0;
        it_message_free(&m);
    }
    ck_assert_msg(got == nwant, "%d of %d expected messages arrived", got,
                  nwant);
}

static void
check_retried_row(struct it_fx *f, const char *event_id, const char *error)
{
    char *e = it_db_str(f->sql,
                        "SELECT CONCAT_WS('|', status, retry_count, "
                        "IFNULL(next_retry_at, 'null'), IFNULL(locked_by, "
                        "'null'), IFNULL(locked_until, 'null'), last_error) "
                        "FROM outbox_event WHERE event_id = '%s'",
                        event_id);
    char want[512];
    snprintf(want, sizeof(want), "PENDING|0|null|null|null|%s", error);
    ck_assert_str_eq(e, want);
    free(e);
    it_db_exec(f->sql, "COMMIT");
}

START_TEST(test_dead_retry_delivers)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    f.consumer = it_consumer_new(f.ex, "#");
    insert_every_status(&f);
    struct it_ctl_run r = it_ctl(f.conf, "dead retry d-1");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, ": 1 DEAD row back to PENDING"), "%s", r.out);
    it_ctl_free(&r);
    check_retried_row(&f, "d-1",
                      "NO_ROUTE: exchange ex, routing key Order.OrderCreated");

    it_daemon_start(&f.d, f.conf, f.name);
    const char *first[] = {"p-1", "p-2", "d-1"};
    receive_ids(&f, first, 3, "d-2 d-3", 30000);
    ck_assert(
        IT_WAIT(10000, it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                        "WHERE event_id IN ('p-1', 'p-2', "
                                        "'d-1') AND status = 'SENT' AND "
                                        "last_error IS NULL") == 3));
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 2);

    r = it_ctl(f.conf, "dead retry --all");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, ": 2 DEAD rows back to PENDING"), "%s", r.out);
    it_ctl_free(&r);
    const char *rest[] = {"d-2", "d-3"};
    receive_ids(&f, rest, 2, NULL, 30000);
    ck_assert(IT_WAIT(10000, it_db_count_status(f.sql, "SENT") == 5 + 5));
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 0);

    /* Nothing DEAD is left to retry: an explicit id says so, exit 1. */
    r = it_ctl(f.conf, "dead retry d-2 --json");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.out, "\"retried\":0,\"not_found\":[\"d-2\"]"), "%s",
                  r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead retry no-such-event");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.err, "no DEAD row has event_id no-such-event"), "%s",
                  r.err);
    it_ctl_free(&r);
    /* Exit 0, also under OUTBOXD_WRAPPER=valgrind --error-exitcode. */
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 20000));
    ck_assert(WIFEXITED(f.d.status) && WEXITSTATUS(f.d.status) == 0);
    it_fx_close(&f);
}
END_TEST

/* Every row, as "event_id:status" in id order, to compare before/after. */
static char *
table_digest(struct it_fx *f)
{
    char *s = it_db_str(f->sql, "SELECT GROUP_CONCAT(CONCAT(event_id, ':', "
                                "status) ORDER BY id) FROM outbox_event");
    it_db_exec(f->sql, "COMMIT");
    return s;
}

static void
check_purge(const char *schema)
{
    struct it_fx f;
    fx_open(&f, schema);
    insert_every_status(&f);
    struct it_ctl_run r = it_ctl(f.conf, "purge --sent-older-than 1h");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, ": deleted 3 SENT rows older than 1h"), "%s",
                  r.out);
    it_ctl_free(&r);
    char *left = table_digest(&f);
    ck_assert_str_eq(left, "p-1:PENDING,p-2:PENDING,w-1:PROCESSING,"
                           "s-new-1:SENT,s-new-2:SENT,r-1:RETRY,d-1:DEAD,"
                           "d-2:DEAD,d-3:DEAD");
    r = it_ctl(f.conf, "--json purge --sent-older-than 1h");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "\"deleted\":0}"), "%s", r.out);
    it_ctl_free(&r);
    char *again = table_digest(&f);
    ck_assert_str_eq(again, left);
    free(again);
    free(left);
    it_fx_close(&f);
}

START_TEST(test_purge)
{
    check_purge("sql/outbox.sql");
    /* The seed's DDL: second precision, no (status, id) index. */
    check_purge("tests/data/seed_outbox.sql");
}
END_TEST

/* Exit code and output of one outboxctl run, which must succeed. */
static struct it_ctl_run
ctl_ok(struct it_fx *f, const char *args, const char *want)
{
    struct it_ctl_run r = it_ctl(f->conf, "%s", args);
    ck_assert_msg(r.rc == 0 && strstr(r.out, want) != NULL,
                  "outboxctl %s: rc %d, want \"%s\":\n%s%s", args, r.rc, want,
                  r.out, r.err);
    return r;
}

/*
 * The seed's DDL, without the optional columns (available_at, held,
 * unfinished): every command an operator runs works on it as on
 * sql/outbox.sql's table, each doing what it says.
 */
START_TEST(test_seed_table)
{
    struct it_fx f;
    it_fx_open(&f, "it_ctl", "tests/data/seed_outbox.sql");
    it_fx_write_config(&f, "        max_retries: 10\n"
                           "        on_dead: hold\n");
    insert_every_status(&f);
    char name[160], age[32];
    long long v[5];
    snprintf(name, sizeof(name), "%s.outbox_event", f.db);
    struct it_ctl_run r = ctl_ok(&f, "status", name);
    parse_status_line(r.out, name, v, 5, age, sizeof(age));
    ck_assert(v[0] == 2 && v[1] == 1 && v[2] == 1 && v[3] == 3 && v[4] == 5);
    ck_assert_msg(strncmp(age, "1m", 2) == 0, "oldest pending age %s", age);
    it_ctl_free(&r);

    r = ctl_ok(&f, "dead list", ": 3 DEAD rows");
    ck_assert(strstr(r.out, "d-1") && strstr(r.out, "d-2") &&
              strstr(r.out, "d-3") && !strstr(r.out, "p-1"));
    it_ctl_free(&r);

    r = ctl_ok(&f, "dead release d-1", ": 1 DEAD row released");
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event "
                                      "WHERE event_id = 'd-1' AND status = "
                                      "'DEAD' AND locked_by = 'released'"),
                     1);
    it_db_exec(f.sql, "COMMIT");

    r = ctl_ok(&f, "dead retry d-2", ": 1 DEAD row back to PENDING");
    it_ctl_free(&r);
    check_retried_row(&f, "d-2", "channel closed: 404 NOT_FOUND - no exchange");

    r = ctl_ok(&f, "purge --sent-older-than 1h",
               ": deleted 3 SENT rows older than 1h");
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_count_status(f.sql, "SENT"), 2);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_bad_usage)
{
    static const char *const cases[] = {
        "",
        "frobnicate",
        "dead",
        "dead bury",
        "--no-such-option status",
        "status --limit 5",
        "status extra-word",
        "dead list --limit 0",
        "dead list --limit many",
        "dead list --outbox",
        "dead retry",
        "dead retry --all d-1",
        "purge",
        "purge --sent-older-than 10",
        "purge --sent-older-than 1fortnight",
        "purge --outbox nosuch.table --sent-older-than 1h",
        "purge --sent-older-than 1h --limit 0",
        "purge --sent-older-than 1h --limit 1000000001",
        "status --dry-run",
        "dead list --dry-run",
        "dead list --limit 1000001",
        "dead retry d-1 --dry-run",
        "dead retry d-1 --limit 5",
        "outboxes --limit 5",
        "outboxes extra-word",
        "help frobnicate",
        "help dead bury",
    };
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_every_status(&f);
    char *before = table_digest(&f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct it_ctl_run r = it_ctl(f.conf, "%s", cases[i]);
        ck_assert_msg(r.rc == 64, "\"%s\": exit %d, stderr %s", cases[i], r.rc,
                      r.err);
        ck_assert_msg(r.out[0] == '\0' && r.err[0] != '\0',
                      "\"%s\": stdout \"%s\", stderr \"%s\"", cases[i], r.out,
                      r.err);
        it_ctl_free(&r);
    }
    /* None of them touched a row. */
    char *after = table_digest(&f);
    ck_assert_str_eq(after, before);
    free(before);
    free(after);
    struct it_ctl_run r = it_ctl(f.conf, "--help");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "usage: outboxctl"), "%s", r.out);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_bad_config)
{
    char conf[128];
    it_unique_name(conf, sizeof(conf), "/tmp/it_ctl_bad");
    it_write_file(conf, "brokers:\n"
                        "  main:\n"
                        "    url: amqp://127.0.0.1/\n"
                        "    colour: blue\n"
                        "databases:\n"
                        "  d:\n"
                        "    user: u\n"
                        "    database: d\n"
                        "    port: many\n"
                        "    outboxes:\n"
                        "      - table: t\n"
                        "        lease: 30\n");
    struct it_ctl_run r = it_ctl(conf, "status");
    ck_assert_int_eq(r.rc, 78);
    char want[3][160];
    snprintf(want[0], sizeof(want[0]), "%s:4:5: ", conf);
    snprintf(want[1], sizeof(want[1]), "%s:9:11: ", conf);
    snprintf(want[2], sizeof(want[2]), "%s:12:16: ", conf);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strstr(r.err, want[i]), "no \"%s\" in:\n%s", want[i],
                      r.err);
    ck_assert_msg(strstr(r.err, "3 configuration errors") && r.out[0] == '\0',
                  "%s", r.err);
    it_ctl_free(&r);
    r = it_ctl("/nonexistent/outboxd.yaml", "status");
    ck_assert_int_eq(r.rc, 78);
    it_ctl_free(&r);
    unlink(conf);
}
END_TEST

/*
 * One database answers, one does not (nothing listens on port 1): the
 * reachable one is still shown, the exit is 69, and no secret is printed.
 */
START_TEST(test_unreachable)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_every_status(&f);
    it_write_file(f.conf,
                  "brokers:\n"
                  "  main:\n"
                  "    url: amqp://guest:broker-Secret-7@127.0.0.1:5672/\n"
                  "databases:\n"
                  "  up:\n"
                  "    host: 127.0.0.1\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database: %s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "  down:\n"
                  "    host: 127.0.0.1\n"
                  "    port: 1\n"
                  "    user: %s\n"
                  "    password: db-Secret-9\n"
                  "    database: %s\n"
                  "    connect_timeout: 2s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n",
                  IT_DB_USER, IT_DB_PASSWORD, f.db, IT_DB_USER, f.db);
    const char *cmds[] = {"status", "--json status", "dead list",
                          "purge --sent-older-than 7d", "dead retry --all"};
    /* Outboxes are named by the config's database key. */
    const char *up = "up.outbox_event";
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        struct it_ctl_run r = it_ctl(f.conf, "%s", cmds[i]);
        ck_assert_msg(r.rc == 69, "%s: exit %d: %s", cmds[i], r.rc, r.err);
        ck_assert_msg(strstr(r.out, up) != NULL, "%s: %s", cmds[i], r.out);
        ck_assert_msg(strstr(r.err, "outboxctl: down.outbox_event: "), "%s: %s",
                      cmds[i], r.err);
        ck_assert_msg(!strstr(r.out, "Secret") && !strstr(r.err, "Secret"),
                      "%s printed a secret:\n%s\n%s", cmds[i], r.out, r.err);
        it_ctl_free(&r);
    }
    /* Only the reachable outbox was retried. */
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 0);
    it_fx_close(&f);
}
END_TEST

/* Each command's help, on stdout, exit 0; a bad option still exits 64. */
START_TEST(test_help)
{
    static const char *const cases[][2] = {
        {"status --help", "status [--outbox NAME]"},
        {"dead list --help", "dead list [--outbox NAME] [--limit N]"},
        {"dead retry --help", "--dry-run        with --all"},
        {"purge --help", "purge --sent-older-than DURATION"},
        {"outboxes --help", "outboxes\n"},
        {"help purge", "--limit N        delete at most N rows"},
        {"help dead retry", "EVENT_ID..."},
        {"dead --help", "dead retry [--outbox NAME]"},
        {"help", "commands:\n  status "},
        {"-h", "dead retry    put DEAD rows back to PENDING"},
        {"dead --help", "dead release [--outbox NAME]"},
        {"help dead release", "the held DEAD rows with these event_ids"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct it_ctl_run r = it_ctl("/nonexistent.yaml", "%s", cases[i][0]);
        ck_assert_msg(r.rc == 0 && r.err[0] == '\0', "%s: exit %d, %s",
                      cases[i][0], r.rc, r.err);
        ck_assert_msg(strstr(r.out, cases[i][1]) != NULL,
                      "%s: no \"%s\" in:\n%s", cases[i][0], cases[i][1], r.out);
        it_ctl_free(&r);
    }
    struct it_ctl_run r = it_ctl("/nonexistent.yaml", "purge --help --limit 0");
    ck_assert_int_eq(r.rc, 64);
    ck_assert_msg(r.out[0] == '\0' && strstr(r.err, "--limit"), "%s", r.err);
    it_ctl_free(&r);
    r = it_ctl("/nonexistent.yaml", "dead retry d-1 --dry-run");
    ck_assert_int_eq(r.rc, 64);
    ck_assert_msg(strstr(r.err, "Try 'outboxctl dead retry --help'"), "%s",
                  r.err);
    it_ctl_free(&r);
}
END_TEST

/* n rows of one status, created 3 h ago, the SENT ones sent 2 h ago. */
static void
insert_rows(struct it_fx *f, const char *prefix, int n, const char *status)
{
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, created_at, "
               "sent_at) SELECT CONCAT('%s-', seq), 'Order', CONCAT('%s-', "
               "seq), 'OrderCreated', '{}', '%s', NOW(6) - INTERVAL 3 HOUR, "
               "IF('%s' = 'SENT', NOW(6) - INTERVAL 2 HOUR, NULL) FROM "
               "seq_1_to_%d",
               prefix, prefix, status, status, n);
    it_db_exec(f->sql, "COMMIT");
}

/* The outbox of a test of its own, retention walking batch rows a step. */
static void
fx_open_batch(struct it_fx *f, unsigned batch)
{
    char keys[128];
    fx_open(f, "sql/outbox.sql");
    snprintf(keys, sizeof(keys), "        retention:\n          batch: %u\n",
             batch);
    it_fx_write_config(f, keys);
}

START_TEST(test_dry_run)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_every_status(&f);
    char *before = table_digest(&f);
    struct it_ctl_run r =
        it_ctl(f.conf, "purge --sent-older-than 1h --dry-run");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, ": would delete 3 SENT rows older than 1h"),
                  "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf,
               "--json purge --sent-older-than 5m --dry-run --limit 10");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strstr(r.out, "\"would_delete\":4}],\"would_delete\":4}"),
                  "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "purge --sent-older-than 1h --dry-run --limit 2");
    ck_assert_msg(strstr(r.out, ": would delete 2 SENT rows"), "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead retry --all --dry-run");
    ck_assert_msg(r.rc == 0 && strstr(r.out, ": would retry 3 DEAD rows"),
                  "rc %d: %s", r.rc, r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json dead retry --all --dry-run");
    ck_assert_msg(strstr(r.out, "\"would_retry\":3}],\"would_retry\":3}"), "%s",
                  r.out);
    it_ctl_free(&r);
    char *after = table_digest(&f);
    ck_assert_str_eq(after, before);
    free(before);
    free(after);
    it_fx_close(&f);
}
END_TEST

/* --limit bounds each outbox's walk, across steps too, oldest id first. */
START_TEST(test_limit)
{
    struct it_fx f;
    fx_open_batch(&f, 3);
    insert_rows(&f, "s", 10, "SENT");
    insert_rows(&f, "d", 2500, "DEAD");
    struct it_ctl_run r =
        it_ctl(f.conf, "purge --sent-older-than 1h --limit 7");
    ck_assert_msg(r.rc == 0 && strstr(r.out, ": deleted 7 SENT rows"),
                  "rc %d: %s%s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    char *left = it_db_str(f.sql, "SELECT GROUP_CONCAT(event_id ORDER BY id) "
                                  "FROM outbox_event WHERE status = 'SENT'");
    ck_assert_str_eq(left, "s-8,s-9,s-10");
    free(left);
    r = it_ctl(f.conf, "--json purge --sent-older-than 1h");
    ck_assert_msg(strstr(r.out, "\"deleted\":3}"), "%s", r.out);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "dead retry --all --limit 1500");
    ck_assert_msg(r.rc == 0 && strstr(r.out, ": 1500 DEAD rows back"),
                  "rc %d: %s%s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 1000);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT MAX(id) FROM outbox_event "
                                      "WHERE status = 'PENDING'") <
                         it_db_int(f.sql, "SELECT MIN(id) FROM outbox_event "
                                          "WHERE status = 'DEAD'"),
                     1);
    r = it_ctl(f.conf, "dead retry --all --limit 2");
    ck_assert_msg(strstr(r.out, ": 2 DEAD rows back"), "%s", r.out);
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 998);
    it_fx_close(&f);
}
END_TEST

/* outboxctl -c conf args..., stdout and stderr to files, not waited for. */
static pid_t
ctl_spawn(const char *conf, const char *const *args, const char *out,
          const char *err)
{
    const char *bin = getenv("OUTBOXCTL_BIN");
    ck_assert_ptr_nonnull(bin);
    char *argv[16] = {(char *)bin, "-c", (char *)conf};
    for (int i = 0; args[i] != NULL && i < 12; i++)
        argv[3 + i] = (char *)args[i];
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        execv(bin, argv);
        _exit(127);
    }
    return pid;
}

/* The exit status, or -1 when it did not exit within timeout_ms. */
static int
wait_exit(pid_t pid, int timeout_ms)
{
    int status = 0;
    if (!IT_WAIT((uint64_t)timeout_ms, waitpid(pid, &status, WNOHANG) == pid))
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static long long
number_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    ck_assert_msg(p != NULL, "no \"%s\" in:\n%s", key, text);
    return strtoll(p + strlen(key), NULL, 10);
}

/* The walk stops between transactions: what it says is what is gone. */
static void
check_interrupt(struct it_fx *f, const char *const *args, int sig, int rows,
                const char *status, const char *said)
{
    char out[128], err[128];
    it_unique_name(out, sizeof(out), "/tmp/it_ctl_out");
    it_unique_name(err, sizeof(err), "/tmp/it_ctl_err");
    pid_t pid = ctl_spawn(f->conf, args, out, err);
    /* Once the first transaction has committed. */
    ck_assert(IT_WAIT(60000, it_db_count_status(f->sql, status) < rows));
    ck_assert_int_eq(kill(pid, sig), 0);
    int rc = wait_exit(pid, 60000);
    char *o = it_file_read(out), *e = it_file_read(err);
    ck_assert_msg(rc == 128 + sig, "exit %d: %s%s", rc, o, e);
    long long done = number_after(o, said);
    long long left = it_db_count_status(f->sql, status);
    ck_assert_msg(left > 0 && done == rows - left,
                  "said %lld, %lld of %d left:\n%s", done, left, rows, o);
    ck_assert_msg(strstr(o, "(interrupted)") &&
                      strstr(e, sig == SIGINT ? "stopped by SIGINT"
                                              : "stopped by SIGTERM"),
                  "%s%s", o, e);
    /* What is left is the tail in id order, rows untouched. */
    ck_assert_int_eq(it_db_int(f->sql,
                               "SELECT MAX(id) - MIN(id) + 1 FROM "
                               "outbox_event WHERE status = '%s'",
                               status),
                     left);
    free(o);
    free(e);
    unlink(out);
    unlink(err);
}

START_TEST(test_purge_interrupted)
{
    struct it_fx f;
    fx_open_batch(&f, 100);
    insert_rows(&f, "p", 3, "PENDING");
    insert_rows(&f, "s", 200000, "SENT");
    insert_rows(&f, "d", 3, "DEAD");
    const char *args[] = {"purge", "--sent-older-than", "1h", NULL};
    check_interrupt(&f, args, SIGINT, 200000, "SENT", ": deleted ");
    /* A second purge finishes the job. */
    long long left = it_db_count_status(f.sql, "SENT");
    struct it_ctl_run r = it_ctl(f.conf, "--json purge --sent-older-than 1h");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_int_eq(number_after(r.out, "\"deleted\":"), left);
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_count_status(f.sql, "SENT"), 0);
    ck_assert_int_eq(it_db_count_status(f.sql, "PENDING"), 3);
    ck_assert_int_eq(it_db_count_status(f.sql, "DEAD"), 3);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_retry_interrupted)
{
    struct it_fx f;
    fx_open(&f, "sql/outbox.sql");
    insert_rows(&f, "d", 100000, "DEAD");
    const char *args[] = {"dead", "retry", "--all", NULL};
    check_interrupt(&f, args, SIGTERM, 100000, "DEAD", ": ");
    struct it_ctl_run r = it_ctl(f.conf, "dead retry --all");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    it_ctl_free(&r);
    ck_assert_int_eq(it_db_count_status(f.sql, "PENDING"), 100000);
    it_fx_close(&f);
}
END_TEST

/* Everything outboxctl writes to a terminal, until it exits. */
static char *
ctl_on_pty(const char *conf, const char *const *args, int *rc)
{
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *bin = getenv("OUTBOXCTL_BIN");
        char *argv[16] = {(char *)bin, "-c", (char *)conf};
        for (int i = 0; args[i] != NULL && i < 12; i++)
            argv[3 + i] = (char *)args[i];
        execv(bin, argv);
        _exit(127);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    char chunk[4096];
    ssize_t n;
    /* EIO once the child has closed its side. */
    while ((n = read(master, chunk, sizeof(chunk))) > 0 || errno == EINTR)
        if (n > 0)
            fwrite(chunk, 1, (size_t)n, mem);
    fclose(mem);
    close(master);
    *rc = wait_exit(pid, 30000);
    return buf;
}

START_TEST(test_progress)
{
    struct it_fx f;
    fx_open_batch(&f, 100);
    insert_rows(&f, "s", 3000, "SENT");
    insert_rows(&f, "d", 2000, "DEAD");
    int rc;
    const char *purge[] = {"purge", "--sent-older-than", "1h", NULL};
    char *out = ctl_on_pty(f.conf, purge, &rc);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "\r") && strstr(out, ": 0/3000 rows purged") &&
                      strstr(out, ": deleted 3000 SENT rows"),
                  "on a terminal:\n%s", out);
    free(out);
    const char *retry[] = {"dead", "retry", "--all", NULL};
    out = ctl_on_pty(f.conf, retry, &rc);
    ck_assert_msg(rc == 0 && strstr(out, "/2000 rows retried") &&
                      strstr(out, ": 2000 DEAD rows back to PENDING"),
                  "exit %d on a terminal:\n%s", rc, out);
    free(out);
    /* Piped: the result only. */
    insert_rows(&f, "t", 300, "SENT");
    struct it_ctl_run r = it_ctl(f.conf, "purge --sent-older-than 1h");
    ck_assert_msg(r.rc == 0 && strstr(r.out, ": deleted 300 SENT rows"),
                  "rc %d: %s", r.rc, r.out);
    ck_assert_msg(r.err[0] == '\0' && !strchr(r.out, '\r'), "piped: %s%s",
                  r.out, r.err);
    it_ctl_free(&r);
    it_fx_close(&f);
}
END_TEST

/* outboxes: the names from the file alone, every database down. */
START_TEST(test_outboxes)
{
    char conf[128];
    it_unique_name(conf, sizeof(conf), "/tmp/it_ctl_outboxes");
    it_write_file(conf, "brokers:\n"
                        "  main:\n"
                        "    url: amqp://127.0.0.1:1/\n"
                        "databases:\n"
                        "  orders:\n"
                        "    host: 127.0.0.1\n"
                        "    port: 1\n"
                        "    user: u\n"
                        "    database: shop\n"
                        "    outboxes:\n"
                        "      - table: outbox_event\n"
                        "      - table: audit_outbox\n"
                        "  billing:\n"
                        "    host: 127.0.0.1\n"
                        "    port: 1\n"
                        "    user: u\n"
                        "    database: bill\n"
                        "    outboxes:\n"
                        "      - table: outbox_event\n");
    struct it_ctl_run r = it_ctl(conf, "outboxes");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_str_eq(r.out, "orders.outbox_event\norders.audit_outbox\n"
                            "billing.outbox_event\n");
    it_ctl_free(&r);
    r = it_ctl(conf, "--json outboxes");
    ck_assert_str_eq(r.out, "{\"outboxes\":[\"orders.outbox_event\","
                            "\"orders.audit_outbox\",\"billing.outbox_event\"]}"
                            "\n");
    it_ctl_free(&r);
    r = it_ctl(conf, "outboxes --outbox orders.outbox_event");
    ck_assert_int_eq(r.rc, 64);
    it_ctl_free(&r);
    unlink(conf);
}
END_TEST

/* sql/inbox.sql: the seed's table and both idempotency recipes. */
static long long
exec_affected(MYSQL *db, const char *sql)
{
    it_db_exec(db, "%s", sql);
    return (long long)mysql_affected_rows(db);
}

#define INBOX_INSERT                                                           \
    "INSERT %sINTO inbox_event (event_id, consumer_name, event_type, "         \
    "status, received_at) VALUES ('%s', 'inventory-service', 'OrderCreated', " \
    "'PROCESSING', CURRENT_TIMESTAMP)%s"

static long long
inbox_insert(MYSQL *db, const char *event_id, bool odku)
{
    char sql[512];
    snprintf(sql, sizeof(sql), INBOX_INSERT, odku ? "" : "IGNORE ", event_id,
             odku ? " ON DUPLICATE KEY UPDATE retry_count = retry_count + 1"
                  : "");
    return exec_affected(db, sql);
}

/* One delivery as a consumer handles it; false when it was a duplicate. */
static bool
consume(MYSQL *db, const char *event_id, bool fail)
{
    char sql[256];
    it_db_exec(db, "START TRANSACTION");
    if (inbox_insert(db, event_id, false) == 0) {
        it_db_exec(db, "COMMIT");
        return false;
    }
    snprintf(sql, sizeof(sql), "INSERT INTO stock (event_id) VALUES ('%s')",
             event_id);
    it_db_exec(db, "%s", sql);
    if (fail) { /* the business change failed: everything goes */
        it_db_exec(db, "ROLLBACK");
        return true;
    }
    snprintf(sql, sizeof(sql),
             "UPDATE inbox_event SET status = 'PROCESSED', processed_at = "
             "CURRENT_TIMESTAMP WHERE event_id = '%s' AND consumer_name = "
             "'inventory-service'",
             event_id);
    it_db_exec(db, "%s", sql);
    it_db_exec(db, "COMMIT");
    return true;
}

START_TEST(test_inbox_recipe)
{
    char db_name[96];
    it_unique_name(db_name, sizeof(db_name), "outboxd_test_inbox");
    it_db_create(db_name, it_src_path("sql/inbox.sql"));
    MYSQL *db = it_db_connect(db_name);
    it_db_exec(db, "CREATE TABLE stock (event_id VARCHAR(64) NOT NULL)");
    /* The recipes as written: 1 then 0, and 1 then 2. */
    ck_assert_int_eq(inbox_insert(db, "ev-1", false), 1);
    ck_assert_int_eq(inbox_insert(db, "ev-1", false), 0);
    ck_assert_int_eq(inbox_insert(db, "ev-2", true), 1);
    ck_assert_int_eq(inbox_insert(db, "ev-2", true), 2);
    ck_assert_int_eq(it_db_int(db, "SELECT retry_count FROM inbox_event "
                                   "WHERE event_id = 'ev-2'"),
                     1);
    /* In the consumer's transaction: a duplicate changes nothing, a
     * failure leaves no inbox row so the redelivery is processed. */
    ck_assert(consume(db, "ev-3", false));
    ck_assert(!consume(db, "ev-3", false));
    ck_assert(consume(db, "ev-4", true));
    ck_assert(consume(db, "ev-4", false));
    ck_assert(!consume(db, "ev-4", false));
    ck_assert_int_eq(it_db_int(db, "SELECT COUNT(*) FROM stock"), 2);
    ck_assert_int_eq(it_db_int(db, "SELECT COUNT(*) FROM inbox_event WHERE "
                                   "status = 'PROCESSED' AND processed_at IS "
                                   "NOT NULL"),
                     2);
    mysql_close(db);
    it_db_drop(db_name);
}
END_TEST

Suite *
it_outboxctl_suite(void)
{
    Suite *s = suite_create("it_outboxctl");
    TCase *tc = tcase_create("outboxctl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_status);
    tcase_add_test(tc, test_dead_list);
    tcase_add_test(tc, test_dead_retry_delivers);
    tcase_add_test(tc, test_purge);
    tcase_add_test(tc, test_seed_table);
    tcase_add_test(tc, test_bad_usage);
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_unreachable);
    tcase_add_test(tc, test_inbox_recipe);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_dry_run);
    tcase_add_test(tc, test_limit);
    tcase_add_test(tc, test_purge_interrupted);
    tcase_add_test(tc, test_retry_interrupted);
    tcase_add_test(tc, test_progress);
    tcase_add_test(tc, test_outboxes);
    suite_add_tcase(s, tc);
    return s;
}
