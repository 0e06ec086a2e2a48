/*
 * outboxctl: the operator's tool (docs/contract.md section 3): status, dead
 * list, dead retry and purge on the outboxes of the daemon's own config file,
 * as an aligned table for a terminal or --json for scripts.  The SQL
 * lives in admin.c and store*.c, the commands that change many rows in
 * outboxctl_walk.c; this file parses, connects and prints.
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
#include "dbsession.h"
#include "discover.h"
#include "outboxctl.h"
#include "store.h"
#include "stats_sql.h"
#include "util.h"

/* dead list shows at most this many rows; purge and retry go further. */
#define LIST_LIMIT_MAX 1000000
#define LIMIT_MAX 1000000000

/*
 * Every option: getopt_long's table, the check that a command takes it
 * and the help are made from this, so they cannot disagree.
 */
struct ctl_option {
    const char *name;
    int has_arg, key;
    unsigned bit; /* OPT_*, 0 for the options of every command */
};

static const struct ctl_option ctl_options[] = {
    {"json", no_argument, 'j', 0},
    {"help", no_argument, 'h', 0},
    {"version", no_argument, 'V', 0},
    {"outbox", required_argument, 'o', OPT_OUTBOX},
    {"limit", required_argument, 'l', OPT_LIMIT},
    {"all", no_argument, 'a', OPT_ALL},
    {"sent-older-than", required_argument, 's', OPT_OLDER},
    {"dry-run", no_argument, 'n', OPT_DRY_RUN},
};
#define NOPTIONS (sizeof(ctl_options) / sizeof(ctl_options[0]))

#define OUTBOX_HELP                                                            \
    "  --outbox NAME    only this outbox, named <database>.<table> "           \
    "(default: all);\n"                                                        \
    "                   of a database_like entry, <database>/<schema>.<table>" \
    "\n                   or <database>/* for all its tenants\n"

/* Every command, in the order of the help. */
struct ctl_command {
    enum command cmd;
    const char *name; /* as typed: "dead list" */
    const char *args; /* the synopsis after the name */
    const char *summary;
    unsigned opts;    /* the OPT_* it takes */
    const char *help; /* its options, one a line */
};

static const struct ctl_command ctl_commands[] = {
    {CMD_STATUS, "status", "[--outbox NAME]",
     "rows per status and the age of the oldest PENDING row", OPT_OUTBOX,
     OUTBOX_HELP},
    {CMD_DEAD_LIST, "dead list", "[--outbox NAME] [--limit N]",
     "the DEAD rows, oldest first, with their last error",
     OPT_OUTBOX | OPT_LIMIT,
     OUTBOX_HELP "  --limit N        show at most N rows per outbox, 1 to "
                 "1000000 (default 100)\n"},
    {CMD_DEAD_RETRY, "dead retry",
     "[--outbox NAME] (--all [--dry-run] [--limit N] | EVENT_ID...)",
     "put DEAD rows back to PENDING",
     OPT_OUTBOX | OPT_ALL | OPT_DRY_RUN | OPT_LIMIT,
     OUTBOX_HELP
     "  --all            every DEAD row, in id order, 1000 per transaction\n"
     "  --dry-run        with --all: count the rows, change nothing\n"
     "  --limit N        with --all: retry at most N rows per outbox\n"
     "  EVENT_ID...      the DEAD rows with these event_ids, in one "
     "transaction\n"},
    {CMD_DEAD_RELEASE, "dead release",
     "[--outbox NAME] (--all [--dry-run] [--limit N] | EVENT_ID...)",
     "let the aggregates held by DEAD rows flow again (on_dead: hold)",
     OPT_OUTBOX | OPT_ALL | OPT_DRY_RUN | OPT_LIMIT,
     OUTBOX_HELP
     "  --all            every held DEAD row, in id order, 1000 per "
     "transaction\n"
     "  --dry-run        with --all: count the rows, change nothing\n"
     "  --limit N        with --all: release at most N rows per outbox\n"
     "  EVENT_ID...      the held DEAD rows with these event_ids, in one "
     "transaction\n"},
    {CMD_PURGE, "purge",
     "--sent-older-than DURATION [--outbox NAME] [--dry-run] [--limit N]",
     "delete SENT rows older than DURATION, as retention does",
     OPT_OUTBOX | OPT_OLDER | OPT_DRY_RUN | OPT_LIMIT,
     "  --sent-older-than DURATION\n"
     "                   rows whose sent_at is older than this (30m, 12h, "
     "7d)\n" OUTBOX_HELP "  --dry-run        count the rows, delete nothing\n"
     "  --limit N        delete at most N rows per outbox\n"},
    {CMD_OUTBOXES, "outboxes", "",
     "the outboxes of the configuration, one a line (reads no database)", 0,
     ""},
    {CMD_HELP, "help", "[COMMAND]", "the help of outboxctl or of COMMAND", 0,
     ""},
};
#define NCOMMANDS (sizeof(ctl_commands) / sizeof(ctl_commands[0]))

