/* libvoidstar's whole ABI, as the official Antithesis SDKs reach it: a
 * dynamically linked program that dlopens /usr/lib/libvoidstar.so, looks
 * up every symbol an SDK declares against it (docs/sdk-protocol.md) and
 * calls each. Built with -rdynamic, it exports its own
 * __sanitizer_cov_trace_pc_guard, which forwards to libvoidstar's
 * __sanitizer_cov_trace_pc_guard_internal with its call site, as the C++
 * SDK's antithesis_instrumentation.h does: a libvoidstar that called
 * __sanitizer_cov_trace_pc_guard by name would reach this one again and
 * recurse until the stack overflowed.
 *
 * Prints one line per result; exits 0 once every call returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        printf("voidstar-abi: missing %s\n", name);
        exit(1);
    }
    return f;
}

static void (*trace_pc_guard_internal)(uint32_t *, uint64_t);
static int forwarded;

/* The C++ SDK's callback: this program's, exported. */
void __sanitizer_cov_trace_pc_guard(uint32_t *guard) {
    if (++forwarded > 100) {
        printf("voidstar-abi: libvoidstar called back into the program\n");
        exit(1);
    }
    trace_pc_guard_internal(guard, (uint64_t)(uintptr_t)__builtin_return_address(0));
}

static void assertion(void (*json)(const char *, size_t), const char *id, bool ok) {
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "{\"antithesis_assert\":{\"assert_type\":\"always\",\"condition\":%s,\"details\":null,"
                     "\"display_type\":\"Always\",\"hit\":true,\"id\":\"%s\",\"location\":{},"
                     "\"message\":\"%s\",\"must_hit\":true}}",
                     ok ? "true" : "false", id, id);
    json(buf, (size_t)n);
}

int main(void) {
    lib = dlopen("/usr/lib/libvoidstar.so", RTLD_NOW);
    if (!lib) {
        printf("voidstar-abi: %s\n", dlerror());
        return 1;
    }
    /* Every SDK. */
    void (*json)(const char *, size_t) = sym("fuzz_json_data");
    void (*flush)(void) = sym("fuzz_flush");
    uint64_t (*get_random)(void) = sym("fuzz_get_random");
    /* Go, Java, TypeScript. */
    size_t (*init_module)(size_t, const char *) = sym("init_coverage_module");
    bool (*notify)(size_t) = sym("notify_coverage");
    /* C++ and clang's SanitizerCoverage. */
    void (*guard_init)(uint32_t *, uint32_t *) = sym("__sanitizer_cov_trace_pc_guard_init");
    void (*guard)(uint32_t *) = sym("__sanitizer_cov_trace_pc_guard");
    trace_pc_guard_internal = sym("__sanitizer_cov_trace_pc_guard_internal");
    /* The Go SDK's instrumentation of 2024. */
    int (*getchar_)(void) = sym("fuzz_getchar");
    int (*putchar_)(char) = sym("fuzz_putchar");
    bool (*coin_flip)(void) = sym("fuzz_coin_flip");
    void (*source_name)(const char *) = sym("fuzz_set_source_name");
    void (*info)(const char *) = sym("fuzz_info_message");
    void (*error)(const char *) = sym("fuzz_error_message");
    void (*fuzz_exit)(int) = sym("fuzz_exit");

    const char *setup = "{\"antithesis_setup\":{\"status\":\"complete\",\"details\":null}}";
    json(setup, strlen(setup));
    flush();
    uint64_t a = get_random(), b = get_random();
    printf("voidstar-abi: random %llu %llu\n", (unsigned long long)a, (unsigned long long)b);
    int c = getchar_();
    printf("voidstar-abi: getchar %d coin %d\n", c, coin_flip() ? 1 : 0);
    assertion(json, "getchar gives a byte", c >= 0 && c <= 255);

    size_t base = init_module(8, "voidstar-abi.sym.tsv");
    printf("voidstar-abi: notify_coverage asks again: %d\n", notify(base + 1) ? 1 : 0);

    /* Four guards; the library's callback and the program's (which
     * forwards to the internal one) each report two. */
    uint32_t guards[4] = {0};
    guard_init(guards, guards + 4);
    int numbered = guards[0] == 1 && guards[1] == 2 && guards[2] == 3 && guards[3] == 4;
    guard(&guards[0]);
    guard(&guards[1]);
    __sanitizer_cov_trace_pc_guard(&guards[2]);
    __sanitizer_cov_trace_pc_guard(&guards[3]);
    __sanitizer_cov_trace_pc_guard(&guards[3]);
    int zeroed = !guards[0] && !guards[1] && !guards[2] && !guards[3];
    printf("voidstar-abi: guards numbered %d, reported and zeroed %d, forwarded %d\n", numbered, zeroed,
           forwarded);
    assertion(json, "trace-pc-guard callbacks do not recurse", numbered && zeroed && forwarded == 3);

    source_name("voidstar-abi");
    info("an info message");
    error("an error message");
    const char *text = "putchar line\n";
    for (size_t i = 0; i < strlen(text); i++) putchar_(text[i]);
    putchar_('!');
    flush();
    fuzz_exit(3);
    printf("voidstar-abi: done\n");
    return 0;
}
