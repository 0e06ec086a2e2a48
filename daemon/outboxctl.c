/*
 * outboxctl: the operator's tool (docs/contract.md section 3): status, dead list,
 * dead retry and purge on the outboxes of the daemon's own config file,
 * as an aligned table for a terminal or --json for scripts.  The SQL
 * lives in admin.c and store.c; this file parses, connects and prints.
 */
#include <getopt.h>
#include <inttypes.h>
#include <mysql.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "config.h"
#include "store.h"
#include "util.h"

#define LIMIT_MAX 1000000

enum command { CMD_NONE, CMD_STATUS, CMD_DEAD_LIST, CMD_DEAD_RETRY, CMD_PURGE };

/* Options that only some commands take, as bits for the check. */
enum { OPT_OUTBOX = 1, OPT_LIMIT = 2, OPT_ALL = 4, OPT_OLDER = 8 };

struct options {
    const char *config;
    bool json;
    unsigned given; /* OPT_* bits seen */
    const char *outbox;
    unsigned limit;
    uint64_t older_ms;
    enum command cmd;
    char **ids; /* dead retry's EVENT_IDs: argv entries */
    size_t nids;
};

/* One run over the selected outboxes. */
struct ctl {
    struct options *o;
    struct config *cfg;
    struct outbox_config **outboxes;
    size_t n;
    bool unavailable; /* a database could not be reached: exit 69 */
    bool failed;      /* anything else went wrong: exit 1 */
};

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: outboxctl [-c FILE] [--json] COMMAND\n"
            "  status                             rows per status, oldest "
            "PENDING age\n"
            "  dead list [--outbox NAME] [--limit N]\n"
            "  dead retry [--outbox NAME] (--all | EVENT_ID...)\n"
            "  purge [--outbox NAME] --sent-older-than DURATION\n"
            "options:\n"
            "  -c FILE      configuration (default " CONFIG_DEFAULT_PATH ")\n"
            "  --json       machine-readable output on stdout\n"
            "  --outbox NAME  one outbox, named <database>.<table> "
            "(default: all)\n"
            "  --limit N    dead list: rows per outbox (default %d)\n"
            "exit codes: 0 ok, 64 usage, 69 database unavailable, 78 "
            "configuration, 1 other\n",
            ADMIN_DEAD_LIMIT);
}

static int
usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "outboxctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'outboxctl --help'.\n");
    return EXIT_USAGE;
}

/* ---- parsing ---- */

/* 0, or EXIT_USAGE once explained. */
static int
parse_limit(const char *text, unsigned *limit)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || v < 1 ||
        v > LIMIT_MAX)
        return usage_error("--limit wants a whole number from 1 to 1000000, "
                           "not \"%s\"",
                           text);
    *limit = (unsigned)v;
    return 0;
}

static int
parse_older(const char *text, uint64_t *ms)
{
    char err[256];
    if (duration_parse(text, ms, err, sizeof(err)) == 0)
        return 0;
    return usage_error("--sent-older-than: %s", err);
}

/* 0 to go on, -1 after --help or --version (exit 0), else EXIT_USAGE. */
static int
parse_option(struct options *o, int ch)
{
    switch (ch) {
    case 'c':
        o->config = optarg;
        return 0;
    case 'j':
        o->json = true;
        return 0;
    case 'o':
        o->given |= OPT_OUTBOX;
        o->outbox = optarg;
        return 0;
    case 'l':
        o->given |= OPT_LIMIT;
        return parse_limit(optarg, &o->limit);
    case 'a':
        o->given |= OPT_ALL;
        return 0;
    case 's':
        o->given |= OPT_OLDER;
        return parse_older(optarg, &o->older_ms);
    case 'h':
        usage(stdout);
        return -1;
    case 'V':
        printf("outboxctl %s\n", OUTBOXD_VERSION);
        return -1;
    default: /* getopt has said what was wrong */
        fprintf(stderr, "Try 'outboxctl --help'.\n");
        return EXIT_USAGE;
    }
}

