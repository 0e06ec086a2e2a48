/*
 * config: the YAML file (docs/contract.md section 4) loaded into a validated
 * struct, driven by one table of keys; every problem reported as
 * "file:line:column: message" before the load fails.
 */
#ifndef OUTBOXD_CONFIG_H
#define OUTBOXD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "template.h"

#define CONFIG_DEFAULT_PATH "/etc/outboxd/outboxd.yaml"
/* The group that may read the config (systemd/outboxd.sysusers). */
#define CONFIG_RELAY_GROUP "outboxd"

enum ordering { ORDERING_AGGREGATE, ORDERING_NONE };
enum on_sent { ON_SENT_MARK, ON_SENT_DELETE };
/* What a DEAD event does to the later events of its aggregate: nothing
 * (skip), or hold them until an operator retries or releases it. */
enum on_dead { ON_DEAD_SKIP, ON_DEAD_HOLD };
/* What wakes an idle outbox: its server's binlog where it can (auto),
 * only that (binlog: not ready without it), or the poll alone. */
enum wake_mode { WAKE_AUTO, WAKE_BINLOG, WAKE_POLL };
/* What a message carries besides the body: outboxd's own properties and
 * headers, or those and the CloudEvents attributes (docs/contract.md
 * section 7). */
enum envelope { ENVELOPE_OUTBOXD, ENVELOPE_CLOUDEVENTS };

struct tls_config {
    bool enabled; /* amqps:// or a tls: block */
    char *ca_file;
    char *cert_file;
    char *key_file;
    bool verify_peer;     /* default true */
    bool verify_hostname; /* default true */
};

/* Where a secret came from, for outboxd -T: never the secret itself. */
struct secret_source {
    const char *key; /* "url", "url_env", "password_file", ...; NULL: none */
    char *ref;       /* the variable's name or the file's path; NULL inline */
};

struct broker_config {
    char *name;
    char **urls; /* url or urls, secrets resolved; tried in turn */
    size_t nurls;
    struct secret_source url_source;
    uint64_t heartbeat_ms;       /* 30s */
    uint64_t connect_timeout_ms; /* 5s */
    uint64_t confirm_timeout_ms; /* 30s */
    struct tls_config tls;
};

struct database_config;

/* discover_tenant_new (discover.c) deep-copies an outbox: a new pointer
 * field needs its line there too. */
struct outbox_config {
    char *name; /* "<database>.<table>" */
    char *table;
    struct database_config *database;
    struct broker_config *broker;
    struct template exchange;    /* "" is the default exchange */
    struct template routing_key; /* "{aggregate_type}.{event_type}" */
    char *exchange_column;       /* per-row override, NULL if unset */
    char *routing_key_column;
    /* false: no AMQP expiration from expires_at */
    bool expiration_from_expires_at;
    bool mandatory;         /* true */
    enum ordering ordering; /* aggregate */
    bool lean; /* true: steady-state batches hold their locks, no lease */
    unsigned batch_size;            /* 500 */
    uint64_t batch_bytes;           /* 16MiB of payload and headers */
    uint64_t poll_min_ms;           /* 1ms: first step of the backoff */
    uint64_t poll_interval_ms;      /* 1s: its ceiling, polling alone */
    uint64_t wake_poll_interval_ms; /* 10s: ceiling with a live wake */
    uint64_t lease_ms;              /* 30s */
    unsigned max_retries;           /* 10 */
    uint64_t backoff_initial_ms;    /* 1s */
    uint64_t backoff_max_ms;        /* 300s */
    enum on_sent on_sent;           /* mark */
    enum envelope envelope;         /* outboxd */
    /* CloudEvents source, a URI-reference; default outboxd://<db>/<table> */
    char *cloudevents_source;
    enum on_dead on_dead;           /* skip */
    uint64_t retention_sent_ms;     /* 7d */
    uint64_t retention_interval_ms; /* 1m */
    unsigned retention_batch;       /* 5000 */
    /* Columns named by templates and overrides, deduplicated. */
    char **columns;
    size_t ncolumns;
};

/* One node of a hosts: list (config_hosts.c). */
struct database_host {
    char *host;
    unsigned port; /* the entry's port unless the item names one */
};