static void
usage(FILE *f)
{
    fprintf(f, "usage: outboxctl [-c FILE] [--json] COMMAND [OPTION...]\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-13s %s\n", ctl_commands[i].name,
                ctl_commands[i].summary);
    fprintf(f, "options of every command:\n"
               "  -c FILE          configuration (default " CONFIG_DEFAULT_PATH
               ")\n"
               "  --json           one JSON document on stdout, for scripts\n"
               "  -h, --help       this help; COMMAND --help: that command's\n"
               "  -V, --version    the version\n"
               "exit status: 0 done, 64 usage, 69 a database unavailable, 78 "
               "configuration,\n"
               "  130/143 stopped by SIGINT/SIGTERM, 1 anything else\n");
}

static void
usage_command(FILE *f, const struct ctl_command *c)
{
    fprintf(f, "usage: outboxctl [-c FILE] [--json] %s%s%s\n  %s\n", c->name,
            c->args[0] ? " " : "", c->args, c->summary);
    if (c->help[0] != '\0')
        fprintf(f, "options:\n%s", c->help);
}

static int
usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "outboxctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'outboxctl --help'.\n");
    return EXIT_USAGE;
}

/* The same, pointing at the command's own help. */
static int
command_error(const struct ctl_command *c, const char *fmt, const char *arg)
{
    fprintf(stderr, "outboxctl: %s: ", c->name);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'outboxctl %s --help'.\n", c->name);
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
        return usage_error("--limit wants a whole number from 1 to "
                           "1000000000, not \"%s\"",
                           text);
    *limit = (unsigned)v;
    return 0;
}

static int
parse_older(const char *text, uint64_t *ms)
{
    char err[ERR_LEN];
    if (duration_parse(text, ms, err, sizeof(err)) == 0)
        return 0;
    return usage_error("--sent-older-than: %s", err);
}

static unsigned
option_bit(int key)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (ctl_options[i].key == key)
            return ctl_options[i].bit;
    return 0;
}

/* 0 to go on, -1 after --version (exit 0), else EXIT_USAGE. */
static int
parse_option(struct options *o, int ch)
{
    o->given |= option_bit(ch);
    switch (ch) {
    case 'c':
        o->config = optarg;
        return 0;
    case 'j':
        o->json = true;
        return 0;
    case 'o':
        o->outbox = optarg;
        return 0;
    case 'l':
        return parse_limit(optarg, &o->limit);
    case 's':
        return parse_older(optarg, &o->older_ms);
    case 'a':
    case 'n':
        return 0;
    case 'h':
        o->help = true;
        return 0;
    case 'V':
        printf("outboxctl %s\n", OUTBOXD_VERSION);
        return -1;
    default: /* getopt has said what was wrong */
        fprintf(stderr, "Try 'outboxctl --help'.\n");
        return EXIT_USAGE;
    }
}