/* The words after the options: the command and dead retry's ids. */
static int
parse_command(struct options *o, char **words, size_t n)
{
    if (n == 0)
        return usage_error("%s", "no command given");
    size_t used = 1;
    if (strcmp(words[0], "status") == 0)
        o->cmd = CMD_STATUS;
    else if (strcmp(words[0], "purge") == 0)
        o->cmd = CMD_PURGE;
    else if (strcmp(words[0], "dead") != 0)
        return usage_error("unknown command \"%s\"", words[0]);
    else if (n < 2)
        return usage_error("%s", "dead wants list or retry");
    else if (strcmp(words[1], "list") == 0)
        o->cmd = CMD_DEAD_LIST, used = 2;
    else if (strcmp(words[1], "retry") == 0)
        o->cmd = CMD_DEAD_RETRY, used = 2;
    else
        return usage_error("unknown command \"dead %s\"", words[1]);
    if (o->cmd == CMD_DEAD_RETRY) {
        o->ids = words + used;
        o->nids = n - used;
    } else if (n > used) {
        return usage_error("unexpected argument \"%s\"", words[used]);
    }
    return 0;
}

/* Each command takes only its own options. */
static int
check_command_options(const struct options *o)
{
    static const unsigned allowed[] = {
        [CMD_STATUS] = OPT_OUTBOX,
        [CMD_DEAD_LIST] = OPT_OUTBOX | OPT_LIMIT,
        [CMD_DEAD_RETRY] = OPT_OUTBOX | OPT_ALL,
        [CMD_PURGE] = OPT_OUTBOX | OPT_OLDER,
    };
    static const char *const names[] = {"--outbox", "--limit", "--all",
                                        "--sent-older-than"};
    unsigned extra = o->given & ~allowed[o->cmd];
    for (unsigned i = 0; i < 4; i++)
        if (extra & (1u << i))
            return usage_error("%s does not apply to this command", names[i]);
    if (o->cmd == CMD_PURGE && !(o->given & OPT_OLDER))
        return usage_error("%s", "purge needs --sent-older-than DURATION");
    if (o->cmd == CMD_DEAD_RETRY && (o->given & OPT_ALL) && o->nids > 0)
        return usage_error("%s", "dead retry takes --all or EVENT_IDs, not "
                                 "both");
    if (o->cmd == CMD_DEAD_RETRY && !(o->given & OPT_ALL) && o->nids == 0)
        return usage_error("%s", "dead retry needs --all or EVENT_IDs");
    return 0;
}

