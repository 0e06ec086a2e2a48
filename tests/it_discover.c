/*
 * it_discover: database_like against the real MariaDB (3306): which
 * schemas discover_schemas finds (the pattern exact, the tables all
 * there, the grants the server shows), a new one found on the next
 * look, and outboxctl status, dead list and dead retry over the tenants.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "discover.h"

Suite *it_discover_suite(void);

/* The schemas of one test: prefix_t1.. match, the others do not. */
struct dfx {
    char prefix[64], like[160], conf[256];
    char made[8][96];
    size_t nmade;
};

static const char *
dfx_schema(struct dfx *f, const char *fmt, const char *suffix)
{
    ck_assert_uint_lt(f->nmade, 7);
    char *s = f->made[f->nmade++];
    snprintf(s, sizeof(f->made[0]), fmt, f->prefix, suffix);
    return s;
}

/* A schema named from the prefix, with the outbox table or empty. */
static const char *
dfx_create(struct dfx *f, const char *fmt, const char *suffix, bool table)
{
    const char *s = dfx_schema(f, fmt, suffix);
    it_db_create(s, table ? it_src_path("sql/outbox.sql") : NULL);
    return s;
}

/* The LIKE pattern "<prefix>_%", the prefix's own '_' escaped. */
static void
dfx_open(struct dfx *f)
{
    memset(f, 0, sizeof(*f));
    it_unique_name(f->prefix, sizeof(f->prefix), "itdisc");
    size_t j = 0;
    for (const char *p = f->prefix; *p != '\0'; p++) {
        if (*p == '_')
            f->like[j++] = '\\';
        f->like[j++] = *p;
    }
    snprintf(f->like + j, sizeof(f->like) - j, "\\_%%");
    snprintf(f->conf, sizeof(f->conf), "/tmp/%s.yaml", f->prefix);
    dfx_create(f, "%s_%s", "t1", true);
    dfx_create(f, "%s_%s", "t2", true);
    dfx_create(f, "%s_%s", "t3", true);
    dfx_create(f, "%s_%s", "empty", false); /* matches, no table */
    dfx_create(f, "x%s_%s", "t9", true);    /* does not match */
    /* Matches only case-blind: the pattern's own letters in capitals. */
    char up[96];
    snprintf(up, sizeof(up), "ITDISC%s_t4", f->prefix + strlen("itdisc"));
    char *s = f->made[f->nmade++];
    str_copy(s, up, sizeof(f->made[0]));
    it_db_create(s, it_src_path("sql/outbox.sql"));
}

static void
dfx_close(struct dfx *f)
{
    for (size_t i = 0; i < f->nmade; i++)
        it_db_drop(f->made[i]);
    unlink(f->conf);
}

/* A config with the entry "tenants" over the pattern; extra outboxes
 * and entries appended as they are. */
static struct config *
dfx_config(struct dfx *f, const char *user, const char *password,
           const char *extra_outboxes, const char *extra_entries)
{
    it_write_file(f->conf,
                  "brokers:\n"
                  "  main: { url: \"" IT_AMQP_URL "\" }\n"
                  "databases:\n"
                  "  tenants:\n"
                  "    host: 127.0.0.1\n"
                  "    port: %d\n"
                  "    user: %s\n"
                  "    password: %s\n"
                  "    database_like: '%s'\n"
                  "    outboxes:\n"
                  "      - table: outbox_event\n"
                  "%s%s",
                  IT_DB_PORT, user, password, f->like, extra_outboxes,
                  extra_entries);
    struct config_errors errs = {0};
    struct config *cfg = config_load(f->conf, &errs);
    ck_assert_msg(cfg != NULL, "%s", errs.n ? errs.msgs[0] : "");
    return cfg;
}

/* discover_schemas' answer into names, its warning into err. */
static size_t
discover_once(const struct database_config *entry, char ***names, char *err,
              size_t errlen)
{
    size_t n;
    MYSQL *db = discover_connect(entry, err, errlen);
    ck_assert_msg(db != NULL, "%s", err);
    ck_assert_msg(discover_schemas(db, entry, names, &n, err, errlen) == 0,
                  "%s", err);
    mysql_close(db);
    return n;
}