/* The command that words start with; *used says how many words it took. */
static const struct ctl_command *
find_command(char **words, size_t n, size_t *used)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const char *name = ctl_commands[i].name;
        const char *sp = strchr(name, ' ');
        if (sp == NULL && strcmp(words[0], name) == 0) {
            *used = 1;
            return &ctl_commands[i];
        }
        if (sp != NULL && n >= 2 &&
            strncmp(words[0], name, (size_t)(sp - name)) == 0 &&
            words[0][sp - name] == '\0' && strcmp(words[1], sp + 1) == 0) {
            *used = 2;
            return &ctl_commands[i];
        }
    }
    return NULL;
}

/* `help dead`, `dead --help`: the help of every dead command. */
static bool
is_dead_prefix(char **words, size_t n)
{
    return n >= 1 && strcmp(words[0], "dead") == 0 &&
           (n == 1 ||
            (strcmp(words[1], "list") != 0 && strcmp(words[1], "retry") != 0 &&
             strcmp(words[1], "release") != 0));
}

static bool
takes_ids(const struct ctl_command *c)
{
    return c->cmd == CMD_DEAD_RETRY || c->cmd == CMD_DEAD_RELEASE;
}

/* The words after the options: the command and dead retry's ids. */
static int
parse_command(struct options *o, char **words, size_t n)
{
    if (n == 0)
        return o->help ? 0 : usage_error("%s", "no command given");
    size_t used = 0;
    o->cmd = find_command(words, n, &used);
    if (o->cmd == NULL && is_dead_prefix(words, n) && n == 1 && o->help) {
        o->help_topic = "dead";
        return 0;
    }
    if (o->cmd == NULL && is_dead_prefix(words, n) && n == 1)
        return usage_error("%s", "dead wants list, retry or release");
    if (o->cmd == NULL && is_dead_prefix(words, n))
        return usage_error("unknown command \"dead %s\"", words[1]);
    if (o->cmd == NULL)
        return usage_error("unknown command \"%s\"", words[0]);
    if (takes_ids(o->cmd)) {
        o->ids = words + used;
        o->nids = n - used;
    } else if (o->cmd->cmd == CMD_HELP && n - used <= 2) {
        o->help = true;
        return n > used ? parse_command(o, words + used, n - used) : 0;
    } else if (n > used) {
        return usage_error("unexpected argument \"%s\"", words[used]);
    }
    return 0;
}

/* Each command takes only its own options. */
static int
check_command_options(const struct options *o)
{
    const struct ctl_command *c = o->cmd;
    unsigned extra = o->given & ~c->opts;
    for (size_t i = 0; i < NOPTIONS; i++)
        if (extra & ctl_options[i].bit) {
            fprintf(stderr, "outboxctl: %s: --%s does not apply to it\n",
                    c->name, ctl_options[i].name);
            fprintf(stderr, "Try 'outboxctl %s --help'.\n", c->name);
            return EXIT_USAGE;
        }
    if (c->cmd == CMD_DEAD_LIST && o->limit > LIST_LIMIT_MAX)
        return command_error(c, "--limit shows at most %s rows", "1000000");
    if (c->cmd == CMD_PURGE && !(o->given & OPT_OLDER))
        return command_error(c, "%s", "needs --sent-older-than DURATION");
    if (!takes_ids(c))
        return 0;
    if ((o->given & OPT_ALL) && o->nids > 0)
        return command_error(c, "%s", "takes --all or EVENT_IDs, not both");
    if (!(o->given & OPT_ALL) && o->nids == 0)
        return command_error(c, "%s", "needs --all or EVENT_IDs");
    if (!(o->given & OPT_ALL) && (o->given & (OPT_DRY_RUN | OPT_LIMIT)))
        return command_error(c, "%s", "--dry-run and --limit go with --all");
    return 0;
}

