/*
 * config: the YAML file of docs/contract.md section 4 checked against one table
 * of keys into a struct config; every problem is kept as "file:line:column:
 * message" and the load fails once, at the end.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <amqp.h>
#include <unistd.h>
#include <yaml.h>

#include "config_int.h"
#include "util.h"

/* Files larger than this are surely not a config or a secret. */
#define CONFIG_MAX_BYTES (1024 * 1024)
#define SECRET_MAX_BYTES (64 * 1024)
/* An RSA public key in PEM: 4096 bits take 800 bytes. */
#define PUBLIC_KEY_MAX_BYTES (16 * 1024)

static const char *const log_levels[] = {"error", "warn", "info", "debug",
                                         NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const orderings[] = {"aggregate", "none", NULL};
static const char *const on_sents[] = {"mark", "delete", NULL};
static const char *const on_deads[] = {"skip", "hold", NULL};
static const char *const wakes[] = {"auto", "binlog", "poll", NULL};
static const char *const envelopes[] = {"outboxd", "cloudevents", NULL};

/* The enums are stored through memcpy of an int. */
_Static_assert(sizeof(enum log_level) == sizeof(int), "enum size");
_Static_assert(sizeof(enum log_format) == sizeof(int), "enum size");
_Static_assert(sizeof(enum ordering) == sizeof(int), "enum size");
_Static_assert(sizeof(enum on_sent) == sizeof(int), "enum size");
_Static_assert(sizeof(enum envelope) == sizeof(int), "enum size");
_Static_assert(sizeof(enum on_dead) == sizeof(int), "enum size");

/* One line per key in the tables below. */
// clang-format off
#define K_STR(n, d, f, o) {n, OPT_STRING, d, f, 0, 0, NULL, NULL, o, NULL}
#define K_DUR(n, d, f, lo, hi, o) \
    {n, OPT_DURATION, d, f, lo, hi, NULL, NULL, o, NULL}
#define K_UINT(n, d, f, lo, hi, o) \
    {n, OPT_UINT, d, f, lo, hi, NULL, NULL, o, NULL}
#define K_SIZE(n, d, f, lo, hi, o) \
    {n, OPT_SIZE, d, f, lo, hi, NULL, NULL, o, NULL}
#define K_BOOL(n, d, f, o) {n, OPT_BOOL, d, f, 0, 0, NULL, NULL, o, NULL}
#define K_ENUM(n, d, f, c, p, o) {n, OPT_ENUM, d, f, 0, 0, c, p, o, NULL}
#define K_MAP(n, f, o, t) {n, OPT_MAP, NULL, f, 0, 0, NULL, NULL, o, t}
#define K_LIST(n, f, t) {n, OPT_LIST, NULL, f, 0, 0, NULL, NULL, NO_FIELD, t}
#define K_ENTRIES(n, f, t) \
    {n, OPT_ENTRIES, NULL, f, 0, 0, NULL, NULL, NO_FIELD, t}
#define K_STRS(n, f) {n, OPT_STRINGS, NULL, f, 0, 0, NULL, NULL, NO_FIELD, NULL}
#define TABLE(name, opts, fin) {name, opts, sizeof(opts) / sizeof(*(opts)), fin}
// clang-format on

#define SEC 1000ULL
#define KIB 1024ULL
#define MIB (1024ULL * KIB)

static void relay_finish(struct loader *, struct section *);
static void tls_finish(struct loader *, struct section *);
static void broker_finish(struct loader *, struct section *);
static void backoff_finish(struct loader *, struct section *);
static void database_finish(struct loader *, struct section *);
static void top_finish(struct loader *, struct section *);

#define RELAY(f) offsetof(struct relay_config, f)
static const struct opt relay_opts[] = {
    K_STR("id", NULL, 0, RELAY(id)), /* default <hostname>:<pid> */
    K_ENUM("log_level", "info", OPT_RELOAD, log_levels, log_level_parse,
           RELAY(log_level)),
    K_ENUM("log_format", "text", OPT_RELOAD, log_formats, NULL,
           RELAY(log_format)),
    K_STR("listen", "127.0.0.1:9180", 0, RELAY(listen)),
    K_DUR("shutdown_timeout", "10s", OPT_RELOAD, 0, 0,
          RELAY(shutdown_timeout_ms)),
    K_UINT("workers", "0", 0, 0, 1024, RELAY(workers)), /* 0: auto */
    K_UINT("metrics_outbox_series", "100", OPT_RELOAD, 0, 1000000,
           RELAY(metrics_outbox_series)),
};
const struct table config_relay_table =
    TABLE("relay", relay_opts, relay_finish);

#define TLS(f) offsetof(struct tls_config, f)
static const struct opt tls_opts[] = {
    K_STR("ca_file", NULL, 0, TLS(ca_file)),
    K_STR("cert_file", NULL, 0, TLS(cert_file)),
    K_STR("key_file", NULL, 0, TLS(key_file)),
    K_BOOL("verify_peer", "true", 0, TLS(verify_peer)),
    K_BOOL("verify_hostname", "true", 0, TLS(verify_hostname)),
};
static const struct table tls_table = TABLE("tls", tls_opts, tls_finish);

#define BROKER(f) offsetof(struct broker_config, f)
static const struct opt broker_opts[] = {
    /* One of url, url_env, url_file, urls: resolved by broker_finish. */
    K_STR("url", NULL, 0, NO_FIELD),
    K_STR("url_env", NULL, 0, NO_FIELD),
    K_STR("url_file", NULL, 0, NO_FIELD),
    K_STRS("urls", 0),
    /* AMQP negotiates the heartbeat in whole seconds, in 16 bits. */
    K_DUR("heartbeat", "30s", 0, 0, 65535 * SEC, BROKER(heartbeat_ms)),
    K_DUR("connect_timeout", "5s", 0, 1, 0, BROKER(connect_timeout_ms)),
    K_DUR("confirm_timeout", "30s", OPT_RELOAD, 1, 0,
          BROKER(confirm_timeout_ms)),
    K_MAP("tls", 0, BROKER(tls), &tls_table),
};
const struct table config_broker_table =
    TABLE("brokers", broker_opts, broker_finish);

/* backoff and retention are nested maps over outbox_config's own fields. */
#define OUTBOX(f) offsetof(struct outbox_config, f)
static const struct opt backoff_opts[] = {
    K_DUR("initial", "1s", OPT_RELOAD, 1, 0, OUTBOX(backoff_initial_ms)),
    K_DUR("max", "300s", OPT_RELOAD, 1, 0, OUTBOX(backoff_max_ms)),
};
static const struct table backoff_table =
    TABLE("backoff", backoff_opts, backoff_finish);

static const struct opt retention_opts[] = {
    K_DUR("sent", "7d", OPT_RELOAD, 0, 0, OUTBOX(retention_sent_ms)),
    K_DUR("interval", "1m", OPT_RELOAD, 1 * SEC, 0,
          OUTBOX(retention_interval_ms)),
    K_UINT("batch", "5000", OPT_RELOAD, 1, 100000, OUTBOX(retention_batch)),
};
static const struct table retention_table =
    TABLE("retention", retention_opts, NULL);

static const struct opt outbox_opts[] = {
    K_STR("table", NULL, OPT_REQUIRED, OUTBOX(table)),
    K_STR("broker", NULL, 0, NO_FIELD), /* may default to the only one */
    K_STR("exchange", "", 0, NO_FIELD), /* compiled by config_outbox_finish */
    K_STR("routing_key", "{aggregate_type}.{event_type}", 0, NO_FIELD),
    K_STR("exchange_column", NULL, 0, OUTBOX(exchange_column)),
    K_STR("routing_key_column", NULL, 0, OUTBOX(routing_key_column)),
    K_BOOL("mandatory", "true", OPT_RELOAD, OUTBOX(mandatory)),
    /* The AMQP expiration from expires_at: docs/contract.md section 7. */
    K_BOOL("expiration_from_expires_at", "false", OPT_RELOAD,
           OUTBOX(expiration_from_expires_at)),
    K_ENUM("ordering", "aggregate", 0, orderings, NULL, OUTBOX(ordering)),
    /* One write and one commit per steady-state batch: docs/design.md,
     * The lean steady state. */
    K_BOOL("lean", "true", OPT_RELOAD, OUTBOX(lean)),
    K_UINT("batch_size", "500", OPT_RELOAD, 1, 10000, OUTBOX(batch_size)),
    /* Payload and headers of one batch: docs/contract.md section 1.6. */
    K_SIZE("batch_bytes", "16MiB", OPT_RELOAD, 64 * KIB, 1024 * MIB,
           OUTBOX(batch_bytes)),
    /* The claim pacing of pacer.c: a backoff from poll_min to a ceiling,
     * poll_interval alone, wake_poll_interval with a live wake stream. */
    K_DUR("poll_min", "1ms", OPT_RELOAD, 0, 0, OUTBOX(poll_min_ms)),
    K_DUR("poll_interval", "1s", OPT_RELOAD, 1, 0, OUTBOX(poll_interval_ms)),
    K_DUR("wake_poll_interval", "10s", OPT_RELOAD, 1, 0,
          OUTBOX(wake_poll_interval_ms)),
    K_DUR("lease", "30s", OPT_RELOAD, 1 * SEC, 0, OUTBOX(lease_ms)),
    K_UINT("max_retries", "10", OPT_RELOAD, 0, 1000, OUTBOX(max_retries)),
    K_MAP("backoff", 0, 0, &backoff_table),
    K_ENUM("on_sent", "mark", OPT_RELOAD, on_sents, NULL, OUTBOX(on_sent)),
    /* The claim's statements are built for it: not reloadable. */
    K_ENUM("on_dead", "skip", 0, on_deads, NULL, OUTBOX(on_dead)),
    K_MAP("retention", 0, 0, &retention_table),
    /* What a message looks like: consumers depend on it, so a restart. */
    K_ENUM("envelope", "outboxd", 0, envelopes, NULL, OUTBOX(envelope)),
    K_STR("cloudevents_source", NULL, 0, OUTBOX(cloudevents_source)),
};
const struct table config_outbox_table =
    TABLE("outboxes", outbox_opts, config_outbox_finish);

#define DB(f) offsetof(struct database_config, f)
static const struct opt database_opts[] = {
    K_STR("host", "127.0.0.1", 0, DB(host)),
    K_UINT("port", "3306", 0, 1, 65535, DB(port)),
    K_STR("socket", NULL, 0, DB(socket)),
    /* Or several nodes, tried in turn: config_hosts.c. */
    K_STRS("hosts", 0),
    K_STR("user", NULL, OPT_REQUIRED, DB(user)),
    /* At most one of the three: resolved by database_finish. */
    K_STR("password", NULL, 0, NO_FIELD),
    K_STR("password_env", NULL, 0, NO_FIELD),
    K_STR("password_file", NULL, 0, NO_FIELD),
    /* One of the two: checked by database_finish. */
    K_STR("database", NULL, 0, DB(database)),
    K_STR("database_like", NULL, 0, DB(database_like)),
    /* Read by main alone, between discoveries: live on SIGHUP. */
    K_DUR("discover_interval", "30s", OPT_RELOAD | OPT_RELOAD_SHARED, 1 * SEC,
          0, DB(discover_interval_ms)),
    K_DUR("connect_timeout", "5s", 0, 1, 0, DB(connect_timeout_ms)),
    K_ENUM("wake", "auto", 0, wakes, NULL, DB(wake)),
    K_MAP("tls", 0, DB(tls), &tls_table),
    K_STR("server_public_key_file", NULL, 0, DB(server_public_key_file)),
    K_LIST("outboxes", OPT_REQUIRED, &config_outbox_table),
};
const struct table config_database_table =
    TABLE("databases", database_opts, database_finish);

static const struct opt top_opts[] = {
    K_MAP("relay", 0, offsetof(struct config, relay), &config_relay_table),
    K_ENTRIES("brokers", OPT_REQUIRED, &config_broker_table),
    K_ENTRIES("databases", OPT_REQUIRED, &config_database_table),
};
static const struct table top_table = TABLE(NULL, top_opts, top_finish);

const struct table *
config_top_table(void)
{
    return &top_table;
}

/* Files and secrets */

static int
file_read(const char *path, size_t max, char **out, size_t *outlen,
          struct stat *stat_out, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        err_set(err, errlen, "cannot open: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char *buf = xmalloc(max + 1);
    size_t len = 0;
    bool failed = false;
    while (!failed && len <= max) {
        ssize_t n = read(fd, buf + len, max + 1 - len);
        if (n == 0)
            break;
        if (n < 0 && errno != EINTR) {
            err_set(err, errlen, "cannot read: %s", strerror(errno));
            failed = true;
        }
        len += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    if (!failed && len > max) {
        err_set(err, errlen, "larger than %zu bytes", max);
        failed = true;
    }
    if (failed) {
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    *out = buf;
    if (outlen != NULL)
        *outlen = len;
    if (stat_out != NULL)
        *stat_out = st;
    return 0;
}

static char *
file_path(struct loader *ld, const char *name)
{
    if (name[0] == '/' || ld->dir == NULL)
        return xstrdup(name);
    return xasprintf("%s/%s", ld->dir, name);
}

/*
 * Of the keys in names, the index of the one that is set, -1 if none,
 * -2 after reporting that two are.
 */
static int
sec_pick_one(struct loader *ld, const struct section *s,
             const char *const *names, size_t n)
{
    int picked = -1;
    for (size_t i = 0; i < n; i++) {
        if (sec_node(s, names[i]) == NULL)
            continue;
        if (picked >= 0) {
            ld_error(ld, &sec_key(s, names[i])->start_mark,
                     "%s: \"%s\" and \"%s\" are both set; use only one",
                     s->path, names[picked], names[i]);
            return -2;
        }
        picked = (int)i;
    }
    return picked;
}

static char *
secret_from_file(struct loader *ld, const yaml_mark_t *mark, const char *path,
                 const char *name)
{
    char *file = file_path(ld, name);
    char *secret = NULL, err[ERR_LEN];
    if (file_read(file, SECRET_MAX_BYTES, &secret, NULL, NULL, err,
                  sizeof(err)) < 0)
        ld_error(ld, mark, "%s: \"%s\": %s", path, file, err);
    /* Editors end files with a newline that is not part of the secret. */
    for (size_t n = secret ? strlen(secret) : 0;
         n > 0 && (secret[n - 1] == '\n' || secret[n - 1] == '\r'); n--)
        secret[n - 1] = '\0';
    free(file);
    return secret;
}

/*
 * Resolves a secret given inline, by environment variable or by file
 * (names: the three keys in that order); NULL on error.
 */
static char *
secret_resolve(struct loader *ld, const struct section *s,
               const char *const names[3], int which)
{
    const char *text = sec_text(s, names[which]);
    const yaml_mark_t *mark = sec_mark(s, names[which]);
    if (text == NULL)
        return NULL; /* reported as the wrong type */
    if (which == 0)
        return xstrdup(text);

    char *path = config_path_join(s->path, names[which]);
    char *secret = NULL;
    if (which == 1) {
        const char *v = getenv(text);
        if (v == NULL)
            ld_error(ld, mark, "%s: environment variable \"%s\" is not set",
                     path, text);
        secret = v ? xstrdup(v) : NULL;
    } else {
        secret = secret_from_file(ld, mark, path, text);
    }
    free(path);
    return secret;
}

/* Records which key gave a secret and what it named: for -T. */
static void
secret_note(struct loader *ld, const struct section *s,
            const char *const *names, int which, struct secret_source *src)
{
    const char *text = sec_text(s, names[which]);
    src->key = names[which];
    if (text != NULL && which == 1)
        src->ref = xstrdup(text);
    else if (text != NULL && which == 2)
        src->ref = file_path(ld, text);
}

/* Finishers */

static char *
default_relay_id(void)
{
    char host[256];
    if (gethostname(host, sizeof(host)) < 0)
        str_copy(host, "localhost", sizeof(host));
    host[sizeof(host) - 1] = '\0';
    return xasprintf("%s:%ld", host, (long)getpid());
}

static bool
listen_valid(const char *listen)
{
    const char *colon = strrchr(listen, ':');
    if (*listen == '\0')
        return true;
    return colon != NULL && port_parse(colon + 1) != 0;
}

static void
relay_finish(struct loader *ld, struct section *s)
{
    struct relay_config *relay = s->base;
    if (relay->id != NULL && relay->id[0] == '\0')
        ld_error(ld, sec_mark(s, "id"), "relay.id: must not be empty");
    if (relay->listen != NULL && !listen_valid(relay->listen))
        ld_error(ld, sec_mark(s, "listen"),
                 "relay.listen: expected HOST:PORT with a port from 1 to "
                 "65535, or \"\" to disable, got \"%s\"",
                 relay->listen);
}

static void
tls_file(struct loader *ld, struct section *s, const char *key, char **file)
{
    if (*file == NULL)
        return;
    char *resolved = file_path(ld, *file);
    free(*file);
    *file = resolved;
    if (access(resolved, R_OK) < 0)
        ld_error(ld, sec_mark(s, key), "%s.%s: cannot read \"%s\": %s", s->path,
                 key, resolved, strerror(errno));
}

static void
tls_finish(struct loader *ld, struct section *s)
{
    struct tls_config *tls = s->base;
    tls->enabled = true;
    if ((tls->cert_file == NULL) != (tls->key_file == NULL))
        ld_error(ld, &s->map->start_mark,
                 "%s: cert_file and key_file must be set together", s->path);
    tls_file(ld, s, "ca_file", &tls->ca_file);
    tls_file(ld, s, "cert_file", &tls->cert_file);
    tls_file(ld, s, "key_file", &tls->key_file);
}

/* The URL itself is not quoted: it usually carries a password. */
static void
broker_add_url(struct loader *ld, struct broker_config *b, char *url,
               const char *path, const yaml_mark_t *mark)
{
    bool tls = strncmp(url, "amqps://", 8) == 0;
    if (!tls && strncmp(url, "amqp://", 7) != 0) {
        ld_error(ld, mark, "%s: URL must start with amqp:// or amqps://", path);
        free(url);
        return;
    }
    /* Refused here rather than at connect time, where the log could only
     * show it masked whole. */
    char *copy = xstrdup(url);
    struct amqp_connection_info ci;
    bool valid = amqp_parse_url(copy, &ci) == AMQP_STATUS_OK;
    free(copy);
    if (!valid) {
        ld_error(ld, mark,
                 "%s: not a valid AMQP URL: expected "
                 "amqp[s]://[user[:password]@]host[:port][/vhost], with "
                 "%%XX escapes for reserved characters such as : / @ in the "
                 "user or password",
                 path);
        free(url);
        return;
    }
    if (tls)
        b->tls.enabled = true;
    b->urls = xrealloc(b->urls, (b->nurls + 1) * sizeof(*b->urls));
    b->urls[b->nurls++] = url;
}

static void
broker_add_list(struct loader *ld, struct section *s, struct broker_config *b)
{
    yaml_node_t *list = sec_node(s, "urls");
    if (list->type != YAML_SEQUENCE_NODE)
        return;
    if (list_size(list) == 0)
        ld_error(ld, &list->start_mark, "%s.urls: empty list", s->path);
    for (size_t i = 0; i < list_size(list); i++) {
        yaml_node_t *item = node_get(ld, list->data.sequence.items.start[i]);
        const char *text = node_text(item);
        if (text == NULL)
            continue;
        char *path = xasprintf("%s.urls[%zu]", s->path, i);
        broker_add_url(ld, b, xstrdup(text), path, &item->start_mark);
        free(path);
    }
}

static void
broker_finish(struct loader *ld, struct section *s)
{
    static const char *const sources[] = {"url", "url_env", "url_file", "urls"};
    struct broker_config *b = s->base;
    int which = sec_pick_one(ld, s, sources, 4);
    if (which >= 0)
        secret_note(ld, s, sources, which, &b->url_source);
    if (which == -1) {
        ld_error(ld, &s->map->start_mark,
                 "missing required key \"url\" (or \"urls\", \"url_env\", "
                 "\"url_file\") in %s",
                 s->path);
    } else if (which == 3) {
        broker_add_list(ld, s, b);
    } else if (which >= 0) {
        char *url = secret_resolve(ld, s, sources, which);
        char *path = config_path_join(s->path, sources[which]);
        if (url != NULL)
            broker_add_url(ld, b, url, path, sec_mark(s, sources[which]));
        free(path);
    }
}

static void
backoff_finish(struct loader *ld, struct section *s)
{
    struct outbox_config *ob = s->base;
    char initial[32], max[32];
    if (ob->backoff_initial_ms <= ob->backoff_max_ms)
        return;
    duration_format(ob->backoff_initial_ms, initial, sizeof(initial));
    duration_format(ob->backoff_max_ms, max, sizeof(max));
    ld_error(ld, &s->map->start_mark,
             "%s: initial (%s) is greater than max (%s)", s->path, initial,
             max);
}

/* database names the schema, or database_like a pattern over schemas. */
static void
database_schema_check(struct loader *ld, struct section *s)
{
    static const char *const keys[] = {"database", "database_like"};
    struct database_config *db = s->base;
    int which = sec_pick_one(ld, s, keys, 2);
    if (which == -1)
        ld_error(ld, &s->map->start_mark,
                 "missing required key \"database\" (or \"database_like\") "
                 "in %s",
                 s->path);
    if (db->database_like != NULL && db->database_like[0] == '\0')
        ld_error(ld, sec_mark(s, "database_like"),
                 "%s.database_like: the pattern is empty (use %% to match "
                 "every schema)",
                 s->path);
    if (db->database_like == NULL && sec_node(s, "discover_interval") != NULL)
        ld_error(ld, sec_mark(s, "discover_interval"),
                 "%s.discover_interval: applies only with database_like",
                 s->path);
}

/*
 * The server's RSA public key, for caching_sha2_password without TLS:
 * read now, as the client library, given a file it cannot read, asks
 * the server for a key instead and trusts whatever comes, silently.
 */
static void
public_key_check(struct loader *ld, struct section *s,
                 struct database_config *db)
{
    if (db->server_public_key_file == NULL)
        return;
    char *file = file_path(ld, db->server_public_key_file);
    free(db->server_public_key_file);
    db->server_public_key_file = file;
    char *pem = NULL, err[ERR_LEN];
    if (file_read(file, PUBLIC_KEY_MAX_BYTES, &pem, NULL, NULL, err,
                  sizeof(err)) < 0)
        ld_error(ld, sec_mark(s, "server_public_key_file"),
                 "%s.server_public_key_file: \"%s\": %s", s->path, file, err);
    else if (strstr(pem, "-----BEGIN PUBLIC KEY-----") == NULL)
        ld_error(ld, sec_mark(s, "server_public_key_file"),
                 "%s.server_public_key_file: \"%s\" holds no PEM public key "
                 "(-----BEGIN PUBLIC KEY-----): copy the server's "
                 "public_key.pem (caching_sha2_password_public_key_path)",
                 s->path, file);
    free(pem);
}

static void
database_finish(struct loader *ld, struct section *s)
{
    static const char *const sources[] = {"password", "password_env",
                                          "password_file"};
    struct database_config *db = s->base;
    database_schema_check(ld, s);
    int which = sec_pick_one(ld, s, sources, 3);
    if (which >= 0) {
        db->password = secret_resolve(ld, s, sources, which);
        secret_note(ld, s, sources, which, &db->password_source);
    }
    if (which == 0)
        ld->inline_password = true;
    if (db->socket != NULL) {
        /* libmysqlclient uses the socket only for host "localhost". */
        free(db->host);
        db->host = xstrdup("localhost");
    }
    config_hosts_finish(ld, s);
    public_key_check(ld, s, db);
    config_outboxes_load(ld, s, db);
}

/* Top level: relay, then brokers before the databases that name them. */

static bool
database_name_valid(const char *name)
{
    /* A dot would make "<database>.<table>" ambiguous. */
    return str_is_word(name, "_-");
}

/*
 * Loads one "name: {...}" entry of brokers or databases into entry,
 * whose name field is set first.
 */
static void
entry_load(struct loader *ld, const char *section, const char *name,
           yaml_node_t *v, const struct table *t, void *entry)
{
    char *path = xasprintf("%s.%s", section, name);
    struct section s;
    table_defaults(t, entry);
    if (node_expect(ld, path, v, YAML_MAPPING_NODE, "a mapping"))
        section_load(ld, &s, t, v, path, entry);
    free(path);
}

static void
brokers_load(struct loader *ld, yaml_node_t *map)
{
    struct config *cfg = ld->cfg;
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return; /* reported as missing or as the wrong type */
    if (map_size(map) == 0) {
        ld_error(ld, &map->start_mark, "brokers: no brokers configured");
        return;
    }
    cfg->brokers = xcalloc(map_size(map), sizeof(*cfg->brokers));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
         p < map->data.mapping.pairs.top; p++) {
        const char *name = map_key(ld, map, p, "brokers");
        if (name == NULL)
            continue;
        struct broker_config *b = &cfg->brokers[cfg->nbrokers++];
        b->name = xstrdup(name);
        entry_load(ld, "brokers", name, node_get(ld, p->value),
                   &config_broker_table, b);
    }
}

static void
databases_load(struct loader *ld, yaml_node_t *map)
{
    struct config *cfg = ld->cfg;
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return;
    if (map_size(map) == 0) {
        ld_error(ld, &map->start_mark, "databases: no databases configured");
        return;
    }
    cfg->databases = xcalloc(map_size(map), sizeof(*cfg->databases));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
         p < map->data.mapping.pairs.top; p++) {
        const char *name = map_key(ld, map, p, "databases");
        if (name == NULL)
            continue;
        if (!database_name_valid(name))
            ld_error(ld, &node_get(ld, p->key)->start_mark,
                     "invalid database name \"%s\": use letters, digits, _ "
                     "or -",
                     name);
        struct database_config *db = &cfg->databases[cfg->ndatabases++];
        db->name = xstrdup(name);
        entry_load(ld, "databases", name, node_get(ld, p->value),
                   &config_database_table, db);
    }
}

static void
top_finish(struct loader *ld, struct section *s)
{
    struct config *cfg = s->base;
    /* Here, not in relay_finish, which runs only when relay: is present. */
    cfg->relay.id_default = cfg->relay.id == NULL;
    if (cfg->relay.id == NULL)
        cfg->relay.id = default_relay_id();
    brokers_load(ld, sec_node(s, "brokers"));
    databases_load(ld, sec_node(s, "databases"));
}

/* Loading */

static void
parser_error(struct loader *ld, const yaml_parser_t *parser)
{
    if (parser->error == YAML_MEMORY_ERROR) {
        ld_error(ld, NULL, "out of memory parsing YAML");
    } else if (parser->error == YAML_READER_ERROR) {
        ld_error(ld, NULL, "invalid YAML: %s at byte %zu", parser->problem,
                 parser->problem_offset);
    } else {
        ld_error(ld, &parser->problem_mark, "invalid YAML: %s%s%s",
                 parser->problem ? parser->problem : "syntax error",
                 parser->context ? " " : "",
                 parser->context ? parser->context : "");
    }
}

/* Loads the one document of text into ld->doc; -1 if there is none. */
static int
document_parse(struct loader *ld, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t extra;
    int rc = -1;
    if (!yaml_parser_initialize(&parser)) {
        ld_error(ld, NULL, "out of memory parsing YAML");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &ld->doc)) {
        parser_error(ld, &parser);
    } else if (!yaml_parser_load(&parser, &extra)) {
        parser_error(ld, &parser);
        rc = 0;
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&extra);
        if (root != NULL)
            ld_error(ld, &root->start_mark,
                     "only one YAML document is allowed");
        yaml_document_delete(&extra);
        rc = 0;
    }
    yaml_parser_delete(&parser);
    return rc;
}

