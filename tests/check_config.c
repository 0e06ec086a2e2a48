/*
 * check_config: the YAML loader against good files (every value and
 * default) and bad ones (the exact "file:line:column: message" lines).
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

Suite *config_suite(void);

#define DATA "data/config/"

/*
 * Each NAME has DATA/NAME.yaml (absent for bad_missing, a directory for
 * bad_directory) and DATA/NAME.expect holding every error line expected.
 */
static const char *const bad_inputs[] = {
    "bad_missing",        "bad_directory",
    "bad_empty",          "bad_yaml",
    "bad_yaml_flow",      "bad_two_documents",
    "bad_top_list",       "bad_unknown_key",
    "bad_wrong_type",     "bad_duration",
    "bad_unknown_broker", "bad_range",
    "bad_enum",           "bad_missing_required",
    "bad_no_sections",    "bad_empty_sections",
    "bad_no_outboxes",    "bad_duplicate",
    "bad_template",       "bad_identifiers",
    "bad_password",       "bad_broker_url",
    "bad_backoff",        "bad_broker_ambiguous",
    "bad_relay",          "bad_tls",
    "bad_many",           "bad_poll",
    "bad_size",           "bad_cloudevents",
    "bad_hold",           "bad_pattern",
    "bad_public_key",     "bad_hosts",
};

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

static void
set_test_env(void)
{
    setenv("OUTBOXD_TEST_DB_PASSWORD", "db-secret", 1);
    setenv("OUTBOXD_TEST_BROKER_URL", "amqp://env:env@127.0.0.1:5672/", 1);
    unsetenv("OUTBOXD_TEST_UNSET_VARIABLE");
}

/* Loads DATA/name.yaml, which must succeed. */
static struct config *
load_good(const char *name)
{
    char path[256];
    struct config_errors errs = {0};
    snprintf(path, sizeof(path), DATA "%s.yaml", name);
    set_test_env();
    struct config *cfg = config_load(path, &errs);
    ck_assert_msg(cfg != NULL, "%s: %s", path,
                  errs.n ? errs.msgs[0] : "failed without a message");
    ck_assert_uint_eq(errs.n, 0);
    config_errors_free(&errs);
    return cfg;
}

START_TEST(test_bad_input)
{
    const char *name = bad_inputs[_i];
    char path[256], expect_path[256];
    struct config_errors errs = {0};
    snprintf(path, sizeof(path), DATA "%s.yaml", name);
    snprintf(expect_path, sizeof(expect_path), DATA "%s.expect", name);
    set_test_env();

    ck_assert_ptr_null(config_load(path, &errs));
    ck_assert_uint_gt(errs.n, 0);
    char got[16384] = "";
    for (size_t i = 0; i < errs.n; i++) {
        strncat(got, errs.msgs[i], sizeof(got) - strlen(got) - 2);
        strcat(got, "\n");
    }
    char *want = slurp(expect_path);
    ck_assert_str_eq(got, want);
    free(want);
    config_errors_free(&errs);
    ck_assert_uint_eq(errs.n, 0);
}
END_TEST

/*
 * chmod 000 stops everyone but root, and the tests run as root in CI, so
 * there this is skipped; bad_directory covers a file that cannot be read.
 */
START_TEST(test_unreadable_file)
{
    if (geteuid() == 0)
        return;
    char path[] = "/tmp/outboxd-unreadable-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    chmod(path, 0);
    struct config_errors errs = {0};
    ck_assert_ptr_null(config_load(path, &errs));
    unlink(path);
    ck_assert_uint_eq(errs.n, 1);
    char want[128];
    snprintf(want, sizeof(want), "%s: cannot open: Permission denied", path);
    ck_assert_str_eq(errs.msgs[0], want);
    config_errors_free(&errs);
}
END_TEST

