/*
 * fuzz_log: log lines built from outside text (row values, server error
 * messages) in both formats.  Each call writes exactly one line; a JSON
 * line is one valid JSON object (checked with json.c's strict reader,
 * which also rejects invalid UTF-8) however long or odd its values.  The
 * first byte picks the format, the rest is message, key, value, ...
 * separated by NUL bytes (a key's first byte picks one of the keys the
 * code uses).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "json.h"
#include "log.h"

static int sink = -1;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    sink = memfd_create("fuzz_log", 0);
    return sink < 0 ? -1 : 0;
}

static int
member_cb(void *arg, const char *key, size_t keylen, const struct json_value *v)
{
    (void)arg;
    (void)key;
    (void)keylen;
    FUZZ_ASSERT(v->type == JSON_STRING);
    return 0;
}

/* Runs log_msg with stderr pointed at the memfd; returns what it wrote. */
static char *
capture(const char *const *kv, const char *msg, size_t *len)
{
    int saved = dup(STDERR_FILENO);
    ftruncate(sink, 0);
    lseek(sink, 0, SEEK_SET);
    dup2(sink, STDERR_FILENO);
    log_msg(LOG_WARN, kv, "%s", msg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    off_t end = lseek(sink, 0, SEEK_END);
    char *out = malloc((size_t)end + 1);
    *len = (size_t)pread(sink, out, (size_t)end, 0);
    out[*len] = '\0';
    return out;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool json = data[0] & 1;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const char *parts[17] = {0};
    size_t n = 0;
    for (char *p = text; n < 16 && p < text + size; p += strlen(p) + 1)
        parts[n++] = p;
    /* parts[0] is the message, then key/value pairs; an odd key is cut.
     * Keys are literals in the code, so a key part only picks one. */
    static const char *const keys[] = {"outbox",   "event_id", "aggregate_id",
                                       "trace_id", "broker",   "file"};
    const char *kv[17] = {0};
    size_t nkv = (n - 1) / 2 * 2;
    for (size_t i = 0; i < nkv; i++)
        kv[i] = i % 2 ? parts[i + 1]
                      : keys[(unsigned char)parts[i + 1][0] %
                             (sizeof(keys) / sizeof(*keys))];
    kv[nkv] = NULL;

    log_init(LOG_DEBUG, json ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
    size_t len;
    char *line = capture(kv, parts[0], &len);
    FUZZ_ASSERT(len > 0 && line[len - 1] == '\n');
    FUZZ_ASSERT(memchr(line, '\n', len - 1) == NULL);
    if (json) {
        char *scratch = malloc(len + 1);
        char err[128];
        int rc = json_object_foreach(line, len - 1, scratch, member_cb, NULL,
                                     err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "not JSON (%s): %.300s\n", err, line);
            FUZZ_ASSERT(!"a JSON log line is not a JSON object");
        }
        free(scratch);
    }
    free(line);
    free(text);
    return 0;
}
