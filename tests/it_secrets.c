/*
 * it_secrets: the passwords outboxd is given (password_file, url_env)
 * never come out of it: not in its log at debug level, not in /metrics,
 * /healthz or /readyz, not in outboxctl's output, `outboxd -t` or `-T`, not
 * after a SIGHUP that changes them; with the right secrets, with a wrong
 * broker password and with a wrong database password.  A config that
 * others may read draws a warning when it holds a password inline, and
 * `outboxd -T` masks inline secrets and prints a config that reads back.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_secrets_suite(void);

/* The shared fixture, with the relay's passwords of the test's own, a
 * broker user, and the strings that must never show. */
struct secrets_fx {
    struct it_fx it;
    char pwfile[256], out[256];
    char db_pw[64];              /* the right one */
    char mq_user[64], mq_pw[64]; /* mq_pw has characters URLs escape */
    char mq_pw_url[96];          /* ... %-escaped, as the URL holds it */
    const char *secrets[8];      /* every string that must not appear */
    size_t nsecrets;
};

static void
add_secret(struct secrets_fx *f, const char *s)
{
    f->secrets[f->nsecrets++] = s;
}

static void
fx_open(struct secrets_fx *f)
{
    memset(f, 0, sizeof(*f));
    it_fx_open(&f->it, "it_secrets", "sql/outbox.sql");
    snprintf(f->pwfile, sizeof(f->pwfile), "/tmp/%s.dbpw", f->it.name);
    snprintf(f->out, sizeof(f->out), "/tmp/%s.out", f->it.name);
    /* The relay's least-privilege account, with a password of its own. */
    char ignored[64];
    it_db_grant_relay(f->it.db, "outbox_event", f->it.user, sizeof(f->it.user),
                      ignored, sizeof(ignored));
    snprintf(f->db_pw, sizeof(f->db_pw), "Db-S3cret-%d", (int)getpid());
    it_db_exec(f->it.sql, "ALTER USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'",
               f->it.user, f->db_pw);
    it_db_exec(f->it.sql, "ALTER USER '%s'@'localhost' IDENTIFIED BY '%s'",
               f->it.user, f->db_pw);
    /* A broker user of the test's own on the shared node. */
    snprintf(f->mq_user, sizeof(f->mq_user), "outboxd_sec_%d", (int)getpid());
    snprintf(f->mq_pw, sizeof(f->mq_pw), "Mq+S3cret/%d", (int)getpid());
    snprintf(f->mq_pw_url, sizeof(f->mq_pw_url), "Mq%%2BS3cret%%2F%d",
             (int)getpid());
    ck_assert_int_eq(it_sh("rabbitmqctl -q add_user '%s' '%s' >/dev/null && "
                           "rabbitmqctl -q set_permissions -p / '%s' '.*' "
                           "'.*' '.*' >/dev/null",
                           f->mq_user, f->mq_pw, f->mq_user),
                     0);
    add_secret(f, f->db_pw);
    add_secret(f, f->mq_pw);
    add_secret(f, f->mq_pw_url);
    f->it.port = it_free_port();
}

static void
fx_close(struct secrets_fx *f)
{
    it_fx_close(&f->it);
    it_sh("rabbitmqctl -q delete_user '%s' >/dev/null 2>&1", f->mq_user);
    unlink(f->pwfile);
    unlink(f->out);
}

/*
 * The config: the database password from a file, the broker URL from the
 * environment (with mq_pw or a wrong one), at debug level.
 */