static void
config_build(struct loader *ld)
{
    yaml_node_t *root = yaml_document_get_root_node(&ld->doc);
    struct section s;
    table_defaults(&top_table, ld->cfg);
    if (root == NULL)
        ld_error(ld, NULL, "the configuration is empty");
    else if (root->type != YAML_MAPPING_NODE)
        ld_error(ld, &root->start_mark,
                 "expected a mapping of relay, brokers and databases, got %s",
                 node_kind(root));
    else
        section_load(ld, &s, &top_table, root, NULL, ld->cfg);
}

/* The group the relay runs as may read it: the package's convention is
 * 0640 root:outboxd, and outboxctl run by root sees that group too. */
static bool
group_is_relays(gid_t gid)
{
    if (gid == getegid())
        return true;
    const struct group *g = getgrnam(CONFIG_RELAY_GROUP);
    return g != NULL && g->gr_gid == gid;
}

static void
config_warn_mode(const struct loader *ld, const struct stat *st)
{
    if (!ld->inline_password || st == NULL)
        return;
    mode_t mode = st->st_mode;
    bool exposed = (mode & S_IROTH) != 0 ||
                   ((mode & S_IRGRP) != 0 && !group_is_relays(st->st_gid));
    if (!exposed)
        return;
    log_warn(LOG_KV("file", ld->path),
             "%s holds an inline password but is readable by group or "
             "others (mode %03o); use password_env or password_file, or "
             "chmod 600 (640 with the group " CONFIG_RELAY_GROUP ")",
             ld->path, (unsigned)(mode & 0777));
}

