/*
 * tenants: discovery of the pattern entries' schemas on a helper thread
 * each, and the tenants' workers started and stopped on the main thread
 * as the answers change.
 */
#include "tenants.h"

#include <event2/event.h>
#include <mysql.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"
#include "helper.h"
#include "log.h"
#include "logrepeat.h"
#include "outbox_log.h"
#include "util.h"

/* While a removed tenant's workers finish, how often to look. */
#define REAP_CHECK_MS 100
/* A failing discovery is logged at once, then at most this often. */
#define DISCOVER_LOG_MAX_MS 600000

/* One discovered schema: its entry and the workers of its outboxes. */
struct tenant {
    struct database_config *db; /* discover_tenant_new's */
    struct worker **workers;    /* one per outbox of db */
    size_t nworkers;
};

/* One pattern entry: its session, its helper, the schemas it found. */
struct entry {
    struct tenants *t;
    const struct database_config *cfg;
    char *group;          /* discover_group_name: the metrics name for all */
    MYSQL *session;       /* the helper's only */
    struct helper helper; /* runs the discovery beside the main loop */
    struct event *timer;  /* time to ask again */
    struct event *done;   /* from the helper: the answer is in */
    bool running;         /* a discovery is on the helper */
    int rc;               /* its answer: 0 and names, or -1 and err */
    char **names;
    size_t nnames;
    char err[ERR_LEN];
    char warned[ERR_LEN]; /* the last schema skipped, told once */
    struct logrepeat log;
    struct tenant **tenants; /* sorted by schema */
    size_t ntenants;
};

struct tenants {
    const struct config *cfg;
    struct pool *pool;
    struct event_base *base;
    struct tenants_hooks hooks;
    struct entry *entries;
    size_t nentries;
    /* The running workers in one array, rebuilt at each change. */
    struct worker **view;
    const struct outbox_config **view_tpl;
    const char **view_group;
    size_t nview;
    /* Removed tenants whose workers are still finishing. */
    struct tenant **retiring;
    size_t nretiring;
    struct event *reap;
    struct tenants_stats stats;
    bool stopping;
    uint64_t stop_deadline_ms;
};

static bool
is_pattern(const struct database_config *db)
{
    return db->database_like != NULL;
}

/* ---- on the helper thread ---- */

static void
discover_job(void *arg)
{
    struct entry *e = arg;
    e->rc = -1;
    e->err[0] = '\0';
    if (e->session == NULL)
        e->session = discover_connect(e->cfg, e->err, sizeof(e->err));
    if (e->session != NULL) {
        e->rc = discover_schemas(e->session, e->cfg, &e->names, &e->nnames,
                                 e->err, sizeof(e->err));
        if (e->rc < 0) { /* the next one starts on a fresh session */
            mysql_close(e->session);
            e->session = NULL;
        }
    }
    event_active(e->done, 0, 0);
}

/* ---- on the main thread ---- */

static void
rebuild_view(struct tenants *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nentries; i++)
        for (size_t j = 0; j < t->entries[i].ntenants; j++)
            n += t->entries[i].tenants[j]->nworkers;
    t->view = xrealloc(t->view, (n + 1) * sizeof(*t->view));
    t->view_tpl = xrealloc(t->view_tpl, (n + 1) * sizeof(*t->view_tpl));
    t->view_group = xrealloc(t->view_group, (n + 1) * sizeof(*t->view_group));
    t->nview = 0;
    for (size_t i = 0; i < t->nentries; i++) {
        struct entry *e = &t->entries[i];
        for (size_t j = 0; j < e->ntenants; j++) {
            struct tenant *tn = e->tenants[j];
            for (size_t k = 0; k < tn->nworkers; k++) {
                t->view[t->nview] = tn->workers[k];
                t->view_tpl[t->nview] = &e->cfg->outboxes[k];
                t->view_group[t->nview++] = e->group;
            }
        }
    }
}

static struct tenant *
tenant_start(struct entry *e, const char *schema)
{
    struct tenants *t = e->t;
    struct tenant *tn = xcalloc(1, sizeof(*tn));
    tn->db = discover_tenant_new(e->cfg, schema);
    tn->workers = xcalloc(tn->db->noutboxes, sizeof(*tn->workers));
    for (size_t k = 0; k < tn->db->noutboxes; k++) {
        const struct outbox_config *ob = &tn->db->outboxes[k];
        struct worker *w =
            worker_new(ob, t->cfg->relay.id, pool_assign(t->pool));
        tn->workers[tn->nworkers++] = w;
        if (worker_start(w) < 0) {
            outbox_log(LOG_ERROR, ob, "cannot start its worker");
            continue;
        }
        if (t->hooks.started != NULL)
            t->hooks.started(t->hooks.arg, w);
    }
    log_info(LOG_KV("database", tn->db->name, "schema", schema),
             "tenant found: relaying %zu outbox%s", tn->nworkers,
             tn->nworkers == 1 ? "" : "es");
    t->stats.added++;
    return tn;
}

