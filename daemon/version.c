/*
 * version: one line per library, its run-time version beside the one
 * its headers gave at build time when the two differ.
 */
#include "version.h"

#include <amqp.h>
#include <event2/event.h>
#include <mysql.h>
#include <openssl/crypto.h>
#include <openssl/opensslv.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"

#ifdef MARIADB_PACKAGE_VERSION_ID
#define DB_CLIENT_NAME "libmariadb"
#define DB_CLIENT_BUILT MARIADB_PACKAGE_VERSION
#else
#define DB_CLIENT_NAME "libmysqlclient"
#define DB_CLIENT_BUILT LIBMYSQL_VERSION
#endif

/* OpenSSL 3 has the bare number; 1.1 only "OpenSSL 1.1.1w  11 Sep 2023". */
#ifdef OPENSSL_VERSION_STRING
#define SSL_RUNNING OpenSSL_version(OPENSSL_VERSION_STRING)
#define SSL_BUILT OPENSSL_VERSION_STR
#else
#define SSL_RUNNING OpenSSL_version(OPENSSL_VERSION)
#define SSL_BUILT OPENSSL_VERSION_TEXT
#endif

static char *
version_line(char *report, const char *name, const char *running,
             const char *built)
{
    char *next;
    if (built == NULL || strcmp(running, built) == 0)
        next = xasprintf("%s%s %s\n", report, name, running);
    else
        next = xasprintf("%s%s %s (built with %s)\n", report, name, running,
                         built);
    free(report);
    return next;
}

char *
version_report(void)
{
    char *r = xasprintf("outboxd %s\n", OUTBOXD_VERSION);
    r = version_line(r, DB_CLIENT_NAME, mysql_get_client_info(),
                     DB_CLIENT_BUILT);
    r = version_line(r, "librabbitmq", amqp_version(), AMQP_VERSION_STRING);
    r = version_line(r, "libevent", event_get_version(), LIBEVENT_VERSION);
    /* yaml.h has no version macro: only the loaded one is known. */
    r = version_line(r, "libyaml", yaml_get_version_string(), NULL);
    /* librabbitmq and libmariadb both do their TLS with it. */
    r = version_line(r, "OpenSSL", SSL_RUNNING, SSL_BUILT);
    return r;
}
