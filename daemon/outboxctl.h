/*
 * outboxctl: what its files share: the parsed command line, one run over
 * the selected outboxes, and the helpers both print and connect with.
 */
#ifndef OUTBOXD_OUTBOXCTL_H
#define OUTBOXD_OUTBOXCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "store.h"

enum command {
    CMD_NONE,
    CMD_STATUS,
    CMD_DEAD_LIST,
    CMD_DEAD_RETRY,
    CMD_DEAD_RELEASE,
    CMD_PURGE,
    CMD_OUTBOXES,
    CMD_HELP
};

/* Options that only some commands take, as bits for the check. */
enum {
    OPT_OUTBOX = 1,
    OPT_LIMIT = 2,
    OPT_ALL = 4,
    OPT_OLDER = 8,
    OPT_DRY_RUN = 16,
};

struct ctl_command;

struct options {
    const char *config;
    bool json, help;
    unsigned given; /* OPT_* bits seen */
    const char *outbox;
    unsigned limit;
    uint64_t older_ms;
    const struct ctl_command *cmd;
    const char *help_topic; /* help's COMMAND, or "dead" for both */
    char **ids;             /* dead retry's, release's EVENT_IDs: argv */
    size_t nids;
};

/* One run over the selected outboxes. */
struct ctl {
    struct options *o;
    struct config *cfg;
    struct outbox_config **outboxes;
    size_t n;
    /* The discovered tenants whose outboxes are in outboxes. */
    struct database_config **tenants;
    size_t ntenants;
    /* One session per server and account, as the daemon's workers hold:
     * a thousand tenants are a thousand tables, not connections. */
    struct dbsession **sessions;
    size_t nsessions;
    bool unavailable; /* a database could not be reached: exit 69 */
    bool failed;      /* anything else went wrong: exit 1 */
};

/* A JSON string on stdout: control characters escaped. */
void ctl_json_str(const char *s);
/* "outboxctl: NAME: err" on stderr; the exit becomes 1. */
void ctl_report(struct ctl *c, const struct outbox_config *ob, const char *err);
/* A connected store, or NULL once reported (exit 69 or 1). */
struct store *ctl_open_store(struct ctl *c, const struct outbox_config *ob);
void ctl_sessions_free(struct ctl *c);

/*
 * outboxctl_select.c: fills outboxes with --outbox NAME or every outbox,
 * in file order, a database_like entry's tenants discovered (when
 * discover) in place of its templates.  0, or the exit code once
 * explained.  _free frees what it made.
 */
int ctl_select_outboxes(struct ctl *c, bool discover);
void ctl_selection_free(struct ctl *c);

/* outboxctl_walk.c: the commands that change many rows. */
void ctl_catch_stop_signals(void);
/* The exit code after a signal (130, 143), else 0. */
int ctl_dead_retry_all(struct ctl *c);
int ctl_purge(struct ctl *c);
void ctl_dead_retry_ids(struct ctl *c);
/* dead release: only the outboxes with on_dead: hold (ctl_hold_only). */
int ctl_dead_release_all(struct ctl *c);
void ctl_dead_release_ids(struct ctl *c);

#endif
