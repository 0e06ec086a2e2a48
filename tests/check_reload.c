/*
 * check_reload: what a SIGHUP may change.  config_reload_check lists the
 * live changes and refuses, by key, what needs a restart;
 * config_reload_apply and the adopt helpers copy only the former.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

Suite *reload_suite(void);

/* A base file; each %s is replaced by an override or the default. */
static const char base_fmt[] = "relay:\n"
                               "  id: %s\n"
                               "  log_level: %s\n"
                               "  listen: \"%s\"\n"
                               "brokers:\n"
                               "  main:\n"
                               "    url: %s\n"
                               "    confirm_timeout: %s\n"
                               "databases:\n"
                               "  orders:\n"
                               "    user: relay\n"
                               "    password: %s\n"
                               "    database: orders\n"
                               "    outboxes:\n"
                               "      - table: outbox_event\n"
                               "        exchange: %s\n"
                               "        batch_size: %s\n"
                               "        poll_interval: %s\n"
                               "        max_retries: %s\n"
                               "        backoff: { initial: %s, max: 300s }\n"
                               "%s";

struct knobs {
    const char *id, *log_level, *listen, *url, *confirm, *password;
    const char *exchange, *batch, *poll, *retries, *initial, *extra;
};

static const struct knobs defaults = {
    "relay-a",
    "info",
    "127.0.0.1:9180",
    "amqp://127.0.0.1:5672/",
    "30s",
    "pw",
    "orders.events",
    "500",
    "100ms",
    "10",
    "1s",
    "",
};

static struct config *
load(const struct knobs *k)
{
    char path[] = "/tmp/check_reload_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, base_fmt, k->id, k->log_level, k->listen, k->url, k->confirm,
            k->password, k->exchange, k->batch, k->poll, k->retries, k->initial,
            k->extra);
    fclose(f);
    struct config_errors errs = {0};
    struct config *cfg = config_load(path, &errs);
    unlink(path);
    ck_assert_msg(cfg != NULL, "load failed: %s", errs.n ? errs.msgs[0] : "?");
    config_errors_free(&errs);
    return cfg;
}

static bool
listed(const struct config_errors *l, const char *needle)
{
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->msgs[i], needle) != NULL)
            return true;
    return false;
}

START_TEST(test_same_file_no_changes)
{
    struct config *a = load(&defaults), *b = load(&defaults);
    struct config_errors refused = {0}, changed = {0};
    ck_assert_uint_eq(config_reload_check(a, b, &refused, &changed), 0);
    ck_assert_uint_eq(refused.n, 0);
    ck_assert_uint_eq(changed.n, 0);
    config_free(a);
    config_free(b);
}
END_TEST

START_TEST(test_live_keys_change)
{
    struct knobs k = defaults;
    k.log_level = "debug";
    k.confirm = "5s";
    k.batch = "50";
    k.poll = "1s";
    k.retries = "3";
    k.initial = "2s";
    struct config *a = load(&defaults), *b = load(&k);
    struct config_errors refused = {0}, changed = {0};
    ck_assert_uint_eq(config_reload_check(a, b, &refused, &changed), 0);
    ck_assert_uint_eq(changed.n, 6);
    ck_assert(listed(&changed, "relay.log_level: info -> debug"));
    ck_assert(listed(&changed, "brokers.main.confirm_timeout: 30s -> 5s"));
    ck_assert(
        listed(&changed, "databases.orders.outboxes[0].batch_size: 500 -> 50"));
    ck_assert(listed(&changed, "poll_interval: 100ms -> 1s"));
    ck_assert(listed(&changed, "max_retries: 10 -> 3"));
    ck_assert(listed(&changed, "outboxes[0].backoff.initial: 1s -> 2s"));

    config_reload_apply(a, b);
    struct outbox_config *ob = config_outbox_at(a, 0);
    ck_assert_uint_eq(ob->batch_size, 50);
    ck_assert_uint_eq(ob->poll_interval_ms, 1000);
    ck_assert_uint_eq(ob->max_retries, 3);
    ck_assert_uint_eq(ob->backoff_initial_ms, 2000);
    ck_assert_uint_eq(a->brokers[0].confirm_timeout_ms, 5000);
    ck_assert_int_eq(a->relay.log_level, LOG_DEBUG);
    config_errors_free(&changed);
    config_free(a);
    config_free(b);
}
END_TEST

