/*
 * binlog: the replication stream's thread.  It connects as a replica
 * would, asks for the binary log from the server's current position (no
 * history is replayed), reads events until the stream breaks, and then
 * reconnects with backoff.  binlog_parse.c says what each event means.
 * MariaDB Connector/C only: mariadb_rpl_open sends the dump request, the
 * packets are then read raw and parsed here, not by the library.
 */
#include "binlog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <mysql.h>
#ifdef MARIADB_PACKAGE_VERSION_ID
#include <mariadb_rpl.h>
#endif

#include "binlog_parse.h"
#include "binlog_payload.h"
#include "dbconn.h"
#include "log.h"
#include "logrepeat.h"
#include "util.h"

#define RETRY_INITIAL_MS 1000
#define RETRY_MAX_MS 60000
/* A stream that stayed up this long starts its backoff over. */
#define STABLE_MS 10000
/* Access denied; you need (at least one of) the ... privilege(s). */
#define ERRNO_SPECIFIC_ACCESS_DENIED 1227
#define ERRNO_PARSE_ERROR 1064
/* An unreadable transaction's line: at once, then at most every step,
 * doubling up to an hour, with the count since. */
#define UNREADABLE_LOG_MS 60000
#define UNREADABLE_LOG_MAX_MS 3600000

struct binlog_stream {
    const struct database_config *db;
    char name[300];
    /* The watches, their clients (each a binlog_client of its own, the
     * watch's arg) and the tracker: changed by add and remove on other
     * threads, so the stream holds it while it feeds an event. */
    pthread_mutex_t watch_lock;
    struct binlog_watchset ws;     /* under watch_lock */
    struct binlog_tracker tracker; /* under watch_lock */
    struct binlog_payload payload; /* the stream thread's */
    bool live;                     /* under watch_lock */
    /* The server's binlog filters, read at each connect before the stream
     * is live (under watch_lock): a watch in a schema they leave out is
     * never told live, and its outbox polls. */
    char do_db[1024], ignore_db[1024];
    char filters_said[1024]; /* the stream thread's: its last warning */
    uint64_t failovers;      /* under watch_lock: see failed_over */
    uint64_t polled_at;      /* when failed_over last asked */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int sock;      /* the open stream's socket, -1: none (under lock) */
    bool stopping; /* under lock */
    bool followed; /* the last stream ended to follow a failover */
    unsigned failures;
    char last_error[ERR_LEN];
    /* Transactions the stream could not read whole, each of which woke
     * every outbox (binlog_tracker_unreadable); the thread's log of them. */
    _Atomic uint64_t unreadable;
    struct logrepeat unreadable_log;
};

struct binlog_stream *
binlog_stream_new(const struct database_config *db)
{
    struct binlog_stream *s = xcalloc(1, sizeof(*s));
    s->db = db;
    if (db->socket != NULL && db->socket[0] != '\0')
        snprintf(s->name, sizeof(s->name), "%s", db->socket);
    else
        snprintf(s->name, sizeof(s->name), "%s:%u",
                 db->host ? db->host : "127.0.0.1", db->port ? db->port : 3306);
    s->sock = -1;
    binlog_watchset_init(&s->ws);
    binlog_tracker_init(&s->tracker, &s->ws);
    binlog_payload_init(&s->payload);
    logrepeat_init(&s->unreadable_log, UNREADABLE_LOG_MS,
                   UNREADABLE_LOG_MAX_MS);
    pthread_mutex_init(&s->watch_lock, NULL);
    pthread_mutex_init(&s->lock, NULL);
    monotonic_cond_init(&s->cond);
    return s;
}

