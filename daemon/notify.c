/*
 * notify: sd_notify(3) without libsystemd, as redis and others do: one
 * datagram per state change to the AF_UNIX socket in $NOTIFY_SOCKET,
 * which may be a path or, with a leading '@', an abstract name.
 */
#define _GNU_SOURCE /* SOCK_CLOEXEC, MSG_NOSIGNAL */
#include "notify.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

/* Fills addr from $NOTIFY_SOCKET; -1 when it is not a usable address. */
static int
notify_addr(const char *path, struct sockaddr_un *addr, socklen_t *len,
            char *err, size_t errlen)
{
    size_t n = strlen(path);
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    if ((path[0] != '/' && path[0] != '@') || n < 2 ||
        n >= sizeof(addr->sun_path)) {
        err_set(err, errlen,
                "NOTIFY_SOCKET \"%s\" is not a socket path or "
                "an @abstract name",
                path);
        return -1;
    }
    memcpy(addr->sun_path, path, n);
    /* An abstract name is the path with its '@' turned into a NUL. */
    if (path[0] == '@')
        addr->sun_path[0] = '\0';
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                       (path[0] == '/' ? 1 : 0));
    return 0;
}

int
notify_send(const char *state, char *err, size_t errlen)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un addr;
    socklen_t len;
    if (path == NULL || path[0] == '\0')
        return 0;
    if (notify_addr(path, &addr, &len, err, errlen) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err_set(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    ssize_t rc = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
                        (struct sockaddr *)&addr, len);
    int saved = errno;
    close(fd);
    if (rc < 0) {
        err_set(err, errlen, "sending to NOTIFY_SOCKET %s: %s", path,
                strerror(saved));
        return -1;
    }
    return 0;
}

static bool
parse_u64(const char *s, uint64_t *v)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *v = n;
    return true;
}

uint64_t
notify_watchdog_usec(void)
{
    uint64_t usec, pid;
    const char *for_pid = getenv("WATCHDOG_PID");
    if (for_pid != NULL &&
        (!parse_u64(for_pid, &pid) || pid != (uint64_t)getpid()))
        return 0;
    if (!parse_u64(getenv("WATCHDOG_USEC"), &usec))
        return 0;
    return usec;
}