/* text NULL: the file could not be read, err says why. */
static struct config *
config_load_text(const char *path, const char *text, size_t len,
                 const struct stat *st, const char *err,
                 struct config_errors *errs)
{
    struct loader ld = {.path = path};
    const char *slash = strrchr(path, '/');

    ld.cfg = xcalloc(1, sizeof(*ld.cfg));
    ld.cfg->path = xstrdup(path);
    ld.dir = slash ? xstrndup(path, (size_t)(slash - path)) : NULL;
    if (text == NULL) {
        ld_error(&ld, NULL, "%s", err);
    } else {
        if (document_parse(&ld, text, len) == 0) {
            config_build(&ld);
            yaml_document_delete(&ld.doc);
        }
        config_warn_mode(&ld, st);
    }
    free(ld.dir);
    bool failed = ld.nerrs > 0;
    errors_flush(&ld, errs);
    if (failed) {
        config_free(ld.cfg);
        return NULL;
    }
    return ld.cfg;
}

struct config *
config_load(const char *path, struct config_errors *errs)
{
    char *text = NULL, err[ERR_LEN] = "";
    size_t len = 0;
    struct stat st;
    int got =
        file_read(path, CONFIG_MAX_BYTES, &text, &len, &st, err, sizeof(err));
    if (got < 0)
        text = NULL;
    struct config *cfg =
        config_load_text(path, text, len, text ? &st : NULL, err, errs);
    free(text);
    return cfg;
}