static bool
str_same(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

bool
binlog_stream_serves(const struct binlog_stream *s,
                     const struct database_config *db)
{
    const struct database_config *a = s->db;
    return str_same(a->host, db->host) && a->port == db->port &&
           dbconn_hosts_equal(a, db) && str_same(a->socket, db->socket) &&
           str_same(a->user, db->user);
}

static void
client_commit(void *arg, bool inserted, const struct binlog_ids *ids)
{
    struct binlog_client *c = arg;
    c->commit(c->arg, inserted, ids);
}

static int
client_id_column(void *arg, unsigned *ncolumns)
{
    struct binlog_client *c = arg;
    return c->id_column != NULL ? c->id_column(c->arg, ncolumns) : -1;
}

static uint64_t
client_failovers(const struct binlog_client *c)
{
    return c->failovers != NULL ? c->failovers(c->arg) : 0;
}

/* The sum of the clients' failovers (struct binlog_client); under the
 * watch lock. */
static uint64_t
clients_failovers(const struct binlog_stream *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->ws.n; i++)
        n += client_failovers(s->ws.all[i]->arg);
    return n;
}

/* Under the watch lock: whether the server logs w's commits. */
static bool
watch_logged(const struct binlog_stream *s, const struct binlog_watch *w)
{
    return binlog_filter_logs(s->do_db, s->ignore_db, w->schema);
}

/* Under the watch lock: the watches the filters leave out, saying so
 * (at warn, or at debug when the same was said at the last connect). */
static void
say_unlogged(struct binlog_stream *s, size_t n, const char *schema,
             const char *table, bool once)
{
    char msg[sizeof(s->filters_said)];
    snprintf(msg, sizeof(msg),
             "binlog: the server's binary log leaves out the schema of %zu "
             "watched table%s, %.64s.%.64s among them (Binlog_Do_DB '%.200s', "
             "Binlog_Ignore_DB '%.200s'): commits to them wake nothing, and "
             "their outboxes poll (poll_interval)",
             n, n == 1 ? "" : "s", schema, table, s->do_db, s->ignore_db);
    if (once && strcmp(msg, s->filters_said) == 0) {
        log_debug(LOG_KV("server", s->name), "%s", msg);
        return;
    }
    log_warn(LOG_KV("server", s->name), "%s", msg);
    if (once)
        str_copy(s->filters_said, msg, sizeof(s->filters_said));
}

void
binlog_stream_add(struct binlog_stream *s, const char *schema,
                  const char *table, const struct binlog_client *c)
{
    struct binlog_client *own = xmalloc(sizeof(*own));
    *own = *c;
    pthread_mutex_lock(&s->watch_lock);
    struct binlog_watch *w =
        binlog_watch_add(&s->ws, schema, table, client_commit, own);
    w->id_column = client_id_column;
    binlog_tracker_watch_added(&s->tracker, w);
    /* Its failovers so far are no news: the stream already reads the
     * server they led to, or connects to it next. */
    s->failovers += client_failovers(own);
    bool logged = watch_logged(s, w);
    if (s->live && logged)
        own->state(own->arg, true);
    if (s->live && !logged)
        say_unlogged(s, 1, schema, table, false);
    pthread_mutex_unlock(&s->watch_lock);
}

void
binlog_stream_remove(struct binlog_stream *s, void *client_arg)
{
    pthread_mutex_lock(&s->watch_lock);
    /* Downwards: a removal moves the last watch, already seen, into i. */
    for (size_t i = s->ws.n; i-- > 0;) {
        struct binlog_watch *w = s->ws.all[i];
        struct binlog_client *c = w->arg;
        if (c->arg != client_arg)
            continue;
        /* What the sum loses, the baseline does too: a failover of its
         * not yet followed is still one. */
        s->failovers -= client_failovers(c);
        binlog_watch_remove(&s->ws, w);
        free(c);
    }
    pthread_mutex_unlock(&s->watch_lock);
}

size_t
binlog_stream_watches(struct binlog_stream *s)
{
    pthread_mutex_lock(&s->watch_lock);
    size_t n = s->ws.n;
    pthread_mutex_unlock(&s->watch_lock);
    return n;
}

const char *
binlog_stream_name(const struct binlog_stream *s)
{
    return s->name;
}

uint64_t
binlog_stream_unreadable(const struct binlog_stream *s)
{
    return atomic_load_explicit(&s->unreadable, memory_order_relaxed);
}

