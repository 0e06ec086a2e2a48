/* publisher: stub until the AMQP publisher lands. */
#include "publisher.h"

struct publisher *
publisher_new(const struct broker_config *broker, const char *connection_name)
{
    (void)broker;
    (void)connection_name;
    return NULL;
}

void
publisher_free(struct publisher *p)
{
    (void)p;
}

int
publisher_connect(struct publisher *p, char *err, size_t errlen)
{
    (void)p;
    (void)err;
    (void)errlen;
    return -1;
}

void
publisher_disconnect(struct publisher *p)
{
    (void)p;
}

bool
publisher_is_connected(const struct publisher *p)
{
    (void)p;
    return false;
}

bool
publisher_is_blocked(const struct publisher *p)
{
    (void)p;
    return false;
}

const char *
publisher_url(const struct publisher *p)
{
    (void)p;
    return "";
}

int
publisher_poll(struct publisher *p, char *err, size_t errlen)
{
    (void)p;
    (void)err;
    (void)errlen;
    return -1;
}

int
publisher_publish_wave(struct publisher *p, struct outbox_batch *b,
                       struct outbox_row **rows, size_t n, bool mandatory,
                       uint64_t deadline_ms, char *err, size_t errlen)
{
    (void)p;
    (void)b;
    (void)rows;
    (void)n;
    (void)mandatory;
    (void)deadline_ms;
    (void)err;
    (void)errlen;
    return -1;
}
