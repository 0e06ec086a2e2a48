/*
 * fuzz: what every libFuzzer target in tests/fuzz/ shares: the entry
 * point's prototype and a NUL-terminated copy of the input.
 */
#ifndef OUTBOXD_FUZZ_H
#define OUTBOXD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The input as a C string (cut at its first NUL, as C callers see it). */
static inline char *
fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Stops the run with a message libFuzzer reports as a crash. */
#define FUZZ_ASSERT(cond)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#endif