/* Under the watch lock, so that a client added meanwhile is told once.
 * The filters change only while the stream is down: a watch left out is
 * told neither up nor down. */
static void
set_live_locked(struct binlog_stream *s, bool live)
{
    if (s->live == live)
        return;
    s->live = live;
    for (size_t i = 0; i < s->ws.n; i++) {
        struct binlog_client *c = s->ws.all[i]->arg;
        if (watch_logged(s, s->ws.all[i]))
            c->state(c->arg, live);
    }
}

static void
set_live(struct binlog_stream *s, bool live)
{
    pthread_mutex_lock(&s->watch_lock);
    set_live_locked(s, live);
    pthread_mutex_unlock(&s->watch_lock);
}

/* Under the watch lock: whether a client's session failed over since
 * the stream connected.  Asked at most every BINLOG_FAILOVER_POLL_MS, as
 * it costs a call per client. */
static bool
failed_over(struct binlog_stream *s)
{
    uint64_t now = clock_ms();
    if (s->polled_at != 0 && now - s->polled_at < BINLOG_FAILOVER_POLL_MS)
        return false;
    s->polled_at = now;
    return clients_failovers(s) != s->failovers;
}

static bool
stopping(struct binlog_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

/* ---- one connection's life ---- */

static int
query_fail(struct binlog_stream *s, MYSQL *db, const char *what, char *err,
           size_t errlen)
{
    unsigned code = mysql_errno(db);
    if (code == ERRNO_SPECIFIC_ACCESS_DENIED)
        err_set(err, errlen,
                "user %s may not %s: grant it REPLICATION SLAVE and "
                "BINLOG MONITOR (MariaDB) or REPLICATION CLIENT (MySQL), see "
                "sql/grants.sql (%s)",
                s->db->user ? s->db->user : "?", what, mysql_error(db));
    else
        err_set(err, errlen, "%s: %s (error %u)", what, mysql_error(db), code);
    return -1;
}

/* One number from a one-row query, or -1. */
static long long
query_number(MYSQL *db, const char *sql)
{
    long long v = -1;
    if (mysql_query(db, sql) != 0)
        return -1;
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = res != NULL ? mysql_fetch_row(res) : NULL;
    if (r != NULL && r[0] != NULL)
        v = strtoll(r[0], NULL, 10);
    if (res != NULL)
        mysql_free_result(res);
    return v;
}

/*
 * MariaDB's GTID position of the binlog's end, "" when there is none
 * (no transaction logged yet, or not MariaDB): a list of
 * domain-server-sequence triples, checked so that it can be quoted.
 */
static void
read_gtid_position(MYSQL *db, char *gtid, size_t len)
{
    gtid[0] = '\0';
    const char *info = mysql_get_server_info(db);
    if (info == NULL || strstr(info, "MariaDB") == NULL ||
        mysql_query(db, "SELECT @@global.gtid_binlog_pos") != 0)
        return;
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = res != NULL ? mysql_fetch_row(res) : NULL;
    if (r != NULL && r[0] != NULL && strlen(r[0]) < len &&
        strspn(r[0], "0123456789-,") == strlen(r[0]))
        str_copy(gtid, r[0], len);
    if (res != NULL)
        mysql_free_result(res);
}

/* SHOW MASTER STATUS's row (MySQL 8.4 knows only the newer name), or
 * NULL with the error on db. */
static MYSQL_RES *
show_master_status(MYSQL *db)
{
    if (mysql_query(db, "SHOW MASTER STATUS") != 0 &&
        (mysql_errno(db) != ERRNO_PARSE_ERROR ||
         mysql_query(db, "SHOW BINARY LOG STATUS") != 0))
        return NULL;
    return mysql_store_result(db);
}

/* The binlog's current file and byte offset. */
static int
read_offset(struct binlog_stream *s, MYSQL *db, char *file, size_t filelen,
            unsigned long *pos, char *err, size_t errlen)
{
    MYSQL_RES *res = show_master_status(db);
    if (res == NULL)
        return query_fail(s, db, "read the binary log position", err, errlen);
    MYSQL_ROW r = mysql_fetch_row(res);
    int rc = -1;
    if (r == NULL || r[0] == NULL || r[1] == NULL) {
        err_set(err, errlen, "SHOW MASTER STATUS names no binary log");
    } else {
        str_copy(file, r[0], filelen);
        *pos = strtoul(r[1], NULL, 10);
        rc = 0;
    }
    mysql_free_result(res);
    return rc;
}

/* MariaDB's GTID position, if it has one: then no file, and the position
 * of the first event, as its protocol asks. */
static bool
start_by_gtid(MYSQL *db, char *file, unsigned long *pos, char *gtid,
              size_t gtidlen)
{
    read_gtid_position(db, gtid, gtidlen);
    if (gtid[0] == '\0')
        return false;
    file[0] = '\0';
    *pos = 4;
    return true;
}

/*
 * Where the binary log ends now: the stream starts there.  Whether there
 * is one at all comes first, as it needs no privilege and is the more
 * fundamental answer.  The end is the byte offset SHOW MASTER STATUS
 * gives, but on a Galera node (wsrep_on): under its load that offset may
 * not yet be one the dump can start from (error 1236, "impossible
 * position"), so the stream starts from the GTID position and the server
 * finds the offset itself.  That costs the server a read of the current
 * binlog file from its start (a tenth of a second of CPU for 80 MB),
 * which elsewhere each connect would pay for nothing; an account without
 * BINLOG MONITOR, which SHOW MASTER STATUS needs, still starts by GTID.
 */
static int
read_position(struct binlog_stream *s, MYSQL *db, char *file, size_t filelen,
              unsigned long *pos, char *gtid, size_t gtidlen, char *err,
              size_t errlen)
{
    gtid[0] = '\0';
    if (query_number(db, "SELECT @@global.log_bin") == 0) {
        err_set(err, errlen,
                "the server keeps no binary log (log_bin is OFF): enable it "
                "to wake on commit");
        return -1;
    }
    bool galera = query_number(db, "SELECT @@global.wsrep_on") == 1;
    if (galera && start_by_gtid(db, file, pos, gtid, gtidlen))
        return 0;
    if (read_offset(s, db, file, filelen, pos, err, errlen) == 0)
        return 0;
    return start_by_gtid(db, file, pos, gtid, gtidlen) ? 0 : -1;
}

/* A replica's server id: random, high, and not the server's own. */
static unsigned
pick_server_id(MYSQL *db)
{
    long long own = query_number(db, "SELECT @@server_id");
    unsigned id = 0;
    do {
        if (getrandom(&id, sizeof(id), 0) != sizeof(id))
            id = (unsigned)clock_ms();
        id |= 0x80000000u;
    } while ((long long)id == own);
    return id;
}

/*
 * A MariaDB replica that connects by GTID: it starts after gtid, not
 * strict (a Galera node's binlog may hold the sequences of several
 * nodes in one domain out of order), and says it understands GTIDs
 * (capability 4, MARIA_SLAVE_CAPABILITY_GTID).
 */
static int
prepare_gtid(struct binlog_stream *s, MYSQL *db, const char *gtid, char *err,
             size_t errlen)
{
    char *sql = xasprintf("SET @slave_connect_state = '%s', "
                          "@slave_gtid_strict_mode = 0, "
                          "@slave_gtid_ignore_duplicates = 0, "
                          "@mariadb_slave_capability = 4",
                          gtid);
    int rc = mysql_query(db, sql);
    free(sql);
    if (rc != 0)
        return query_fail(s, db, "start the binlog stream by GTID", err,
                          errlen);
    return 0;
}

/*
 * The server sends checksums we are ready for, and a heartbeat while it
 * has nothing to send, so that a silent stream can be told from a dead
 * one by the read timeout.
 */
static int
prepare_session(struct binlog_stream *s, MYSQL *db, const char *gtid, char *err,
                size_t errlen)
{
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SET @master_binlog_checksum = @@global.binlog_checksum, "
             "@master_heartbeat_period = %llu",
             (unsigned long long)BINLOG_HEARTBEAT_MS * 1000000ULL);
    if (mysql_query(db, sql) != 0)
        return query_fail(s, db, "set up the replication session", err, errlen);
    return gtid[0] != '\0' ? prepare_gtid(s, db, gtid, err, errlen) : 0;
}