static void
check_full_relay_brokers(const struct config *cfg)
{
    ck_assert_str_eq(cfg->path, DATA "good_full.yaml");
    ck_assert_str_eq(cfg->relay.id, "relay-a");
    ck_assert_int_eq(cfg->relay.log_level, LOG_DEBUG);
    ck_assert_int_eq(cfg->relay.log_format, LOG_FORMAT_JSON);
    ck_assert_str_eq(cfg->relay.listen, "0.0.0.0:9999");
    ck_assert_uint_eq(cfg->relay.shutdown_timeout_ms, 25000);
    ck_assert_uint_eq(cfg->relay.metrics_outbox_series, 0);

    ck_assert_uint_eq(cfg->nbrokers, 2);
    const struct broker_config *b = &cfg->brokers[0];
    ck_assert_str_eq(b->name, "main");
    ck_assert_uint_eq(b->nurls, 1);
    ck_assert_str_eq(b->urls[0], "amqps://user:pw@rabbit.example:5671/vhost");
    ck_assert_uint_eq(b->heartbeat_ms, 15000);
    ck_assert_uint_eq(b->connect_timeout_ms, 2000);
    ck_assert_uint_eq(b->confirm_timeout_ms, 45000);
    ck_assert(b->tls.enabled);
    ck_assert_str_eq(b->tls.ca_file, DATA "tls_ca.pem");
    ck_assert_str_eq(b->tls.cert_file, DATA "tls_cert.pem");
    ck_assert_str_eq(b->tls.key_file, DATA "tls_key.pem");
    ck_assert(!b->tls.verify_peer);
    ck_assert(!b->tls.verify_hostname);

    b = &cfg->brokers[1];
    ck_assert_str_eq(b->name, "backup");
    ck_assert_uint_eq(b->nurls, 2);
    ck_assert_str_eq(b->urls[0], "amqp://rabbit-a:5672/");
    ck_assert_str_eq(b->urls[1], "amqp://rabbit-b:5672/");
    ck_assert(!b->tls.enabled);
}

static void
check_full_database(const struct config *cfg)
{
    ck_assert_uint_eq(cfg->ndatabases, 1);
    const struct database_config *db = &cfg->databases[0];
    ck_assert_str_eq(db->name, "orders");
    ck_assert_str_eq(db->host, "db.example");
    ck_assert_uint_eq(db->port, 3307);
    ck_assert_ptr_null(db->socket);
    ck_assert_str_eq(db->user, "relay");
    ck_assert_str_eq(db->password, "db-secret");
    ck_assert_str_eq(db->database, "orders_db");
    ck_assert_uint_eq(db->connect_timeout_ms, 3000);
    ck_assert_int_eq(db->wake, WAKE_POLL);
    ck_assert(db->tls.enabled);
    ck_assert_str_eq(db->tls.ca_file, DATA "tls_ca.pem");
    ck_assert_ptr_null(db->tls.cert_file);
    ck_assert(db->tls.verify_peer);
    ck_assert(!db->tls.verify_hostname);
    ck_assert_str_eq(db->server_public_key_file, DATA "mysql_public_key.pem");
    ck_assert_uint_eq(db->noutboxes, 1);
}

static void
check_full_outbox(const struct config *cfg)
{
    const struct outbox_config *ob = &cfg->databases[0].outboxes[0];
    ck_assert_str_eq(ob->name, "orders.outbox_event");
    ck_assert_str_eq(ob->table, "outbox_event");
    ck_assert_ptr_eq(ob->database, &cfg->databases[0]);
    ck_assert_ptr_eq(ob->broker, &cfg->brokers[0]);
    ck_assert_str_eq(ob->exchange.source, "orders.{aggregate_type}");
    ck_assert_str_eq(ob->routing_key.source, "{event_type}.v1");
    ck_assert_str_eq(ob->exchange_column, "exchange_override");
    ck_assert_str_eq(ob->routing_key_column, "routing_key_override");
    ck_assert(!ob->mandatory);
    ck_assert(!ob->lean);
    ck_assert_int_eq(ob->ordering, ORDERING_NONE);
    ck_assert_uint_eq(ob->batch_size, 1000);
    ck_assert_uint_eq(ob->batch_bytes, 4 * 1024 * 1024);
    ck_assert_uint_eq(ob->poll_min_ms, 5);
    ck_assert_uint_eq(ob->poll_interval_ms, 250);
    ck_assert_uint_eq(ob->wake_poll_interval_ms, 30000);
    ck_assert_uint_eq(ob->lease_ms, 60000);
    ck_assert_uint_eq(ob->max_retries, 3);
    ck_assert_uint_eq(ob->backoff_initial_ms, 2000);
    ck_assert_uint_eq(ob->backoff_max_ms, 600000);
    ck_assert_int_eq(ob->on_sent, ON_SENT_DELETE);
    ck_assert_uint_eq(ob->retention_sent_ms, 3 * 86400000ULL);
    ck_assert_uint_eq(ob->retention_interval_ms, 300000);
    ck_assert_uint_eq(ob->retention_batch, 100);
    /* Templates first, in order, then the override columns. */
    ck_assert_uint_eq(ob->ncolumns, 4);
    ck_assert_str_eq(ob->columns[0], "aggregate_type");
    ck_assert_str_eq(ob->columns[1], "event_type");
    ck_assert_str_eq(ob->columns[2], "exchange_override");
    ck_assert_str_eq(ob->columns[3], "routing_key_override");
}