static void
fx_config(struct secrets_fx *f, const char *db_pw, const char *mq_pw_url)
{
    it_write_file(f->pwfile, "%s\n", db_pw);
    char url[256];
    snprintf(url, sizeof(url), "amqp://%s:%s@127.0.0.1:5672/", f->mq_user,
             mq_pw_url);
    setenv("OUTBOXD_TEST_BROKER_URL", url, 1);
    it_write_file(f->it.conf,
                  "relay:\n"
                  "  id: %s\n"
                  "  log_level: debug\n"
                  "  listen: \"127.0.0.1:%u\"\n"
                  "brokers:\n"
                  "  main:\n"
                  "    url_env: OUTBOXD_TEST_BROKER_URL\n"
                  "    connect_timeout: 2s\n"
                  "databases:\n"
                  "  %s:\n"
                  "    host: 127.0.0.1\n"
                  "    user: %s\n"
                  "    password_file: %s\n"
                  "    database: %s\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "        exchange: \"%s\"\n",
                  f->it.name, f->it.port, f->it.db, f->it.user, f->pwfile,
                  f->it.db, f->it.ex);
}

/* Fails naming the place when text holds any of the secrets. */
static void
assert_clean(const struct secrets_fx *f, const char *where, const char *text)
{
    for (size_t i = 0; i < f->nsecrets; i++)
        ck_assert_msg(strstr(text, f->secrets[i]) == NULL,
                      "%s shows the secret \"%s\"", where, f->secrets[i]);
}

static void
assert_file_clean(const struct secrets_fx *f, const char *path)
{
    char *text = it_file_read(path);
    assert_clean(f, path, text);
    free(text);
}

/* /metrics, /healthz, /readyz: whatever they answer, no secret. */
static void
assert_http_clean(const struct secrets_fx *f)
{
    static const char *const paths[] = {"/metrics", "/healthz", "/readyz",
                                        "/nope"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
        char *body;
        int status = it_http_get(f->it.port, paths[i], &body);
        ck_assert_msg(status > 0, "GET %s: no answer", paths[i]);
        assert_clean(f, paths[i], body);
        free(body);
    }
}

/* outboxctl and `outboxd -t` on the same config, output kept in f->out. */
static void
assert_tools_clean(const struct secrets_fx *f)
{
    const char *ctl = getenv("OUTBOXCTL_BIN");
    const char *const cmds[] = {"status", "dead list", "status --json"};
    for (size_t i = 0; ctl != NULL && i < sizeof(cmds) / sizeof(*cmds); i++) {
        it_sh("'%s' -c '%s' %s >'%s' 2>&1", ctl, f->it.conf, cmds[i], f->out);
        assert_file_clean(f, f->out);
    }
    it_sh("'%s' -t -c '%s' >'%s' 2>&1", getenv("OUTBOXD_BIN"), f->it.conf,
          f->out);
    assert_file_clean(f, f->out);
    it_sh("'%s' -T -c '%s' >'%s' 2>&1", getenv("OUTBOXD_BIN"), f->it.conf,
          f->out);
    assert_file_clean(f, f->out);
}

START_TEST(test_secrets_right)
{
    struct secrets_fx f;
    fx_open(&f);
    fx_config(&f, f.db_pw, f.mq_pw_url);
    struct it_consumer *c = it_consumer_new(f.it.ex, "#");
    it_db_insert_events(f.it.sql, "outbox_event", "sec", 20, 4, 64);
    it_fx_start(&f.it);
    ck_assert(IT_WAIT(30000, it_db_count_status(f.it.sql, "SENT") == 20));
    ck_assert(it_file_has(f.it.d.log_path, "broker connected: amqp://"));
    ck_assert(it_file_has(f.it.d.log_path, ":***@127.0.0.1"));
    assert_http_clean(&f);
    assert_tools_clean(&f);
    /* A SIGHUP that changes both secrets: refused, neither shown. */
    char new_db[64];
    snprintf(new_db, sizeof(new_db), "Db-N3w-%d", (int)getpid());
    add_secret(&f, new_db);
    fx_config(&f, new_db, "N3w-Mq-Secret");
    add_secret(&f, "N3w-Mq-Secret");
    kill(f.it.d.pid, SIGHUP);
    ck_assert(IT_WAIT(10000, it_file_has(f.it.d.log_path, "password")));
    ck_assert(it_daemon_signal_wait(&f.it.d, SIGTERM, 15000));
    ck_assert(WIFEXITED(f.it.d.status) && WEXITSTATUS(f.it.d.status) == 0);
    assert_file_clean(&f, f.it.d.log_path);
    it_consumer_free(c);
    fx_close(&f);
}
END_TEST

