/*
 * check_config_dump: `outboxd -T`'s YAML (defaults filled in, secrets
 * masked, read back to the same text) and outboxd.yaml(5) against the
 * key tables, so that the page cannot drift from the code.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

Suite *config_dump_suite(void);

#define DATA "data/config/"
#define MAN_PAGE "../docs/man/outboxd.yaml.5.scd"

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (len + n + 1 > cap)
            buf = realloc(buf, cap = 2 * (len + n + 1));
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    buf = buf ? buf : malloc(1);
    buf[len] = '\0';
    return buf;
}

static struct config *
load_text(const char *path, const char *text)
{
    struct config_errors errs = {0};
    struct config *cfg = config_load_buffer(path, text, strlen(text), &errs);
    ck_assert_msg(cfg != NULL, "%s: %s\n--\n%s", path,
                  errs.n ? errs.msgs[0] : "failed without a message", text);
    config_errors_free(&errs);
    return cfg;
}

static char *
dump_file(const char *path)
{
    struct config_errors errs = {0};
    struct config *cfg = config_load(path, &errs);
    ck_assert_msg(cfg != NULL, "%s: %s", path, errs.n ? errs.msgs[0] : "");
    char *text = config_dump(cfg);
    config_free(cfg);
    return text;
}

/* The dump, loaded again (from another directory's point of view) and
 * dumped again, is the same text. */
/* Every one of lines stands in the dump text. */
static void
assert_has_lines(const char *text, const char *const *lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strstr(text, lines[i]) != NULL, "no %s in:\n%s", lines[i],
                      text);
}

static void
assert_round_trip(const char *text)
{
    struct config *again = load_text("/nonexistent/dumped.yaml", text);
    char *twice = config_dump(again);
    ck_assert_str_eq(twice, text);
    free(twice);
    config_free(again);
}

static void
set_test_env(void)
{
    setenv("OUTBOXD_TEST_DB_PASSWORD", "db-secret", 1);
    setenv("OUTBOXD_TEST_BROKER_URL", "amqp://env:env-secret@127.0.0.1/", 1);
}

START_TEST(test_defaults_filled_in)
{
    char *text = dump_file(DATA "good_minimal.yaml");
    static const char *const lines[] = {
        "\n  # id: unset, each process takes <hostname>:<pid>\n",
        "\n  log_level: info\n",
        "\n  listen: 127.0.0.1:9180\n",
        "\n  shutdown_timeout: 10s\n",
        "\n    heartbeat: 30s\n",
        "\n    # tls: unset, no TLS\n",
        "\n    port: 3306\n",
        "\n    # password: unset, no password\n",
        "\n      - table: outbox_event\n",
        "\n        exchange: \"\"\n",
        "\n        routing_key: \"{aggregate_type}.{event_type}\"\n",
        "\n        batch_size: 500\n",
        "\n        poll_min: 1ms\n",
        "\n        backoff:\n          initial: 1s\n          max: 5m\n",
        "\n        retention:\n          sent: 7d\n          interval: 1m\n"
        "          batch: 5000\n",
    };
    assert_has_lines(text, lines, sizeof(lines) / sizeof(*lines));
    assert_round_trip(text);
    free(text);
}
END_TEST

/* hosts: each node with its port; host and port left out for it. */
START_TEST(test_hosts)
{
    char *text = dump_file(DATA "good_hosts.yaml");
    static const char *const lines[] = {
        "\n    # host: unset, hosts names the nodes\n",
        "\n    # port: unset, hosts names the nodes\n",
        "\n    hosts:\n      - node1.example:3310\n"
        "      - node2.example:3307\n      - \"[fd00::3]:3308\"\n"
        "      - \"[fd00::4]:3310\"\n",
    };
    assert_has_lines(text, lines, sizeof(lines) / sizeof(*lines));
    assert_round_trip(text);
    free(text);
}
END_TEST