/* The schemas discovered, as "a b c" without the prefix. */
static char *
discovered(const struct database_config *entry, const char *prefix)
{
    char err[ERR_LEN], **names;
    size_t n = discover_once(entry, &names, err, sizeof(err));
    ck_assert_str_eq(err, "");
    struct strbuf out = {0};
    strbuf_adds(&out, "");
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(strncmp(names[i], prefix, strlen(prefix)) == 0,
                      "%s does not match %s", names[i], prefix);
        strbuf_addf(&out, "%s%s", i ? " " : "", names[i] + strlen(prefix));
    }
    discover_names_free(names, n);
    return out.p;
}

START_TEST(test_schemas_found)
{
    struct dfx f;
    dfx_open(&f);
    struct config *cfg = dfx_config(&f, IT_DB_USER, IT_DB_PASSWORD, "", "");
    char *got = discovered(&cfg->databases[0], f.prefix);
    ck_assert_str_eq(got, "_t1 _t2 _t3");
    free(got);
    /* A tenant created later is there on the next look, in order. */
    dfx_create(&f, "%s_%s", "t0", true);
    got = discovered(&cfg->databases[0], f.prefix);
    ck_assert_str_eq(got, "_t0 _t1 _t2 _t3");
    free(got);
    config_free(cfg);
    dfx_close(&f);
}
END_TEST

/* With two outbox tables, a schema that has only one is no tenant. */
START_TEST(test_schema_needs_every_table)
{
    struct dfx f;
    dfx_open(&f);
    MYSQL *db = it_db_connect(f.made[1]); /* _t2 */
    it_db_exec(db, "CREATE TABLE audit_outbox LIKE outbox_event");
    mysql_close(db);
    struct config *cfg = dfx_config(&f, IT_DB_USER, IT_DB_PASSWORD,
                                    "      - table: audit_outbox\n", "");
    char *got = discovered(&cfg->databases[0], f.prefix);
    ck_assert_str_eq(got, "_t2");
    free(got);
    config_free(cfg);
    dfx_close(&f);
}
END_TEST

/* How many schemas discover_schemas found, its warning into err. */
static size_t
discover_count(const struct database_config *entry, char *err, size_t errlen)
{
    char **names;
    size_t n = discover_once(entry, &names, err, errlen);
    discover_names_free(names, n);
    return n;
}

/*
 * Tenants with more tables than the server's table caches hold: the
 * discovery says so, with the cache's size, and still finds them all;
 * with room for them, it says nothing.
 */
START_TEST(test_table_caches_too_small)
{
    struct dfx f;
    dfx_open(&f);
    for (size_t i = 0; i < 3; i++) { /* _t1 .. _t3: 4 tables each */
        MYSQL *db = it_db_connect(f.made[i]);
        for (int k = 2; k <= 4; k++)
            it_db_exec(db, "CREATE TABLE o%d LIKE outbox_event", k);
        mysql_close(db);
    }
    struct config *cfg = dfx_config(
        &f, IT_DB_USER, IT_DB_PASSWORD,
        "      - table: o2\n      - table: o3\n      - table: o4\n", "");
    MYSQL *root = it_db_connect(NULL);
    long long was = it_db_int(root, "SELECT @@global.table_open_cache");
    /* Above the 12 tables, below the 60 instances their probes open. */
    it_db_exec(root, "SET GLOBAL table_open_cache = 40");
    char err[ERR_LEN];
    size_t n = discover_count(&cfg->databases[0], err, sizeof(err));
    it_db_exec(root, "SET GLOBAL table_open_cache = %lld", was);
    ck_assert_uint_eq(n, 3);
    ck_assert_msg(strstr(err, "table_open_cache (40)") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "database tenants: ") == err, "%s", err);
    n = discover_count(&cfg->databases[0], err, sizeof(err));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(err, "");
    mysql_close(root);
    config_free(cfg);
    dfx_close(&f);
}
END_TEST

/* The server lists only what the user may see: a relay account granted
 * on one tenant's table finds that tenant alone. */