struct config *
config_load_buffer(const char *path, const char *text, size_t len,
                   struct config_errors *errs)
{
    char err[ERR_LEN];
    snprintf(err, sizeof(err), "larger than %d bytes", CONFIG_MAX_BYTES);
    return config_load_text(path, len > CONFIG_MAX_BYTES ? NULL : text, len,
                            NULL, err, errs);
}

/* Freeing */

static void
tls_free(struct tls_config *tls)
{
    free(tls->ca_file);
    free(tls->cert_file);
    free(tls->key_file);
}

static void
outbox_free(struct outbox_config *ob)
{
    free(ob->name);
    free(ob->table);
    template_free(&ob->exchange);
    template_free(&ob->routing_key);
    free(ob->exchange_column);
    free(ob->routing_key_column);
    free(ob->cloudevents_source);
    for (size_t i = 0; i < ob->ncolumns; i++)
        free(ob->columns[i]);
    free(ob->columns);
}

void
config_database_clear(struct database_config *db)
{
    free(db->name);
    free(db->host);
    config_hosts_free(db);
    free(db->socket);
    free(db->user);
    free(db->password);
    free(db->password_source.ref);
    free(db->database);
    free(db->database_like);
    tls_free(&db->tls);
    free(db->server_public_key_file);
    for (size_t i = 0; i < db->noutboxes; i++)
        outbox_free(&db->outboxes[i]);
    free(db->outboxes);
}