/* Every value of good_full.yaml, none a default, comes out as set. */
START_TEST(test_values_kept)
{
    set_test_env();
    char *text = dump_file(DATA "good_full.yaml");
    static const char *const lines[] = {
        "\n  id: relay-a\n",
        "\n  log_format: json\n",
        "\n    url: \"amqps://user:***@rabbit.example:5671/vhost\"\n",
        "\n    tls:\n      ca_file: /",
        "/tests/data/config/tls_ca.pem\n",
        "\n      verify_hostname: false\n",
        "\n    urls:\n      - amqp://rabbit-a:5672/\n"
        "      - amqp://rabbit-b:5672/\n",
        "\n    password_env: OUTBOXD_TEST_DB_PASSWORD\n",
        "\n    wake: poll\n",
        "\n    server_public_key_file: /",
        "/tests/data/config/mysql_public_key.pem\n",
        "\n        exchange: \"orders.{aggregate_type}\"\n",
        "\n        exchange_column: exchange_override\n",
        "\n        ordering: none\n",
        "\n        poll_interval: 250ms\n",
        "\n        on_sent: delete\n",
    };
    assert_has_lines(text, lines, sizeof(lines) / sizeof(*lines));
    ck_assert_ptr_null(strstr(text, "pw@"));
    assert_round_trip(text);
    free(text);
}
END_TEST

static void
assert_hidden(const char *text, const char *secret)
{
    ck_assert_msg(strstr(text, secret) == NULL, "\"%s\" shown in:\n%s", secret,
                  text);
}

/* Inline secrets show as ***; of env and file, only their names. */
START_TEST(test_secrets_masked)
{
    static const char text[] =
        "brokers:\n"
        "  a: { url: \"amqp://relay:Mq-S3cret@rabbit:5672/\" }\n"
        "  b: { urls: [\"amqp://u:L1st-S3cret@r1/\", amqp://r2/] }\n"
        "databases:\n"
        "  d:\n"
        "    user: u\n"
        "    password: Inl1ne-S3cret\n"
        "    database: d\n"
        "    outboxes: [{ table: t, broker: a }]\n";
    struct config *cfg = load_text("inline.yaml", text);
    char *out = config_dump(cfg);
    assert_hidden(out, "Mq-S3cret");
    assert_hidden(out, "L1st-S3cret");
    assert_hidden(out, "Inl1ne-S3cret");
    ck_assert_ptr_nonnull(
        strstr(out, "url: \"amqp://relay:***@rabbit:5672/\""));
    ck_assert_ptr_nonnull(strstr(out, "- \"amqp://u:***@r1/\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "- amqp://r2/\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n    password: \"***\"\n"));
    assert_round_trip(out);
    free(out);
    config_free(cfg);
}
END_TEST

START_TEST(test_secret_sources_named)
{
    set_test_env();
    char *text = dump_file(DATA "good_secrets.yaml");
    assert_hidden(text, "env-secret");
    assert_hidden(text, "db-secret");
    assert_hidden(text, "s3cret pass");  /* secret_password.txt */
    assert_hidden(text, "relay:secret"); /* secret_url.txt */
    ck_assert_ptr_nonnull(strstr(text, "url_env: OUTBOXD_TEST_BROKER_URL\n"));
    ck_assert_ptr_nonnull(strstr(text, "password_env: OUTBOXD_TEST_DB_"));
    /* Relative to the config's directory, printed absolute. */
    ck_assert_ptr_nonnull(
        strstr(text, "/tests/data/config/secret_password.txt\n"));
    ck_assert_ptr_nonnull(strstr(text, "    url_file: /"));
    assert_round_trip(text);
    free(text);
}
END_TEST

/* Strings YAML would read otherwise are quoted; names too. */
START_TEST(test_quoting)
{
    static const char text[] =
        "relay: { id: \"null\", listen: \"\" }\n"
        "brokers: { \"my broker\": { url: amqp://h/ }, \"mai:\": { url: "
        "amqp://h/ } }\n"
        "databases:\n"
        "  d:\n"
        "    user: \"a \\\"quoted\\\" #user\"\n"
        "    database: \"true\"\n"
        "    socket: \"s\\N\\L\\P\\uFEFF\\x01\\t\"\n"
        "    outboxes: [{ table: p$t, routing_key: \"k: v\", broker: \"my "
        "broker\" }]\n";
    struct config *cfg = load_text("quoting.yaml", text);
    char *out = config_dump(cfg);
    ck_assert_ptr_nonnull(strstr(out, "\n  id: \"null\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n  listen: \"\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n  \"my broker\":\n"));
    ck_assert_ptr_nonnull(strstr(out, "user: \"a \\\"quoted\\\" #user\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n        broker: \"my broker\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "routing_key: \"k: v\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n  \"mai:\":\n")); /* fuzz_config */
    /* Breaks YAML would fold, and control characters, stay escaped. */
    ck_assert_ptr_nonnull(
        strstr(out, "socket: \"s\\N\\L\\P\\uFEFF\\x01\\x09\"\n"));
    assert_round_trip(out);
    free(out);
    config_free(cfg);
}
END_TEST

START_TEST(test_every_good_file_round_trips)
{
    static const char *const names[] = {"good_full",  "good_minimal",
                                        "good_multi", "good_secrets",
                                        "good_amqps", "good_pattern"};
    set_test_env();
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        char path[128];
        snprintf(path, sizeof(path), DATA "%s.yaml", names[i]);
        char *text = dump_file(path);
        assert_round_trip(text);
        free(text);
    }
}
END_TEST

/* ---- the keys walked, and outboxd.yaml(5) ---- */

struct keys {
    size_t n, reloadable;
    bool saw_sent, saw_listen, saw_tls_under_databases;
};

static void
count_key(const struct config_key *k, void *arg)
{
    struct keys *ks = arg;
    ks->n++;
    ks->reloadable += k->reload;
    if (strcmp(k->path, "databases.NAME.outboxes[].retention.sent") == 0)
        ks->saw_sent = k->reload && strcmp(k->def, "7d") == 0 &&
                       strcmp(k->section, "retention") == 0;
    if (strcmp(k->path, "relay.listen") == 0)
        ks->saw_listen = !k->reload && strcmp(k->type, "string") == 0;
    if (strcmp(k->path, "databases.NAME.tls.verify_peer") == 0)
        ks->saw_tls_under_databases = strcmp(k->section, "tls") == 0;
}

START_TEST(test_keys_walk)
{
    struct keys ks = {0};
    config_keys_walk(count_key, &ks);
    ck_assert(ks.saw_sent);
    ck_assert(ks.saw_listen);
    ck_assert(ks.saw_tls_under_databases);
    /* The keys conf/outboxd.yaml marks (reload): 4 of relay, 1 of each
     * broker, 1 of each database (discover_interval), 11 of each outbox
     * with 2 of backoff and 3 of retention. */
    ck_assert_uint_eq(ks.reloadable, 22);
    ck_assert_uint_gt(ks.n, 50);
}
END_TEST

/* The page, line by line, with each "# HEADING" it falls under. */
struct page {
    char **lines;
    char **heading;
    size_t n;
};

static void
page_load(struct page *p, const char *path)
{
    char *text = slurp(path), *save = NULL, *heading = "";
    memset(p, 0, sizeof(*p));
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# ", 2) == 0)
            heading = line + 2;
        p->lines = realloc(p->lines, (p->n + 1) * sizeof(*p->lines));
        p->heading = realloc(p->heading, (p->n + 1) * sizeof(*p->heading));
        p->lines[p->n] = line;
        p->heading[p->n++] = heading;
    }
}