/* Returns -1 to go on, else the exit code. */
static int
parse_args(struct options *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"outbox", required_argument, NULL, 'o'},
        {"limit", required_argument, NULL, 'l'},
        {"all", no_argument, NULL, 'a'},
        {"sent-older-than", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    o->config = CONFIG_DEFAULT_PATH;
    o->limit = ADMIN_DEAD_LIMIT;
    /* Options may follow the command: `outboxctl dead list --json`. */
    while ((ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        int rc = parse_option(o, ch);
        if (rc != 0)
            return rc < 0 ? 0 : rc;
    }
    int rc = parse_command(o, argv + optind, (size_t)(argc - optind));
    if (rc == 0)
        rc = check_command_options(o);
    return rc != 0 ? rc : -1;
}

/* ---- output helpers ---- */

/* A JSON string: control characters escaped, anything else as stored. */
static void
json_str(const char *s)
{
    if (s == NULL) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", stdout);
        else if (*p == '\t')
            fputs("\\t", stdout);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* A terminal cell: line breaks and tabs would break the columns. */
static const char *
cell(const char *s, char *buf, size_t size)
{
    if (s == NULL)
        return "-";
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < size; i++)
        buf[i] = (unsigned char)s[i] < 0x20 ? ' ' : s[i];
    buf[i] = '\0';
    return buf;
}

/* "42.0s", "3m05s", "2h07m", "4d03h". */
static void
format_age(int64_t us, char *buf, size_t size)
{
    uint64_t s = (uint64_t)(us > 0 ? us : 0) / 1000000;
    if (s < 60)
        snprintf(buf, size, "%.1fs", (double)(us > 0 ? us : 0) / 1e6);
    else if (s < 3600)
        snprintf(buf, size, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, size, "%" PRIu64 "h%02" PRIu64 "m", s / 3600,
                 s / 60 % 60);
    else
        snprintf(buf, size, "%" PRIu64 "d%02" PRIu64 "h", s / 86400,
                 s / 3600 % 24);
}

/* ---- connecting ---- */

static void
report(struct ctl *c, const struct outbox_config *ob, const char *err)
{
    fprintf(stderr, "outboxctl: %s: %s\n", ob->name, err);
    c->failed = true;
}

/*
 * store_connect checks the server version and the table as the daemon
 * does.  A failure that is not about the schema is the database being
 * out of reach (down, wrong port, refused login): exit 69.
 */
static struct store *
open_store(struct ctl *c, const struct outbox_config *ob)
{
    char err[1024];
    struct store *st = store_new(ob);
    if (store_connect(st, err, sizeof(err)) == 0)
        return st;
    if (store_last_error_is_schema(st))
        report(c, ob, err);
    else {
        fprintf(stderr, "outboxctl: %s: %s\n", ob->name, err);
        c->unavailable = true;
    }
    store_free(st);
    return NULL;
}

/* ---- status ---- */

static int
max_int(int a, int b)
{
    return a > b ? a : b;
}

struct status_result {
    const struct outbox_config *ob;
    bool ok;
    struct admin_status s;
};

static const enum outbox_status status_order[] = {
    OUTBOX_PENDING, OUTBOX_PROCESSING, OUTBOX_RETRY, OUTBOX_DEAD, OUTBOX_SENT};
#define NSTATUS (sizeof(status_order) / sizeof(status_order[0]))

static void
status_collect(struct ctl *c, struct status_result *r)
{
    char err[1024];
    struct store *st = open_store(c, r->ob);
    if (st == NULL)
        return;
    if (admin_status(store_session(st), r->ob->table, &r->s, err, sizeof(err)) <
        0)
        report(c, r->ob, err);
    else
        r->ok = true;
    store_free(st);
}

/* Column widths: the name, then one per status, wide enough for both
 * the header and the largest count. */
struct status_widths {
    int name, col[NSTATUS];
};

static void
status_measure(const struct status_result *rs, size_t n,
               struct status_widths *w)
{
    char buf[32];
    w->name = (int)strlen("OUTBOX");
    for (size_t k = 0; k < NSTATUS; k++)
        w->col[k] = (int)strlen(outbox_status_name(status_order[k]));
    for (size_t i = 0; i < n; i++) {
        w->name = max_int(w->name, (int)strlen(rs[i].ob->name));
        for (size_t k = 0; rs[i].ok && k < NSTATUS; k++)
            w->col[k] =
                max_int(w->col[k], snprintf(buf, sizeof(buf), "%" PRIu64,
                                            rs[i].s.rows[status_order[k]]));
    }
}

static void
status_print_row(const struct status_result *r, const struct status_widths *w)
{
    char age[32] = "-";
    printf("%-*s", w->name, r->ob->name);
    for (size_t k = 0; k < NSTATUS; k++) {
        if (r->ok)
            printf("  %*" PRIu64, w->col[k], r->s.rows[status_order[k]]);
        else
            printf("  %*s", w->col[k], "-");
    }
    if (r->ok && r->s.pending)
        format_age(r->s.oldest_pending_us, age, sizeof(age));
    printf("  %s\n", age);
}

static void
status_print_text(const struct status_result *rs, size_t n)
{
    struct status_widths w;
    status_measure(rs, n, &w);
    printf("%-*s", w.name, "OUTBOX");
    for (size_t k = 0; k < NSTATUS; k++)
        printf("  %*s", w.col[k], outbox_status_name(status_order[k]));
    printf("  OLDEST PENDING\n");
    for (size_t i = 0; i < n; i++)
        status_print_row(&rs[i], &w);
    for (size_t i = 0; i < n; i++)
        if (rs[i].ok && rs[i].s.other > 0)
            printf("%s: %" PRIu64 " row%s with a status outboxd does not "
                   "know: never sent\n",
                   rs[i].ob->name, rs[i].s.other,
                   rs[i].s.other == 1 ? "" : "s");
}

static void
status_print_json_one(const struct status_result *r)
{
    printf("{\"outbox\":");
    json_str(r->ob->name);
    if (!r->ok) {
        printf(",\"error\":true}");
        return;
    }
    printf(",\"rows\":{");
    for (size_t k = 0; k < NSTATUS; k++)
        printf("%s\"%s\":%" PRIu64, k ? "," : "",
               outbox_status_name(status_order[k]), r->s.rows[status_order[k]]);
    printf("},\"other\":%" PRIu64 ",\"dead\":%" PRIu64
           ",\"oldest_pending_age_seconds\":",
           r->s.other, r->s.rows[OUTBOX_DEAD]);
    if (r->s.pending)
        printf("%.6f}", (double)r->s.oldest_pending_us / 1e6);
    else
        printf("null}");
}

static void
cmd_status(struct ctl *c)
{
    struct status_result *rs = xcalloc(c->n, sizeof(*rs));
    for (size_t i = 0; i < c->n; i++) {
        rs[i].ob = c->outboxes[i];
        status_collect(c, &rs[i]);
    }
    if (c->o->json) {
        printf("{\"outboxes\":[");
        for (size_t i = 0; i < c->n; i++) {
            if (i > 0)
                putchar(',');
            status_print_json_one(&rs[i]);
        }
        printf("]}\n");
    } else {
        status_print_text(rs, c->n);
    }
    free(rs);
}

/* ---- dead list ---- */

/* Column widths of one outbox's DEAD rows. */
struct dead_widths {
    int id, event_id, aggregate, type;
};

static void
dead_aggregate(const struct admin_dead_row *d, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%s", d->aggregate_type ? d->aggregate_type : "",
             d->aggregate_id ? d->aggregate_id : "");
}