/* Wrong passwords: the errors say who was refused, never with what. */
static void
check_wrong(struct secrets_fx *f, const char *refused)
{
    it_fx_start(&f->it);
    if (!IT_WAIT(30000, it_file_has(f->it.d.log_path, refused))) {
        it_daemon_dump_log(&f->it.d);
        ck_abort_msg("the log never said \"%s\"", refused);
    }
    ck_assert(
        IT_WAIT(30000, it_file_has(f->it.d.log_path, "still unavailable")));
    ck_assert(it_daemon_alive(&f->it.d));
    assert_http_clean(f);
    assert_tools_clean(f);
    ck_assert(it_daemon_signal_wait(&f->it.d, SIGTERM, 15000));
    assert_file_clean(f, f->it.d.log_path);
}

START_TEST(test_secrets_wrong_broker_password)
{
    struct secrets_fx f;
    fx_open(&f);
    static const char wrong[] = "Wr0ng%2BMq-Secret";
    add_secret(&f, wrong);
    add_secret(&f, "Wr0ng+Mq-Secret");
    fx_config(&f, f.db_pw, wrong);
    check_wrong(&f, "ACCESS_REFUSED");
    fx_close(&f);
}
END_TEST

START_TEST(test_secrets_wrong_db_password)
{
    struct secrets_fx f;
    fx_open(&f);
    static const char wrong[] = "Wr0ng-Db-Secret";
    add_secret(&f, wrong);
    fx_config(&f, wrong, f.mq_pw_url);
    check_wrong(&f, "Access denied for user");
    fx_close(&f);
}
END_TEST

/* docs/contract.md section 4: a readable file with an inline password is warned
 * of. */
START_TEST(test_inline_password_mode_warning)
{
    char conf[256], out[256], name[64];
    it_unique_name(name, sizeof(name), "it_secrets_mode");
    snprintf(conf, sizeof(conf), "/tmp/%s.yaml", name);
    snprintf(out, sizeof(out), "/tmp/%s.out", name);
    static const char secret[] = "Inl1ne-S3cret";
    it_write_file(conf,
                  "brokers:\n  main:\n    url: amqp://127.0.0.1:5672/\n"
                  "databases:\n  d:\n    user: u\n    password: %s\n"
                  "    database: d\n    outboxes:\n      - table: t\n",
                  secret);
    const char *bin = getenv("OUTBOXD_BIN");
    chmod(conf, 0644);
    ck_assert_int_eq(it_sh("'%s' -t -c '%s' >'%s' 2>&1", bin, conf, out), 0);
    char *text = it_file_read(out);
    ck_assert_msg(strstr(text, "readable by group or others") != NULL &&
                      strstr(text, "mode 644") != NULL,
                  "no warning: %s", text);
    ck_assert_msg(strstr(text, secret) == NULL, "the warning shows it");
    free(text);
    /* Group-readable by a group that is not the relay's: warned of. */
    ck_assert_int_eq(chown(conf, (uid_t)-1, 65534), 0); /* nogroup */
    chmod(conf, 0640);
    ck_assert_int_eq(it_sh("'%s' -t -c '%s' >'%s' 2>&1", bin, conf, out), 0);
    ck_assert(it_file_has(out, "mode 640"));
    chmod(conf, 0600);
    ck_assert_int_eq(it_sh("'%s' -t -c '%s' >'%s' 2>&1", bin, conf, out), 0);
    ck_assert(!it_file_has(out, "readable by group or others"));
    /* password_file instead: nothing inline, nothing to warn of. */
    it_write_file(conf,
                  "brokers:\n  main:\n    url: amqp://127.0.0.1:5672/\n"
                  "databases:\n  d:\n    user: u\n    password_file: %s\n"
                  "    database: d\n    outboxes:\n      - table: t\n",
                  out);
    chmod(conf, 0644);
    ck_assert_int_eq(it_sh("'%s' -t -c '%s' >'%s.2' 2>&1", bin, conf, out), 0);
    char second[300];
    snprintf(second, sizeof(second), "%s.2", out);
    ck_assert(!it_file_has(second, "readable by group or others"));
    unlink(second);
    unlink(conf);
    unlink(out);
}
END_TEST

