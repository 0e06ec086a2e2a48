/*
 * tenants: the outboxes of the config's pattern entries (database_like):
 * every discover_interval each entry's server is asked which schemas
 * match and hold the tables, and a worker is started for each new one
 * and stopped for each one gone, without a restart.
 */
#ifndef OUTBOXD_TENANTS_H
#define OUTBOXD_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "pool.h"
#include "worker.h"

struct event_base;
struct tenants;

/* What the main thread does as tenants come and go (its binlog streams
 * watch their tables); both on the main thread. */
struct tenants_hooks {
    void (*started)(void *arg, struct worker *w);
    /* After it returns, nothing may call into w any more. */
    void (*stopping)(void *arg, struct worker *w);
    void *arg;
};

/* NULL when cfg has no pattern entry. */
struct tenants *tenants_new(const struct config *cfg, struct pool *pool,
                            struct event_base *base,
                            const struct tenants_hooks *hooks);
/* Discovers every entry now and then every discover_interval. */
int tenants_start(struct tenants *t);
/* The running tenants' workers, for readiness, metrics and reload; valid
 * until the main loop runs again. */
size_t tenants_count(const struct tenants *t);
struct worker *tenants_worker(const struct tenants *t, size_t i);
/* The template outbox a tenant's worker was made from (for a reload). */
const struct outbox_config *tenants_template(const struct tenants *t, size_t i);
/* The metrics group of a tenant's worker (discover_group_name). */
const char *tenants_group(const struct tenants *t, size_t i);
/* Counters since start, for /metrics. */
struct tenants_stats {
    uint64_t discoveries, failures, added, removed;
};
void tenants_stats(const struct tenants *t, struct tenants_stats *st);
/* Stops discovering and asks every tenant's worker to finish. */
void tenants_stop(struct tenants *t, uint64_t deadline_ms);
bool tenants_done(const struct tenants *t);
/* With the pool stopped (or every worker done). */
void tenants_free(struct tenants *t);

#endif
