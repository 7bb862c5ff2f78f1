/* A vault behind four gates, each opened by one 1-in-8 random choice from
 * hvsim's seeded stream: the target of `hvsim bench explore --linux`. Each
 * gate is a "sometimes" assertion (a new state the explorer snapshots at);
 * the vault opening fails an "always" assertion: the bug. One attempt per
 * 100 ms of virtual time. */
#include <time.h>

#include "hvsim_sdk.h"

int main(void) {
    hvsim_init();
    hvsim_setup_complete("{\"program\":\"vault\"}");
    for (;;) {
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
        int open = 1;
        for (int gate = 0; gate < 4 && open; gate++) {
            open = hvsim_random_choice(8) == 0;
            switch (gate) {
            case 0: HVSIM_SOMETIMES(open, "vault: gate 1 opens", NULL); break;
            case 1: HVSIM_SOMETIMES(open, "vault: gate 2 opens", NULL); break;
            case 2: HVSIM_SOMETIMES(open, "vault: gate 3 opens", NULL); break;
            default: HVSIM_SOMETIMES(open, "vault: gate 4 opens", NULL); break;
            }
        }
        HVSIM_ALWAYS(!open, "vault: the vault stays closed", NULL);
    }
}
