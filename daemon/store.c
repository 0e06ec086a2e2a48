/* store: stub until the MySQL store lands. */
#include "store.h"

struct store *
store_new(const struct outbox_config *ob)
{
    (void)ob;
    return NULL;
}

void
store_free(struct store *st)
{
    (void)st;
}

int
store_connect(struct store *st, char *err, size_t errlen)
{
    (void)st;
    (void)err;
    (void)errlen;
    return -1;
}

void
store_disconnect(struct store *st)
{
    (void)st;
}

bool
store_is_connected(const struct store *st)
{
    (void)st;
    return false;
}

bool
store_last_error_is_schema(const struct store *st)
{
    (void)st;
    return false;
}

int
store_claim_batch(struct store *st, const char *relay_id,
                  struct outbox_batch *b, char *err, size_t errlen)
{
    (void)st;
    (void)relay_id;
    (void)b;
    (void)err;
    (void)errlen;
    return -1;
}

int
store_finalize_batch(struct store *st, struct outbox_batch *b, size_t *lost,
                     char *err, size_t errlen)
{
    (void)st;
    (void)b;
    (void)lost;
    (void)err;
    (void)errlen;
    return -1;
}