START_TEST(test_schemas_by_grant)
{
    struct dfx f;
    char user[64], password[64];
    dfx_open(&f);
    it_db_grant_relay(f.made[2], "outbox_event", user, sizeof(user), password,
                      sizeof(password));
    struct config *cfg = dfx_config(&f, user, password, "", "");
    char *got = discovered(&cfg->databases[0], f.prefix);
    ck_assert_str_eq(got, "_t3");
    free(got);
    config_free(cfg);
    dfx_close(&f);
}
END_TEST

/* A DEAD row in tenant _t2, for outboxctl. */
static void
insert_dead(const char *schema)
{
    MYSQL *db = it_db_connect(schema);
    it_db_exec(db, "INSERT INTO outbox_event (event_id, aggregate_type, "
                   "aggregate_id, event_type, payload, status, retry_count, "
                   "last_error) VALUES ('d-1', 'Order', 'o-1', 'OrderCreated', "
                   "'{}', 'DEAD', 11, 'NO_ROUTE')");
    it_db_exec(db, "COMMIT");
    mysql_close(db);
}

static char *
tenant_outbox(const struct dfx *f, const char *suffix)
{
    return xasprintf("tenants/%s_%s.outbox_event", f->prefix, suffix);
}

START_TEST(test_outboxctl_over_tenants)
{
    struct dfx f;
    dfx_open(&f);
    insert_dead(f.made[1]);
    config_free(dfx_config(&f, IT_DB_USER, IT_DB_PASSWORD, "", ""));
    char *t1 = tenant_outbox(&f, "t1"), *t2 = tenant_outbox(&f, "t2");
    struct it_ctl_run r = it_ctl(f.conf, "status");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, t1) && strstr(r.out, t2) &&
                      strstr(r.out, "_t3.outbox_event") &&
                      !strstr(r.out, "_empty") && !strstr(r.out, "ITDISC") &&
                      !strstr(r.out, "_t9"),
                  "status:\n%s", r.out);
    it_ctl_free(&r);

    r = it_ctl(f.conf, "--json dead list");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    char *want = xasprintf("{\"outbox\":\"%s\",\"total\":1,", t2);
    ck_assert_msg(strstr(r.out, want) != NULL, "dead list: %s", r.out);
    free(want);
    it_ctl_free(&r);

    /* One tenant by its name; the others are not touched. */
    r = it_ctl(f.conf, "dead retry --outbox %s d-1", t2);
    ck_assert_msg(r.rc == 0, "rc %d: %s %s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    MYSQL *db = it_db_connect(f.made[1]);
    ck_assert_int_eq(it_db_count_status(db, "PENDING"), 1);
    mysql_close(db);
    r = it_ctl(f.conf, "status --outbox %s", t1);
    ck_assert_msg(r.rc == 0 && strstr(r.out, t1) && !strstr(r.out, t2),
                  "rc %d: %s %s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    free(t1);
    free(t2);
    dfx_close(&f);
}
END_TEST

/*
 * outboxctl holds one session per server and account, as the daemon's
 * workers do: an account allowed two connections an hour (the
 * discovery's and one more) reads the status of all three tenants.  A
 * tenant whose table lost a column is named, exit 1, and the session
 * goes on for the tenant after it.
 */
START_TEST(test_outboxctl_one_session)
{
    struct dfx f;
    dfx_open(&f);
    char user[64];
    snprintf(user, sizeof(user), "itctl%d", (int)getpid());
    MYSQL *db = it_db_connect(NULL);
    it_db_exec(db,
               "CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY 'pw' WITH "
               "MAX_CONNECTIONS_PER_HOUR 2",
               user);
    for (size_t i = 0; i < 3; i++)
        it_db_exec(db,
                   "GRANT SELECT, UPDATE, DELETE ON `%s`.`outbox_event` TO "
                   "'%s'@'127.0.0.1'",
                   f.made[i], user);
    config_free(dfx_config(&f, user, "pw", "", ""));
    struct it_ctl_run r = it_ctl(f.conf, "status");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "_t1.outbox_event") &&
                      strstr(r.out, "_t2.outbox_event") &&
                      strstr(r.out, "_t3.outbox_event"),
                  "status:\n%s", r.out);
    it_ctl_free(&r);
    it_db_exec(db, "FLUSH USER_RESOURCES");
    it_db_exec(db, "ALTER TABLE `%s`.outbox_event DROP COLUMN event_type",
               f.made[1]);
    r = it_ctl(f.conf, "status");
    ck_assert_msg(r.rc == 1 && strstr(r.err, "_t2.outbox_event") &&
                      strstr(r.err, "event_type"),
                  "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "_t1.outbox_event") &&
                      strstr(r.out, "_t3.outbox_event"),
                  "status:\n%s", r.out);
    it_ctl_free(&r);
    it_db_exec(db, "DROP USER '%s'@'127.0.0.1'", user);
    mysql_close(db);
    dfx_close(&f);
}
END_TEST

