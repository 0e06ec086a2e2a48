/*
 * metrics_int: what the text (metrics.c) and the folding of groups into
 * one series each (metrics_group.c) share.  Private to the two.
 */
#ifndef OUTBOXD_METRICS_INT_H
#define OUTBOXD_METRICS_INT_H

#include "metrics.h"

/* The uint64_t counters of struct outbox_metrics with a family each. */
#define METRICS_NCOUNTERS 19

struct counter_family {
    const char *name, *help;
    size_t off; /* into struct outbox_metrics */
};

extern const struct counter_family metrics_counters[METRICS_NCOUNTERS];

/*
 * The series one scrape renders, in parallel arrays: each an outbox of
 * its own or a folded group, with how many outboxes it stands for and
 * how many of those a live binlog stream wakes.
 */
struct metrics_view {
    struct outbox_metrics *obs;
    size_t *members, *live;
    size_t n;
    struct histogram *hists; /* the folded groups' own, two per group */
};

/* Folds each group into one series when more than limit outboxes have a
 * group; updates mg (which may be NULL) either way. */
void metrics_view_build(struct metrics_view *v,
                        const struct outbox_metrics *obs, size_t n,
                        unsigned limit, struct metrics_groups *mg);
void metrics_view_free(struct metrics_view *v);

#endif
