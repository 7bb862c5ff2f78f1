/* Unit test of the C SDK outside hvsim: output goes to a local file. */
#include "hvsim_sdk.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); failures++; } } while (0)

static void unreached(void) { HVSIM_UNREACHABLE("c test: never reached", NULL); }

int main(int argc, char **argv) {
    char path[] = "/tmp/hvsim-c-sdk-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    setenv("HVSIM_SDK_OUTPUT", path, 1);
    hvsim_init();
    hvsim_setup_complete(NULL);
    HVSIM_ALWAYS(1 == 1, "c test: \"quoted\" always", "{\"k\":1}");
    HVSIM_SOMETIMES(0, "c test: sometimes", NULL);
    HVSIM_ALWAYS_GREATER_THAN(3, 5, "c test: three above five", NULL);
    hvsim_send_event("c_test_event", "{\"n\":2}");
    hvsim_stop_faults(5);
    if (argc > 100) unreached();
    (void)argv;
    CHECK(hvsim_random_choice(10) < 10);
    /* Outside hvsim a buggify site never fires. */
    CHECK(!hvsim_buggify("c test: site"));

    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[4096];
    int n = 0, registered_unreached = 0, setup = 0, quoted = 0, numeric = 0, event = 0, stop = 0;
    while (f && fgets(line, sizeof line, f)) {
        n++;
        if (strstr(line, "\"hit\":false") && strstr(line, "c test: never reached") && strstr(line, "\"Unreachable\""))
            registered_unreached = 1;
        if (strstr(line, "{\"antithesis_setup\":{\"status\":\"complete\"")) setup = 1;
        if (strstr(line, "c test: \\\"quoted\\\" always") && strstr(line, "\"hit\":true") && strstr(line, "\"details\":{\"k\":1}") &&
            strstr(line, "test_sdk.c"))
            quoted = 1;
        if (strstr(line, "\"guidance_type\":\"numeric\"") && strstr(line, "\"left\":3")) numeric = 1;
        if (strstr(line, "{\"c_test_event\":{\"n\":2}}")) event = 1;
        if (strcmp(line, "{\"hvsim_faults\":{\"pause\":5}}\n") == 0) stop = 1;
    }
    if (f) fclose(f);
    unlink(path);
    CHECK(n >= 9);
    CHECK(registered_unreached);
    CHECK(setup);
    CHECK(quoted);
    CHECK(numeric);
    CHECK(event);
    CHECK(stop);
    if (failures) return 1;
    printf("C SDK: %d lines checked\n", n);
    return 0;
}