/* --help, help, COMMAND --help: exit 0 with the help on stdout. */
static int
print_help(const struct options *o)
{
    if (o->help_topic != NULL) {
        for (size_t i = 0, n = 0; i < NCOMMANDS; i++)
            if (strncmp(ctl_commands[i].name, "dead ", 5) == 0) {
                if (n++ > 0)
                    putchar('\n');
                usage_command(stdout, &ctl_commands[i]);
            }
    } else if (o->cmd != NULL && o->cmd->cmd != CMD_HELP) {
        usage_command(stdout, o->cmd);
    } else {
        usage(stdout);
    }
    return 0;
}

/* getopt_long's table, from ctl_options. */
static const struct option *
long_options(void)
{
    static struct option longopts[NOPTIONS + 1];
    for (size_t i = 0; i < NOPTIONS; i++)
        longopts[i] =
            (struct option){ctl_options[i].name, ctl_options[i].has_arg, NULL,
                            ctl_options[i].key};
    return longopts;
}

/* Returns -1 to go on, else the exit code. */
static int
parse_args(struct options *o, int argc, char **argv)
{
    const struct option *longopts = long_options();
    int ch;
    o->config = CONFIG_DEFAULT_PATH;
    o->limit = ADMIN_DEAD_LIMIT;
    /* Options may follow the command: `outboxctl dead list --json`. */
    while ((ch = getopt_long(argc, argv, "c:hV", longopts, NULL)) != -1) {
        int rc = parse_option(o, ch);
        if (rc != 0)
            return rc < 0 ? 0 : rc;
    }
    int rc = parse_command(o, argv + optind, (size_t)(argc - optind));
    if (rc == 0 && o->help)
        return print_help(o);
    if (rc == 0)
        rc = check_command_options(o);
    return rc != 0 ? rc : -1;
}

/* ---- output helpers ---- */

/* A JSON string: control characters escaped, anything else as stored. */
void
ctl_json_str(const char *s)
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

void
ctl_report(struct ctl *c, const struct outbox_config *ob, const char *err)
{
    fprintf(stderr, "outboxctl: %s: %s\n", ob->name, err);
    c->failed = true;
}

/* The session of ob's server and account, opened by its first store. */
static struct dbsession *
ctl_session(struct ctl *c, const struct database_config *db)
{
    for (size_t i = 0; i < c->nsessions; i++)
        if (dbsession_serves(c->sessions[i], db))
            return c->sessions[i];
    c->sessions =
        xrealloc(c->sessions, (c->nsessions + 1) * sizeof(*c->sessions));
    return c->sessions[c->nsessions++] = dbsession_new(db);
}

void
ctl_sessions_free(struct ctl *c)
{
    for (size_t i = 0; i < c->nsessions; i++)
        dbsession_free(c->sessions[i]);
    free(c->sessions);
    c->sessions = NULL;
    c->nsessions = 0;
}

/*
 * store_connect checks the server version and the table as the daemon
 * does.  A failure that is not about the schema is the database being
 * out of reach (down, wrong port, refused login): exit 69.
 */
struct store *
ctl_open_store(struct ctl *c, const struct outbox_config *ob)
{
    char err[ERR_LEN];
    struct store *st = store_new(ob, ctl_session(c, ob->database));
    /* status and dead list may read a replica; a write there fails on
     * its own statement, with the server's reason. */
    store_allow_read_only(st);
    if (store_connect(st, err, sizeof(err)) == 0)
        return st;
    if (store_last_error_is_schema(st))
        ctl_report(c, ob, err);
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
    bool holds; /* on_dead: hold: h counted */
    struct outbox_holds h;
};

static const enum outbox_status status_order[] = {
    OUTBOX_PENDING, OUTBOX_PROCESSING, OUTBOX_RETRY, OUTBOX_DEAD, OUTBOX_SENT};
#define NSTATUS (sizeof(status_order) / sizeof(status_order[0]))

