/* Two processes ask hvsim questions through the C SDK's exchange
 * (hvsim__ask: write the question to /dev/hvsim, read the answer) as fast
 * as they can, and check every answer, while a third reads the run's
 * random stream from /dev/hvsim as fast as it can. The questions have
 * answers known here: Test Composer's time to wind down (none: the most a
 * u64 holds, this run has no composer) and whether composer run N may
 * start (1: this run takes nothing back). Random bytes taken for either
 * are wrong with probability 1 - 2^-64. Each asker runs for ASK_NS of
 * virtual time, long enough for the scheduler to switch between them and
 * the reader many times. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hvsim_sdk.h"

#define ASK_NS (100LL * 1000 * 1000)

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int asker(const char *name, int budget) {
    long long end = now_ns() + ASK_NS;
    long asked = 0, wrong = 0;
    while (now_ns() < end) {
        char msg[64];
        uint64_t v = 0, want = budget ? UINT64_MAX : 1;
        int len = budget ? snprintf(msg, sizeof msg, "{\"hvsim_composer_budget\":{}}")
                         : snprintf(msg, sizeof msg, "{\"hvsim_composer_run\":{\"run\":%ld}}", asked);
        int answered = hvsim__ask(msg, (size_t)len, &v);
        asked++;
        if (!answered || v != want) {
            if (wrong < 3)
                printf("exchange: %s: question %ld: answer %#" PRIx64 ", not %#" PRIx64 "\n", name, asked, v, want);
            wrong++;
        }
    }
    printf("exchange: %s: %ld questions, %ld wrong answers\n", name, asked, wrong);
    return asked > 0 && wrong == 0 ? 0 : 1;
}

static void reader(void) {
    int fd = open("/dev/hvsim", O_RDONLY | O_CLOEXEC);
    uint64_t v;
    while (fd >= 0 && read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
    _exit(2);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid_t r = fork();
    if (r == 0)
        reader();
    pid_t a = fork();
    if (a == 0)
        _exit(asker("budget", 1));
    pid_t b = fork();
    if (b == 0)
        _exit(asker("runs", 0));
    int sa = 0, sb = 0;
    waitpid(a, &sa, 0);
    waitpid(b, &sb, 0);
    kill(r, SIGKILL);
    waitpid(r, NULL, 0);
    int ok = WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0;
    printf("exchange: %s\n", ok ? "every answer reached its asker" : "answers went astray");
    return ok ? 0 : 1;
}
