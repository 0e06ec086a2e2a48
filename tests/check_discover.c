/*
 * check_discover: a tenant's entry made from a database_like template
 * (names, pointers, every field the relay reads) without a server.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "discover.h"

Suite *discover_suite(void);

static const char pattern_yaml[] = "brokers:\n"
                                   "  main: { url: amqp://h/ }\n"
                                   "  other: { url: amqp://o/ }\n"
                                   "databases:\n"
                                   "  tenants:\n"
                                   "    host: db.example\n"
                                   "    port: 3307\n"
                                   "    user: relay\n"
                                   "    password: pw\n"
                                   "    database_like: \"tenant\\\\_%\"\n"
                                   "    connect_timeout: 7s\n"
                                   "    wake: poll\n"
                                   "    tls: { verify_peer: false }\n"
                                   "    outboxes:\n"
                                   "      - table: outbox\n"
                                   "        broker: other\n"
                                   "        exchange: \"ex.{region}\"\n"
                                   "        routing_key_column: rk\n"
                                   "        envelope: cloudevents\n"
                                   "        batch_size: 77\n"
                                   "        on_dead: hold\n"
                                   "        lease: 45s\n"
                                   "      - table: audit\n"
                                   "        broker: main\n"
                                   "        cloudevents_source: /audit\n";

static struct config *
load(void)
{
    struct config_errors errs = {0};
    struct config *cfg = config_load_buffer("/nonexistent/t.yaml", pattern_yaml,
                                            strlen(pattern_yaml), &errs);
    ck_assert_msg(cfg != NULL, "%s", errs.n ? errs.msgs[0] : "");
    return cfg;
}

START_TEST(test_tenant_entry)
{
    struct config *cfg = load();
    const struct database_config *e = &cfg->databases[0];
    struct database_config *t = discover_tenant_new(e, "tenant_0001");
    ck_assert_str_eq(t->name, "tenants/tenant_0001");
    ck_assert_str_eq(t->database, "tenant_0001");
    ck_assert_ptr_null(t->database_like);
    ck_assert_str_eq(t->host, "db.example");
    ck_assert_ptr_ne(t->host, e->host);
    ck_assert_uint_eq(t->port, 3307);
    ck_assert_str_eq(t->user, "relay");
    ck_assert_str_eq(t->password, "pw");
    ck_assert_str_eq(t->password_source.key, "password");
    ck_assert_uint_eq(t->connect_timeout_ms, 7000);
    ck_assert_int_eq(t->wake, WAKE_POLL);
    ck_assert(t->tls.enabled);
    ck_assert(!t->tls.verify_peer);
    ck_assert_uint_eq(t->noutboxes, 2);
    discover_tenant_free(t);
    config_free(cfg);
}
END_TEST

START_TEST(test_tenant_outboxes)
{
    struct config *cfg = load();
    const struct database_config *e = &cfg->databases[0];
    struct database_config *t = discover_tenant_new(e, "tenant_0001");
    const struct outbox_config *a = &t->outboxes[0], *src = &e->outboxes[0];
    ck_assert_str_eq(a->name, "tenants/tenant_0001.outbox");
    ck_assert_str_eq(a->table, "outbox");
    ck_assert_ptr_eq(a->database, t);
    ck_assert_ptr_eq(a->broker, &cfg->brokers[1]);
    ck_assert_str_eq(a->exchange.source, "ex.{region}");
    ck_assert_ptr_ne(a->exchange.parts, src->exchange.parts);
    ck_assert_uint_eq(a->exchange.nparts, 2);
    ck_assert(a->exchange.parts[1].is_column);
    ck_assert_str_eq(a->exchange.parts[1].text, "region");
    ck_assert_str_eq(a->routing_key.source, "{aggregate_type}.{event_type}");
    ck_assert_str_eq(a->routing_key_column, "rk");
    ck_assert_uint_eq(a->ncolumns, src->ncolumns);
    for (size_t i = 0; i < a->ncolumns; i++)
        ck_assert_str_eq(a->columns[i], src->columns[i]);
    ck_assert_str_eq(a->cloudevents_source,
                     "outboxd://tenants/tenant_0001/outbox");
    ck_assert_int_eq(a->envelope, ENVELOPE_CLOUDEVENTS);
    ck_assert_uint_eq(a->batch_size, 77);
    ck_assert_int_eq(a->on_dead, ON_DEAD_HOLD);
    ck_assert_uint_eq(a->lease_ms, 45000);
    ck_assert_uint_eq(a->retention_sent_ms, src->retention_sent_ms);
    const struct outbox_config *b = &t->outboxes[1];
    ck_assert_str_eq(b->name, "tenants/tenant_0001.audit");
    ck_assert_str_eq(b->cloudevents_source, "/audit");
    ck_assert_ptr_eq(b->broker, &cfg->brokers[0]);
    discover_tenant_free(t);
    config_free(cfg);
}
END_TEST

/* Two tenants share nothing they free: freeing one leaves the other. */
START_TEST(test_tenants_independent)
{
    struct config *cfg = load();
    struct database_config *a = discover_tenant_new(&cfg->databases[0], "t1");
    struct database_config *b = discover_tenant_new(&cfg->databases[0], "t2");
    discover_tenant_free(a);
    ck_assert_str_eq(b->outboxes[0].name, "tenants/t2.outbox");
    ck_assert_str_eq(b->outboxes[0].exchange.parts[0].text, "ex.");
    discover_tenant_free(b);
    discover_tenant_free(NULL);
    /* The template is untouched. */
    ck_assert_str_eq(cfg->databases[0].outboxes[0].name, "tenants.outbox");
    ck_assert_ptr_null(cfg->databases[0].outboxes[0].cloudevents_source);
    config_free(cfg);
}
END_TEST

START_TEST(test_group_name)
{
    struct config *cfg = load();
    struct database_config *t = discover_tenant_new(&cfg->databases[0], "t1");
    char *g = discover_group_name(&cfg->databases[0]);
    ck_assert_str_eq(g, "tenants/*");
    free(g);
    g = discover_group_name(t);
    ck_assert_str_eq(g, "tenants/*");
    free(g);
    discover_tenant_free(t);
    config_free(cfg);
}
END_TEST

Suite *
discover_suite(void)
{
    Suite *s = suite_create("discover");
    TCase *tc = tcase_create("tenant");
    tcase_add_test(tc, test_tenant_entry);
    tcase_add_test(tc, test_tenant_outboxes);
    tcase_add_test(tc, test_tenants_independent);
    tcase_add_test(tc, test_group_name);
    suite_add_tcase(s, tc);
    return s;
}
