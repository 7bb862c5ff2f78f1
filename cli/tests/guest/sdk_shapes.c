/* What the official Antithesis SDKs for Go and C++ do with their output
 * path ($ANTITHESIS_SDK_LOCAL_OUTPUT) and with libvoidstar, done by hand
 * (their toolchains cannot be fetched here; see docs/sdk-protocol.md):
 *
 *   go          open(O_RDWR|O_CREAT), ftruncate(0), one write(2) per line
 *               (Go SDK 0.7);
 *   cpp         fopen("w") and fprintf per line, never flushed: the lines
 *               leave the stdio buffer only at exit (C++ SDK 0.4.5);
 *   voidstar    dlopen("/usr/lib/libvoidstar.so", RTLD_NOW), dlsym the
 *               symbols the SDKs use, send messages (one of 300 KiB), draw
 *               random numbers, register a coverage module, report edges;
 *   concurrent  4 processes write 25 lines each, every line in two writes
 *               with a pause between, through one shared descriptor each.
 *
 * Every line is an "always" assertion whose id names its mode and number,
 * so the test can check that each arrived exactly once, whole. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *path(void) {
    const char *p = getenv("ANTITHESIS_SDK_LOCAL_OUTPUT");
    if (!p) {
        fprintf(stderr, "ANTITHESIS_SDK_LOCAL_OUTPUT is not set\n");
        exit(2);
    }
    return p;
}

static int line(char *buf, size_t n, const char *mode, int i, const char *details) {
    return snprintf(buf, n,
                    "{\"antithesis_assert\":{\"assert_type\":\"always\",\"condition\":true,\"details\":%s,"
                    "\"display_type\":\"Always\",\"hit\":true,\"id\":\"%s %d\",\"location\":{},"
                    "\"message\":\"%s %d\",\"must_hit\":true}}\n",
                    details, mode, i, mode, i);
}

static void pause_briefly(void) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
}

static int go(void) {
    int fd = open(path(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, 0) != 0) {
        perror("go: open and truncate");
        return 1;
    }
    char buf[512];
    for (int i = 0; i < 3; i++) {
        int n = line(buf, sizeof buf, "go", i, "null");
        if (write(fd, buf, n) != n) return 1;
    }
    return 0;
}

static int cpp(void) {
    FILE *f = fopen(path(), "w");
    if (!f) {
        perror("cpp: fopen");
        return 1;
    }
    char buf[512];
    for (int i = 0; i < 3; i++) {
        line(buf, sizeof buf, "cpp", i, "{}");
        fprintf(f, "%s", buf);
    }
    /* No fflush, no fclose: exit() flushes what is buffered. */
    exit(0);
}

static int voidstar(void) {
    void *lib = dlopen("/usr/lib/libvoidstar.so", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "voidstar: %s\n", dlerror());
        return 1;
    }
    void (*json)(const char *, size_t) = (void (*)(const char *, size_t))dlsym(lib, "fuzz_json_data");
    void (*flush)(void) = (void (*)(void))dlsym(lib, "fuzz_flush");
    uint64_t (*random)(void) = (uint64_t (*)(void))dlsym(lib, "fuzz_get_random");
    size_t (*module)(size_t, const char *) = (size_t (*)(size_t, const char *))dlsym(lib, "init_coverage_module");
    bool (*notify)(size_t) = (bool (*)(size_t))dlsym(lib, "notify_coverage");
    if (!json || !flush || !random || !module || !notify) {
        fprintf(stderr, "voidstar: a symbol is missing\n");
        return 1;
    }
    uint64_t a = random(), b = random();
    printf("voidstar: random %016llx %016llx\n", (unsigned long long)a, (unsigned long long)b);
    size_t base = module(3, "sdk-shapes.sym.tsv");
    for (size_t edge = 1; edge <= 3; edge++) {
        if (notify(base + edge)) {
            fprintf(stderr, "voidstar: notify_coverage asked to be called again\n");
            return 1;
        }
    }
    /* 300 KiB of details in one message. */
    size_t big = 300 * 1024;
    char *details = malloc(big + 3);
    details[0] = '"';
    memset(details + 1, 'x', big);
    strcpy(details + 1 + big, "\"");
    char *buf = malloc(big + 1024);
    for (int i = 0; i < 2; i++) {
        int n = line(buf, big + 1024, "voidstar", i, i == 1 ? details : "null");
        json(buf, n - 1); /* the SDKs send no newline */
        flush();
    }
    return 0;
}

static int concurrent(void) {
    for (int p = 0; p < 4; p++) {
        if (fork() == 0) {
            int fd = open(path(), O_WRONLY | O_APPEND | O_CLOEXEC);
            char buf[512], mode[32];
            snprintf(mode, sizeof mode, "concurrent %d", p);
            for (int i = 0; i < 25; i++) {
                int n = line(buf, sizeof buf, mode, i, "null");
                if (write(fd, buf, n / 2) != n / 2) _exit(1);
                pause_briefly();
                if (write(fd, buf + n / 2, n - n / 2) != n - n / 2) _exit(1);
            }
            _exit(0);
        }
    }
    int failed = 0, status;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: sdk-shapes go|cpp|voidstar|concurrent\n");
        return 2;
    }
    if (!strcmp(argv[1], "go")) return go();
    if (!strcmp(argv[1], "cpp")) return cpp();
    if (!strcmp(argv[1], "voidstar")) return voidstar();
    if (!strcmp(argv[1], "concurrent")) return concurrent();
    return 2;
}
