/* Reads the time-stamp counter in user mode, which hvsim cannot intercept
 * on hosts where the guest's CR4.TSD does not reach the hardware (see
 * `host_limits`): a real source of nondeterminism. After setup complete it
 * checks, a millisecond apart, that the counter's bits 8 to 11 are never
 * all zero, and reports the first read where they are as a failing
 * "always" assertion. (Not the lowest bits: the nested development host's
 * TSC counts in steps of two, offset by whatever a restore set, so after
 * one restore its lowest bit is almost always 1 and the lowest four bits
 * are almost never 0; a millisecond is millions of cycles, and bits 8 to
 * 11 are as good as random.) On such a host that failure comes at a point that a
 * re-execution of the same timeline almost never reaches again: a flaky
 * bug. Where RDTSC traps, hvsim answers with virtual time, and the bug is
 * an ordinary deterministic one. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static void sdk(const char *line) {
    const char *path = getenv("HVSIM_SDK_OUTPUT");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    fprintf(f, "%s\n", line);
    fclose(f);
}

int main(void) {
    sdk("{\"antithesis_setup\":{\"status\":\"complete\",\"details\":null}}");
    for (int i = 0; i < 1000; i++) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
        unsigned long long tsc = __rdtsc();
        if (((tsc >> 8) & 0xf) == 0) {
            char line[512];
            snprintf(line, sizeof line,
                     "{\"antithesis_assert\":{\"id\":\"tscflake\",\"message\":\"the TSC's bits 8-11 are never 0\","
                     "\"condition\":false,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\","
                     "\"display_type\":\"Always\",\"location\":{},\"details\":{\"read\":%d}}}",
                     i);
            sdk(line);
            printf("tscflake: read %d has bits 8-11 0\n", i);
            return 0;
        }
    }
    return 0;
}
