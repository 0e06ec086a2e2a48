/*
 * outboxctl_select: the outboxes a command runs on: --outbox NAME, a
 * pattern entry's group ("tenants/" and an asterisk) or all, with the
 * tenants of each database_like entry discovered now, one session per
 * entry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"
#include "outboxctl.h"
#include "util.h"

static void
add_outbox(struct ctl *c, struct outbox_config *ob)
{
    c->outboxes = xrealloc(c->outboxes, (c->n + 1) * sizeof(*c->outboxes));
    c->outboxes[c->n++] = ob;
}

/* want names entry's group: its name, "/", "*". */
static bool
is_group_of(const char *want, const struct database_config *entry)
{
    size_t len = strlen(entry->name);
    return strncmp(want, entry->name, len) == 0 && want[len] == '/' &&
           strcmp(want + len + 1, "*") == 0;
}

/* Whether want may name one of entry's tenants' outboxes, or all. */
static bool
entry_selected(const char *want, const struct database_config *entry)
{
    size_t len = strlen(entry->name);
    return want == NULL ||
           (strncmp(want, entry->name, len) == 0 && want[len] == '/');
}

static bool
outbox_selected(const char *want, const struct database_config *entry,
                const struct outbox_config *ob)
{
    return want == NULL || is_group_of(want, entry) ||
           strcmp(want, ob->name) == 0;
}

/* Keeps tenant t when want selects any of its outboxes, else frees it. */
static void
add_tenant(struct ctl *c, const struct database_config *entry,
           struct database_config *t)
{
    size_t before = c->n;
    for (size_t i = 0; i < t->noutboxes; i++)
        if (outbox_selected(c->o->outbox, entry, &t->outboxes[i]))
            add_outbox(c, &t->outboxes[i]);
    if (c->n == before) {
        discover_tenant_free(t);
        return;
    }
    c->tenants = xrealloc(c->tenants, (c->ntenants + 1) * sizeof(*c->tenants));
    c->tenants[c->ntenants++] = t;
}

/* An entry whose server cannot be reached is reported, exit 69; the
 * other entries are still served. */
static void
add_tenants(struct ctl *c, const struct database_config *entry)
{
    char err[ERR_LEN], **names = NULL;
    size_t n = 0;
    MYSQL *db = discover_connect(entry, err, sizeof(err));
    if (db == NULL ||
        discover_schemas(db, entry, &names, &n, err, sizeof(err)) < 0) {
        fprintf(stderr, "outboxctl: %s\n", err);
        c->unavailable = true;
    } else if (err[0] != '\0') {
        fprintf(stderr, "outboxctl: warning: %s\n", err);
    }
    if (db != NULL)
        mysql_close(db);
    for (size_t i = 0; i < n; i++)
        add_tenant(c, entry, discover_tenant_new(entry, names[i]));
    if (db != NULL && n == 0 && c->o->outbox == NULL)
        fprintf(stderr,
                "outboxctl: database %s: no schema like \"%s\" holds its "
                "tables yet\n",
                entry->name, entry->database_like);
    discover_names_free(names, n);
}

/* want names a group of the file, or a tenant that was not found. */
static bool
is_known_group(const struct config *cfg, const char *want)
{
    for (size_t i = 0; i < cfg->ndatabases; i++)
        if (cfg->databases[i].database_like != NULL &&
            is_group_of(want, &cfg->databases[i]))
            return true;
    return false;
}

static int
not_found(struct ctl *c)
{
    if (c->unavailable)
        return EXIT_UNAVAILABLE; /* said why already */
    fprintf(stderr,
            "outboxctl: no outbox named %s in %s; there are:", c->o->outbox,
            c->cfg->path ? c->cfg->path : c->o->config);
    for (size_t i = 0; i < c->cfg->ndatabases; i++) {
        const struct database_config *d = &c->cfg->databases[i];
        if (d->database_like != NULL)
            fprintf(stderr, " %s/* (%s/SCHEMA.TABLE)", d->name, d->name);
        for (size_t j = 0; d->database_like == NULL && j < d->noutboxes; j++)
            fprintf(stderr, " %s", d->outboxes[j].name);
    }
    fprintf(stderr, "\n");
    return EXIT_USAGE;
}

int
ctl_select_outboxes(struct ctl *c, bool discover)
{
    const char *want = c->o->outbox;
    struct outbox_config *named =
        want != NULL ? config_outbox_find(c->cfg, want) : NULL;
    if (named != NULL) {
        add_outbox(c, named);
        return 0;
    }
    for (size_t i = 0; i < c->cfg->ndatabases; i++) {
        struct database_config *d = &c->cfg->databases[i];
        if (d->database_like == NULL) {
            for (size_t j = 0; want == NULL && j < d->noutboxes; j++)
                add_outbox(c, &d->outboxes[j]);
        } else if (discover && entry_selected(want, d)) {
            add_tenants(c, d);
        }
    }
    if (want != NULL && c->n == 0 && !is_known_group(c->cfg, want))
        return not_found(c);
    return 0;
}

void
ctl_selection_free(struct ctl *c)
{
    for (size_t i = 0; i < c->ntenants; i++)
        discover_tenant_free(c->tenants[i]);
    free(c->tenants);
    free(c->outboxes);
}