#ifdef MARIADB_PACKAGE_VERSION_ID
static int
request_dump(struct binlog_stream *s, MYSQL *db, const char *file,
             unsigned long pos, char *err, size_t errlen)
{
    unsigned id = pick_server_id(db);
    MARIADB_RPL *rpl = mariadb_rpl_init(db);
    if (rpl == NULL)
        return query_fail(s, db, "start the binlog stream", err, errlen);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, file, strlen(file));
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, pos);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, id);
    mariadb_rpl_optionsv(rpl, MARIADB_RPL_FLAGS, 0u);
    int rc = mariadb_rpl_open(rpl);
    mariadb_rpl_close(rpl); /* the request is sent; we read raw packets */
    if (rc != 0)
        return query_fail(s, db, "read the binary log (REPLICATION SLAVE)", err,
                          errlen);
    return 0;
}
#else
static int
request_dump(struct binlog_stream *s, MYSQL *db, const char *file,
             unsigned long pos, char *err, size_t errlen)
{
    (void)s, (void)db, (void)file, (void)pos;
    err_set(err, errlen,
            "this build's client library (not MariaDB "
            "Connector/C) cannot read the binary log");
    return -1;
}
#endif

static void
log_live(struct binlog_stream *s, size_t n, const char *from)
{
    char outboxes[24];
    snprintf(outboxes, sizeof(outboxes), "%zu", n);
    log_info(LOG_KV("server", s->name, "outboxes", outboxes),
             "binlog stream live from %s: commits wake their outboxes", from);
}

