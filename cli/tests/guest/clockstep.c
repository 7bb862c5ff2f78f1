/* A lease kept on the wall clock: it reads CLOCK_REALTIME every 10 ms
 * for 1.5 s of virtual time and trusts it not to step back by more than
 * 500 ms (a lease measured on it would outlive its holder). Small clock
 * bumps, and their resets, are harmless; one large step back (a large
 * bump backward, or a forward one's reset to true time) breaks it. Each
 * reading is also left in /tmp/clockstep.last ("READING_NUMBER NS"), for
 * `hvsim debug` to find at a moment. */
#include <stdio.h>
#include <time.h>

#include "hvsim_sdk.h"

/* The clock the lease is kept on (clockstep_fixed.c: the monotonic one). */
#ifndef LEASE_CLOCK
#define LEASE_CLOCK CLOCK_REALTIME
#endif

static long long realtime_ns(void) {
    struct timespec t;
    clock_gettime(LEASE_CLOCK, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(void) {
    hvsim_init();
    hvsim_setup_complete("{\"program\":\"clockstep\"}");
    long long last = realtime_ns();
    for (int i = 0; i < 150; i++) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        long long now = realtime_ns();
        FILE *f = fopen("/tmp/clockstep.last", "w");
        if (f) {
            fprintf(f, "%d %lld\n", i + 1, now);
            fclose(f);
        }
        HVSIM_ALWAYS(now > last - 500000000LL, "the wall clock never steps back more than 500 ms", NULL);
        last = now;
    }
    return 0;
}