/* A tenant that is not there is a usage error naming the groups; the
 * group itself selects every tenant; outboxes reads no database. */
START_TEST(test_outboxctl_names)
{
    struct dfx f;
    dfx_open(&f);
    config_free(dfx_config(&f, IT_DB_USER, IT_DB_PASSWORD, "", ""));
    char *gone = tenant_outbox(&f, "empty");
    struct it_ctl_run r = it_ctl(f.conf, "status --outbox %s", gone);
    ck_assert_msg(r.rc == 64 && strstr(r.err, "no outbox named") &&
                      strstr(r.err, "tenants/*"),
                  "rc %d: %s", r.rc, r.err);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "--json status --outbox 'tenants/*'");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "_t1.outbox_event") &&
                      strstr(r.out, "_t3.outbox_event"),
                  "rc %d: %s %s", r.rc, r.out, r.err);
    it_ctl_free(&r);
    r = it_ctl(f.conf, "outboxes");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_str_eq(r.out, "tenants/*\n");
    it_ctl_free(&r);
    free(gone);
    dfx_close(&f);
}
END_TEST

/* A pattern entry whose server is down: exit 69, the others served. */
START_TEST(test_outboxctl_server_down)
{
    struct dfx f;
    char *other = NULL;
    dfx_open(&f);
    other = xasprintf("  shop:\n"
                      "    host: 127.0.0.1\n"
                      "    port: %d\n"
                      "    user: " IT_DB_USER "\n"
                      "    password: " IT_DB_PASSWORD "\n"
                      "    database: %s\n"
                      "    outboxes:\n"
                      "      - table: outbox_event\n"
                      "  down:\n"
                      "    host: 127.0.0.1\n"
                      "    port: 1\n"
                      "    user: u\n"
                      "    database_like: '%%'\n"
                      "    outboxes:\n"
                      "      - table: outbox_event\n",
                      IT_DB_PORT, f.made[0]);
    config_free(dfx_config(&f, IT_DB_USER, IT_DB_PASSWORD, "", other));
    struct it_ctl_run r = it_ctl(f.conf, "status");
    ck_assert_msg(r.rc == 69, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.err, "database down") != NULL, "%s", r.err);
    char *shop = xasprintf("shop.outbox_event");
    ck_assert_msg(strstr(r.out, shop) && strstr(r.out, "_t2.outbox_event"),
                  "%s", r.out);
    free(shop);
    it_ctl_free(&r);
    free(other);
    dfx_close(&f);
}
END_TEST

Suite *
it_discover_suite(void)
{
    Suite *s = suite_create("it_discover");
    TCase *tc = tcase_create("discover");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_schemas_found);
    tcase_add_test(tc, test_schema_needs_every_table);
    tcase_add_test(tc, test_schemas_by_grant);
    tcase_add_test(tc, test_table_caches_too_small);
    tcase_add_test(tc, test_outboxctl_over_tenants);
    tcase_add_test(tc, test_outboxctl_names);
    tcase_add_test(tc, test_outboxctl_one_session);
    tcase_add_test(tc, test_outboxctl_server_down);
    suite_add_tcase(s, tc);
    return s;
}
