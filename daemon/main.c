/*
 * main: outboxd's entry point.  Loads the config, places one worker per
 * outbox on the pool's threads, and owns the main event loop: signals,
 * SIGHUP reload, the HTTP endpoints, systemd notifications and orderly
 * shutdown.
 */
#define _POSIX_C_SOURCE 200809L
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binlog.h"
#include "config.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "outbox_log.h"
#include "pool.h"
#include "tenants.h"
#include "util.h"
#include "version.h"
#include "worker.h"

/* How often the main loop checks whether the workers have finished. */
#define SHUTDOWN_CHECK_MS 20
/* How often readiness is summed up into systemd's STATUS line. */
#define STATUS_CHECK_MS 1000

struct daemon {
    struct config *cfg;
    bool verbose; /* -v: debug whatever log_level says */
    struct event_base *base;
    struct pool *pool;
    struct worker **workers; /* the fixed outboxes' */
    size_t nworkers;
    struct tenants *tenants;        /* the pattern entries'; NULL: none */
    struct binlog_stream **streams; /* one per database server and user */
    size_t nstreams;
    bool streams_started; /* a stream made later starts at once */
    struct event *sig_term, *sig_int, *sig_hup, *shutdown_check;
    struct event *status_check, *watchdog;
    struct http_server *http;
    struct metrics_groups *metrics_groups; /* made at the first scrape */
    uint64_t hard_deadline_ms;
    bool stopping;
    bool timed_out;
    bool notify_failed; /* warned once already */
    char status[512];   /* the last STATUS= sent */
    bool last_reload_ok;
    uint64_t reloads_ok, reloads_failed;
};

static void
usage(FILE *f)
{
    static const char text[] =
        "usage: outboxd [-c FILE] [-t | -T] [-v] [-V] [--version]\n"
        "  -c FILE    configuration (default " CONFIG_DEFAULT_PATH ")\n"
        "  -t         check the configuration and exit\n"
        "  -T         check it and print it with every default filled in,\n"
        "             secrets masked\n"
        "  -v         log at debug level\n"
        "  -V         print the version and the libraries' versions\n"
        "  --version  print the version and exit\n";
    if (f == stderr)
        log_plain(LOG_ERROR, "%s", text); /* with its priority */
    else
        fputs(text, f);
}

/* getopt's complaint, written here (opterr is 0) so that it carries its
 * priority under journald as every other line does. */
static void
bad_option(char *const *argv)
{
    if (optopt == 'c')
        log_plain(LOG_ERROR, "outboxd: option -c needs a FILE\n");
    else if (optopt != 0)
        log_plain(LOG_ERROR, "outboxd: unknown option -%c\n", optopt);
    else
        log_plain(LOG_ERROR, "outboxd: unknown option %s\n", argv[optind - 1]);
}