static void
broker_free(struct broker_config *b)
{
    free(b->name);
    for (size_t i = 0; i < b->nurls; i++)
        free(b->urls[i]);
    free(b->urls);
    free(b->url_source.ref);
    tls_free(&b->tls);
}

void
config_free(struct config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->path);
    free(cfg->relay.id);
    free(cfg->relay.listen);
    for (size_t i = 0; i < cfg->nbrokers; i++)
        broker_free(&cfg->brokers[i]);
    free(cfg->brokers);
    for (size_t i = 0; i < cfg->ndatabases; i++)
        config_database_clear(&cfg->databases[i]);
    free(cfg->databases);
    free(cfg);
}

void
config_errors_free(struct config_errors *errs)
{
    for (size_t i = 0; i < errs->n; i++)
        free(errs->msgs[i]);
    free(errs->msgs);
    errs->msgs = NULL;
    errs->n = 0;
}

unsigned
config_workers(const struct relay_config *r, size_t noutboxes, long ncpus)
{
    /* The work waits on two servers' round trips, not on the CPU: a few
     * loops per CPU keep an idle tenant's event from queueing behind
     * others' batches, while each one costs a session per server and a
     * connection per broker. */
    size_t n = r->workers;
    if (n == 0) {
        n = ncpus > 0 ? (size_t)ncpus * 4 : 4;
        n = n < 4 ? 4 : n > 32 ? 32 : n;
    }
    if (n > noutboxes)
        n = noutboxes;
    return n > 0 ? (unsigned)n : 1;
}

