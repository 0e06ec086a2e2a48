/*
 * binlog_watch: the tables a binlog stream watches, hashed by schema and
 * table (and by schema alone), so that an event finds its watches in
 * constant time however many tables one server holds.  Pure; the
 * caller serialises access (binlog.c holds its lock).
 */
#ifndef OUTBOXD_BINLOG_WATCH_H
#define OUTBOXD_BINLOG_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The ids a transaction inserted into a watched table: the claim woken
 * by its commit locks them by primary key.  More rows than fit, or any
 * the tracker could not read, and known is false. */
#define BINLOG_IDS_MAX 16
struct binlog_ids {
    const uint64_t *id;
    size_t n;
    bool known; /* id holds every row the transaction inserted */
    /* It updated rows, or ran a statement naming the table other than an
     * insert: some row it did not insert may be unfinished again. */
    bool reopens;
};

/* One watched table and whom to tell of its commits. */
struct binlog_watch {
    char *schema; /* copies, NUL-terminated */
    char *table;
    /* At the commit of a transaction that wrote the table: inserted is
     * true when it inserted rows, false when it only changed some, and
     * ids the ids of the rows it inserted.  On the stream's thread: must
     * not block. */
    void (*notify)(void *arg, bool inserted, const struct binlog_ids *ids);
    /* Which column of the table holds its id (0: the first), the table
     * having *ncolumns; -1 while not known.  Asked at each insert's rows
     * event, on the stream's thread.  NULL (binlog_watch_add): never
     * known, and no ids are read. */
    int (*id_column)(void *arg, unsigned *ncolumns);
    void *arg;
    /* Set-private: the hashes, the chains and the slot in all. */
    uint64_t hash, schema_hash;
    struct binlog_watch *next, *next_schema;
    size_t slot;
    /* Tracker-private: what the open transaction did to the table. */
    bool touched, inserted, reopens;
    struct binlog_watch *next_touched;
    uint64_t ids[BINLOG_IDS_MAX];
    size_t nids;
    bool ids_lost;
    uint64_t partial_trx; /* the tracker's trx + 1 it was added in, or 0 */
};

struct binlog_watchset {
    struct binlog_watch **all; /* in no order; n of them */
    size_t n, cap;
    struct binlog_watch **by_name, **by_schema; /* nbuckets each */
    size_t nbuckets;                            /* a power of two */
    /* The watches the open transaction touched (the tracker's). */
    struct binlog_watch *touched;
};

void binlog_watchset_init(struct binlog_watchset *ws);
/* Frees every watch (not their args) and the indexes. */
void binlog_watchset_clear(struct binlog_watchset *ws);

/* Watches schema.table for notify(arg); the names are copied.  The same
 * table may be watched more than once, by different args. */
struct binlog_watch *binlog_watch_add(
    struct binlog_watchset *ws, const char *schema, const char *table,
    void (*notify)(void *, bool, const struct binlog_ids *), void *arg);
/* Unlinks w from every index and from the touched list, and frees it. */
void binlog_watch_remove(struct binlog_watchset *ws, struct binlog_watch *w);

/* The hash binlog_watch_next matches by: of schema and table, letter
 * case folded as the matching is. */
uint64_t binlog_watch_hash(const char *schema, size_t schema_len,
                           const char *table, size_t table_len);
/* The first watch of schema.table after prev (NULL: the first of all),
 * or NULL; the names need not be NUL-terminated. */
struct binlog_watch *binlog_watch_next(const struct binlog_watchset *ws,
                                       const struct binlog_watch *prev,
                                       uint64_t hash, const char *schema,
                                       size_t schema_len, const char *table,
                                       size_t table_len);
/* The same for every watch in schema, whatever its table. */
struct binlog_watch *
binlog_watch_next_in_schema(const struct binlog_watchset *ws,
                            const struct binlog_watch *prev, const char *schema,
                            size_t schema_len);

/*
 * Whether a server whose binary log filters are do_db and ignore_db
 * (SHOW MASTER STATUS's Binlog_Do_DB and Binlog_Ignore_DB: comma-separated
 * names, "" or NULL for none) logs the changes of tables in schema.  As
 * the server decides: a do list names the schemas logged, else an ignore
 * list those left out.  In doubt it says not logged, since an outbox that
 * polls is late by a poll at most and one waiting for a wake that never
 * comes by wake_poll_interval: a do list must name schema exactly, an
 * ignore list in any letter case.
 */
bool binlog_filter_logs(const char *do_db, const char *ignore_db,
                        const char *schema);

#endif