/* A transaction the tracker could not read whole woke every outbox:
 * counted for the metric, and said, at once and then rate-limited. */
static void
report_unreadable(struct binlog_stream *s, uint64_t n, const char *why)
{
    if (n == 0)
        return;
    atomic_fetch_add_explicit(&s->unreadable, n, memory_order_relaxed);
    uint64_t since = 0;
    switch (logrepeat_failure(&s->unreadable_log, why, clock_ms(), &since)) {
    case LOGREPEAT_FIRST:
        log_warn(LOG_KV("server", s->name),
                 "binlog: cannot read %s: woke every outbox of the server",
                 why);
        break;
    case LOGREPEAT_REPEAT:
        log_warn(LOG_KV("server", s->name),
                 "binlog: %llu transactions unreadable since the last "
                 "report, each waking every outbox: the last, %s",
                 (unsigned long long)since, why);
        break;
    case LOGREPEAT_QUIET:
        log_debug(LOG_KV("server", s->name), "binlog: cannot read %s", why);
        break;
    }
}

/*
 * One event, under the watch lock: it may end the stream (-1) to follow
 * a failover, make it live, and tell the clients of its commits.  A
 * demoted primary stays up and keeps streaming, but commits now happen
 * where the outbox's session went: the stream goes there too.
 */
static int
feed_event(struct binlog_stream *s, const struct binlog_format *fmt,
           const struct binlog_event *ev, uint64_t *live_since,
           const char *from, char *err, size_t errlen)
{
    char why[sizeof(s->tracker.why)];
    pthread_mutex_lock(&s->watch_lock);
    bool follow = failed_over(s);
    bool first = !follow && *live_since == 0;
    size_t n = s->ws.n;
    uint64_t unreadable = s->tracker.unreadable;
    if (first)
        set_live_locked(s, true);
    if (!follow)
        binlog_payload_feed(&s->payload, fmt, ev, &s->tracker);
    unreadable = s->tracker.unreadable - unreadable;
    if (unreadable != 0)
        str_copy(why, s->tracker.why, sizeof(why));
    pthread_mutex_unlock(&s->watch_lock);
    report_unreadable(s, unreadable, why);
    if (follow) {
        err_set(err, errlen, "its database failed over: following it");
        s->followed = true;
        return -1;
    }
    if (first) {
        *live_since = clock_ms();
        log_live(s, n, from);
        s->last_error[0] = '\0';
    }
    return 0;
}