static void
page_free(struct page *p)
{
    if (p->n > 0)
        free(p->lines[0]); /* strtok_r's buffer */
    free(p->lines);
    free(p->heading);
}

static void
upper(char *dst, const char *src, size_t size)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < size; i++)
        dst[i] = (char)toupper((unsigned char)src[i]);
    dst[i] = '\0';
}

/* The line "*name* ..." under heading, scdoc's backslashes dropped. */
static bool
page_entry(const struct page *p, const char *heading, const char *name,
           char *out, size_t size)
{
    char bold[96];
    snprintf(bold, sizeof(bold), "*%s*", name);
    for (size_t i = 0; i < p->n; i++) {
        const char *l = p->lines[i];
        if (strcmp(p->heading[i], heading) != 0 ||
            strncmp(l, bold, strlen(bold)) != 0 ||
            (l[strlen(bold)] != ' ' && l[strlen(bold)] != '\0'))
            continue;
        size_t j = 0;
        for (; *l != '\0' && j + 1 < size; l++)
            if (*l != '\\')
                out[j++] = *l;
        out[j] = '\0';
        return true;
    }
    return false;
}

struct drift {
    struct page page;
    char report[3000]; /* Check refuses longer messages */
    size_t len, nmissing;
};

static void drift_add(struct drift *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
drift_add(struct drift *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->report + d->len, sizeof(d->report) - d->len, fmt, ap);
    va_end(ap);
    if (n > 0 && d->len + (size_t)n < sizeof(d->report))
        d->len += (size_t)n;
    d->nmissing++;
}

static bool
is_scalar(const struct config_key *k)
{
    return strcmp(k->type, "mapping") != 0 && strcmp(k->type, "list") != 0;
}

