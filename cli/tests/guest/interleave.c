/* Threads that share one private PRNG (xorshift, fixed seed). Each, in
 * turn, sleeps a short while, then under a lock draws from the PRNG, folds
 * the draw and its own number into an accumulator and sets its next pause
 * from the draw: the outcome depends only on the order in which the
 * threads take the lock, that is on the schedule, never on any randomness
 * from outside. It reports setup complete before the threads start, and
 * its outcome class (0-7) as a "sometimes" assertion, on the SDK channel. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define THREADS 3
#define ROUNDS 12

static unsigned long long prng = 0x9E3779B97F4A7C15ULL;
static unsigned long long acc;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long long next(void) {
    prng ^= prng << 13;
    prng ^= prng >> 7;
    prng ^= prng << 17;
    return prng;
}

static void *worker(void *arg) {
    long id = (long)arg;
    /* Exact timers: no coalescing of the threads' wake-ups. */
    prctl(PR_SET_TIMERSLACK, 1UL);
    long pause_ns = 200000;
    for (int i = 0; i < ROUNDS; i++) {
        struct timespec t = {0, pause_ns};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&lock);
        unsigned long long r = next();
        acc = acc * 31 + (r % 1000) * (unsigned long long)(id + 1);
        /* The next pause depends on the draw: a change in order feeds on itself. */
        pause_ns = 100000 + (long)(r % 64) * 10000;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void sdk(const char *line) {
    const char *path = getenv("HVSIM_SDK_OUTPUT");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    fprintf(f, "%s\n", line);
    fclose(f);
}

int main(void) {
    sdk("{\"antithesis_setup\":{\"status\":\"complete\",\"details\":null}}");
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    unsigned outcome = (unsigned)(acc % 8);
    char line[512];
    snprintf(line, sizeof line,
             "{\"antithesis_assert\":{\"id\":\"interleave: outcome %u\",\"message\":\"interleave: outcome %u\","
             "\"condition\":true,\"hit\":true,\"must_hit\":true,\"assert_type\":\"sometimes\","
             "\"display_type\":\"Sometimes\",\"location\":{},\"details\":null}}",
             outcome, outcome);
    sdk(line);
    printf("interleave: acc %llu outcome %u\n", acc, outcome);
    return 0;
}