START_TEST(test_fixed_keys_refused_others_apply)
{
    struct knobs k = defaults;
    k.id = "relay-b";
    k.listen = "127.0.0.1:9181";
    k.url = "amqp://secret:hidden@127.0.0.1:5672/";
    k.password = "pw2";
    k.exchange = "other.events";
    k.batch = "20";
    struct config *a = load(&defaults), *b = load(&k);
    const char *running_url = a->brokers[0].urls[0];
    struct config_errors refused = {0}, changed = {0};
    ck_assert_uint_eq(config_reload_check(a, b, &refused, &changed), 5);
    ck_assert(listed(&refused, "relay.id: cannot change without a restart"));
    ck_assert(listed(&refused, "relay.listen: cannot change"));
    ck_assert(listed(&refused, "brokers.main.url: cannot change"));
    ck_assert(listed(&refused, "databases.orders.password: cannot change"));
    ck_assert(listed(&refused, "outboxes[0].exchange: cannot change"));
    /* secrets are never quoted in a log line */
    ck_assert(!listed(&refused, "hidden"));
    ck_assert(!listed(&refused, "pw2"));
    ck_assert_uint_eq(changed.n, 1);

    config_reload_apply(a, b);
    ck_assert_str_eq(a->relay.id, "relay-a");
    ck_assert_str_eq(a->relay.listen, "127.0.0.1:9180");
    ck_assert_ptr_eq(a->brokers[0].urls[0], running_url);
    ck_assert_str_eq(a->databases[0].password, "pw");
    ck_assert_str_eq(config_outbox_at(a, 0)->exchange.source, "orders.events");
    ck_assert_uint_eq(config_outbox_at(a, 0)->batch_size, 20);
    config_errors_free(&refused);
    config_errors_free(&changed);
    config_free(a);
    config_free(b);
}
END_TEST

START_TEST(test_outbox_added_and_removed)
{
    struct knobs k = defaults;
    k.extra = "      - table: audit_outbox\n";
    struct config *a = load(&defaults), *b = load(&k);
    struct config_errors refused = {0};
    ck_assert_uint_eq(config_reload_check(a, b, &refused, NULL), 1);
    ck_assert(listed(&refused, "outboxes[1]: a new outbox "
                               "(orders.audit_outbox) needs a restart"));
    config_errors_free(&refused);
    ck_assert_uint_eq(config_reload_check(b, a, &refused, NULL), 1);
    ck_assert(listed(&refused, "removing outbox orders.audit_outbox"));
    config_errors_free(&refused);
    config_free(a);
    config_free(b);
}
END_TEST

/* What a worker does with its private copy: scalars only, no pointers. */
START_TEST(test_outbox_adopt_copies_values_not_pointers)
{
    struct knobs k = defaults;
    k.batch = "7";
    k.confirm = "9s";
    struct config *a = load(&defaults), *b = load(&k);
    struct outbox_config live = *config_outbox_at(a, 0);
    struct broker_config broker = *live.broker;
    const char *table = live.table;
    config_outbox_adopt(&live, config_outbox_at(b, 0));
    config_broker_adopt(&broker, &b->brokers[0]);
    ck_assert_uint_eq(live.batch_size, 7);
    ck_assert_uint_eq(broker.confirm_timeout_ms, 9000);
    ck_assert_ptr_eq(live.table, table);
    ck_assert_ptr_eq(live.database, config_outbox_at(a, 0)->database);
    config_free(a);
    config_free(b);
}
END_TEST

Suite *
reload_suite(void)
{
    Suite *s = suite_create("reload");
    TCase *tc = tcase_create("reload");
    tcase_add_test(tc, test_same_file_no_changes);
    tcase_add_test(tc, test_live_keys_change);
    tcase_add_test(tc, test_fixed_keys_refused_others_apply);
    tcase_add_test(tc, test_outbox_added_and_removed);
    tcase_add_test(tc, test_outbox_adopt_copies_values_not_pointers);
    suite_add_tcase(s, tc);
    return s;
}
