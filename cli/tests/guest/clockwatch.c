/* Watches the clocks for clock-fault tests (cli/tests/faults.rs): every
 * PERIOD_MS milliseconds of monotonic time, COUNT times, prints
 *   clock NODE I REAL MONO RAW TOD TIME
 * with REAL, MONO and RAW from clock_gettime (CLOCK_REALTIME, _MONOTONIC,
 * _MONOTONIC_RAW, in ns), TOD from gettimeofday (us) and TIME from time().
 * A realtime timerfd armed with TFD_TIMER_CANCEL_ON_SET prints
 *   cancelled I
 * whenever someone sets the clock. NODE is $HVSIM_NODE. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static long long ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void arm(int fd) {
    struct itimerspec it = {0};
    clock_gettime(CLOCK_REALTIME, &it.it_value);
    it.it_value.tv_sec += 86400;
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &it, NULL) != 0) perror("timerfd_settime");
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 10, period_ms = argc > 2 ? atoi(argv[2]) : 100;
    const char *node = getenv("HVSIM_NODE") ? getenv("HVSIM_NODE") : "-";
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK);
    arm(fd);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int i = 0; i < count; i++) {
        unsigned long long expirations;
        if (read(fd, &expirations, sizeof expirations) < 0 && errno == ECANCELED) {
            printf("cancelled %s %d\n", node, i);
            arm(fd);
        }
        struct timeval tv;
        gettimeofday(&tv, NULL);
        printf("clock %s %d %lld %lld %lld %lld %lld\n", node, i, ns(CLOCK_REALTIME), ns(CLOCK_MONOTONIC),
               ns(CLOCK_MONOTONIC_RAW), tv.tv_sec * 1000000LL + tv.tv_usec, (long long)time(NULL));
        fflush(stdout);
        next.tv_nsec += period_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return 0;
}
