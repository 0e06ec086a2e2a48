/*
 * main: outboxd's entry point.  Loads the config, starts one worker per
 * outbox, and owns the main event loop: signals and orderly shutdown.
 */
#define _POSIX_C_SOURCE 200809L
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "util.h"
#include "worker.h"

/* How often the main loop checks whether the workers have finished. */
#define SHUTDOWN_CHECK_MS 20

struct daemon {
    struct config *cfg;
    struct event_base *base;
    struct worker **workers;
    size_t nworkers;
    struct event *sig_term, *sig_int, *sig_hup, *shutdown_check;
    uint64_t hard_deadline_ms;
    bool stopping;
    bool timed_out;
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: outboxd [-c FILE] [-t] [-v] [--version]\n"
               "  -c FILE    configuration (default " CONFIG_DEFAULT_PATH ")\n"
               "  -t         check the configuration and exit\n"
               "  -v         log at debug level\n"
               "  --version  print the version and exit\n");
}

static struct config *
load_config(const char *path)
{
    struct config_errors errs = {0};
    struct config *cfg = config_load(path, &errs);
    for (size_t i = 0; i < errs.n; i++)
        fprintf(stderr, "%s\n", errs.msgs[i]);
    if (cfg == NULL)
        fprintf(stderr, "outboxd: %zu configuration error%s\n", errs.n,
                errs.n == 1 ? "" : "s");
    config_errors_free(&errs);
    return cfg;
}

static bool
all_workers_done(const struct daemon *d)
{
    for (size_t i = 0; i < d->nworkers; i++)
        if (!worker_done(d->workers[i]))
            return false;
    return true;
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
    uint64_t timeout = d->cfg->relay.shutdown_timeout_ms;
    uint64_t now = clock_ms();
    d->hard_deadline_ms = now + timeout - (timeout > 200 ? 100 : 0);
    log_info(NULL, "%s: stopping, waiting for confirms in flight", why);
    for (size_t i = 0; i < d->nworkers; i++)
        worker_stop(d->workers[i], now + timeout * 3 / 4);
    shutdown_check_cb(-1, 0, d);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;
    (void)what;
    if (sig == SIGHUP) {
        log_warn(NULL, "SIGHUP: configuration reload is not supported yet; "
                       "restart to apply changes");
        return;
    }
    begin_shutdown(d, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static int
start_workers(struct daemon *d)
{
    d->nworkers = config_outbox_count(d->cfg);
    d->workers = xcalloc(d->nworkers, sizeof(*d->workers));
    for (size_t i = 0; i < d->nworkers; i++) {
        const struct outbox_config *ob = config_outbox_at(d->cfg, i);
        d->workers[i] = worker_new(ob, d->cfg->relay.id);
        if (worker_start(d->workers[i]) < 0) {
            log_error(LOG_KV("outbox", ob->name), "cannot start its worker");
            return -1;
        }
        log_info(LOG_KV("outbox", ob->name, "broker", ob->broker->name),
                 "relaying to exchange \"%s\"", ob->exchange.source);
    }
    return 0;
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
    if (!d->sig_term || !d->sig_int || !d->sig_hup || !d->shutdown_check)
        return -1;
    evsignal_add(d->sig_term, NULL);
    evsignal_add(d->sig_int, NULL);
    evsignal_add(d->sig_hup, NULL);
    return 0;
}

static void
teardown(struct daemon *d)
{
    for (size_t i = 0; i < d->nworkers; i++)
        worker_free(d->workers[i]);
    free(d->workers);
    event_free(d->sig_term);
    event_free(d->sig_int);
    event_free(d->sig_hup);
    event_free(d->shutdown_check);
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
    if (start_workers(d) < 0)
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
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = CONFIG_DEFAULT_PATH;
    bool test_only = false, verbose = false;
    int ch;

    while ((ch = getopt_long(argc, argv, "c:tvh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 't':
            test_only = true;
            break;
        case 'v':
            verbose = true;
            break;
        case 'V':
            printf("outboxd %s\n", OUTBOXD_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    struct daemon d = {0};
    d.cfg = load_config(path);
    if (d.cfg == NULL)
        return EXIT_CONFIG;
    if (test_only) {
        printf("configuration OK\n");
        config_free(d.cfg);
        return 0;
    }
    log_init(verbose ? LOG_DEBUG : d.cfg->relay.log_level,
             d.cfg->relay.log_format);
    return run(&d);
}
