/*
 * itproxy: the integration tests' TCP forwarder (see itproxy.h), one
 * thread to accept and one per connection.
 */
#include "itproxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"

struct pump {
    struct it_proxy *px;
    int client, server;
    unsigned epoch; /* the proxy's at connect */
    bool dump;
    size_t left; /* bytes of the client's current packet still to pass */
    unsigned char head[5];
    size_t nhead;
};

#define COM_BINLOG_DUMP 0x12

/* Follows the client's packets to see the command each one starts. */
static void
pump_scan(struct pump *p, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (p->left > 0) {
            size_t skip = n - i < p->left ? n - i : p->left;
            p->left -= skip, i += skip;
            continue;
        }
        p->head[p->nhead++] = b[i++];
        if (p->nhead < 5)
            continue;
        p->dump = p->dump || p->head[4] == COM_BINLOG_DUMP;
        p->left = ((size_t)p->head[0] | (size_t)p->head[1] << 8 |
                   (size_t)p->head[2] << 16) -
                  1;
        p->nhead = 0;
    }
}

/* Moves what from has to to; false when either side is done. */
static bool
pump_move(struct pump *p, int from, int to)
{
    unsigned char b[16384];
    ssize_t n = read(from, b, sizeof(b));
    if (n <= 0)
        return false;
    if (from == p->client)
        pump_scan(p, b, (size_t)n);
    return write(to, b, (size_t)n) == n;
}

static bool
pump_cut(const struct pump *p)
{
    return p->px->cut && p->px->epoch != p->epoch;
}

static void *
pump_main(void *arg)
{
    struct pump *p = arg;
    for (bool up = true; up && !p->px->stop && !pump_cut(p);) {
        bool hold = (p->dump && p->px->stall_dump) || p->px->stall_replies;
        struct pollfd fds[2] = {{.fd = p->client, .events = POLLIN},
                                {.fd = p->server, .events = hold ? 0 : POLLIN}};
        if (poll(fds, 2, 50) <= 0)
            continue;
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
            up = pump_move(p, p->client, p->server);
        if (up && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (p->px->delay_replies_ms > 0)
                it_sleep_ms(p->px->delay_replies_ms);
            up = pump_move(p, p->server, p->client);
        }
    }
    close(p->client);
    close(p->server);
    p->px->pumps--;
    free(p);
    return NULL;
}

static int
tcp_to(unsigned port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

static void
proxy_accept(struct it_proxy *px)
{
    int client = accept(px->fd, NULL, NULL);
    if (client < 0)
        return;
    int server = tcp_to(px->target);
    if (server < 0) {
        close(client);
        return;
    }
    struct pump *p = calloc(1, sizeof(*p));
    *p = (struct pump){
        .px = px, .client = client, .server = server, .epoch = px->epoch};
    pthread_t t;
    px->pumps++;
    if (pthread_create(&t, NULL, pump_main, p) != 0) {
        px->pumps--;
        close(client), close(server), free(p);
        return;
    }
    pthread_detach(t);
}

static void *
proxy_main(void *arg)
{
    struct it_proxy *px = arg;
    while (!px->stop) {
        struct pollfd pfd = {.fd = px->fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) > 0)
            proxy_accept(px);
    }
    return NULL;
}

void
it_proxy_start(struct it_proxy *px, unsigned target)
{
    memset(px, 0, sizeof(*px));
    px->target = target;
    px->port = it_free_port();
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)px->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    px->fd = socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    setsockopt(px->fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    ck_assert_int_eq(bind(px->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(px->fd, 16), 0);
    ck_assert_int_eq(pthread_create(&px->thread, NULL, proxy_main, px), 0);
}

void
it_proxy_move(struct it_proxy *px, unsigned target, bool cut)
{
    px->cut = cut;
    px->target = target;
    px->epoch++;
}

void
it_proxy_stop(struct it_proxy *px)
{
    px->stop = true;
    pthread_join(px->thread, NULL);
    close(px->fd);
    ck_assert(IT_WAIT(5000, px->pumps == 0));
}