static void
status_collect(struct ctl *c, struct status_result *r)
{
    char err[ERR_LEN];
    struct store *st = ctl_open_store(c, r->ob);
    if (st == NULL)
        return;
    const char *held = store_hold_cond(st);
    r->holds = held != NULL;
    if (admin_status(st, &r->s, err, sizeof(err)) < 0 ||
        (held != NULL && stats_sql_holds(st, &r->h, err, sizeof(err)) < 0))
        ctl_report(c, r->ob, err);
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

/* on_dead: hold: the aggregates waiting for an operator. */
static void
status_print_holds(const struct status_result *r)
{
    char age[32];
    uint64_t n = r->h.aggregates;
    printf("%s: %" PRIu64 " aggregate%s held by DEAD events", r->ob->name, n,
           n == 1 ? "" : "s");
    if (n > 0) {
        format_age(r->h.oldest_us, age, sizeof(age));
        printf(", the oldest for %s (outboxctl dead retry or dead release)",
               age);
    }
    putchar('\n');
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
        if (rs[i].ok && rs[i].holds)
            status_print_holds(&rs[i]);
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
    ctl_json_str(r->ob->name);
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
        printf("%.6f", (double)r->s.oldest_pending_us / 1e6);
    else
        printf("null");
    if (!r->holds)
        printf(",\"held_aggregates\":null,\"oldest_hold_age_seconds\":null}");
    else if (r->h.aggregates == 0)
        printf(",\"held_aggregates\":0,\"oldest_hold_age_seconds\":null}");
    else
        printf(",\"held_aggregates\":%" PRIu64
               ",\"oldest_hold_age_seconds\":%.6f}",
               r->h.aggregates, (double)r->h.oldest_us / 1e6);
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
    /* With hold, whether each row still holds its aggregate. */
    bool hold = ob->on_dead == ON_DEAD_HOLD;
    printf("%*s  %-*s  %-*s  %-*s  %7s  %s%s\n", w.id, "ID", w.event_id,
           "EVENT_ID", w.aggregate, "AGGREGATE", w.type, "TYPE", "RETRIES",
           hold ? "HOLDS     " : "", "LAST_ERROR");
    for (size_t i = 0; i < l->n; i++) {
        const struct admin_dead_row *d = &l->rows[i];
        dead_aggregate(d, a, sizeof(a));
        printf("%*" PRIu64 "  %-*s  %-*s  ", w.id, d->id, w.event_id,
               cell(d->event_id, b, sizeof(b)), w.aggregate, cell(a, a, 256));
        printf("%-*s  %7lu  %s%s\n", w.type, cell(d->event_type, b, sizeof(b)),
               d->retry_count,
               !hold         ? ""
               : d->released ? "released  "
                             : "yes       ",
               cell(d->last_error, e, sizeof(e)));
    }
    if (l->total > l->n)
        printf("(the oldest %zu of %" PRIu64 "; --limit N shows more)\n", l->n,
               l->total);
}

static void
dead_print_json_row(const struct outbox_config *ob,
                    const struct admin_dead_row *d)
{
    char a[512];
    printf("{\"id\":%" PRIu64 ",\"event_id\":", d->id);
    ctl_json_str(d->event_id);
    dead_aggregate(d, a, sizeof(a));
    printf(",\"aggregate\":");
    ctl_json_str(a);
    printf(",\"aggregate_type\":");
    ctl_json_str(d->aggregate_type);
    printf(",\"aggregate_id\":");
    ctl_json_str(d->aggregate_id);
    printf(",\"event_type\":");
    ctl_json_str(d->event_type);
    printf(",\"retry_count\":%lu,\"created_at\":", d->retry_count);
    ctl_json_str(d->created_at);
    printf(",\"last_error\":");
    ctl_json_str(d->last_error);
    /* null without on_dead: hold, where no DEAD row holds anything. */
    printf(",\"holds\":%s}", ob->on_dead != ON_DEAD_HOLD ? "null"
                             : d->released               ? "false"
                                                         : "true");
}

static void
dead_print_json(const struct outbox_config *ob, const struct admin_dead_list *l)
{
    printf("{\"outbox\":");
    ctl_json_str(ob->name);
    if (l == NULL) {
        printf(",\"error\":true}");
        return;
    }
    printf(",\"total\":%" PRIu64 ",\"rows\":[", l->total);
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0)
            putchar(',');
        dead_print_json_row(ob, &l->rows[i]);
    }
    printf("]}");
}

