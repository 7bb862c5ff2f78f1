/*
 * hvsim guest SDK for C (header-only; GCC or Clang, ELF).
 *
 * Assertions and lifecycle events for programs tested under hvsim, written
 * as JSON lines in the shapes the Antithesis SDKs use (hvsim's
 * docs/sdk-protocol.md) to $HVSIM_SDK_OUTPUT (under hvsim, /run/hvsim/sdk: a
 * file of the guest kernel, where every line written is one message to the
 * VMM), else $ANTITHESIS_SDK_LOCAL_OUTPUT, else nowhere.
 *
 *     #include "hvsim_sdk.h"
 *     int main(void) {
 *         hvsim_init();                       // registers every assertion
 *         hvsim_setup_complete(NULL);
 *         HVSIM_ALWAYS(balance >= 0, "balance never negative", NULL);
 *         HVSIM_SOMETIMES(retried, "a request is sometimes retried", NULL);
 *     }
 *
 * Messages must be string literals: every assertion site is placed in the
 * "hvsim_catalog" section at compile time, and hvsim_init() registers them
 * all, so assertions that are never reached still appear in the report.
 * `details` arguments are JSON text (or NULL).
 */
#ifndef HVSIM_SDK_H
#define HVSIM_SDK_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

enum hvsim_kind {
    HVSIM_KIND_ALWAYS,
    HVSIM_KIND_ALWAYS_OR_UNREACHABLE,
    HVSIM_KIND_SOMETIMES,
    HVSIM_KIND_REACHABLE,
    HVSIM_KIND_UNREACHABLE,
    HVSIM_KIND_ALWAYS_GT,
    HVSIM_KIND_ALWAYS_GE,
    HVSIM_KIND_ALWAYS_LT,
    HVSIM_KIND_ALWAYS_LE,
    HVSIM_KIND_SOMETIMES_GT,
    HVSIM_KIND_SOMETIMES_GE,
    HVSIM_KIND_SOMETIMES_LT,
    HVSIM_KIND_SOMETIMES_LE,
};

struct hvsim_site {
    int kind;
    int line;
    const char *message;
    const char *file;
    const char *function;
};

/* Provided by the linker for the section holding every site. */
extern const struct hvsim_site __start_hvsim_catalog[] __attribute__((weak));
extern const struct hvsim_site __stop_hvsim_catalog[] __attribute__((weak));

#define HVSIM__SITE(kind, msg)                                                              \
    ({                                                                                      \
        static const struct hvsim_site hvsim__site                                          \
            __attribute__((section("hvsim_catalog"), used, aligned(8))) = {                 \
                (kind), __LINE__, (msg), __FILE__, __func__};                               \
        &hvsim__site;                                                                       \
    })

static const char *const hvsim__display[] = {
    "Always", "AlwaysOrUnreachable", "Sometimes", "Reachable", "Unreachable",
    "AlwaysGreaterThan", "AlwaysGreaterThanOrEqualTo", "AlwaysLessThan", "AlwaysLessThanOrEqualTo",
    "SometimesGreaterThan", "SometimesGreaterThanOrEqualTo", "SometimesLessThan", "SometimesLessThanOrEqualTo",
};

static int hvsim__fd = -2;

/* Writes one line with a single write(2), so concurrent lines never mix. */
static inline void hvsim__emit(const char *line, size_t len) {
    if (hvsim__fd == -2) {
        const char *path = getenv("HVSIM_SDK_OUTPUT");
        if (!path || !*path) path = getenv("ANTITHESIS_SDK_LOCAL_OUTPUT");
        hvsim__fd = (path && *path) ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
    }
    if (hvsim__fd >= 0) {
        ssize_t r;
        do { r = write(hvsim__fd, line, len); } while (r < 0 && errno == EINTR);
    }
}

/* A growable line buffer. */
struct hvsim__buf { char *p; size_t len, cap; };

static inline void hvsim__put(struct hvsim__buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 512) + n;
        char *p = (char *)realloc(b->p, cap);
        if (!p) return;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static inline void hvsim__puts(struct hvsim__buf *b, const char *s) { hvsim__put(b, s, strlen(s)); }

/* A JSON string literal for `s`. */
static inline void hvsim__str(struct hvsim__buf *b, const char *s) {
    hvsim__put(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; hvsim__put(b, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); hvsim__puts(b, esc); }
        else hvsim__put(b, (const char *)&c, 1);
    }
    hvsim__put(b, "\"", 1);
}

static inline void hvsim__send(struct hvsim__buf *b) {
    hvsim__put(b, "\n", 1);
    if (b->p) hvsim__emit(b->p, b->len);
    free(b->p);
}