START_TEST(test_full)
{
    struct config *cfg = load_good("good_full");
    check_full_relay_brokers(cfg);
    check_full_database(cfg);
    check_full_outbox(cfg);
    config_free(cfg);
}
END_TEST

static void
check_default_relay_broker(const struct config *cfg)
{
    char host[256], id[300];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    snprintf(id, sizeof(id), "%s:%ld", host, (long)getpid());
    ck_assert_str_eq(cfg->relay.id, id);
    ck_assert_int_eq(cfg->relay.log_level, LOG_INFO);
    ck_assert_int_eq(cfg->relay.log_format, LOG_FORMAT_TEXT);
    ck_assert_str_eq(cfg->relay.listen, "127.0.0.1:9180");
    ck_assert_uint_eq(cfg->relay.shutdown_timeout_ms, 10000);
    ck_assert_uint_eq(cfg->relay.metrics_outbox_series, 100);

    ck_assert_uint_eq(cfg->nbrokers, 1);
    const struct broker_config *b = &cfg->brokers[0];
    ck_assert_uint_eq(b->heartbeat_ms, 30000);
    ck_assert_uint_eq(b->connect_timeout_ms, 5000);
    ck_assert_uint_eq(b->confirm_timeout_ms, 30000);
    ck_assert(!b->tls.enabled);
    ck_assert_ptr_null(b->tls.ca_file);
    ck_assert_ptr_null(b->tls.cert_file);
    ck_assert_ptr_null(b->tls.key_file);
    ck_assert(b->tls.verify_peer);
    ck_assert(b->tls.verify_hostname);
}

static void
check_default_database(const struct database_config *db)
{
    ck_assert_str_eq(db->host, "127.0.0.1");
    ck_assert_uint_eq(db->port, 3306);
    ck_assert_ptr_null(db->socket);
    ck_assert_ptr_null(db->password);
    ck_assert_uint_eq(db->connect_timeout_ms, 5000);
    ck_assert_int_eq(db->wake, WAKE_AUTO);
    ck_assert(!db->tls.enabled);
    ck_assert_ptr_null(db->server_public_key_file);
    ck_assert(db->tls.verify_peer);
    ck_assert(db->tls.verify_hostname);
}

static void
check_default_outbox(const struct config *cfg, const struct outbox_config *ob)
{
    ck_assert_ptr_eq(ob->broker, &cfg->brokers[0]); /* the only broker */
    ck_assert_str_eq(ob->exchange.source, "");
    ck_assert_str_eq(ob->routing_key.source, "{aggregate_type}.{event_type}");
    ck_assert_ptr_null(ob->exchange_column);
    ck_assert_ptr_null(ob->routing_key_column);
    ck_assert(ob->mandatory);
    ck_assert(ob->lean);
    ck_assert_int_eq(ob->ordering, ORDERING_AGGREGATE);
    ck_assert_uint_eq(ob->batch_size, 500);
    ck_assert_uint_eq(ob->batch_bytes, 16 * 1024 * 1024);
    ck_assert_uint_eq(ob->poll_min_ms, 1);
    ck_assert_uint_eq(ob->poll_interval_ms, 1000);
    ck_assert_uint_eq(ob->wake_poll_interval_ms, 10000);
    ck_assert_uint_eq(ob->lease_ms, 30000);
    ck_assert_uint_eq(ob->max_retries, 10);
    ck_assert_uint_eq(ob->backoff_initial_ms, 1000);
    ck_assert_uint_eq(ob->backoff_max_ms, 300000);
    ck_assert_int_eq(ob->on_sent, ON_SENT_MARK);
    ck_assert_int_eq(ob->on_dead, ON_DEAD_SKIP);
    ck_assert_uint_eq(ob->retention_sent_ms, 7 * 86400000ULL);
    ck_assert_uint_eq(ob->retention_interval_ms, 60000);
    ck_assert_uint_eq(ob->retention_batch, 5000);
    ck_assert_int_eq(ob->envelope, ENVELOPE_OUTBOXD);
    /* <database>/<table>: the same from every relay of the outbox. */
    ck_assert_str_eq(ob->cloudevents_source, "outboxd://orders/outbox_event");
    ck_assert_uint_eq(ob->ncolumns, 2);
    ck_assert_str_eq(ob->columns[0], "aggregate_type");
    ck_assert_str_eq(ob->columns[1], "event_type");
}