static void
reap_schedule(struct tenants *t)
{
    struct timeval tv = {0, REAP_CHECK_MS * 1000};
    evtimer_add(t->reap, &tv);
}

/* Its workers stop now and are freed once done (reap_cb). */
static void
tenant_retire(struct tenants *t, struct tenant *tn, const char *why)
{
    uint64_t deadline = t->stopping
                            ? t->stop_deadline_ms
                            : clock_ms() + t->cfg->relay.shutdown_timeout_ms;
    for (size_t k = 0; k < tn->nworkers; k++) {
        if (t->hooks.stopping != NULL)
            t->hooks.stopping(t->hooks.arg, tn->workers[k]);
        worker_stop(tn->workers[k], deadline);
    }
    if (why != NULL) {
        log_info(LOG_KV("database", tn->db->name), "tenant gone: %s", why);
        t->stats.removed++;
    }
    t->retiring = xrealloc(t->retiring, (t->nretiring + 1) * sizeof(tn));
    t->retiring[t->nretiring++] = tn;
    reap_schedule(t);
}

static bool
tenant_done(const struct tenant *tn)
{
    for (size_t k = 0; k < tn->nworkers; k++)
        if (!worker_done(tn->workers[k]))
            return false;
    return true;
}

static void
tenant_free(struct tenant *tn)
{
    for (size_t k = 0; k < tn->nworkers; k++)
        worker_free(tn->workers[k]);
    free(tn->workers);
    discover_tenant_free(tn->db);
    free(tn);
}

static void
reap_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tenants *t = arg;
    (void)fd;
    (void)what;
    size_t kept = 0;
    for (size_t i = 0; i < t->nretiring; i++) {
        if (tenant_done(t->retiring[i]))
            tenant_free(t->retiring[i]);
        else
            t->retiring[kept++] = t->retiring[i];
    }
    t->nretiring = kept;
    if (kept > 0)
        reap_schedule(t);
}

/* Both lists sorted by schema: start the new ones, retire the gone. */
static void
apply_answer(struct entry *e)
{
    struct tenants *t = e->t;
    struct tenant **next = xcalloc(e->nnames + 1, sizeof(*next));
    size_t i = 0, j = 0, n = 0;
    while (i < e->nnames || j < e->ntenants) {
        int c = i == e->nnames ? 1
                : j == e->ntenants
                    ? -1
                    : strcmp(e->names[i], e->tenants[j]->db->database);
        if (c < 0)
            next[n++] = tenant_start(e, e->names[i++]);
        else if (c > 0)
            tenant_retire(t, e->tenants[j++],
                          "its schema or table is no longer there");
        else
            next[n++] = e->tenants[j++], i++;
    }
    free(e->tenants);
    e->tenants = next;
    e->ntenants = n;
    rebuild_view(t);
}

static void
free_names(struct entry *e)
{
    discover_names_free(e->names, e->nnames);
    e->names = NULL;
    e->nnames = 0;
}

static void
timer_schedule(struct entry *e)
{
    uint64_t ms = e->cfg->discover_interval_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(e->timer, &tv);
}

static void
log_answer(struct entry *e)
{
    uint64_t since, ms, n;
    if (e->rc == 0) {
        if (e->err[0] != '\0' && strcmp(e->err, e->warned) != 0)
            log_warn(LOG_KV("database", e->cfg->name), "%s", e->err);
        str_copy(e->warned, e->err, sizeof(e->warned));
        if (logrepeat_success(&e->log, clock_ms(), &ms, &n))
            log_info(LOG_KV("database", e->cfg->name),
                     "discovery works again, after %llu failures",
                     (unsigned long long)n);
        return;
    }
    e->t->stats.failures++;
    switch (logrepeat_failure(&e->log, e->err, clock_ms(), &since)) {
    case LOGREPEAT_FIRST:
        log_error(LOG_KV("database", e->cfg->name),
                  "cannot discover the tenants, the running ones go on: %s",
                  e->err);
        break;
    case LOGREPEAT_REPEAT:
        log_error(LOG_KV("database", e->cfg->name),
                  "still cannot discover the tenants, %llu failures since "
                  "the last report: %s",
                  (unsigned long long)since, e->err);
        break;
    case LOGREPEAT_QUIET:
        break;
    }
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
    struct entry *e = arg;
    (void)fd;
    (void)what;
    helper_wait(&e->helper);
    e->running = false;
    e->t->stats.discoveries++;
    log_answer(e);
    if (e->rc == 0 && !e->t->stopping)
        apply_answer(e);
    free_names(e);
    if (!e->t->stopping)
        timer_schedule(e);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct entry *e = arg;
    (void)fd;
    (void)what;
    if (e->running || e->t->stopping)
        return;
    e->running = true;
    /* false: no thread to be had, the job ran here and is done */
    helper_submit(&e->helper, discover_job, e);
}

