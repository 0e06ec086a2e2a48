/*
 * fuzz_url: broker URLs as the publisher reads them (amqp_parse_url) and
 * as logs show them (amqpconn_mask_url).  The masked form of a valid URL
 * is the URL with exactly its password replaced by "***"; a URL it
 * refuses shows nothing between "user:" and its last '@'.
 */
#include <amqp.h>
#include <stdio.h>

#include "fuzz.h"
#include "amqpconn.h"
#include "util.h"

/* Where amqp_parse_url found the password; -1 when there is none. */
static long
password_span(const char *url, size_t *end)
{
    char *copy = strdup(url);
    struct amqp_connection_info ci;
    long start = -1;
    /* Without a password in the url, ci.password is the default "guest"
     * outside the copy. */
    if (amqp_parse_url(copy, &ci) == AMQP_STATUS_OK && ci.password >= copy &&
        ci.password <= copy + strlen(url)) {
        start = (long)(ci.password - copy);
        const char *at = strchr(url + start, '@');
        FUZZ_ASSERT(at != NULL);
        *end = (size_t)(at - url);
    }
    free(copy);
    return start;
}

static int
url_valid(const char *url)
{
    char *copy = strdup(url);
    struct amqp_connection_info ci;
    int ok = amqp_parse_url(copy, &ci) == AMQP_STATUS_OK;
    free(copy);
    return ok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = fuzz_cstr(data, size);
    char *masked = amqpconn_mask_url(url);
    size_t end = 0;
    long start = password_span(url, &end);
    if (start >= 0) {
        char *want = xasprintf("%.*s***%s", (int)start, url, url + end);
        FUZZ_ASSERT(strcmp(masked, want) == 0);
        free(want);
    }
    /* Refused URLs: everything after "user:" (or "://") up to the last
     * '@' is hidden, which covers wherever a password could sit. */
    const char *scheme = strstr(url, "://");
    if (start < 0 && scheme != NULL && !url_valid(url)) {
        const char *at = strrchr(scheme, '@');
        const char *colon =
            at ? memchr(scheme + 3, ':', (size_t)(at - scheme - 3)) : NULL;
        size_t keep = (size_t)((colon ? colon + 1 : scheme + 3) - url);
        FUZZ_ASSERT(strncmp(masked, url, keep) == 0);
        FUZZ_ASSERT(strncmp(masked + keep, "***", 3) == 0);
        FUZZ_ASSERT(strcmp(masked + keep + 3, at ? at : "") == 0);
        /* What stays before the mask holds no ':' after the scheme. */
        FUZZ_ASSERT(memchr(scheme + 3, ':',
                           keep - (size_t)(scheme + 3 - url)) == NULL ||
                    colon != NULL);
    }
    free(masked);
    free(url);
    return 0;
}
