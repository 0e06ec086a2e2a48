/*
 * fuzz_config: the YAML loader on any text.  A load either fails with
 * every message naming the file, or gives a config that compares with a
 * second load of the same text as unchanged (the SIGHUP path) and whose
 * dump (outboxd -T) loads again and dumps the same.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "log.h"

/* Relative password_file and tls paths resolve beside this, which does
 * not exist: only absolute paths reach real files. */
#define FUZZ_PATH "/nonexistent-outboxd-fuzz/outboxd.yaml"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* password_file: /dev/stdin must not wait for a terminal. */
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        close(fd);
    }
    log_init(LOG_ERROR, LOG_FORMAT_TEXT);
    return 0;
}

/* outboxd -T's text loads again and prints the same. */
static void
dump_reads_back(const struct config *cfg)
{
    struct config_errors errs = {0};
    char *text = config_dump(cfg);
    struct config *dumped =
        config_load_buffer(FUZZ_PATH, text, strlen(text), &errs);
    if (dumped == NULL) {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "%s\n", errs.msgs[i]);
        fprintf(stderr, "--- the dump:\n%s", text);
        FUZZ_ASSERT(!"the dump does not load");
    }
    char *again = config_dump(dumped);
    if (strcmp(text, again) != 0) {
        fprintf(stderr, "--- dump:\n%s--- its dump:\n%s", text, again);
        FUZZ_ASSERT(!"the dump of the dump differs");
    }
    free(again);
    free(text);
    config_free(dumped);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config_errors errs = {0};
    struct config *cfg =
        config_load_buffer(FUZZ_PATH, (const char *)data, size, &errs);
    if (cfg == NULL) {
        FUZZ_ASSERT(errs.n > 0);
        for (size_t i = 0; i < errs.n; i++)
            FUZZ_ASSERT(strncmp(errs.msgs[i], FUZZ_PATH ":",
                                strlen(FUZZ_PATH ":")) == 0);
        config_errors_free(&errs);
        return 0;
    }
    FUZZ_ASSERT(errs.n == 0);
    struct config *again =
        config_load_buffer(FUZZ_PATH, (const char *)data, size, &errs);
    FUZZ_ASSERT(again != NULL);
    struct config_errors refused = {0}, changed = {0};
    size_t n = config_reload_check(cfg, again, &refused, &changed);
    if (n != 0 || changed.n != 0) {
        for (size_t i = 0; i < refused.n; i++)
            fprintf(stderr, "refused: %s\n", refused.msgs[i]);
        for (size_t i = 0; i < changed.n; i++)
            fprintf(stderr, "changed: %s\n", changed.msgs[i]);
        FUZZ_ASSERT(!"the same text reloads as a change");
    }
    dump_reads_back(cfg);
    config_reload_apply(cfg, again);
    for (size_t i = 0; i < config_outbox_count(cfg); i++)
        FUZZ_ASSERT(config_outbox_find(cfg, config_outbox_at(cfg, i)->name) !=
                    NULL);
    config_errors_free(&refused);
    config_errors_free(&changed);
    config_free(again);
    config_free(cfg);
    return 0;
}