/*
 * Reads until the stream breaks: always -1, err saying why.  The stream
 * is live from its first event on (the server sends its format event at
 * once), not from the request: a path that passes the request and
 * nothing after it must not hold the outboxes at the long ceiling.
 */
static int
read_events(struct binlog_stream *s, MYSQL *db, const char *from,
            uint64_t *live_since, char *err, size_t errlen)
{
    struct binlog_format fmt = {0};
    struct binlog_event ev;
    pthread_mutex_lock(&s->watch_lock);
    binlog_tracker_reset(&s->tracker);
    pthread_mutex_unlock(&s->watch_lock);
    for (;;) {
        unsigned long n = mysql_net_read_packet(db);
        if (n == packet_error &&
            mysql_errno(db) == ERRNO_SPECIFIC_ACCESS_DENIED)
            return query_fail(s, db, "read the binary log", err, errlen);
        if (n == packet_error) {
            err_set(err, errlen, "binlog stream broke: %s (error %u)",
                    mysql_error(db), mysql_errno(db));
            return -1;
        }
        const unsigned char *p = db->net.read_pos;
        if (n < 9 && p[0] == 0xFE) {
            err_set(err, errlen, "the server ended the binlog stream");
            return -1;
        }
        if (binlog_parse(&fmt, p, n, &ev, err, errlen) < 0 ||
            feed_event(s, &fmt, &ev, live_since, from, err, errlen) < 0)
            return -1;
    }
}

static void
publish_socket(struct binlog_stream *s, MYSQL *db)
{
    pthread_mutex_lock(&s->lock);
    s->sock = db != NULL ? (int)mysql_get_socket(db) : -1;
    /* A stop that came while connecting finds no socket to shut. */
    if (db != NULL && s->stopping)
        shutdown(s->sock, SHUT_RDWR);
    pthread_mutex_unlock(&s->lock);
}

/* Under the watch lock: says which watches the filters leave out. */
static void
check_filters_locked(struct binlog_stream *s)
{
    size_t n = 0;
    const struct binlog_watch *first = NULL;
    for (size_t i = 0; i < s->ws.n; i++)
        if (!watch_logged(s, s->ws.all[i])) {
            first = first != NULL ? first : s->ws.all[i];
            n++;
        }
    if (n > 0)
        say_unlogged(s, n, first->schema, first->table, true);
    else
        s->filters_said[0] = '\0';
}

/*
 * The server's binlog filters (binlog_do_db and binlog_ignore_db, options
 * of its command line): a schema they leave out is never in the stream.
 * Read while the stream is down.  A server that does not say (the account
 * lacks BINLOG MONITOR) is taken to log every schema.
 */
static void
read_filters(struct binlog_stream *s, MYSQL *db)
{
    char do_db[sizeof(s->do_db)] = "", ignore_db[sizeof(s->ignore_db)] = "";
    MYSQL_RES *res = show_master_status(db);
    MYSQL_ROW r =
        res != NULL && mysql_num_fields(res) >= 4 ? mysql_fetch_row(res) : NULL;
    if (r != NULL) {
        str_copy(do_db, r[2] != NULL ? r[2] : "", sizeof(do_db));
        str_copy(ignore_db, r[3] != NULL ? r[3] : "", sizeof(ignore_db));
    } else {
        log_debug(LOG_KV("server", s->name),
                  "binlog: its filters unread, every schema taken as "
                  "logged: %s",
                  mysql_error(db));
    }
    if (res != NULL)
        mysql_free_result(res);
    pthread_mutex_lock(&s->watch_lock);
    str_copy(s->do_db, do_db, sizeof(s->do_db));
    str_copy(s->ignore_db, ignore_db, sizeof(s->ignore_db));
    check_filters_locked(s);
    pthread_mutex_unlock(&s->watch_lock);
}

/* Where the stream starts, for its "live" line; with hosts:, on which
 * of them. */
