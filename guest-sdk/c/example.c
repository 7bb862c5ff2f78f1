/* A small program instrumented with hvsim's C SDK, used by hvsim's tests:
 * `hvsim explore --linux --guest-file example:/bin/sdk-example --init-cmd /bin/sdk-example`. */
#include "hvsim_sdk.h"

static void never_called(void) { HVSIM_UNREACHABLE("example: the impossible branch", NULL); }

int main(int argc, char **argv) {
    hvsim_init();
    hvsim_setup_complete("{\"program\":\"sdk-example\"}");
    uint64_t r = hvsim_get_random();
    HVSIM_ALWAYS(1 + 1 == 2, "example: arithmetic works", NULL);
    HVSIM_SOMETIMES(r % 2 == 0, "example: the random value is sometimes even", NULL);
    HVSIM_ALWAYS_LESS_THAN((double)(r % 100), 100.0, "example: r mod 100 stays below 100", NULL);
    hvsim_send_event("example_finished", "{\"ok\":true}");
    if (argc > 5) never_called();
    (void)argv;
    return 0;
}
