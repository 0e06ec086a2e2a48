/*
 * dbconn: the client options every session to a configured database
 * gets, and an error message that says which setting to look at.
 */
#include "dbconn.h"

#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "util.h"

/* CR_SSL_CONNECTION_ERROR, the same in both client libraries. */
#define ERRNO_TLS_CONNECT 2026
/* ER_UNKNOWN_COM_ERROR: what a Galera node out of the cluster answers. */
#define ERRNO_WSREP_NOT_READY 1047

unsigned
dbconn_seconds(uint64_t ms)
{
    uint64_t s = (ms + 999) / 1000;
    return s == 0 ? 1 : s > UINT_MAX ? UINT_MAX : (unsigned)s;
}

static void
set_tls_options(MYSQL *db, const struct tls_config *tls)
{
    if (!tls->enabled)
        return;
    if (tls->ca_file != NULL)
        mysql_options(db, MYSQL_OPT_SSL_CA, tls->ca_file);
    if (tls->cert_file != NULL)
        mysql_options(db, MYSQL_OPT_SSL_CERT, tls->cert_file);
    if (tls->key_file != NULL)
        mysql_options(db, MYSQL_OPT_SSL_KEY, tls->key_file);
#ifdef MARIADB_PACKAGE_VERSION
    my_bool on = 1, verify = tls->verify_peer;
    mysql_options(db, MYSQL_OPT_SSL_ENFORCE, &on);
    mysql_options(db, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
#else
    unsigned mode = !tls->verify_peer      ? SSL_MODE_REQUIRED
                    : tls->verify_hostname ? SSL_MODE_VERIFY_IDENTITY
                                           : SSL_MODE_VERIFY_CA;
    mysql_options(db, MYSQL_OPT_SSL_MODE, &mode);
#endif
}

/* Bounded waits everywhere, so a hung server cannot hang the caller. */
static void
set_options(const struct database_config *dc, MYSQL *db, unsigned io_s)
{
    unsigned connect_s =
        dbconn_seconds(dc->connect_timeout_ms ? dc->connect_timeout_ms : 5000);
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(db, MYSQL_OPT_READ_TIMEOUT, &io_s);
    mysql_options(db, MYSQL_OPT_WRITE_TIMEOUT, &io_s);
    /* Row strings arrive as stored, not squeezed into latin1. */
    mysql_options(db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
#if defined(MARIADB_PACKAGE_VERSION)
    my_bool reconnect = 0;
    mysql_options(db, MYSQL_OPT_RECONNECT, &reconnect);
#elif MYSQL_VERSION_ID < 80034
    bool reconnect = false; /* off by default; 8.0.34+ warns on the option */
    mysql_options(db, MYSQL_OPT_RECONNECT, &reconnect);
#endif
    set_tls_options(db, &dc->tls);
    /* caching_sha2_password (MySQL 8.4's default) over a connection
     * without TLS: the password encrypted to this key (the file is
     * checked at load, config.c). */
    if (dc->server_public_key_file != NULL)
        mysql_options(db, MYSQL_SERVER_PUBLIC_KEY, dc->server_public_key_file);
}

/* One number or word of a one-row answer (column col); false if none. */
static bool
query_value(MYSQL *db, const char *sql, unsigned col, char *out, size_t len)
{
    if (mysql_query(db, sql) != 0)
        return false;
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = res != NULL ? mysql_fetch_row(res) : NULL;
    bool ok = r != NULL && mysql_num_fields(res) > col && r[col] != NULL;
    if (ok)
        str_copy(out, r[col], len);
    if (res != NULL)
        mysql_free_result(res);
    return ok;
}

/*
 * A Galera node out of the primary component (or still joining) takes
 * connections and answers 1047 to every statement until it rejoins: a
 * session there serves nothing, so the next host is tried.  Servers
 * without wsrep (MySQL has no @@wsrep_on) are ready.
 */
static bool
node_ready(MYSQL *db)
{
    char v[16];
    if (!query_value(db, "SELECT @@wsrep_on", 0, v, sizeof(v)))
        return mysql_errno(db) != ERRNO_WSREP_NOT_READY;
    if (strcmp(v, "1") != 0)
        return true;
    return query_value(db, "SHOW STATUS LIKE 'wsrep_ready'", 1, v, sizeof(v)) &&
           strcmp(v, "ON") == 0;
}

/* One attempt at host:port; NULL with err and *code set. */
static MYSQL *
open_one(const struct database_config *dc, const char *host, unsigned port,
         bool with_schema, unsigned io_s, const char *where, unsigned *code,
         char *err, size_t errlen)
{
    bool sock = dc->socket != NULL && dc->socket[0] != '\0';
    MYSQL *db = mysql_init(NULL);
    *code = 0;
    if (db == NULL) {
        err_set(err, errlen, "connect %s: out of memory", where);
        return NULL;
    }
    set_options(dc, db, io_s);
    if (mysql_real_connect(db, host, dc->user, dc->password,
                           with_schema ? dc->database : NULL, port,
                           sock ? dc->socket : NULL, 0) != NULL) {
        if (node_ready(db))
            return db;
        err_set(err, errlen,
                "connect %s at %s:%u: the Galera node is not ready "
                "(wsrep_ready OFF: not in the primary component) (error %u)",
                where, host, port, ERRNO_WSREP_NOT_READY);
        *code = ERRNO_WSREP_NOT_READY;
        mysql_close(db);
        return NULL;
    }
    /* The library's text alone ("TLS/SSL error: self-signed certificate
     * in certificate chain") does not say which setting to look at. */
    bool tls = mysql_errno(db) == ERRNO_TLS_CONNECT;
    err_set(err, errlen, "connect %s at %s: %s%s%s%s (error %u)", where,
            sock ? dc->socket : host,
            tls ? "TLS handshake or certificate verification failed "
                  "(tls.ca_file "
                : "",
            tls ? (dc->tls.ca_file ? dc->tls.ca_file : "unset") : "",
            tls ? "): " : "", mysql_error(db), mysql_errno(db));
    *code = mysql_errno(db);
    mysql_close(db);
    return NULL;
}

/* With hosts:, each in turn from the first, so that a node that comes
 * back is preferred again; err says why the last one failed. */
MYSQL *
dbconn_open(const struct database_config *dc, bool with_schema, unsigned io_s,
            const char *where, unsigned *code, char *err, size_t errlen)
{
    bool sock = dc->socket != NULL && dc->socket[0] != '\0';
    if (dc->nhosts == 0)
        return open_one(dc,
                        sock       ? "localhost"
                        : dc->host ? dc->host
                                   : "127.0.0.1",
                        dc->port ? dc->port : 3306, with_schema, io_s, where,
                        code, err, errlen);
    MYSQL *db = NULL;
    for (size_t i = 0; i < dc->nhosts && db == NULL; i++)
        db = open_one(dc, dc->hosts[i].host, dc->hosts[i].port, with_schema,
                      io_s, where, code, err, errlen);
    return db;
}

void
dbconn_hosts_copy(struct database_config *to, const struct database_config *dc)
{
    to->nhosts = dc->nhosts;
    to->hosts = NULL;
    if (dc->nhosts == 0)
        return;
    to->hosts = xcalloc(dc->nhosts, sizeof(*to->hosts));
    for (size_t i = 0; i < dc->nhosts; i++)
        to->hosts[i] = (struct database_host){xstrdup(dc->hosts[i].host),
                                              dc->hosts[i].port};
}

bool
dbconn_hosts_equal(const struct database_config *a,
                   const struct database_config *b)
{
    if (a->nhosts != b->nhosts)
        return false;
    for (size_t i = 0; i < a->nhosts; i++)
        if (a->hosts[i].port != b->hosts[i].port ||
            strcmp(a->hosts[i].host, b->hosts[i].host) != 0)
            return false;
    return true;
}