START_TEST(test_minimal_defaults)
{
    struct config *cfg = load_good("good_minimal");
    check_default_relay_broker(cfg);
    ck_assert_uint_eq(cfg->ndatabases, 1);
    check_default_database(&cfg->databases[0]);
    ck_assert_uint_eq(config_outbox_count(cfg), 1);
    struct outbox_config *ob = config_outbox_at(cfg, 0);
    ck_assert_str_eq(ob->name, "orders.outbox_event");
    ck_assert_ptr_eq(ob->database, &cfg->databases[0]);
    check_default_outbox(cfg, ob);
    config_free(cfg);
}
END_TEST

START_TEST(test_secrets)
{
    struct config *cfg = load_good("good_secrets");
    ck_assert_str_eq(cfg->brokers[0].urls[0], "amqp://env:env@127.0.0.1:5672/");
    /* The file's trailing "\r\n" is not part of the secret. */
    ck_assert_str_eq(cfg->brokers[1].urls[0],
                     "amqp://relay:secret@127.0.0.1:5672/");
    ck_assert_str_eq(cfg->databases[0].password, "s3cret pass");
    ck_assert_str_eq(cfg->databases[1].password, "db-secret");
    ck_assert_ptr_eq(config_outbox_find(cfg, "orders.outbox_event")->broker,
                     &cfg->brokers[0]);
    ck_assert_ptr_eq(config_outbox_find(cfg, "billing.outbox_event")->broker,
                     &cfg->brokers[1]);
    config_free(cfg);
}
END_TEST

START_TEST(test_hosts)
{
    struct config *cfg = load_good("good_hosts");
    const struct database_config *db = &cfg->databases[0];
    static const char *const hosts[] = {"node1.example", "node2.example",
                                        "fd00::3", "fd00::4"};
    static const unsigned ports[] = {3310, 3307, 3308, 3310};
    ck_assert_uint_eq(db->nhosts, 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(db->hosts[i].host, hosts[i]);
        ck_assert_uint_eq(db->hosts[i].port, ports[i]);
    }
    /* The first names the entry's server where one name is needed. */
    ck_assert_str_eq(db->host, "node1.example");
    ck_assert_uint_eq(db->port, 3310);
    ck_assert_uint_eq(cfg->databases[0].noutboxes, 1);
    config_free(cfg);
}
END_TEST

START_TEST(test_multi)
{
    static const char *const names[] = {
        "orders.outbox_event", "orders.outbox_audit", "billing.outbox_event",
        "billing.invoice_outbox", "billing.payment$outbox"};
    static const size_t brokers[] = {0, 1, 1, 0, 0};
    struct config *cfg = load_good("good_multi");
    ck_assert_str_eq(cfg->relay.listen, "");
    ck_assert_uint_eq(cfg->brokers[1].nurls, 2);
    ck_assert_str_eq(cfg->brokers[1].urls[1], "amqp://rabbit-b2:5672/");
    ck_assert_str_eq(cfg->databases[0].socket, "/run/mysqld/mysqld.sock");
    ck_assert_str_eq(cfg->databases[0].host, "localhost");
    ck_assert_str_eq(cfg->databases[1].host, "billing-db");
    ck_assert_uint_eq(config_outbox_count(cfg), 5);
    for (size_t i = 0; i < 5; i++) {
        struct outbox_config *ob = config_outbox_at(cfg, i);
        ck_assert_str_eq(ob->name, names[i]);
        ck_assert_ptr_eq(config_outbox_find(cfg, names[i]), ob);
        ck_assert_ptr_eq(ob->database, &cfg->databases[i < 2 ? 0 : 1]);
        ck_assert_ptr_eq(ob->broker, &cfg->brokers[brokers[i]]);
    }
    ck_assert_ptr_null(config_outbox_at(cfg, 5));
    ck_assert_ptr_null(config_outbox_find(cfg, "orders.nope"));
    ck_assert_ptr_null(config_outbox_find(cfg, "outbox_event"));
    /* A constant routing key needs no column; an override adds its own. */
    ck_assert_uint_eq(config_outbox_at(cfg, 1)->ncolumns, 0);
    ck_assert_uint_eq(config_outbox_at(cfg, 2)->ncolumns, 3);
    ck_assert_str_eq(config_outbox_at(cfg, 2)->columns[2], "rk");
    config_free(cfg);
}
END_TEST

