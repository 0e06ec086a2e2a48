/*
 * outboxctl_walk: purge, dead retry and dead release, the commands that
 * change rows: a count first, then short transactions with progress on a
 * terminal, --dry-run, --limit, and a stop between transactions on
 * SIGINT/SIGTERM.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "outboxctl.h"
#include "util.h"

/* ---- purge and dead retry --all: long walks ---- */

/* The signal that asked to stop; the walks check it between transactions. */
static volatile sig_atomic_t stop_signal;

static void
stop_cb(int sig)
{
    stop_signal = sig;
}

/*
 * SA_RESTART: a query under way is not cut short, its transaction ends
 * as it would have.  SA_RESETHAND: a second Ctrl-C kills outright, and
 * the server rolls back what that connection had not committed.
 */
void
ctl_catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = stop_cb,
                           .sa_flags = SA_RESTART | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* A line on the terminal, rewritten in place, four times a second. */
struct progress {
    bool on;
    const char *name, *verb;
    uint64_t total, shown_ms;
    int width; /* of the last line, to blank it out */
};

#define PROGRESS_EVERY_MS 250

static void
progress_show(struct progress *p, uint64_t done, bool now)
{
    if (!p->on || (!now && clock_ms() - p->shown_ms < PROGRESS_EVERY_MS))
        return;
    /* Rows that aged in since the count are deleted too. */
    uint64_t total = done > p->total ? done : p->total;
    int w = fprintf(stderr, "\r%s: %" PRIu64 "/%" PRIu64 " rows %s", p->name,
                    done, total, p->verb);
    if (w < p->width)
        fprintf(stderr, "%*s", p->width - w, "");
    p->width = w > p->width ? w : p->width;
    p->shown_ms = clock_ms();
}

static void
progress_end(struct progress *p)
{
    if (p->on && p->width > 0)
        fprintf(stderr, "\r%*s\r", p->width, "");
}

/* What one walk does on one outbox: purge or dead retry --all. */
struct walk {
    const char *verb; /* of the progress line */
    int (*count)(struct ctl *c, struct store *st,
                 const struct outbox_config *ob, uint64_t *total, char *err,
                 size_t errlen);
    /* One transaction of at most max rows (0: no bound); *finished when
     * nothing is left. */
    int (*step)(struct ctl *c, struct store *st, const struct outbox_config *ob,
                uint64_t max, uint64_t *done, bool *finished, char *err,
                size_t errlen);
};

struct walk_result {
    uint64_t total; /* the count first, bounded by --limit */
    uint64_t done;
    bool ok;          /* false: failed (reported); done says what stayed */
    bool interrupted; /* a signal stopped it before the end */
};

static uint64_t
walk_limit(const struct ctl *c)
{
    return (c->o->given & OPT_LIMIT) ? c->o->limit : 0;
}

/* Steps until the end, the limit or a signal; false on an error. */
static bool
walk_steps(struct ctl *c, const struct walk *w, struct store *st,
           const struct outbox_config *ob, struct walk_result *r,
           struct progress *p, char *err, size_t errlen)
{
    uint64_t limit = walk_limit(c);
    bool finished = false;
    while (!finished && (limit == 0 || r->done < limit)) {
        if (stop_signal) {
            r->interrupted = true;
            return true;
        }
        uint64_t n = 0;
        int rc = w->step(c, st, ob, limit ? limit - r->done : 0, &n, &finished,
                         err, errlen);
        r->done += n;
        if (rc < 0)
            return false;
        progress_show(p, r->done, false);
    }
    return true;
}