static inline void hvsim__assert(const struct hvsim_site *s, int hit, int condition, const char *details) {
    int k = s->kind;
    int sometimes = k == HVSIM_KIND_SOMETIMES || k >= HVSIM_KIND_SOMETIMES_GT;
    int reach = k == HVSIM_KIND_REACHABLE || k == HVSIM_KIND_UNREACHABLE;
    int must_hit = k != HVSIM_KIND_ALWAYS_OR_UNREACHABLE && k != HVSIM_KIND_UNREACHABLE;
    char num[64];
    struct hvsim__buf b = {0};
    hvsim__puts(&b, "{\"antithesis_assert\":{\"id\":");
    hvsim__str(&b, s->message);
    hvsim__puts(&b, ",\"message\":");
    hvsim__str(&b, s->message);
    hvsim__puts(&b, condition ? ",\"condition\":true" : ",\"condition\":false");
    hvsim__puts(&b, hit ? ",\"hit\":true" : ",\"hit\":false");
    hvsim__puts(&b, must_hit ? ",\"must_hit\":true" : ",\"must_hit\":false");
    hvsim__puts(&b, reach ? ",\"assert_type\":\"reachability\"" : sometimes ? ",\"assert_type\":\"sometimes\"" : ",\"assert_type\":\"always\"");
    hvsim__puts(&b, ",\"display_type\":");
    hvsim__str(&b, hvsim__display[k]);
    hvsim__puts(&b, ",\"location\":{\"class\":\"\",\"function\":");
    hvsim__str(&b, s->function);
    hvsim__puts(&b, ",\"file\":");
    hvsim__str(&b, s->file);
    snprintf(num, sizeof num, ",\"begin_line\":%d,\"begin_column\":0},\"details\":", s->line);
    hvsim__puts(&b, num);
    hvsim__puts(&b, details && *details ? details : "null");
    hvsim__puts(&b, "}}");
    hvsim__send(&b);
}

/* Announces the SDK and registers every assertion site of the program. */
static inline void hvsim_init(void) {
    static const char sdk[] =
        "{\"antithesis_sdk\":{\"language\":{\"name\":\"C\",\"version\":\"\"},\"sdk_version\":\"0.1.0\",\"protocol_version\":\"1.0.0\"}}\n";
    hvsim__emit(sdk, sizeof sdk - 1);
    if (__start_hvsim_catalog && __stop_hvsim_catalog) {
        for (const struct hvsim_site *s = __start_hvsim_catalog; s < __stop_hvsim_catalog; s++)
            hvsim__assert(s, 0, 0, NULL);
    }
}

/* The system is ready: hvsim's explorer takes its root snapshot here. */
static inline void hvsim_setup_complete(const char *details) {
    struct hvsim__buf b = {0};
    hvsim__puts(&b, "{\"antithesis_setup\":{\"status\":\"complete\",\"details\":");
    hvsim__puts(&b, details && *details ? details : "null");
    hvsim__puts(&b, "}}");
    hvsim__send(&b);
}

/* Pauses every fault for `seconds` of virtual time (the network heals,
 * crashed nodes come back): what `$ANTITHESIS_STOP_FAULTS SECONDS` does. */
static inline void hvsim_stop_faults(unsigned seconds) {
    struct hvsim__buf b = {0};
    char n[24];
    snprintf(n, sizeof n, "%u", seconds);
    hvsim__puts(&b, "{\"hvsim_faults\":{\"pause\":");
    hvsim__puts(&b, n);
    hvsim__puts(&b, "}}");
    hvsim__send(&b);
}

/* A named event, counted in the report. */
static inline void hvsim_send_event(const char *name, const char *details) {
    struct hvsim__buf b = {0};
    hvsim__puts(&b, "{");
    hvsim__str(&b, name);
    hvsim__puts(&b, ":");
    hvsim__puts(&b, details && *details ? details : "null");
    hvsim__puts(&b, "}");
    hvsim__send(&b);
}

/* A random value from the run's seeded stream (under hvsim: /dev/hvsim),
 * else from the operating system. Under hvsim the draw is announced first
 * (`{"hvsim_draw":...}`, with how many outcomes the caller makes of it if
 * known): the explorer may snapshot there and choose the value later. */
/* Sends `msg` on /dev/hvsim and reads the 8-byte answer (a draw's value, a
 * buggify verdict); 0 outside hvsim. */
static inline int hvsim__ask(const char *msg, size_t len, uint64_t *v) {
    int fd = open("/dev/hvsim", O_RDWR | O_CLOEXEC);
    if (fd < 0) return 0;
    int ok = write(fd, msg, len) == (ssize_t)len && read(fd, v, sizeof *v) == (ssize_t)sizeof *v;
    close(fd);
    return ok;
}

static inline uint64_t hvsim__draw(size_t options) {
    uint64_t v = 0;
    char msg[64];
    int len = options ? snprintf(msg, sizeof msg, "{\"hvsim_draw\":{\"options\":%zu}}", options)
                      : snprintf(msg, sizeof msg, "{\"hvsim_draw\":{}}");
    if (hvsim__ask(msg, (size_t)len, &v)) return v;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)rand();
    return v;
}