static void
dead_measure(const struct admin_dead_list *l, struct dead_widths *w)
{
    char buf[512];
    *w = (struct dead_widths){2, 8, 9, 4};
    for (size_t i = 0; i < l->n; i++) {
        const struct admin_dead_row *d = &l->rows[i];
        w->id = max_int(w->id, snprintf(buf, sizeof(buf), "%" PRIu64, d->id));
        w->event_id =
            max_int(w->event_id, (int)strlen(cell(d->event_id, buf, 256)));
        dead_aggregate(d, buf, sizeof(buf));
        w->aggregate = max_int(w->aggregate, (int)strlen(buf));
        w->type = max_int(w->type, (int)strlen(cell(d->event_type, buf, 256)));
    }
}

static void
dead_print_text(const struct outbox_config *ob, const struct admin_dead_list *l)
{
    char a[512], b[256], e[2048];
    struct dead_widths w;
    printf("%s: %" PRIu64 " DEAD row%s\n", ob->name, l->total,
           l->total == 1 ? "" : "s");
    if (l->n == 0)
        return;
    dead_measure(l, &w);
    printf("%*s  %-*s  %-*s  %-*s  %7s  %s\n", w.id, "ID", w.event_id,
           "EVENT_ID", w.aggregate, "AGGREGATE", w.type, "TYPE", "RETRIES",
           "LAST_ERROR");
    for (size_t i = 0; i < l->n; i++) {
        const struct admin_dead_row *d = &l->rows[i];
        dead_aggregate(d, a, sizeof(a));
        printf("%*" PRIu64 "  %-*s  %-*s  ", w.id, d->id, w.event_id,
               cell(d->event_id, b, sizeof(b)), w.aggregate, cell(a, a, 256));
        printf("%-*s  %7lu  %s\n", w.type, cell(d->event_type, b, sizeof(b)),
               d->retry_count, cell(d->last_error, e, sizeof(e)));
    }
    if (l->total > l->n)
        printf("(the oldest %zu of %" PRIu64 "; --limit N shows more)\n", l->n,
               l->total);
}