static int
entry_init(struct tenants *t, struct entry *e, const struct database_config *db)
{
    struct pool_hooks hooks = worker_pool_hooks();
    e->t = t;
    e->cfg = db;
    e->group = discover_group_name(db);
    helper_init(&e->helper, hooks.thread_begin, hooks.thread_end);
    logrepeat_init(&e->log, 1000, DISCOVER_LOG_MAX_MS);
    e->timer = evtimer_new(t->base, timer_cb, e);
    e->done = event_new(t->base, -1, 0, done_cb, e);
    return e->timer != NULL && e->done != NULL ? 0 : -1;
}

struct tenants *
tenants_new(const struct config *cfg, struct pool *pool,
            struct event_base *base, const struct tenants_hooks *hooks)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->ndatabases; i++)
        n += is_pattern(&cfg->databases[i]);
    if (n == 0)
        return NULL;
    struct tenants *t = xcalloc(1, sizeof(*t));
    t->cfg = cfg;
    t->pool = pool;
    t->base = base;
    t->hooks = *hooks;
    t->entries = xcalloc(n, sizeof(*t->entries));
    t->reap = evtimer_new(base, reap_cb, t);
    for (size_t i = 0; i < cfg->ndatabases; i++)
        if (is_pattern(&cfg->databases[i]) &&
            entry_init(t, &t->entries[t->nentries++], &cfg->databases[i]) < 0)
            t->stopping = true; /* tenants_start fails */
    return t;
}

int
tenants_start(struct tenants *t)
{
    if (t->stopping || t->reap == NULL)
        return -1;
    for (size_t i = 0; i < t->nentries; i++) {
        log_info(LOG_KV("database", t->entries[i].cfg->name),
                 "discovering schemas like \"%s\" every %llu ms",
                 t->entries[i].cfg->database_like,
                 (unsigned long long)t->entries[i].cfg->discover_interval_ms);
        event_active(t->entries[i].timer, EV_TIMEOUT, 0);
    }
    return 0;
}

size_t
tenants_count(const struct tenants *t)
{
    return t ? t->nview : 0;
}

struct worker *
tenants_worker(const struct tenants *t, size_t i)
{
    return t->view[i];
}

const struct outbox_config *
tenants_template(const struct tenants *t, size_t i)
{
    return t->view_tpl[i];
}

const char *
tenants_group(const struct tenants *t, size_t i)
{
    return t->view_group[i];
}

void
tenants_stats(const struct tenants *t, struct tenants_stats *st)
{
    *st = t ? t->stats : (struct tenants_stats){0};
}

void
tenants_stop(struct tenants *t, uint64_t deadline_ms)
{
    if (t == NULL)
        return;
    t->stopping = true;
    t->stop_deadline_ms = deadline_ms;
    for (size_t i = 0; i < t->nentries; i++) {
        struct entry *e = &t->entries[i];
        if (e->timer)
            evtimer_del(e->timer);
        for (size_t j = 0; j < e->ntenants; j++)
            tenant_retire(t, e->tenants[j], NULL);
        free(e->tenants);
        e->tenants = NULL;
        e->ntenants = 0;
    }
    rebuild_view(t);
}

bool
tenants_done(const struct tenants *t)
{
    if (t == NULL)
        return true;
    for (size_t i = 0; i < t->nretiring; i++)
        if (!tenant_done(t->retiring[i]))
            return false;
    return true;
}

void
tenants_free(struct tenants *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nentries; i++) {
        struct entry *e = &t->entries[i];
        helper_fini(&e->helper); /* a discovery still under way ends */
        free_names(e);
        for (size_t j = 0; j < e->ntenants; j++)
            tenant_free(e->tenants[j]);
        free(e->tenants);
        if (e->session)
            mysql_close(e->session);
        if (e->timer)
            event_free(e->timer);
        if (e->done)
            event_free(e->done);
        free(e->group);
    }
    for (size_t i = 0; i < t->nretiring; i++)
        tenant_free(t->retiring[i]);
    free(t->retiring);
    free(t->entries);
    free(t->view);
    free(t->view_tpl);
    free(t->view_group);
    if (t->reap)
        event_free(t->reap);
    free(t);
}
