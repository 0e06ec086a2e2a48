/*
 * config_hosts: a database entry's hosts: list (the nodes of a cluster,
 * tried in turn), checked and split into host and port.
 */
#include <stdlib.h>
#include <string.h>

#include "config_int.h"
#include "util.h"

/*
 * "host", "host:port", "[v6]" or "[v6]:port"; an address with several
 * colons and no brackets is an IPv6 literal without a port.  0 with
 * *host and *port set, or -1 with why.
 */
static int
host_split(const char *text, unsigned def_port, char **host, unsigned *port,
           const char **why)
{
    const char *colon = strrchr(text, ':');
    const char *hs = text, *he;
    *port = def_port;
    if (text[0] == '[') {
        hs = text + 1;
        he = strchr(hs, ']');
        if (he == NULL || (he[1] != '\0' && he[1] != ':')) {
            *why = "an IPv6 address in brackets ends with ] or ]:port";
            return -1;
        }
        colon = he[1] == ':' ? he + 1 : NULL;
    } else if (colon != NULL && strchr(text, ':') != colon) {
        colon = NULL; /* a bare IPv6 literal */
        he = text + strlen(text);
    } else {
        he = colon != NULL ? colon : text + strlen(text);
    }
    if (colon != NULL && (*port = port_parse(colon + 1)) == 0) {
        *why = "the port must be a number from 1 to 65535";
        return -1;
    }
    if (he == hs) {
        *why = "the host is empty";
        return -1;
    }
    *host = xstrndup(hs, (size_t)(he - hs));
    return 0;
}

static void
host_add(struct loader *ld, struct section *s, struct database_config *db,
         size_t i, yaml_node_t *item)
{
    const char *text = node_text(item), *why = NULL;
    char *host = NULL;
    unsigned port;
    if (text == NULL)
        return; /* not a string: reported by the walk */
    if (host_split(text, db->port, &host, &port, &why) < 0) {
        ld_error(ld, &item->start_mark, "%s.hosts[%zu]: \"%s\": %s", s->path, i,
                 text, why);
        return;
    }
    db->hosts = xrealloc(db->hosts, (db->nhosts + 1) * sizeof(*db->hosts));
    db->hosts[db->nhosts++] = (struct database_host){host, port};
}

/* host and socket name one server, hosts several: one or the other. */
static void
hosts_exclusive(struct loader *ld, struct section *s)
{
    static const char *const other[] = {"host", "socket"};
    for (size_t i = 0; i < 2; i++)
        if (sec_node(s, other[i]) != NULL)
            ld_error(ld, &sec_key(s, other[i])->start_mark,
                     "%s: \"hosts\" and \"%s\" are both set; use only one "
                     "(a host of hosts may carry its port: \"host:port\")",
                     s->path, other[i]);
}

/*
 * hosts: the first becomes host and port, which name the entry's server
 * everywhere one name is needed (the binlog stream, the metrics); the
 * sessions try them all in turn (dbconn.c).
 */
void
config_hosts_finish(struct loader *ld, struct section *s)
{
    struct database_config *db = s->base;
    yaml_node_t *list = sec_node(s, "hosts");
    if (list == NULL)
        return;
    hosts_exclusive(ld, s);
    if (list->type != YAML_SEQUENCE_NODE)
        return; /* reported as the wrong type by the walk */
    if (list_size(list) == 0)
        ld_error(ld, &list->start_mark, "%s.hosts: empty list", s->path);
    for (size_t i = 0; i < list_size(list); i++)
        host_add(ld, s, db, i,
                 node_get(ld, list->data.sequence.items.start[i]));
    if (db->nhosts == 0)
        return;
    free(db->host);
    db->host = xstrdup(db->hosts[0].host);
    db->port = db->hosts[0].port;
}

void
config_hosts_free(struct database_config *db)
{
    for (size_t i = 0; i < db->nhosts; i++)
        free(db->hosts[i].host);
    free(db->hosts);
    db->hosts = NULL;
    db->nhosts = 0;
}
