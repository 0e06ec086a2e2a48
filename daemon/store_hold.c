/*
 * store_hold: on_dead: hold.  A DEAD event that is not released holds the
 * later events of its aggregate (docs/contract.md section 1.3): the
 * claim's filter, the ordering check's extra reads, the held condition.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/*
 * sql/outbox.sql's `held` is status = 'DEAD' AND locked_by IS NULL,
 * generated.  As for `unfinished`, each server prints the expression its
 * own way: the column is trusted when it names status, 'DEAD', locked_by
 * and IS NULL and no other state, no NOT and no OR; else the claim reads
 * status and locked_by themselves.
 */
bool
store_is_held_expression(const char *expr)
{
    if (expr == NULL || strlen(expr) >= 200)
        return false;
    char low[256];
    size_t n = 0;
    for (const char *c = expr; *c != '\0'; c++)
        low[n++] = (char)tolower((unsigned char)*c);
    low[n] = '\0';
    return strstr(low, "status") && strstr(low, "'dead'") &&
           strstr(low, "locked_by") && strstr(low, " is null") &&
           strstr(low, " and ") && !strstr(low, " or ") &&
           !strstr(low, "not") && !strstr(low, "'pending'") &&
           !strstr(low, "'retry'") && !strstr(low, "'processing'") &&
           !strstr(low, "'sent'");
}

/* "A DEAD row not released", on the rows of alias (`p`, or "" for none). */
static char *
held_cond(const struct store *st, const char *alias)
{
    const char *dot = alias[0] != '\0' ? "." : "";
    if (st->plan.held)
        return xasprintf("%s%s`held` = 1", alias, dot);
    return xasprintf("%s%s`status` = 'DEAD' AND %s%s`locked_by` IS NULL", alias,
                     dot, alias, dot);
}

static bool
holds(const struct store *st)
{
    return st->ob->on_dead == ON_DEAD_HOLD &&
           st->ob->ordering == ORDERING_AGGREGATE;
}

const char *
store_hold_cond(const struct store *st)
{
    return holds(st) ? st->plan.held_cond : NULL;
}

void
store_hold_plan(struct store *st, bool held_column)
{
    st->plan.held = held_column;
    free(st->plan.held_cond);
    st->plan.held_cond = held_cond(st, "");
}

/*
 * The claim pages past held aggregates, as it does past a backing-off
 * RETRY row: a held aggregate with batch_size events waiting would fill
 * every LIMIT with rows the ordering check drops.  With `held` one entry
 * of idx_outbox_held per candidate, none of the aggregate's SENT history.
 */
char *
store_hold_filter(const struct store *st, char *unblocked)
{
    if (!holds(st))
        return unblocked;
    char *cond = held_cond(st, "`d`");
    char *filter = xasprintf(
        "%s AND NOT EXISTS (SELECT 1 FROM %s `d` WHERE %s AND "
        "`d`.`aggregate_type` = `c`.`aggregate_type` AND "
        "`d`.`aggregate_id` = `c`.`aggregate_id` AND `d`.`id` < `c`.`id`)",
        unblocked, st->table, cond);
    free(cond);
    free(unblocked);
    return filter;
}

/* The exact count's addition: held DEAD rows count as unfinished. */
char *
store_hold_count_term(const struct store *st)
{
    if (!holds(st))
        return xstrdup("");
    char *cond = held_cond(st, "p");
    char *term = xasprintf(" + (SELECT COUNT(*) FROM %s p WHERE "
                           "p.`aggregate_type` = c.`aggregate_type` AND "
                           "p.`aggregate_id` = c.`aggregate_id` AND "
                           "p.`id` < c.`id` AND %s)",
                           st->table, cond);
    free(cond);
    return term;
}

/*
 * The ordering check's range read, extended: the held DEAD rows of the
 * candidates' aggregates are read as unfinished ones, so a candidate
 * behind one never has as many earlier events in the batch as it needs.
 * The claim's filter already skips such candidates; this catches a row
 * that went DEAD since the candidates were located.
 */
void
store_hold_add_earlier(struct store *st, const struct outbox_batch *b)
{
    if (!holds(st))
        return;
    struct strbuf *q = &st->sql;
    char *cond = held_cond(st, "");
    strbuf_addf(q,
                " UNION ALL SELECT 1, `aggregate_type`, `aggregate_id`, `id` "
                "FROM %s WHERE %s AND (`aggregate_type`, `aggregate_id`) IN (",
                st->table, cond);
    free(cond);
    for (size_t g = 0; g < st->claim.ngroups; g++) {
        const struct outbox_row *row = st->claim.byagg[st->claim.groups[g]];
        strbuf_adds(q, g == 0 ? "(" : ",(");
        sql_add_string(st, row->aggregate_type);
        strbuf_adds(q, ",");
        sql_add_string(st, row->aggregate_id);
        strbuf_adds(q, ")");
    }
    strbuf_addf(q, ") AND `id` < %" PRIu64, b->rows[b->n - 1].id);
}

/* What a row going DEAD gets as locked_until: with hold, when its hold
 * began (outboxctl status and the gauge read it); else NULL as ever. */
const char *
store_dead_locked_until(const struct store *st)
{
    return holds(st) ? "NOW(6)" : "NULL";
}

/*
 * An expired event was meant to be dropped, not fixed: it goes DEAD
 * released, so that it holds nothing (docs/contract.md section 6);
 * without hold DEAD rows keep locked_by NULL as ever.
 */
const char *
store_expired_locked_by(const struct store *st)
{
    return holds(st) ? "'" STORE_RELEASED "'" : "NULL";
}