static void
describe_start(const struct binlog_stream *s, const MYSQL *db, const char *file,
               unsigned long pos, const char *gtid, char *from, size_t len)
{
    int n = gtid[0] != '\0' ? snprintf(from, len, "GTID %s", gtid)
                            : snprintf(from, len, "%s:%lu", file, pos);
    if (s->db->nhosts > 0 && n > 0 && (size_t)n < len && db->host != NULL)
        snprintf(from + n, len - (size_t)n, " on %s:%u", db->host, db->port);
}

/* Connects, streams until it breaks; returns with err saying why. */
static void
stream_once(struct binlog_stream *s, uint64_t *live_since, char *err,
            size_t errlen)
{
    unsigned code,
        io_s = dbconn_seconds(BINLOG_HEARTBEAT_MS * BINLOG_STALL_BEATS);
    char file[256], gtid[1024], from[1100];
    unsigned long pos = 0;
    pthread_mutex_lock(&s->watch_lock);
    s->failovers = clients_failovers(s);
    s->polled_at = 0;
    pthread_mutex_unlock(&s->watch_lock);
    MYSQL *db = dbconn_open(s->db, false, io_s, s->name, &code, err, errlen);
    if (db == NULL)
        return;
    publish_socket(s, db);
    bool ready = read_position(s, db, file, sizeof(file), &pos, gtid,
                               sizeof(gtid), err, errlen) == 0;
    if (ready)
        read_filters(s, db);
    if (ready && prepare_session(s, db, gtid, err, errlen) == 0 &&
        request_dump(s, db, file, pos, err, errlen) == 0) {
        describe_start(s, db, file, pos, gtid, from, sizeof(from));
        read_events(s, db, from, live_since, err, errlen);
    }
    publish_socket(s, NULL);
    mysql_close(db);
}

/* Says why the outboxes poll: once per distinct reason. */
static void
log_down(struct binlog_stream *s, const char *err)
{
    if (strcmp(s->last_error, err) != 0)
        log_warn(LOG_KV("server", s->name),
                 "no binlog wake, its outboxes poll (poll_interval): %s", err);
    else
        log_debug(LOG_KV("server", s->name), "binlog still unavailable: %s",
                  err);
    str_copy(s->last_error, err, sizeof(s->last_error));
}

static void
wait_retry(struct binlog_stream *s, uint64_t ms)
{
    struct timespec at = monotonic_in_ms(ms);
    pthread_mutex_lock(&s->lock);
    while (!s->stopping && pthread_cond_timedwait(&s->cond, &s->lock, &at) == 0)
        ;
    pthread_mutex_unlock(&s->lock);
}

static void *
stream_main(void *arg)
{
    struct binlog_stream *s = arg;
    char err[ERR_LEN];
    while (!stopping(s)) {
        uint64_t live_since = 0;
        err[0] = '\0';
        stream_once(s, &live_since, err, sizeof(err));
        set_live(s, false);
        if (stopping(s))
            break;
        if ((live_since != 0 && clock_ms() - live_since >= STABLE_MS) ||
            s->followed)
            s->failures = 0;
        s->followed = false;
        log_down(s, err);
        wait_retry(s,
                   backoff_ms(s->failures++, RETRY_INITIAL_MS, RETRY_MAX_MS));
    }
    mysql_thread_end();
    return NULL;
}

int
binlog_stream_start(struct binlog_stream *s)
{
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0)
        return -1;
    s->started = true;
    return 0;
}

void
binlog_stream_stop(struct binlog_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    if (s->sock >= 0)
        shutdown(s->sock, SHUT_RDWR);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void
binlog_stream_free(struct binlog_stream *s)
{
    if (s == NULL)
        return;
    binlog_stream_stop(s);
    if (s->started)
        pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->watch_lock);
    pthread_cond_destroy(&s->cond);
    binlog_payload_free(&s->payload);
    for (size_t i = 0; i < s->ws.n; i++)
        free(s->ws.all[i]->arg);
    binlog_watchset_clear(&s->ws);
    free(s);
}
