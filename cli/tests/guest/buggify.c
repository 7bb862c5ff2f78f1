/* A ledger whose retry path has a bug that only buggify reaches: when the
 * site "ledger: the reply is lost" fires, the client retries a transfer
 * the server already applied, and the server applies it twice. A second
 * site guards harmless slowness. Twenty transfers, one every 50 ms of
 * virtual time; then the program ends (its timeline's end). */
#include <time.h>

#include "hvsim_sdk.h"

int main(void) {
    hvsim_init();
    hvsim_setup_complete("{\"program\":\"ledger\"}");
    long sent = 0, applied = 0;
    for (int i = 0; i < 20; i++) {
        struct timespec t = {0, 50 * 1000 * 1000};
        if (hvsim_buggify("ledger: the server is slow"))
            t.tv_nsec *= 2;
        nanosleep(&t, NULL);
        sent += 10;
        applied += 10;
        if (hvsim_buggify("ledger: the reply is lost"))
            applied += 10; /* the retry is not deduplicated: the bug */
        HVSIM_ALWAYS(applied == sent, "ledger: every transfer is applied once", NULL);
    }
    return 0;
}