START_TEST(test_amqps_enables_tls)
{
    struct config *cfg = load_good("good_amqps");
    ck_assert(cfg->brokers[0].tls.enabled);
    ck_assert(cfg->brokers[0].tls.verify_peer);
    ck_assert(cfg->brokers[0].tls.verify_hostname);
    ck_assert(!cfg->databases[0].tls.enabled);
    config_free(cfg);
}
END_TEST

START_TEST(test_reference_config)
{
    struct config_errors errs = {0};
    setenv("ORDERS_DB_PASSWORD", "from-env", 1);
    struct config *cfg = config_load("../conf/outboxd.yaml", &errs);
    ck_assert_msg(cfg != NULL, "%s", errs.n ? errs.msgs[0] : "");
    ck_assert_str_eq(cfg->databases[0].password, "from-env");
    ck_assert_ptr_nonnull(config_outbox_find(cfg, "orders.outbox_event"));
    config_free(cfg);
}
END_TEST

/* Loads text written with mode; returns what the loader wrote to stderr. */
static char *
load_capturing_stderr(const char *text, mode_t mode)
{
    char path[] = "/tmp/outboxd-config-XXXXXX";
    char log_path[] = "/tmp/outboxd-stderr-XXXXXX";
    int fd = mkstemp(path), log_fd = mkstemp(log_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(log_fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
    close(fd);
    chmod(path, mode);

    int saved = dup(STDERR_FILENO);
    dup2(log_fd, STDERR_FILENO);
    struct config_errors errs = {0};
    struct config *cfg = config_load(path, &errs);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(log_fd);
    ck_assert_ptr_nonnull(cfg);
    config_free(cfg);
    unlink(path);
    char *out = slurp(log_path);
    unlink(log_path);
    return out;
}

START_TEST(test_inline_password_warning)
{
    static const char text[] = "brokers: { main: { url: amqp://h/ } }\n"
                               "databases:\n"
                               "  orders:\n"
                               "    user: relay\n"
                               "    password: inline\n"
                               "    database: orders\n"
                               "    outboxes: [{ table: outbox_event }]\n";
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    char *out = load_capturing_stderr(text, 0644);
    ck_assert_ptr_nonnull(strstr(out, "inline password"));
    ck_assert_ptr_nonnull(strstr(out, "mode 644"));
    free(out);
    out = load_capturing_stderr(text, 0600);
    ck_assert_str_eq(out, "");
    free(out);
    /* The file's group is ours (mkstemp makes it so): 0640 is the
     * package's convention, root:outboxd, and draws no warning. */
    out = load_capturing_stderr(text, 0640);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

/* One outbox with extra keys, loaded from memory. */
static struct config *
load_outbox(const char *keys, struct config_errors *errs)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "brokers: { main: { url: amqp://h/ } }\n"
             "databases:\n"
             "  shop-eu:\n"
             "    user: relay\n"
             "    database: shop\n"
             "    outboxes:\n"
             "      - table: outbox$1\n"
             "%s",
             keys);
    return config_load_buffer("/nonexistent/ce.yaml", text, strlen(text), errs);
}

/* Sources the CloudEvents spec's own examples use, and an IP literal. */
static const char *const good_sources[] = {
    "https://github.com/cloudevents",
    "mailto:cncf-wg-serverless@lists.cncf.io",
    "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66",
    "cloudevents/spec/pull/123",
    "/sensors/tn-1234567/alerts",
    "1-555-123-4567",
    "amqp://[::1]:5672/orders?x=1#frag",
    "/orders/caf%C3%A9",
};

START_TEST(test_cloudevents_keys)
{
    char keys[256];
    snprintf(keys, sizeof(keys),
             "        envelope: cloudevents\n"
             "        cloudevents_source: \"%s\"\n",
             good_sources[_i]);
    struct config_errors errs = {0};
    struct config *cfg = load_outbox(keys, &errs);
    ck_assert_msg(cfg != NULL, "%s", errs.n ? errs.msgs[0] : "");
    const struct outbox_config *ob = config_outbox_at(cfg, 0);
    ck_assert_int_eq(ob->envelope, ENVELOPE_CLOUDEVENTS);
    ck_assert_str_eq(ob->cloudevents_source, good_sources[_i]);
    config_free(cfg);
}
END_TEST

/* The default source names the database entry and the table, as the
 * outbox's name does, and is itself a valid URI-reference. */
START_TEST(test_cloudevents_default_source)
{
    struct config *cfg = load_outbox("        envelope: cloudevents\n", NULL);
    ck_assert_ptr_nonnull(cfg);
    const struct outbox_config *ob = config_outbox_at(cfg, 0);
    ck_assert_str_eq(ob->name, "shop-eu.outbox$1");
    ck_assert_str_eq(ob->cloudevents_source, "outboxd://shop-eu/outbox$1");
    config_free(cfg);
}
END_TEST

/* What a message looks like changes only with a restart. */
START_TEST(test_cloudevents_keys_need_restart)
{
    struct config *a = load_outbox("", NULL);
    struct config *b = load_outbox("        envelope: cloudevents\n"
                                   "        cloudevents_source: /shop\n",
                                   NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    struct config_errors refused = {0};
    ck_assert_uint_eq(config_reload_check(a, b, &refused, NULL), 2);
    ck_assert_ptr_nonnull(strstr(refused.msgs[0], ".envelope: cannot change"));
    ck_assert_ptr_nonnull(
        strstr(refused.msgs[1], ".cloudevents_source: cannot change"));
    config_errors_free(&refused);
    config_free(a);
    config_free(b);
}
END_TEST

/* database_like: the entry's outboxes are templates, no outboxes of
 * their own; a default CloudEvents source is left for each tenant. */
START_TEST(test_pattern)
{
    struct config *cfg = load_good("good_pattern");
    const struct database_config *t = &cfg->databases[0];
    ck_assert_str_eq(t->name, "tenants");
    ck_assert_ptr_null(t->database);
    ck_assert_str_eq(t->database_like, "tenant\\_%");
    ck_assert_uint_eq(t->discover_interval_ms, 120000);
    ck_assert_uint_eq(t->noutboxes, 2);
    ck_assert_str_eq(t->outboxes[0].name, "tenants.outbox");
    ck_assert_ptr_null(t->outboxes[0].cloudevents_source);
    ck_assert_str_eq(t->outboxes[1].cloudevents_source, "/audit");
    ck_assert_uint_eq(t->outboxes[1].ncolumns,
                      3); /* region and the key's two */
    ck_assert_str_eq(cfg->databases[1].database, "orders");
    ck_assert_ptr_null(cfg->databases[1].database_like);
    ck_assert_uint_eq(cfg->databases[1].discover_interval_ms, 30000);
    ck_assert_uint_eq(config_outbox_count(cfg), 1);
    ck_assert_str_eq(config_outbox_at(cfg, 0)->name, "orders.outbox_event");
    ck_assert_ptr_null(config_outbox_find(cfg, "tenants.outbox"));
    config_free(cfg);
}
END_TEST

static struct config *
load_pattern(const char *like, const char *interval)
{
    char text[512];
    snprintf(text, sizeof(text),
             "brokers: { main: { url: amqp://h/ } }\n"
             "databases:\n"
             "  tenants:\n"
             "    user: relay\n"
             "    database_like: \"%s\"\n"
             "    discover_interval: %s\n"
             "    outboxes:\n"
             "      - table: outbox\n",
             like, interval);
    struct config_errors errs = {0};
    struct config *cfg =
        config_load_buffer("/nonexistent/p.yaml", text, strlen(text), &errs);
    ck_assert_msg(cfg != NULL, "%s", errs.n ? errs.msgs[0] : "");
    return cfg;
}

/* SIGHUP: discover_interval changes live, the pattern needs a restart. */
START_TEST(test_pattern_reload)
{
    struct config *cur = load_pattern("t%", "30s");
    struct config *next = load_pattern("t%", "5s");
    struct config_errors refused = {0}, changed = {0};
    ck_assert_uint_eq(config_reload_check(cur, next, &refused, &changed), 0);
    ck_assert_uint_eq(changed.n, 1);
    ck_assert_str_eq(changed.msgs[0],
                     "databases.tenants.discover_interval: 30s -> 5s");
    config_reload_apply(cur, next);
    ck_assert_uint_eq(cur->databases[0].discover_interval_ms, 5000);
    config_free(next);
    next = load_pattern("u%", "5s");
    ck_assert_uint_eq(config_reload_check(cur, next, &refused, NULL), 1);
    ck_assert_ptr_nonnull(strstr(refused.msgs[0],
                                 "databases.tenants.database_like: cannot "
                                 "change without a restart"));
    config_errors_free(&refused);
    config_errors_free(&changed);
    config_free(next);
    config_free(cur);
}
END_TEST

/* relay.metrics_outbox_series: a count from 0, refused past its range
 * with the key and where, changed by a reload. */
static struct config *
load_series(const char *value, struct config_errors *errs)
{
    char text[512];
    snprintf(text, sizeof(text),
             "relay:\n"
             "  metrics_outbox_series: %s\n"
             "brokers: { main: { url: amqp://h/ } }\n"
             "databases:\n"
             "  shop:\n"
             "    user: relay\n"
             "    database: shop\n"
             "    outboxes: [{ table: outbox_event }]\n",
             value);
    return config_load_buffer("/nonexistent/ms.yaml", text, strlen(text), errs);
}

START_TEST(test_metrics_outbox_series)
{
    struct config_errors errs = {0};
    ck_assert_ptr_null(load_series("-1", &errs));
    ck_assert_ptr_null(load_series("1000001", &errs));
    ck_assert_uint_eq(errs.n, 2);
    ck_assert_str_eq(errs.msgs[0],
                     "/nonexistent/ms.yaml:2:26: relay.metrics_outbox_series: "
                     "expected a whole number from 0 to 1000000, got \"-1\"");
    ck_assert_str_eq(errs.msgs[1],
                     "/nonexistent/ms.yaml:2:26: relay.metrics_outbox_series: "
                     "1000001 is out of range (0 to 1000000)");
    config_errors_free(&errs);
    struct config *a = load_series("0", NULL), *b = load_series("1000", NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(a->relay.metrics_outbox_series, 0);
    struct config_errors changed = {0};
    ck_assert_uint_eq(config_reload_check(a, b, NULL, &changed), 0);
    ck_assert_uint_eq(changed.n, 1);
    ck_assert_str_eq(changed.msgs[0], "relay.metrics_outbox_series: 0 -> 1000");
    config_reload_apply(a, b);
    ck_assert_uint_eq(a->relay.metrics_outbox_series, 1000);
    config_errors_free(&changed);
    config_free(a);
    config_free(b);
}
END_TEST

/* Errors of a second load are appended; a NULL errs is allowed. */
START_TEST(test_errors_append)
{
    struct config_errors errs = {0};
    ck_assert_ptr_null(config_load(DATA "bad_unknown_broker.yaml", &errs));
    ck_assert_ptr_null(config_load(DATA "bad_relay.yaml", &errs));
    ck_assert_uint_eq(errs.n, 3);
    ck_assert_ptr_nonnull(strstr(errs.msgs[2], "relay.listen"));
    config_errors_free(&errs);
    ck_assert_ptr_null(config_load(DATA "bad_relay.yaml", NULL));
    config_free(NULL);
}
END_TEST

Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("bad");
    tcase_add_loop_test(tc, test_bad_input, 0,
                        sizeof(bad_inputs) / sizeof(*bad_inputs));
    tcase_add_test(tc, test_unreadable_file);
    tcase_add_test(tc, test_errors_append);
    suite_add_tcase(s, tc);

    tc = tcase_create("good");
    tcase_add_test(tc, test_full);
    tcase_add_test(tc, test_minimal_defaults);
    tcase_add_test(tc, test_secrets);
    tcase_add_test(tc, test_hosts);
    tcase_add_test(tc, test_multi);
    tcase_add_test(tc, test_amqps_enables_tls);
    tcase_add_test(tc, test_reference_config);
    tcase_add_test(tc, test_inline_password_warning);
    tcase_add_loop_test(tc, test_cloudevents_keys, 0,
                        sizeof(good_sources) / sizeof(*good_sources));
    tcase_add_test(tc, test_cloudevents_default_source);
    tcase_add_test(tc, test_cloudevents_keys_need_restart);
    tcase_add_test(tc, test_pattern);
    tcase_add_test(tc, test_pattern_reload);
    tcase_add_test(tc, test_metrics_outbox_series);
    suite_add_tcase(s, tc);
    return s;
}