struct database_config {
    char *name;
    char *host;    /* 127.0.0.1 unless socket is set; hosts[0] with hosts */
    unsigned port; /* 3306 */
    /* hosts: the nodes of a cluster, tried in turn; 0 without it. */
    struct database_host *hosts;
    size_t nhosts;
    char *socket;
    char *user;
    char *password; /* password, password_env or password_file */
    struct secret_source password_source;
    char *database; /* NULL when database_like is set */
    /* A LIKE pattern over schema names instead of database: the outboxes
     * below are templates, one instance per schema found (discover.h). */
    char *database_like;
    uint64_t discover_interval_ms; /* 30s: how often to look again */
    uint64_t connect_timeout_ms;   /* 5s */
    enum wake_mode wake;           /* auto */
    struct tls_config tls;
    /* caching_sha2_password without TLS: the server's RSA public key
     * (PEM), the password's encryption pinned to it; NULL: the library
     * asks the server for its key. */
    char *server_public_key_file;
    struct outbox_config *outboxes;
    size_t noutboxes;
};

struct relay_config {
    char *id;        /* default <hostname>:<pid> */
    bool id_default; /* id was not in the file */
    enum log_level log_level;
    enum log_format log_format;
    char *listen; /* "" disables */
    uint64_t shutdown_timeout_ms;
    /* Threads that serve the outboxes; 0: config_workers decides. */
    unsigned workers;
    /* Past this many outboxes in groups, one series per group. */
    unsigned metrics_outbox_series;
};

struct config {
    char *path;
    struct relay_config relay;
    struct broker_config *brokers;
    size_t nbrokers;
    struct database_config *databases;
    size_t ndatabases;
};

/* Every problem found in one load, in file order. */
struct config_errors {
    char **msgs; /* "file:line:column: message" */
    size_t n;
};

/* NULL when errs->n > 0 after the load; errs must start zeroed. */
struct config *config_load(const char *path, struct config_errors *errs);
/*
 * The same for text[0..len) in memory (tests, fuzzing): path names it in
 * errors and locates relative secret and TLS files; no mode warning.
 */
struct config *config_load_buffer(const char *path, const char *text,
                                  size_t len, struct config_errors *errs);
/* config_load that prints every problem on stderr, then one summary
 * line naming prog: what both programs do at start. */
struct config *config_load_or_report(const char *path, const char *prog);
void config_free(struct config *cfg);
void config_errors_free(struct config_errors *errs);

/*
 * SIGHUP: compares next, a fresh load of the file, with the running cur.
 * Each key that differs and may change live is added to changed as
 * "key: old -> new"; each that may not (also a broker, database or outbox
 * added or removed) to refused, naming the key.  Either list may be
 * NULL.  Returns the number refused: those keep their running values.
 */
size_t config_reload_check(const struct config *cur, const struct config *next,
                           struct config_errors *refused,
                           struct config_errors *changed);
/* Copies every live-changeable value of next into cur, matched by name. */
void config_reload_apply(struct config *cur, const struct config *next);
/* The same for one outbox or broker: what a worker adopts between cycles. */
void config_outbox_adopt(struct outbox_config *dst,
                         const struct outbox_config *src);
void config_broker_adopt(struct broker_config *dst,
                         const struct broker_config *src);

/*
 * outboxd -T: cfg as YAML that config_load reads back to the same text,
 * every key with its value or default, durations in units, relative
 * files made absolute; secrets masked ("***" for an inline password and
 * a URL's password; of password_env and the like, only the name).
 * malloc'd.
 */
char *config_dump(const struct config *cfg);

/* One key of the file as the loader's tables define it. */
struct config_key {
    const char *section; /* its table: "relay", "brokers", "tls",
                            "databases", "outboxes", "backoff",
                            "retention"; NULL at the top level */
    const char *path;    /* "databases.NAME.outboxes[].retention.sent" */
    const char *name;    /* "sent" */
    const char *type;    /* string, duration, integer, size, boolean,
                            enum, mapping, list */
    const char *def;     /* in config syntax; NULL: none or computed */
    uint64_t min, max;   /* integer bounds; duration ms; size bytes; max 0:
                            none */
    bool required;
    bool reload; /* a SIGHUP applies it live */
};
/* Calls fn for every key, in table order, each nested table after the
 * key that holds it (tls twice: under brokers and under databases). */
void config_keys_walk(void (*fn)(const struct config_key *, void *), void *arg);

/* The threads relay.workers asks for, for noutboxes outboxes on a
 * machine of ncpus: 0 (auto) is 4 per CPU, 4 to 32; never more than
 * one per outbox, and at least one. */
unsigned config_workers(const struct relay_config *r, size_t noutboxes,
                        long ncpus);

/* Frees what db holds, not db itself: for discover_tenant_free. */
void config_database_clear(struct database_config *db);

/* Iteration helper: all outboxes of all databases, in file order; the
 * templates of database_like entries are none of them (discover.h makes
 * outboxes of them). */
size_t config_outbox_count(const struct config *cfg);
struct outbox_config *config_outbox_at(const struct config *cfg, size_t i);
struct outbox_config *config_outbox_find(const struct config *cfg,
                                         const char *name);

#endif
