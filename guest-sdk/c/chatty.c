/* A chatty service, for memory budgets (`hvsim bench memory`, and the
 * test that an exploration stays within --snapshot-memory): after setup complete it sends
 * EVENTS SDK events with DETAILS bytes of details each (its message log
 * grows to about EVENTS * DETAILS bytes), then runs STEPS steps of 5 ms of
 * virtual time, each logging a console line and drawing. An exploration
 * that snapshots it every few milliseconds holds many snapshots, each
 * with that whole log behind it. (Every byte of a message costs an exit
 * on a nested host, docs/nested-host.md: the log is kept to what a test
 * can afford.) */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hvsim_sdk.h"

#define EVENTS 48
#define DETAILS 16384
#define STEPS 200

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    hvsim_init();
    hvsim_setup_complete("{\"program\":\"chatty\"}");
    static char pad[DETAILS + 1], details[DETAILS + 64];
    memset(pad, 'x', DETAILS);
    for (int i = 0; i < EVENTS; i++) {
        snprintf(details, sizeof details, "{\"event\":%d,\"pad\":\"%s\"}", i, pad);
        hvsim_send_event("chatty: a heavy event", details);
    }
    unsigned seen = 0;
    for (int i = 0; i < STEPS; i++) {
        size_t d = hvsim_random_choice(8);
        seen |= 1u << d;
        printf("chatty: step %d drew %zu\n", i, d);
        HVSIM_SOMETIMES(seen == 0xff && i < 16, "chatty: every outcome early", NULL);
        struct timespec t = {0, 5 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    printf("chatty: done\n");
    return 0;
}