static void
dead_print_json_row(const struct admin_dead_row *d)
{
    char a[512];
    printf("{\"id\":%" PRIu64 ",\"event_id\":", d->id);
    json_str(d->event_id);
    dead_aggregate(d, a, sizeof(a));
    printf(",\"aggregate\":");
    json_str(a);
    printf(",\"aggregate_type\":");
    json_str(d->aggregate_type);
    printf(",\"aggregate_id\":");
    json_str(d->aggregate_id);
    printf(",\"event_type\":");
    json_str(d->event_type);
    printf(",\"retry_count\":%lu,\"created_at\":", d->retry_count);
    json_str(d->created_at);
    printf(",\"last_error\":");
    json_str(d->last_error);
    printf("}");
}

static void
dead_print_json(const struct outbox_config *ob, const struct admin_dead_list *l)
{
    printf("{\"outbox\":");
    json_str(ob->name);
    if (l == NULL) {
        printf(",\"error\":true}");
        return;
    }
    printf(",\"total\":%" PRIu64 ",\"rows\":[", l->total);
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0)
            putchar(',');
        dead_print_json_row(&l->rows[i]);
    }
    printf("]}");
}

/* Fills l; false (reported) when the outbox could not be read. */
static bool
dead_collect(struct ctl *c, const struct outbox_config *ob,
             struct admin_dead_list *l)
{
    char err[1024];
    struct store *st = open_store(c, ob);
    if (st == NULL)
        return false;
    int rc = admin_dead_list(store_session(st), ob->table, c->o->limit, l, err,
                             sizeof(err));
    if (rc < 0)
        report(c, ob, err);
    store_free(st);
    return rc == 0;
}

static void
cmd_dead_list(struct ctl *c)
{
    if (c->o->json)
        printf("{\"outboxes\":[");
    for (size_t i = 0; i < c->n; i++) {
        struct admin_dead_list l = {0};
        bool ok = dead_collect(c, c->outboxes[i], &l);
        if (c->o->json) {
            if (i > 0)
                putchar(',');
            dead_print_json(c->outboxes[i], ok ? &l : NULL);
        } else if (ok) {
            if (i > 0)
                putchar('\n');
            dead_print_text(c->outboxes[i], &l);
        }
        admin_dead_list_free(&l);
    }
    if (c->o->json)
        printf("]}\n");
}

/* ---- dead retry ---- */

/* -1 (reported) when the outbox could not be changed. */
static int64_t
retry_one(struct ctl *c, const struct outbox_config *ob, bool *found)
{
    char err[1024];
    uint64_t n = 0;
    struct store *st = open_store(c, ob);
    if (st == NULL)
        return -1;
    MYSQL *db = store_session(st);
    int rc = c->o->nids == 0
                 ? admin_dead_retry_all(db, ob->table, &n, err, sizeof(err))
                 : admin_dead_retry_ids(
                       db, ob->table, (const char *const *)c->o->ids,
                       c->o->nids, found, &n, err, sizeof(err));
    if (rc < 0)
        report(c, ob, err);
    store_free(st);
    /* --all commits in batches: what it changed before failing counts. */
    return rc < 0 && n == 0 ? -1 : (int64_t)n;
}

static void
retry_print_missing(struct ctl *c, const bool *found)
{
    bool any = false;
    for (size_t i = 0; i < c->o->nids; i++) {
        if (found[i])
            continue;
        if (c->o->json) {
            if (any)
                putchar(',');
            json_str(c->o->ids[i]);
        } else {
            fprintf(stderr, "outboxctl: no DEAD row has event_id %s\n",
                    c->o->ids[i]);
        }
        any = true;
        c->failed = true;
    }
}

static void
cmd_dead_retry(struct ctl *c)
{
    bool *found = xcalloc(c->o->nids + 1, sizeof(*found));
    uint64_t total = 0;
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (size_t i = 0; i < c->n; i++) {
        const struct outbox_config *ob = c->outboxes[i];
        int64_t n = retry_one(c, ob, found);
        total += n > 0 ? (uint64_t)n : 0;
        if (c->o->json) {
            printf("%s{\"outbox\":", i ? "," : "");
            json_str(ob->name);
            if (n < 0)
                fputs(",\"error\":true}", stdout);
            else
                printf(",\"retried\":%" PRId64 "}", n);
        } else if (n >= 0) {
            printf("%s: %" PRId64 " DEAD row%s back to PENDING\n", ob->name, n,
                   n == 1 ? "" : "s");
        }
    }
    if (c->o->json)
        printf("],\"retried\":%" PRIu64 ",\"not_found\":[", total);
    if (c->failed || c->unavailable) {
        /* An outbox we could not search may hold the missing ids. */
        if (c->o->json)
            printf("]}\n");
        free(found);
        return;
    }
    retry_print_missing(c, found);
    if (c->o->json)
        fputs("]}\n", stdout);
    free(found);
}