/* What the entry's first line must say besides the name. */
static void
check_entry(struct drift *d, const struct config_key *k, const char *line)
{
    char want[128];
    if (k->def != NULL) {
        snprintf(want, sizeof(want), "default %s", k->def[0] ? k->def : "\"\"");
        if (strstr(line, want) == NULL)
            drift_add(d, "  %s: its line lacks \"%s\"\n", k->path, want);
    }
    if (strcmp(k->type, "integer") == 0) {
        snprintf(want, sizeof(want), "%llu to %llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
        if (strstr(line, want) == NULL)
            drift_add(d, "  %s: its line lacks \"%s\"\n", k->path, want);
    }
    if (k->required && strstr(line, "required") == NULL)
        drift_add(d, "  %s: its line does not say \"required\"\n", k->path);
    if (!is_scalar(k))
        return;
    const char *yes = k->reload ? "reload" : "restart";
    const char *no = k->reload ? "restart" : "reload";
    if (strstr(line, yes) == NULL || strstr(line, no) != NULL)
        drift_add(d, "  %s: its line must say \"%s\" and not \"%s\"\n", k->path,
                  yes, no);
}

static void
check_key(const struct config_key *k, void *arg)
{
    struct drift *d = arg;
    char heading[32], line[512];
    if (k->section == NULL) {
        upper(heading, k->name, sizeof(heading));
        for (size_t i = 0; i < d->page.n; i++)
            if (strcmp(d->page.heading[i], heading) == 0)
                return;
        drift_add(d, "  %s: no \"# %s\" section\n", k->path, heading);
        return;
    }
    upper(heading, k->section, sizeof(heading));
    if (!page_entry(&d->page, heading, k->name, line, sizeof(line)))
        drift_add(d, "  %s: no line starting \"*%s*\" under \"# %s\"\n",
                  k->path, k->name, heading);
    else
        check_entry(d, k, line);
}

START_TEST(test_man_page_documents_every_key)
{
    struct drift *d = calloc(1, sizeof(*d));
    page_load(&d->page, MAN_PAGE);
    config_keys_walk(check_key, d);
    ck_assert_msg(d->nmissing == 0,
                  "%s does not match the key tables (%zu problems):\n%s",
                  MAN_PAGE, d->nmissing, d->report);
    page_free(&d->page);
    free(d);
}
END_TEST

/* And the other way: every entry in a key section is a key there. */
struct known {
    const char *section, *name;
    bool found;
};

static void
find_key(const struct config_key *k, void *arg)
{
    struct known *kn = arg;
    char heading[32];
    upper(heading, k->section ? k->section : "", sizeof(heading));
    if (strcmp(heading, kn->section) == 0 && strcmp(k->name, kn->name) == 0)
        kn->found = true;
}

START_TEST(test_man_page_documents_only_keys)
{
    static const char *const sections[] = {"RELAY",     "BROKERS",  "TLS",
                                           "DATABASES", "OUTBOXES", "BACKOFF",
                                           "RETENTION"};
    struct page p;
    page_load(&p, MAN_PAGE);
    for (size_t i = 0; i < p.n; i++) {
        char name[64];
        if (p.lines[i][0] != '*' ||
            sscanf(p.lines[i], "*%63[a-z_]*", name) != 1)
            continue;
        for (size_t s = 0; s < sizeof(sections) / sizeof(*sections); s++) {
            if (strcmp(p.heading[i], sections[s]) != 0)
                continue;
            struct known kn = {sections[s], name, false};
            config_keys_walk(find_key, &kn);
            ck_assert_msg(kn.found, "%s: \"*%s*\" under \"# %s\" is no key",
                          MAN_PAGE, name, sections[s]);
        }
    }
    page_free(&p);
}
END_TEST

Suite *
config_dump_suite(void)
{
    Suite *s = suite_create("config_dump");
    TCase *tc = tcase_create("dump");
    tcase_add_test(tc, test_defaults_filled_in);
    tcase_add_test(tc, test_values_kept);
    tcase_add_test(tc, test_hosts);
    tcase_add_test(tc, test_secrets_masked);
    tcase_add_test(tc, test_secret_sources_named);
    tcase_add_test(tc, test_quoting);
    tcase_add_test(tc, test_every_good_file_round_trips);
    suite_add_tcase(s, tc);
    tc = tcase_create("documented");
    tcase_add_test(tc, test_keys_walk);
    tcase_add_test(tc, test_man_page_documents_every_key);
    tcase_add_test(tc, test_man_page_documents_only_keys);
    suite_add_tcase(s, tc);
    return s;
}