static inline uint64_t hvsim_get_random(void) { return hvsim__draw(0); }

/* Buggify (FoundationDB's BUGGIFY, docs/faults.md#buggify): whether the
 * site `name` misbehaves now. In each timeline a site is enabled or not
 * (1 in 4), decided by hvsim the first time the timeline reaches it after
 * setup complete, the same for every process; an enabled site fires 1 time
 * in 4 it is reached. Never fires outside hvsim or before setup complete. */
static inline int hvsim_buggify(const char *name) {
    struct hvsim__buf b = {0};
    uint64_t v = 0;
    hvsim__puts(&b, "{\"hvsim_buggify\":{\"name\":");
    hvsim__str(&b, name);
    hvsim__puts(&b, "}}");
    int fires = b.p && hvsim__ask(b.p, b.len, &v) && v != 0;
    free(b.p);
    return fires;
}

/* An index in [0, n) chosen with hvsim_get_random (n > 0). */
static inline size_t hvsim_random_choice(size_t n) { return n ? (size_t)(hvsim__draw(n) % n) : 0; }

static inline void hvsim__numeric(const struct hvsim_site *s, double left, double right, const char *details) {
    int k = s->kind;
    int cond = (k == HVSIM_KIND_ALWAYS_GT || k == HVSIM_KIND_SOMETIMES_GT)   ? left > right
             : (k == HVSIM_KIND_ALWAYS_GE || k == HVSIM_KIND_SOMETIMES_GE) ? left >= right
             : (k == HVSIM_KIND_ALWAYS_LT || k == HVSIM_KIND_SOMETIMES_LT) ? left < right
                                                                            : left <= right;
    int maximize = k == HVSIM_KIND_ALWAYS_LT || k == HVSIM_KIND_ALWAYS_LE || k == HVSIM_KIND_SOMETIMES_GT ||
                   k == HVSIM_KIND_SOMETIMES_GE;
    char num[160];
    struct hvsim__buf b = {0};
    hvsim__puts(&b, "{\"antithesis_guidance\":{\"guidance_type\":\"numeric\",\"id\":");
    hvsim__str(&b, s->message);
    hvsim__puts(&b, ",\"message\":");
    hvsim__str(&b, s->message);
    snprintf(num, sizeof num, ",\"maximize\":%s,\"guidance_data\":{\"left\":%.17g,\"right\":%.17g},\"hit\":true}}",
             maximize ? "true" : "false", left, right);
    hvsim__puts(&b, num);
    hvsim__send(&b);
    hvsim__assert(s, 1, cond, details);
}

#define HVSIM_ALWAYS(cond, msg, details) hvsim__assert(HVSIM__SITE(HVSIM_KIND_ALWAYS, msg), 1, !!(cond), details)
#define HVSIM_ALWAYS_OR_UNREACHABLE(cond, msg, details) \
    hvsim__assert(HVSIM__SITE(HVSIM_KIND_ALWAYS_OR_UNREACHABLE, msg), 1, !!(cond), details)
#define HVSIM_SOMETIMES(cond, msg, details) hvsim__assert(HVSIM__SITE(HVSIM_KIND_SOMETIMES, msg), 1, !!(cond), details)
#define HVSIM_REACHABLE(msg, details) hvsim__assert(HVSIM__SITE(HVSIM_KIND_REACHABLE, msg), 1, 1, details)
#define HVSIM_UNREACHABLE(msg, details) hvsim__assert(HVSIM__SITE(HVSIM_KIND_UNREACHABLE, msg), 1, 1, details)
#define HVSIM_ALWAYS_GREATER_THAN(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_ALWAYS_GT, msg), (l), (r), details)
#define HVSIM_ALWAYS_GREATER_THAN_OR_EQUAL_TO(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_ALWAYS_GE, msg), (l), (r), details)
#define HVSIM_ALWAYS_LESS_THAN(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_ALWAYS_LT, msg), (l), (r), details)
#define HVSIM_ALWAYS_LESS_THAN_OR_EQUAL_TO(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_ALWAYS_LE, msg), (l), (r), details)
#define HVSIM_SOMETIMES_GREATER_THAN(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_SOMETIMES_GT, msg), (l), (r), details)
#define HVSIM_SOMETIMES_GREATER_THAN_OR_EQUAL_TO(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_SOMETIMES_GE, msg), (l), (r), details)
#define HVSIM_SOMETIMES_LESS_THAN(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_SOMETIMES_LT, msg), (l), (r), details)
#define HVSIM_SOMETIMES_LESS_THAN_OR_EQUAL_TO(l, r, msg, details) hvsim__numeric(HVSIM__SITE(HVSIM_KIND_SOMETIMES_LE, msg), (l), (r), details)

#endif /* HVSIM_SDK_H */
