/*
 * dbsession: one MySQL/MariaDB session to one server, set up for the
 * store (READ COMMITTED, UTC, autocommit off) and shared by the stores
 * of every outbox on that server that one thread serves.
 */
#ifndef OUTBOXD_DBSESSION_H
#define OUTBOXD_DBSESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <mysql.h>

#include "config.h"

/* Minimum versions with SKIP LOCKED (docs/contract.md section 5). */
#define DBSESSION_MIN_MYSQL 80001UL
#define DBSESSION_MIN_MARIADB 100600UL

/* Error numbers shared by MySQL and MariaDB (MariaDB-only ones marked). */
enum {
    ERRNO_UNKNOWN_COM = 1047, /* Galera: node not primary (WSREP not ready) */
    ERRNO_SERVER_SHUTDOWN = 1053,
    ERRNO_BAD_FIELD = 1054,
    ERRNO_TABLE_ACCESS_DENIED = 1142,
    ERRNO_COLUMN_ACCESS_DENIED = 1143,
    ERRNO_NO_SUCH_TABLE = 1146,
    ERRNO_LOCK_WAIT_TIMEOUT = 1205,
    ERRNO_DEADLOCK = 1213,
    ERRNO_OPTION_PREVENTS = 1290,   /* --read-only, --super-read-only */
    ERRNO_READ_ONLY_MODE = 1836,    /* MySQL: super_read_only */
    ERRNO_CONNECTION_KILLED = 1927, /* MariaDB */
    ERRNO_CLIENT_FIRST = 2000,      /* CR_*: the client library's own */
    ERRNO_CLIENT_LAST = 2999,
    ERRNO_INTERACTION_TIMEOUT = 4031, /* MySQL 8.0.24+ */
};

struct dbsession;

/* A session to dc's server, with no default schema: its users name
 * their tables `schema`.`table`.  Closed until dbsession_open. */
struct dbsession *dbsession_new(const struct database_config *dc);
/*
 * A store's own session (outboxctl, tests): dc's database is also the
 * default schema, so that admin's unqualified statements run on it;
 * where names it in messages.
 */
struct dbsession *dbsession_new_private(const struct database_config *dc,
                                        const char *where);
void dbsession_free(struct dbsession *s);
/* Same server and credentials: may serve dc's tables. */
bool dbsession_serves(const struct dbsession *s,
                      const struct database_config *dc);

/*
 * Opens the session if it is closed: connects, checks the server
 * version, sets the session up and, unless allowed, refuses a server
 * with read_only on.  Each open that succeeds starts a new generation.
 */
int dbsession_open(struct dbsession *s, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Ends the session for every user of it; the next open starts anew. */
void dbsession_close(struct dbsession *s);
bool dbsession_is_open(const struct dbsession *s);
MYSQL *dbsession_db(const struct dbsession *s);
/* Grows at every successful open: a user that checked its table under
 * another generation checks it again. */
uint64_t dbsession_generation(const struct dbsession *s);
/* The server's id of the open session (0 when closed), for KILL. */
unsigned long dbsession_connection_id(const struct dbsession *s);
/* Statements sent since dbsession_new, and successful opens. */
uint64_t dbsession_statement_count(const struct dbsession *s);
uint64_t dbsession_connect_count(const struct dbsession *s);
bool dbsession_is_mariadb(const struct dbsession *s);
/* A Galera node (@@wsrep_on): its row locks do not reach other nodes. */
bool dbsession_is_galera(const struct dbsession *s);

/* Reads and writes wait at least ms (a lease) from the next open on. */
void dbsession_need_io_ms(struct dbsession *s, uint64_t ms);
/* No read_only check at open (outboxctl, which may only read). */
void dbsession_allow_read_only(struct dbsession *s);
bool dbsession_read_only_allowed(const struct dbsession *s);

/* Runs one statement, counted; mysql_real_query's result. */
int dbsession_query(struct dbsession *s, const char *sql, size_t len);
/*
 * Records that a statement failed with code and ends the session when
 * the code means it cannot go on (dbsession_errno_ends_session):
 * true then.
 */
bool dbsession_fail(struct dbsession *s, unsigned code);
/* The connection is gone or unusable: lost, killed, shut down, 2xxx. */
bool dbsession_errno_is_connection(unsigned code);
/* The server refuses writes (1290, 1836, Galera's 1047). */
bool dbsession_errno_is_read_only(unsigned code);
bool dbsession_errno_ends_session(unsigned code);

/* How the last open or dbsession_fail ended. */
unsigned dbsession_last_errno(const struct dbsession *s);
bool dbsession_last_error_is_read_only(const struct dbsession *s);
bool dbsession_last_error_is_version(const struct dbsession *s);
/* Ends the session on a server found read-only. */
void dbsession_refuse_read_only(struct dbsession *s);

/*
 * MariaDB's check_constraint_checks, a session variable whose right
 * value is per table: the session keeps the value it last set (on at
 * open), and this sets it only when it differs.
 */
/*
 * The mean row size its stores' last claims saw, 0 before any: a store
 * that has claimed nothing yet sizes its first window by it, so that a
 * thousand tenants of one table do not each start with a small claim.
 */
uint64_t dbsession_row_bytes_hint(const struct dbsession *s);
void dbsession_set_row_bytes_hint(struct dbsession *s, uint64_t bytes);

struct schema_cache;

/* The table definitions the session's stores have checked
 * (schema_cache.h); emptied when the session closes. */
struct schema_cache *dbsession_schema_cache(struct dbsession *s);
/* Sets idle_transaction_timeout unless it is set so already; -1 when the
 * server has no such variable (MySQL) or the statement failed. */
int dbsession_set_idle_trx_timeout(struct dbsession *s, unsigned seconds);
bool dbsession_checks_off(const struct dbsession *s);
int dbsession_set_checks_off(struct dbsession *s, bool off);

/* "5.5.5-10.11.6-MariaDB" to 101106. */
unsigned long dbsession_parse_version(const char *s);

#endif
