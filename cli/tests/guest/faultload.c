/* A disk workload for hvsim's fault tests, run inside the guest on one
 * node: ROUNDS times, write a sector with O_DIRECT, flush every fourth
 * round, read the sector back. Errors are counted, never fatal; the counts
 * go to stdout on one line. The last two rounds' writes stay unflushed, so
 * a later simulated crash has something to lose. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: faultload DISK ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[2]);
    int fd = open(argv[1], O_RDWR | O_DIRECT);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    unsigned char *buf;
    if (posix_memalign((void **)&buf, 4096, 4096)) return 1;
    long writes = 0, write_errors = 0, flushes = 0, flush_errors = 0;
    long reads = 0, read_errors = 0, mismatches = 0;
    for (int i = 0; i < rounds; i++) {
        off_t at = (off_t)((i * 7) % 128) * 512;
        unsigned char fill = 'A' + i % 26;
        memset(buf, fill, 512);
        if (pwrite(fd, buf, 512, at) == 512) writes++; else write_errors++;
        if (i % 4 == 3) {
            if (fdatasync(fd) == 0) flushes++; else flush_errors++;
        }
        memset(buf, 0, 512);
        if (pread(fd, buf, 512, at) != 512) {
            read_errors++;
            continue;
        }
        reads++;
        for (int b = 0; b < 512; b++) {
            if (buf[b] != fill) {
                mismatches++;
                break;
            }
        }
    }
    printf("faultload: writes=%ld write_errors=%ld flushes=%ld flush_errors=%ld reads=%ld read_errors=%ld mismatches=%ld\n",
           writes, write_errors, flushes, flush_errors, reads, read_errors, mismatches);
    return 0;
}