static void notify(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* systemd is told but never relied on: a failed send is logged once. */
static void
notify(struct daemon *d, const char *fmt, ...)
{
    char state[1024], err[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(state, sizeof(state), fmt, ap);
    va_end(ap);
    if (notify_send(state, err, sizeof(err)) < 0 && !d->notify_failed) {
        d->notify_failed = true;
        log_warn(NULL, "cannot notify systemd: %s", err);
    }
}

static void
apply_log_settings(const struct daemon *d)
{
    log_init(d->verbose ? LOG_DEBUG : d->cfg->relay.log_level,
             d->cfg->relay.log_format);
}

/* ---- readiness and metrics, read from the workers' atomics ---- */

/* Every running worker: the fixed outboxes', then the tenants'. */
static size_t
all_count(const struct daemon *d)
{
    return d->nworkers + tenants_count(d->tenants);
}

static struct worker *
all_at(const struct daemon *d, size_t i)
{
    return i < d->nworkers ? d->workers[i]
                           : tenants_worker(d->tenants, i - d->nworkers);
}

/* What keeps w's outbox from ready, as a line into buf; 0 if nothing. */
static int
not_ready_line(struct worker *w, char *buf, size_t len)
{
    bool db = worker_db_connected(w);
    bool broker = worker_broker_connected(w);
    const struct outbox_config *ob = worker_outbox(w);
    if (db && broker && ob->database->wake == WAKE_BINLOG &&
        !worker_wake_live(w))
        return snprintf(buf, len,
                        "not ready: %s: wake: binlog, and its binlog stream "
                        "is not live\n",
                        ob->name);
    if (db && broker)
        return 0;
    return snprintf(buf, len, "not ready: %s: %s%s%s not connected\n", ob->name,
                    db ? "" : "database", db || broker ? "" : " and ",
                    broker ? "" : "broker");
}

/* True when every outbox has both links; else one line per outbox. */
static bool
daemon_ready(void *arg, char *err, size_t errlen)
{
    struct daemon *d = arg;
    size_t len = 0;
    err[0] = '\0';
    if (d->stopping) {
        str_copy(err, "not ready: stopping\n", errlen);
        return false;
    }
    for (size_t i = 0; i < all_count(d) && len < errlen; i++) {
        int n = not_ready_line(all_at(d, i), err + len, errlen - len);
        len += n > 0 ? (size_t)n : 0;
    }
    return err[0] == '\0';
}

static char *
daemon_metrics_text(void *arg, size_t *len)
{
    struct daemon *d = arg;
    size_t n = all_count(d);
    struct outbox_metrics *obs = xcalloc(n + 1, sizeof(*obs));
    for (size_t i = 0; i < n; i++) {
        worker_metrics(all_at(d, i), &obs[i]);
        if (i >= d->nworkers)
            obs[i].group = tenants_group(d->tenants, i - d->nworkers);
    }
    struct daemon_metrics dm = {
        .version = OUTBOXD_VERSION,
        .last_reload_ok = d->last_reload_ok,
        .reloads_ok = d->reloads_ok,
        .reloads_failed = d->reloads_failed,
        .outbox_series = d->cfg->relay.metrics_outbox_series,
    };
    struct tenants_stats ts;
    tenants_stats(d->tenants, &ts);
    dm.discoveries = ts.discoveries;
    dm.discovery_failures = ts.failures;
    dm.tenants_added = ts.added;
    dm.tenants_removed = ts.removed;
    if (d->metrics_groups == NULL)
        d->metrics_groups = metrics_groups_new();
    dm.groups = d->metrics_groups;
    struct binlog_metrics *bm = xcalloc(d->nstreams + 1, sizeof(*bm));
    for (size_t i = 0; i < d->nstreams; i++) {
        bm[i].server = binlog_stream_name(d->streams[i]);
        bm[i].unreadable = binlog_stream_unreadable(d->streams[i]);
    }
    dm.binlogs = bm;
    dm.nbinlogs = d->nstreams;
    char *text = metrics_render(&dm, obs, n, len);
    free(bm);
    free(obs);
    return text;
}

/* systemd's STATUS= line follows readiness, sent only when it changes. */
static void
status_check_cb(evutil_socket_t fd, short what, void *arg)
{
    struct daemon *d = arg;
    char why[sizeof(d->status) - 64], status[sizeof(d->status)];
    (void)fd;
    (void)what;
    if (d->stopping)
        return;
    if (daemon_ready(d, why, sizeof(why))) {
        snprintf(status, sizeof(status), "relaying %zu outbox%s", all_count(d),
                 all_count(d) == 1 ? "" : "es");
    } else {
        /* One line: systemctl status shows STATUS= on a single line. */
        for (char *p = why; (p = strchr(p, '\n')) != NULL;)
            *p = p[1] ? ';' : '\0';
        str_copy(status, why, sizeof(status));
    }
    if (strcmp(status, d->status) != 0) {
        str_copy(d->status, status, sizeof(d->status));
        notify(d, "STATUS=%s", status);
    }
}

/* Pinged from the main loop only: a wedged loop is what systemd kills. */
static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    notify(arg, "WATCHDOG=1");
}

/* ---- shutdown ---- */

static bool
all_workers_done(const struct daemon *d)
{
    for (size_t i = 0; i < d->nworkers; i++)
        if (!worker_done(d->workers[i]))
            return false;
    return tenants_done(d->tenants);
}

static void
shutdown_check_cb(evutil_socket_t fd, short what, void *arg)
{
    struct daemon *d = arg;
    (void)fd;
    (void)what;
    if (all_workers_done(d)) {
        event_base_loopbreak(d->base);
        return;
    }
    if (clock_ms() >= d->hard_deadline_ms) {
        d->timed_out = true;
        event_base_loopbreak(d->base);
        return;
    }
    struct timeval tv = {0, SHUTDOWN_CHECK_MS * 1000};
    evtimer_add(d->shutdown_check, &tv);
}

/*
 * Stops claiming everywhere.  Workers get three quarters of the timeout
 * to collect confirms and the rest to record them; the hard deadline
 * keeps the promise to exit within shutdown_timeout.
 */
static void
begin_shutdown(struct daemon *d, const char *why)
{
    if (d->stopping)
        return;
    d->stopping = true;
    notify(d, "STOPPING=1\nSTATUS=stopping: %s", why);
    uint64_t timeout = d->cfg->relay.shutdown_timeout_ms;
    uint64_t now = clock_ms();
    d->hard_deadline_ms = now + timeout - (timeout > 200 ? 100 : 0);
    log_info(NULL, "%s: stopping, waiting for confirms in flight", why);
    for (size_t i = 0; i < d->nstreams; i++)
        binlog_stream_stop(d->streams[i]);
    for (size_t i = 0; i < d->nworkers; i++)
        worker_stop(d->workers[i], now + timeout * 3 / 4);
    tenants_stop(d->tenants, now + timeout * 3 / 4);
    shutdown_check_cb(-1, 0, d);
}

/* ---- SIGHUP ---- */

static void
log_list(enum log_level level, const char *file, struct config_errors *l)
{
    for (size_t i = 0; i < l->n; i++)
        log_msg(level, LOG_KV("file", file), "%s", l->msgs[i]);
}

/* Applies the changeable values of next and hands them to the workers. */
static void
reload_apply(struct daemon *d, const struct config *next)
{
    struct config_errors refused = {0}, changed = {0};
    const char *file = d->cfg->path;
    size_t nrefused = config_reload_check(d->cfg, next, &refused, &changed);
    config_reload_apply(d->cfg, next);
    apply_log_settings(d);
    for (size_t i = 0; i < d->nworkers; i++)
        worker_reload(d->workers[i], worker_outbox(d->workers[i]));
    /* A tenant takes its entry's values: its own copy is the start's. */
    for (size_t i = 0; i < tenants_count(d->tenants); i++)
        worker_reload(tenants_worker(d->tenants, i),
                      tenants_template(d->tenants, i));
    log_list(LOG_WARN, file, &refused);
    log_list(LOG_INFO, file, &changed);
    log_info(LOG_KV("file", file),
             "configuration reloaded: %zu change%s applied, %zu refused "
             "(those need a restart)",
             changed.n, changed.n == 1 ? "" : "s", nrefused);
    config_errors_free(&refused);
    config_errors_free(&changed);
}

/* Any error keeps the running configuration whole. */
static void
reload(struct daemon *d)
{
    struct config_errors errs = {0};
    const char *file = d->cfg->path;
    notify(d, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading %s",
           (unsigned long long)clock_ms() * 1000ULL, file);
    log_info(LOG_KV("file", file), "SIGHUP: reloading the configuration");
    struct config *next = config_load(file, &errs);
    d->last_reload_ok = next != NULL;
    if (next == NULL) {
        d->reloads_failed++;
        log_list(LOG_ERROR, NULL, &errs); /* each names file:line:col */
        log_error(LOG_KV("file", file),
                  "reload failed with %zu error%s: still running the "
                  "previous configuration",
                  errs.n, errs.n == 1 ? "" : "s");
    } else {
        d->reloads_ok++;
        reload_apply(d, next);
        config_free(next);
    }
    config_errors_free(&errs);
    d->status[0] = '\0'; /* send STATUS= again after READY */
    notify(d, "READY=1");
    status_check_cb(-1, 0, d);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;
    (void)what;
    if (sig == SIGHUP) {
        if (!d->stopping)
            reload(d);
        return;
    }
    begin_shutdown(d, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- start and stop ---- */

static bool
has_patterns(const struct config *cfg)
{
    for (size_t i = 0; i < cfg->ndatabases; i++)
        if (cfg->databases[i].database_like != NULL)
            return true;
    return false;
}

static int
start_pool(struct daemon *d, size_t nfixed)
{
    /* Tenants are not counted yet: a pattern entry may find any number. */
    size_t n = has_patterns(d->cfg) ? SIZE_MAX : nfixed;
    unsigned threads =
        config_workers(&d->cfg->relay, n, sysconf(_SC_NPROCESSORS_ONLN));
    struct pool_hooks hooks = worker_pool_hooks();
    d->pool = pool_new(threads, &hooks);
    if (d->pool == NULL || pool_start(d->pool) < 0) {
        log_error(NULL, "cannot start the %u worker threads", threads);
        return -1;
    }
    log_info(NULL, "%u worker thread%s", threads, threads == 1 ? "" : "s");
    return 0;
}

static int
start_workers(struct daemon *d)
{
    /* A pattern entry's outboxes are templates: tenants.c runs them. */
    size_t n = config_outbox_count(d->cfg);
    if (start_pool(d, n) < 0)
        return -1;
    d->workers = xcalloc(n + 1, sizeof(*d->workers));
    for (size_t i = 0; i < n; i++) {
        const struct outbox_config *ob = config_outbox_at(d->cfg, i);
        struct worker *w =
            worker_new(ob, d->cfg->relay.id, pool_assign(d->pool));
        d->workers[d->nworkers++] = w;
        if (worker_start(w) < 0) {
            outbox_log(LOG_ERROR, ob, "cannot start its worker");
            return -1;
        }
        outbox_log_kv(LOG_INFO, ob, LOG_KV("broker", ob->broker->name),
                      "relaying to exchange \"%s\"", ob->exchange.source);
    }
    return 0;
}

/* The stream of db's server, if there is one yet. */
static struct binlog_stream *
stream_find(struct daemon *d, const struct database_config *db)
{
    for (size_t i = 0; i < d->nstreams; i++)
        if (binlog_stream_serves(d->streams[i], db))
            return d->streams[i];
    return NULL;
}

static struct binlog_stream *
stream_for(struct daemon *d, const struct database_config *db)
{
    struct binlog_stream *found = stream_find(d, db);
    if (found != NULL)
        return found;
    d->streams = xrealloc(d->streams, (d->nstreams + 1) * sizeof(*d->streams));
    struct binlog_stream *s = d->streams[d->nstreams++] = binlog_stream_new(db);
    if (d->streams_started && binlog_stream_start(s) < 0)
        log_error(LOG_KV("server", binlog_stream_name(s)),
                  "cannot start the binlog stream's thread: its outboxes "
                  "poll");
    return s;
}

/* One binlog stream per database server (and user) wakes its outboxes,
 * however many databases and tables it holds. */
static void
stream_watch(struct daemon *d, struct worker *w)
{
    const struct outbox_config *ob = worker_outbox(w);
    if (ob->database->wake == WAKE_POLL)
        return;
    struct binlog_client c = worker_binlog_client(w);
    binlog_stream_add(stream_for(d, ob->database), ob->database->database,
                      ob->table, &c);
}

static void
start_streams(struct daemon *d)
{
    for (size_t i = 0; i < d->nworkers; i++)
        stream_watch(d, d->workers[i]);
    d->streams_started = true;
    for (size_t i = 0; i < d->nstreams; i++)
        if (binlog_stream_start(d->streams[i]) < 0)
            log_error(LOG_KV("server", binlog_stream_name(d->streams[i])),
                      "cannot start the binlog stream's thread: its "
                      "outboxes poll");
}

static void
tenant_started(void *arg, struct worker *w)
{
    stream_watch(arg, w);
}

static void
tenant_stopping(void *arg, struct worker *w)
{
    struct daemon *d = arg;
    struct binlog_stream *s = stream_find(d, worker_outbox(w)->database);
    if (s != NULL)
        binlog_stream_remove(s, w);
}

/* After the streams: a tenant found is watched at once. */
static int
start_tenants(struct daemon *d)
{
    struct tenants_hooks hooks = {
        .started = tenant_started, .stopping = tenant_stopping, .arg = d};
    if (!has_patterns(d->cfg))
        return 0;
    d->tenants = tenants_new(d->cfg, d->pool, d->base, &hooks);
    if (d->tenants == NULL || tenants_start(d->tenants) < 0) {
        log_error(NULL, "cannot start the discovery of tenants");
        return -1;
    }
    return 0;
}

/* A listen address that cannot be bound is the operator's to fix. */
static int
start_http(struct daemon *d)
{
    const char *listen = d->cfg->relay.listen;
    char err[ERR_LEN];
    if (listen == NULL || listen[0] == '\0')
        return 0;
    struct http_handlers h = {
        .metrics = daemon_metrics_text,
        .ready = daemon_ready,
        .arg = d,
    };
    d->http = http_start(d->base, listen, &h, err, sizeof(err));
    if (d->http == NULL) {
        log_error(LOG_KV("listen", listen), "relay.listen: %s", err);
        return -1;
    }
    log_info(LOG_KV("listen", listen), "serving /metrics /healthz /readyz");
    return 0;
}

static void
start_timers(struct daemon *d)
{
    struct timeval status = {STATUS_CHECK_MS / 1000,
                             (STATUS_CHECK_MS % 1000) * 1000};
    evtimer_add(d->status_check, &status);
    uint64_t usec = notify_watchdog_usec();
    if (usec == 0)
        return;
    /* Half the interval, as sd_watchdog_enabled(3) advises. */
    struct timeval every = {(time_t)(usec / 2 / 1000000),
                            (suseconds_t)(usec / 2 % 1000000)};
    evtimer_add(d->watchdog, &every);
    log_debug(NULL, "systemd watchdog: pinging every %llu ms",
              (unsigned long long)(usec / 2000));
}

static int
setup_events(struct daemon *d)
{
    evthread_use_pthreads();
    d->base = event_base_new();
    if (d->base == NULL)
        return -1;
    d->sig_term = evsignal_new(d->base, SIGTERM, signal_cb, d);
    d->sig_int = evsignal_new(d->base, SIGINT, signal_cb, d);
    d->sig_hup = evsignal_new(d->base, SIGHUP, signal_cb, d);
    d->shutdown_check = evtimer_new(d->base, shutdown_check_cb, d);
    d->status_check = event_new(d->base, -1, EV_PERSIST, status_check_cb, d);
    d->watchdog = event_new(d->base, -1, EV_PERSIST, watchdog_cb, d);
    if (!d->sig_term || !d->sig_int || !d->sig_hup || !d->shutdown_check ||
        !d->status_check || !d->watchdog)
        return -1;
    evsignal_add(d->sig_term, NULL);
    evsignal_add(d->sig_int, NULL);
    evsignal_add(d->sig_hup, NULL);
    return 0;
}

static void
teardown(struct daemon *d)
{
    /* Streams first: their callbacks reach into the workers. */
    for (size_t i = 0; i < d->nstreams; i++)
        binlog_stream_free(d->streams[i]);
    free(d->streams);
    /* The loops end first: then nothing runs a worker's events. */
    if (d->pool != NULL)
        pool_stop(d->pool);
    tenants_free(d->tenants);
    for (size_t i = 0; i < d->nworkers; i++)
        worker_free(d->workers[i]);
    free(d->workers);
    pool_free(d->pool);
    http_free(d->http);
    metrics_groups_free(d->metrics_groups);
    event_free(d->sig_term);
    event_free(d->sig_int);
    event_free(d->sig_hup);
    event_free(d->shutdown_check);
    event_free(d->status_check);
    event_free(d->watchdog);
    event_base_free(d->base);
    config_free(d->cfg);
}

static int
run(struct daemon *d)
{
    /* A broken socket must surface as an error from send, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    if (setup_events(d) < 0) {
        log_error(NULL, "cannot set up the event loop");
        return 1;
    }
    log_info(LOG_KV("relay_id", d->cfg->relay.id), "outboxd %s starting",
             OUTBOXD_VERSION);
    if (start_http(d) < 0) {
        teardown(d);
        return 1;
    }
    bool start_failed = start_workers(d) < 0;
    if (!start_failed) {
        /* READY means started: /readyz tells when the links are up. */
        notify(d, "READY=1\nSTATUS=started, connecting");
        start_streams(d);
        start_timers(d);
        start_failed = start_tenants(d) < 0;
    }
    if (start_failed)
        begin_shutdown(d, "startup failure");
    event_base_dispatch(d->base);
    if (d->timed_out) {
        /* A worker is stuck in a network call: its rows come back after
         * their lease, so exiting now loses nothing. */
        log_warn(NULL, "shutdown_timeout reached with confirms still "
                       "outstanding; those events will be retried after "
                       "their lease");
        _exit(0);
    }
    teardown(d);
    log_info(NULL, "stopped");
    return start_failed ? 1 : 0;
}

/* What the command line asks for. */
struct options {
    const char *path;
    bool test_only; /* -t */
    bool dump;      /* -T */
    bool verbose;   /* -v */
};

/* Output that cannot be written (a closed pipe, a full disk) fails. */
static int
print_text(char *text)
{
    fputs(text, stdout);
    free(text);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

/* -1 to go on, else the exit status of what was done instead. */
static int
parse_args(int argc, char **argv, struct options *o)
{
    enum { OPT_VERSION = 256 }; /* --version: just the version */
    static const struct option longopts[] = {
        {"version", no_argument, NULL, OPT_VERSION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "c:tTvVh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            o->path = optarg;
            break;
        case 't':
            o->test_only = true;
            break;
        case 'T':
            o->dump = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case OPT_VERSION:
            printf("outboxd %s\n", OUTBOXD_VERSION);
            return 0;
        case 'V':
            return print_text(version_report());
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad_option(argv);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind != argc || (o->test_only && o->dump)) {
        usage(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

int
main(int argc, char **argv)
{
    struct options opts = {.path = CONFIG_DEFAULT_PATH};
    int rc = parse_args(argc, argv, &opts);
    if (rc >= 0)
        return rc;
    struct daemon d = {.last_reload_ok = true, .verbose = opts.verbose};
    d.cfg = config_load_or_report(opts.path, "outboxd");
    if (d.cfg == NULL)
        return EXIT_CONFIG;
    if (opts.test_only || opts.dump) {
        rc = opts.dump ? print_text(config_dump(d.cfg))
                       : print_text(xstrdup("configuration OK\n"));
        config_free(d.cfg);
        return rc;
    }
    apply_log_settings(&d);
    return run(&d);
}