static void
walk_one(struct ctl *c, const struct walk *w, const struct outbox_config *ob,
         struct walk_result *r)
{
    char err[ERR_LEN];
    memset(r, 0, sizeof(*r));
    struct store *st = ctl_open_store(c, ob);
    if (st == NULL)
        return;
    uint64_t limit = walk_limit(c);
    r->ok = w->count(c, st, ob, &r->total, err, sizeof(err)) == 0;
    if (r->ok && limit != 0 && r->total > limit)
        r->total = limit;
    struct progress p = {.on = !c->o->json && isatty(STDERR_FILENO),
                         .name = ob->name,
                         .verb = w->verb,
                         .total = r->total};
    if (r->ok && !(c->o->given & OPT_DRY_RUN)) {
        progress_show(&p, 0, true);
        r->ok = walk_steps(c, w, st, ob, r, &p, err, sizeof(err));
        progress_end(&p);
    }
    if (!r->ok)
        ctl_report(c, ob, err);
    store_free(st);
}

/* After a signal: what was not done, and how to finish. */
static int
walk_stopped(struct ctl *c, size_t next)
{
    fprintf(stderr,
            "outboxctl: stopped by %s after a committed transaction; run "
            "it again to finish",
            stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
    for (size_t i = next; i < c->n; i++)
        fprintf(stderr, "%s %s", i == next ? "; not started:" : ",",
                c->outboxes[i]->name);
    fprintf(stderr, "\n");
    return 128 + stop_signal;
}

/* ---- dead retry ---- */

static int
retry_count(struct ctl *c, struct store *st, const struct outbox_config *ob,
            uint64_t *total, char *err, size_t errlen)
{
    (void)ob;
    (void)c;
    return admin_dead_count(st, total, err, errlen);
}

static int
retry_step(struct ctl *c, struct store *st, const struct outbox_config *ob,
           uint64_t max, uint64_t *done, bool *finished, char *err,
           size_t errlen)
{
    (void)ob;
    (void)c;
    unsigned ask =
        max != 0 && max < ADMIN_RETRY_BATCH ? (unsigned)max : ADMIN_RETRY_BATCH;
    if (admin_dead_retry_batch(st, ask, done, err, errlen) < 0)
        return -1;
    *finished = *done < ask;
    return 0;
}

/* One outbox's entry in --json: the rows done (or, dry, counted) under
 * key, or an error when nothing was done. */
static void
walk_print_json(const struct outbox_config *ob, const struct walk_result *r,
                size_t i, const char *key, bool dry)
{
    printf("%s{\"outbox\":", i ? "," : "");
    ctl_json_str(ob->name);
    if (!r->ok && r->done == 0)
        fputs(",\"error\":true}", stdout);
    else
        printf(",\"%s\":%" PRIu64 "%s}", key, dry ? r->total : r->done,
               r->interrupted ? ",\"interrupted\":true" : "");
}

static const struct walk retry_walk = {"retried", retry_count, retry_step};

static void
retry_print(const struct ctl *c, const struct outbox_config *ob,
            const struct walk_result *r, size_t i)
{
    bool dry = c->o->given & OPT_DRY_RUN;
    if (c->o->json) {
        walk_print_json(ob, r, i, dry ? "would_retry" : "retried", dry);
    } else if (dry && r->ok) {
        printf("%s: would retry %" PRIu64 " DEAD row%s\n", ob->name, r->total,
               r->total == 1 ? "" : "s");
    } else if (r->ok || r->done > 0) {
        printf("%s: %" PRIu64 " DEAD row%s back to PENDING%s\n", ob->name,
               r->done, r->done == 1 ? "" : "s",
               r->interrupted ? " (interrupted)" : "");
    }
}

/* -1 (reported) when the outbox could not be changed. */
static int64_t
retry_ids_one(struct ctl *c, const struct outbox_config *ob, bool *found)
{
    char err[ERR_LEN];
    uint64_t n = 0;
    struct store *st = ctl_open_store(c, ob);
    if (st == NULL)
        return -1;
    int rc = admin_dead_retry_ids(st, (const char *const *)c->o->ids,
                                  c->o->nids, found, &n, err, sizeof(err));
    if (rc < 0)
        ctl_report(c, ob, err);
    store_free(st);
    return rc < 0 ? -1 : (int64_t)n;
}

static void
print_missing(struct ctl *c, const bool *found, const char *what)
{
    bool any = false;
    for (size_t i = 0; i < c->o->nids; i++) {
        if (found[i])
            continue;
        if (c->o->json) {
            if (any)
                putchar(',');
            ctl_json_str(c->o->ids[i]);
        } else {
            fprintf(stderr, "outboxctl: no %s row has event_id %s\n", what,
                    c->o->ids[i]);
        }
        any = true;
        c->failed = true;
    }
}

/* ---- dead release ---- */

static int
release_count(struct ctl *c, struct store *st, const struct outbox_config *ob,
              uint64_t *total, char *err, size_t errlen)
{
    (void)ob;
    (void)c;
    return admin_held_count(st, store_hold_cond(st), total, err, errlen);
}

static int
release_step(struct ctl *c, struct store *st, const struct outbox_config *ob,
             uint64_t max, uint64_t *done, bool *finished, char *err,
             size_t errlen)
{
    (void)ob;
    (void)c;
    unsigned ask =
        max != 0 && max < ADMIN_RETRY_BATCH ? (unsigned)max : ADMIN_RETRY_BATCH;
    if (admin_dead_release_batch(st, store_hold_cond(st), ask, done, err,
                                 errlen) < 0)
        return -1;
    *finished = *done < ask;
    return 0;
}

static const struct walk release_walk = {"released", release_count,
                                         release_step};

static void
release_print(const struct ctl *c, const struct outbox_config *ob,
              const struct walk_result *r, size_t i)
{
    bool dry = c->o->given & OPT_DRY_RUN;
    if (c->o->json) {
        walk_print_json(ob, r, i, dry ? "would_release" : "released", dry);
    } else if (dry && r->ok) {
        printf("%s: would release %" PRIu64 " held DEAD row%s\n", ob->name,
               r->total, r->total == 1 ? "" : "s");
    } else if (r->ok || r->done > 0) {
        printf("%s: %" PRIu64 " DEAD row%s released, %s aggregate%s flow "
               "again%s\n",
               ob->name, r->done, r->done == 1 ? "" : "s",
               r->done == 1 ? "its" : "their", r->done == 1 ? "" : "s",
               r->interrupted ? " (interrupted)" : "");
    }
}

static int64_t
release_ids_one(struct ctl *c, const struct outbox_config *ob, bool *found)
{
    char err[ERR_LEN];
    uint64_t n = 0;
    struct store *st = ctl_open_store(c, ob);
    if (st == NULL)
        return -1;
    int rc = admin_dead_release_ids(st, store_hold_cond(st),
                                    (const char *const *)c->o->ids, c->o->nids,
                                    found, &n, err, sizeof(err));
    if (rc < 0)
        ctl_report(c, ob, err);
    store_free(st);
    return rc < 0 ? -1 : (int64_t)n;
}

/* ---- dead retry and dead release, alike but for what they change ---- */

struct dead_cmd {
    const struct walk *walk;
    void (*print)(const struct ctl *c, const struct outbox_config *ob,
                  const struct walk_result *r, size_t i);
    /* The rows of c->o->ids changed in ob, -1 (reported) on failure. */
    int64_t (*ids_one)(struct ctl *c, const struct outbox_config *ob,
                       bool *found);
    const char *done_key, *dry_key; /* --json totals */
    const char *missing;            /* "no %s row has event_id" */
};

static const struct dead_cmd retry_cmd = {
    &retry_walk, retry_print, retry_ids_one, "retried", "would_retry", "DEAD"};
static const struct dead_cmd release_cmd = {&release_walk,   release_print,
                                            release_ids_one, "released",
                                            "would_release", "held DEAD"};

static int
dead_all(struct ctl *c, const struct dead_cmd *cmd)
{
    bool dry = c->o->given & OPT_DRY_RUN;
    uint64_t total = 0;
    size_t i = 0;
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (; i < c->n && !stop_signal; i++) {
        struct walk_result r;
        walk_one(c, cmd->walk, c->outboxes[i], &r);
        cmd->print(c, c->outboxes[i], &r, i);
        total += dry ? r.total : r.done;
    }
    if (c->o->json)
        printf("],\"%s\":%" PRIu64 "%s}\n", dry ? cmd->dry_key : cmd->done_key,
               total, stop_signal ? ",\"interrupted\":true" : "");
    fflush(stdout);
    return stop_signal ? walk_stopped(c, i) : 0;
}

static void
dead_ids(struct ctl *c, const struct dead_cmd *cmd)
{
    bool *found = xcalloc(c->o->nids + 1, sizeof(*found));
    uint64_t total = 0;
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (size_t i = 0; i < c->n; i++) {
        const struct outbox_config *ob = c->outboxes[i];
        int64_t n = cmd->ids_one(c, ob, found);
        struct walk_result r = {.ok = n >= 0, .done = n > 0 ? (uint64_t)n : 0};
        cmd->print(c, ob, &r, i);
        total += r.done;
    }
    if (c->o->json)
        printf("],\"%s\":%" PRIu64 ",\"not_found\":[", cmd->done_key, total);
    /* An outbox we could not search may hold the missing ids. */
    if (!c->failed && !c->unavailable)
        print_missing(c, found, cmd->missing);
    if (c->o->json)
        fputs("]}\n", stdout);
    free(found);
}

int
ctl_dead_retry_all(struct ctl *c)
{
    return dead_all(c, &retry_cmd);
}

void
ctl_dead_retry_ids(struct ctl *c)
{
    dead_ids(c, &retry_cmd);
}

int
ctl_dead_release_all(struct ctl *c)
{
    return dead_all(c, &release_cmd);
}

void
ctl_dead_release_ids(struct ctl *c)
{
    dead_ids(c, &release_cmd);
}

/* ---- purge ---- */

static int
purge_count(struct ctl *c, struct store *st, const struct outbox_config *ob,
            uint64_t *total, char *err, size_t errlen)
{
    (void)ob;
    return admin_purge_count(st, c->o->older_ms, total, err, errlen);
}

/* The daemon's own walk and batch size, without its time budget. */
static int
purge_step(struct ctl *c, struct store *st, const struct outbox_config *ob,
           uint64_t max, uint64_t *done, bool *finished, char *err,
           size_t errlen)
{
    struct store_purge res = {0};
    int rc = store_purge_sent_step(st, c->o->older_ms, ob->retention_batch, max,
                                   &res, err, errlen);
    *done = res.deleted;
    *finished = res.done;
    return rc;
}

static const struct walk purge_walk = {"purged", purge_count, purge_step};

static void
purge_print(const struct ctl *c, const struct outbox_config *ob,
            const struct walk_result *r, size_t i, const char *age)
{
    bool dry = c->o->given & OPT_DRY_RUN;
    if (c->o->json) {
        walk_print_json(ob, r, i, dry ? "would_delete" : "deleted", dry);
    } else if (dry && r->ok) {
        printf("%s: would delete %" PRIu64 " SENT row%s older than %s\n",
               ob->name, r->total, r->total == 1 ? "" : "s", age);
    } else if (r->ok || r->done > 0) {
        printf("%s: deleted %" PRIu64 " SENT row%s older than %s%s\n", ob->name,
               r->done, r->done == 1 ? "" : "s", age,
               r->interrupted ? " (interrupted)" : "");
    }
}

int
ctl_purge(struct ctl *c)
{
    char age[32];
    bool dry = c->o->given & OPT_DRY_RUN;
    uint64_t total = 0;
    size_t i = 0;
    duration_format(c->o->older_ms, age, sizeof(age));
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (; i < c->n && !stop_signal; i++) {
        struct walk_result r;
        walk_one(c, &purge_walk, c->outboxes[i], &r);
        purge_print(c, c->outboxes[i], &r, i, age);
        total += dry ? r.total : r.done;
    }
    if (c->o->json)
        printf("],\"%s\":%" PRIu64 "%s}\n", dry ? "would_delete" : "deleted",
               total, stop_signal ? ",\"interrupted\":true" : "");
    fflush(stdout);
    return stop_signal ? walk_stopped(c, i) : 0;
}