/* ---- purge ---- */

/* -1 (reported) when nothing could be deleted. */
static int64_t
purge_one(struct ctl *c, const struct outbox_config *ob)
{
    char err[1024];
    struct store_purge res;
    struct store *st = open_store(c, ob);
    if (st == NULL)
        return -1;
    /* The daemon's own walk and batch size, without its time budget. */
    int rc = store_purge_sent(st, c->o->older_ms, ob->retention_batch, 0, &res,
                              err, sizeof(err));
    if (rc < 0)
        report(c, ob, err);
    store_free(st);
    return rc < 0 && res.deleted == 0 ? -1 : (int64_t)res.deleted;
}

static void
cmd_purge(struct ctl *c)
{
    char age[32];
    uint64_t total = 0;
    duration_format(c->o->older_ms, age, sizeof(age));
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (size_t i = 0; i < c->n; i++) {
        const struct outbox_config *ob = c->outboxes[i];
        int64_t n = purge_one(c, ob);
        total += n > 0 ? (uint64_t)n : 0;
        if (c->o->json) {
            printf("%s{\"outbox\":", i ? "," : "");
            json_str(ob->name);
            if (n < 0)
                fputs(",\"error\":true}", stdout);
            else
                printf(",\"deleted\":%" PRId64 "}", n);
        } else if (n >= 0) {
            printf("%s: deleted %" PRId64 " SENT row%s older than %s\n",
                   ob->name, n, n == 1 ? "" : "s", age);
        }
    }
    if (c->o->json)
        printf("],\"deleted\":%" PRIu64 "}\n", total);
}

/* ---- main ---- */

/* --outbox NAME or every outbox of the file, in file order. */
static int
select_outboxes(struct ctl *c)
{
    size_t total = config_outbox_count(c->cfg);
    c->outboxes = xcalloc(total + 1, sizeof(*c->outboxes));
    if (c->o->outbox == NULL) {
        for (size_t i = 0; i < total; i++)
            c->outboxes[c->n++] = config_outbox_at(c->cfg, i);
        return 0;
    }
    c->outboxes[0] = config_outbox_find(c->cfg, c->o->outbox);
    if (c->outboxes[0] != NULL) {
        c->n = 1;
        return 0;
    }
    fprintf(stderr,
            "outboxctl: no outbox named %s in %s; there are:", c->o->outbox,
            c->cfg->path ? c->cfg->path : c->o->config);
    for (size_t i = 0; i < total; i++)
        fprintf(stderr, " %s", config_outbox_at(c->cfg, i)->name);
    fprintf(stderr, "\n");
    return EXIT_USAGE;
}

static int
run(struct ctl *c)
{
    int rc = select_outboxes(c);
    if (rc != 0)
        return rc;
    switch (c->o->cmd) {
    case CMD_STATUS:
        cmd_status(c);
        break;
    case CMD_DEAD_LIST:
        cmd_dead_list(c);
        break;
    case CMD_DEAD_RETRY:
        cmd_dead_retry(c);
        break;
    case CMD_PURGE:
        cmd_purge(c);
        break;
    case CMD_NONE:
        break;
    }
    fflush(stdout);
    return c->unavailable ? EXIT_UNAVAILABLE : c->failed ? 1 : 0;
}

int
main(int argc, char **argv)
{
    struct options o = {0};
    int rc = parse_args(&o, argc, argv);
    if (rc >= 0)
        return rc;
    struct ctl c = {.o = &o};
    c.cfg = config_load_or_report(o.config, "outboxctl");
    if (c.cfg == NULL)
        return EXIT_CONFIG;
    rc = run(&c);
    free(c.outboxes);
    config_free(c.cfg);
    store_thread_end();
    mysql_library_end();
    return rc;
}
