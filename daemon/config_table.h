/*
 * config_table: the key tables behind config.c, shared only with the
 * files that walk them too (config_dump.c: -T and the documented keys;
 * config_reload.c: what a SIGHUP may change).
 */
#ifndef OUTBOXD_CONFIG_TABLE_H
#define OUTBOXD_CONFIG_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NO_FIELD ((size_t)-1)

#define OPT_REQUIRED 0x1
#define OPT_RELOAD 0x2 /* may change on SIGHUP without a restart */
/* With OPT_RELOAD: live even in a section the workers read through the
 * shared struct (databases), because only main reads this key. */
#define OPT_RELOAD_SHARED 0x4

enum opt_type {
    OPT_STRING,
    OPT_DURATION, /* "30s", stored as uint64_t milliseconds */
    OPT_UINT,     /* stored as unsigned */
    OPT_BOOL,
    OPT_ENUM,    /* stored as an int-sized enum */
    OPT_MAP,     /* nested keys, the sub table applied at off */
    OPT_ENTRIES, /* name: {...} mappings, each read against sub */
    OPT_LIST,    /* a list of mappings (sub), read by the finisher */
    OPT_STRINGS,
    OPT_SIZE, /* "16MiB" or bytes, stored as uint64_t bytes */
};

struct loader;
struct section;

struct opt {
    const char *name;
    enum opt_type type;
    const char *def; /* in config syntax; NULL: unset or computed */
    unsigned flags;
    uint64_t min,
        max; /* UINT values, DURATION ms, SIZE bytes; max 0: unbounded */
    const char *const *choices; /* ENUM: NULL-terminated, index = value */
    int (*parse)(const char *); /* ENUM: parser when not the index */
    size_t off;                 /* in the section's struct, or NO_FIELD */
    const struct table *sub;    /* MAP, ENTRIES, LIST: the nested keys */
};

struct table {
    const char *name; /* "outboxes": what outboxd.yaml(5) calls it */
    const struct opt *opts;
    size_t nopts;
    /* Cross-key checks and the keys that need more than a store. */
    void (*finish)(struct loader *, struct section *);
};

/* The top level: relay, brokers, databases and, through their sub
 * tables, every key there is. */
const struct table *config_top_table(void);

/* The sections a reload compares, each against its running copy. */
extern const struct table config_relay_table, config_broker_table,
    config_database_table, config_outbox_table;

/* Whether a SIGHUP applies the key live (scalars marked OPT_RELOAD). */
bool config_opt_reloadable(const struct opt *o);

/* A key's path in messages: "path.name", or name at the top; malloc'd. */
char *config_path_join(const char *path, const char *name);

#endif
