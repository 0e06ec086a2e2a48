/*
 * fuzz_duration: duration_parse on any text; whatever it accepts must
 * format back to a duration that parses to the same milliseconds.
 */
#include <stdio.h>

#include "fuzz.h"
#include "util.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    char err[128], buf[64];
    uint64_t ms, again;
    if (duration_parse(text, &ms, err, sizeof(err)) == 0) {
        duration_format(ms, buf, sizeof(buf));
        FUZZ_ASSERT(duration_parse(buf, &again, err, sizeof(err)) == 0);
        FUZZ_ASSERT(again == ms);
    } else {
        FUZZ_ASSERT(err[0] != '\0');
    }
    free(text);
    return 0;
}