static void
assert_has(const char *path, const char *needle)
{
    char *text = it_file_read(path);
    ck_assert_msg(strstr(text, needle) != NULL, "no \"%s\" in:\n%s", needle,
                  text);
    free(text);
}

/* outboxd -T: the secrets masked, the defaults filled in, and what it
 * prints is a config that -t accepts and -T prints the same. */
START_TEST(test_dump_masks_and_reads_back)
{
    char name[64], conf[256], out[256], again[256];
    it_unique_name(name, sizeof(name), "it_secrets_dump");
    snprintf(conf, sizeof(conf), "/tmp/%s.yaml", name);
    snprintf(out, sizeof(out), "/tmp/%s.out.yaml", name);
    snprintf(again, sizeof(again), "/tmp/%s.again.yaml", name);
    static const char db_pw[] = "Inl1ne-Db-S3cret", mq_pw[] = "Url-Mq-S3cret";
    it_write_file(conf,
                  "brokers:\n  main:\n    url: amqp://relay:%s@127.0.0.1/\n"
                  "databases:\n  d:\n    user: u\n    password: %s\n"
                  "    database: d\n    outboxes:\n      - table: t\n",
                  mq_pw, db_pw);
    chmod(conf, 0600);
    const char *bin = getenv("OUTBOXD_BIN");
    ck_assert_int_eq(it_sh("'%s' -T -c '%s' >'%s' 2>&1", bin, conf, out), 0);
    ck_assert_msg(!it_file_has(out, db_pw) && !it_file_has(out, mq_pw),
                  "-T shows a secret: %s", it_file_read(out));
    assert_has(out, "    url: \"amqp://relay:***@127.0.0.1/\"\n");
    assert_has(out, "    password: \"***\"\n");
    assert_has(out, "  shutdown_timeout: 10s\n");
    assert_has(out, "        batch_size: 500\n");
    assert_has(out, "        retention:\n          sent: 7d\n");
    chmod(out, 0600);
    ck_assert_int_eq(it_sh("'%s' -t -c '%s' >/dev/null 2>&1", bin, out), 0);
    ck_assert_int_eq(it_sh("'%s' -T -c '%s' >'%s' 2>&1", bin, out, again), 0);
    ck_assert_int_eq(it_sh("cmp -s '%s' '%s'", out, again), 0);
    /* A bad config: the errors and 78, as -t, and no YAML. */
    it_write_file(conf, "relay: { log_level: loud }\n");
    ck_assert_int_eq(it_sh("'%s' -T -c '%s' >'%s' 2>/dev/null", bin, conf, out),
                     78);
    char *text = it_file_read(out);
    ck_assert_str_eq(text, "");
    free(text);
    unlink(conf);
    unlink(out);
    unlink(again);
}
END_TEST

Suite *
it_secrets_suite(void)
{
    Suite *s = suite_create("it_secrets");
    TCase *tc = tcase_create("secrets");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_secrets_right);
    tcase_add_test(tc, test_secrets_wrong_broker_password);
    tcase_add_test(tc, test_secrets_wrong_db_password);
    tcase_add_test(tc, test_inline_password_mode_warning);
    tcase_add_test(tc, test_dump_masks_and_reads_back);
    suite_add_tcase(s, tc);
    return s;
}