/* Fills l; false (reported) when the outbox could not be read. */
static bool
dead_collect(struct ctl *c, const struct outbox_config *ob,
             struct admin_dead_list *l)
{
    char err[ERR_LEN];
    struct store *st = ctl_open_store(c, ob);
    if (st == NULL)
        return false;
    int rc = admin_dead_list(st, c->o->limit, l, err, sizeof(err));
    if (rc < 0)
        ctl_report(c, ob, err);
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

/* ---- outboxes ---- */

static void
outboxes_print(struct ctl *c, const char *name, size_t *k)
{
    if (!c->o->json) {
        printf("%s\n", name);
        return;
    }
    if ((*k)++ > 0)
        putchar(',');
    ctl_json_str(name);
}

/* The names --outbox takes, from the file alone: for scripts and
 * completion, and it works with every database down.  A database_like
 * entry is its group, "<entry>/" and an asterisk: all its tenants. */
static void
cmd_outboxes(struct ctl *c)
{
    size_t k = 0;
    if (c->o->json)
        fputs("{\"outboxes\":[", stdout);
    for (size_t i = 0; i < c->cfg->ndatabases; i++) {
        const struct database_config *d = &c->cfg->databases[i];
        if (d->database_like != NULL) {
            char *group = discover_group_name(d);
            outboxes_print(c, group, &k);
            free(group);
        }
        for (size_t j = 0; d->database_like == NULL && j < d->noutboxes; j++)
            outboxes_print(c, d->outboxes[j].name, &k);
    }
    if (c->o->json)
        fputs("]}\n", stdout);
}

/* ---- main ---- */

/* dead release acts on the outboxes that hold, and on no other. */
static int
run_release(struct ctl *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->outboxes[i]->on_dead == ON_DEAD_HOLD)
            c->outboxes[k++] = c->outboxes[i];
    if (k == 0 && c->o->outbox != NULL)
        fprintf(stderr,
                "outboxctl: dead release: %s has on_dead: skip; its DEAD "
                "rows hold nothing\n",
                c->outboxes[0]->name);
    else if (k == 0)
        fprintf(stderr, "outboxctl: dead release: no outbox has on_dead: "
                        "hold; DEAD rows hold nothing\n");
    if (k == 0)
        return EXIT_USAGE;
    c->n = k;
    if (c->o->nids > 0) {
        ctl_dead_release_ids(c);
        return 0;
    }
    ctl_catch_stop_signals();
    return ctl_dead_release_all(c);
}

/* The exit code a walk chose (after a signal), or 0. */
static int
run_command(struct ctl *c)
{
    switch (c->o->cmd->cmd) {
    case CMD_STATUS:
        cmd_status(c);
        return 0;
    case CMD_DEAD_LIST:
        cmd_dead_list(c);
        return 0;
    case CMD_DEAD_RETRY:
        if (c->o->nids > 0) {
            ctl_dead_retry_ids(c);
            return 0;
        }
        ctl_catch_stop_signals();
        return ctl_dead_retry_all(c);
    case CMD_DEAD_RELEASE:
        return run_release(c);
    case CMD_PURGE:
        ctl_catch_stop_signals();
        return ctl_purge(c);
    case CMD_OUTBOXES:
        cmd_outboxes(c);
        return 0;
    default:
        return 0;
    }
}

static int
run(struct ctl *c)
{
    /* outboxes reads the file alone: it works with every database down. */
    int rc = ctl_select_outboxes(c, c->o->cmd->cmd != CMD_OUTBOXES);
    if (rc != 0)
        return rc;
    rc = run_command(c);
    fflush(stdout);
    if (rc != 0)
        return rc;
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
    ctl_sessions_free(&c);
    ctl_selection_free(&c);
    config_free(c.cfg);
    store_thread_end();
    mysql_library_end();
    return rc;
}