/* The outboxes of a database_like entry are templates, not outboxes. */
static size_t
database_outbox_count(const struct database_config *db)
{
    return db->database_like != NULL ? 0 : db->noutboxes;
}

size_t
config_outbox_count(const struct config *cfg)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->ndatabases; i++)
        n += database_outbox_count(&cfg->databases[i]);
    return n;
}

struct outbox_config *
config_outbox_at(const struct config *cfg, size_t i)
{
    for (size_t d = 0; d < cfg->ndatabases; d++) {
        size_t n = database_outbox_count(&cfg->databases[d]);
        if (i < n)
            return &cfg->databases[d].outboxes[i];
        i -= n;
    }
    return NULL;
}

struct outbox_config *
config_outbox_find(const struct config *cfg, const char *name)
{
    for (size_t i = 0; i < config_outbox_count(cfg); i++) {
        struct outbox_config *ob = config_outbox_at(cfg, i);
        if (ob->name != NULL && strcmp(ob->name, name) == 0)
            return ob;
    }
    return NULL;
}

struct config *
config_load_or_report(const char *path, const char *prog)
{
    struct config_errors errs = {0};
    struct config *cfg = config_load(path, &errs);
    for (size_t i = 0; i < errs.n; i++)
        log_plain(LOG_ERROR, "%s\n", errs.msgs[i]);
    if (cfg == NULL)
        log_plain(LOG_ERROR, "%s: %zu configuration error%s\n", prog, errs.n,
                  errs.n == 1 ? "" : "s");
    config_errors_free(&errs);
    return cfg;
}
