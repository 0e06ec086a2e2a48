/*
 * dbconn: the client options every session to a configured database
 * gets, and an error message that says which setting to look at.
 */
#include "dbconn.h"

#include <limits.h>
#include <stdbool.h>

#include "util.h"

/* CR_SSL_CONNECTION_ERROR, the same in both client libraries. */
#define ERRNO_TLS_CONNECT 2026

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

MYSQL *
dbconn_open(const struct database_config *dc, bool with_schema, unsigned io_s,
            const char *where, unsigned *code, char *err, size_t errlen)
{
    bool sock = dc->socket != NULL && dc->socket[0] != '\0';
    const char *host = sock ? "localhost" : dc->host ? dc->host : "127.0.0.1";
    MYSQL *db = mysql_init(NULL);
    *code = 0;
    if (db == NULL) {
        err_set(err, errlen, "connect %s: out of memory", where);
        return NULL;
    }
    set_options(dc, db, io_s);
    if (mysql_real_connect(
            db, host, dc->user, dc->password, with_schema ? dc->database : NULL,
            dc->port ? dc->port : 3306, sock ? dc->socket : NULL, 0) != NULL)
        return db;
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
