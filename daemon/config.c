/* config: stub until the loader lands. */
#include "config.h"

#include <stdlib.h>

struct config *
config_load(const char *path, struct config_errors *errs)
{
    (void)path;
    (void)errs;
    return NULL;
}

void
config_free(struct config *cfg)
{
    (void)cfg;
}

void
config_errors_free(struct config_errors *errs)
{
    (void)errs;
}

size_t
config_outbox_count(const struct config *cfg)
{
    (void)cfg;
    return 0;
}

struct outbox_config *
config_outbox_at(const struct config *cfg, size_t i)
{
    (void)cfg;
    (void)i;
    return NULL;
}

struct outbox_config *
config_outbox_find(const struct config *cfg, const char *name)
{
    (void)cfg;
    (void)name;
    return NULL;
}
