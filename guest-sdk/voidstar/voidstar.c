/*
 * libvoidstar for hvsim: the library the Antithesis SDKs (Rust, Go, C++,
 * Python, Java, .NET) load from /usr/lib/libvoidstar.so, and through which
 * they send everything when it is there. hvsim puts this one in every Linux
 * guest; it forwards to hvsim's channel, /dev/hvsim:
 *
 *  - fuzz_json_data: one write is one message, of any length;
 *  - fuzz_get_random: 8 bytes of the run's seeded stream, which hvsim
 *    re-keys for every branch of an exploration;
 *  - coverage (init_coverage_module, notify_coverage, and the
 *    SanitizerCoverage trace-pc-guard callbacks): each edge sets its bit in
 *    the guest's coverage map, which every process maps from /dev/hvsim and
 *    hvsim reads between exits: no system call per edge, and hvsim sees a
 *    new edge as soon as the machine next stops (docs/sdk-protocol.md).
 *
 * It depends on nothing, not even a C library (it makes its own system
 * calls), so it loads into any program: glibc or musl, dynamic or static.
 * Build: gcc -shared -fPIC -nostdlib -ffreestanding -O2 voidstar.c
 *        -o libvoidstar.so; or compile it into a static program (for
 *        coverage callbacks that must resolve at link time).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* --- system calls (x86-64 Linux) --- */

#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_mmap 9
#define SYS_getrandom 318
#define O_RDWR 02
#define O_CLOEXEC 02000000
#define EINTR 4
#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_SHARED 1

static long sys3(long n, long a, long b, long c)
{
	long r;

	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

/* /dev/hvsim, opened once by whichever thread needs it first. */
static int hvsim_fd = -1;

static int device(void)
{
	int fd = __atomic_load_n(&hvsim_fd, __ATOMIC_ACQUIRE);
	int want = -1;

	if (fd >= 0)
		return fd;
	fd = (int)sys3(SYS_open, (long)"/dev/hvsim", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (!__atomic_compare_exchange_n(&hvsim_fd, &want, fd, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		sys3(SYS_close, fd, 0, 0);
		return want;
	}
	return fd;
}

/* One message; outside hvsim (no /dev/hvsim) it goes nowhere. */
static void send(const char *buf, size_t len)
{
	int fd = device();
	long r;

	if (fd < 0)
		return;
	do
		r = sys3(SYS_write, fd, (long)buf, (long)len);
	while (r == -EINTR);
}

/* --- a little formatting, into fixed buffers --- */

struct out {
	char *buf;
	size_t len, cap;
};

static void put(struct out *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n && o->len < o->cap; i++)
		o->buf[o->len++] = s[i];
}

static void puts_(struct out *o, const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	put(o, s, n);
}

static void put_u64(struct out *o, uint64_t v)
{
	char digits[20];
	int n = 0;

	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		put(o, &digits[--n], 1);
}

/* A JSON string (quotes included), cut to what fits. */
static void put_json_string(struct out *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	put(o, "\"", 1);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };
			put(o, e, 2);
		} else if (c < 0x20) {
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
			put(o, e, 6);
		} else {
			put(o, (const char *)&c, 1);
		}
	}
	put(o, "\"", 1);
}

/* --- coverage --- */

/* hvsim_abi::hc::COVERAGE_BYTES and coverage_bit(). */
#define COVERAGE_BYTES (64 * 1024)

static unsigned coverage_bit(uint64_t edge)
{
	return (unsigned)((edge * 0x9E3779B97F4A7C15ull) >> (64 - 19));
}

/* The coverage map, mapped once; NO_MAP where there is none. */
#define NO_MAP ((uint8_t *)1)
static uint8_t *coverage_map;

static uint8_t *map(void)
{
	uint8_t *m = __atomic_load_n(&coverage_map, __ATOMIC_ACQUIRE);
	uint8_t *want = 0;
	long r;
	int fd;

	if (m)
		return m == NO_MAP ? 0 : m;
	fd = device();
	r = fd < 0 ? -1 : sys6(SYS_mmap, 0, COVERAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	m = r < 0 && r > -4096 ? NO_MAP : (uint8_t *)r;
	if (!__atomic_compare_exchange_n(&coverage_map, &want, m, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		m = want; /* another thread mapped it first; ours stays, unused */
	return m == NO_MAP ? 0 : m;
}

/*
 * A module's base (its edges are base + 1, base + 2, ...) comes from its
 * name and size: the same binary, in any process of any node, reports the
 * same edges, and different binaries rarely share a base.
 */
static uint64_t module_base(const char *name, size_t edge_count)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; name && *name; name++)
		h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
	h = (h ^ edge_count) * 0x100000001b3ull;
	return ((h >> 32) | 1) << 32;
}

EXPORT size_t init_coverage_module(size_t edge_count, const char *symbol_file_name)
{
	uint64_t base = module_base(symbol_file_name, edge_count);
	char buf[512];
	struct out o = { buf, 0, sizeof(buf) - 3 };

	puts_(&o, "{\"hvsim_coverage_module\":{\"name\":");
	put_json_string(&o, symbol_file_name);
	puts_(&o, ",\"edges\":");
	put_u64(&o, edge_count);
	puts_(&o, ",\"base\":");
	put_u64(&o, base);
	o.cap += 3;
	puts_(&o, "}}");
	send(buf, o.len);
	return (size_t)base;
}

/* Marks an edge reached; false: the caller need not call again for it. */
EXPORT bool notify_coverage(size_t edge_plus_module)
{
	uint8_t *m = map();
	unsigned bit = coverage_bit(edge_plus_module);

	if (m)
		__atomic_fetch_or(&m[bit / 8], (uint8_t)(1u << (bit % 8)), __ATOMIC_RELAXED);
	return false;
}

/* SanitizerCoverage (trace-pc-guard): each module's guards are numbered
 * 1..n at start-up; a guard is reported the first time it is reached, then
 * zeroed so it costs nothing more. */
#define MAX_GUARD_MODULES 64
static struct {
	uint32_t *start, *stop;
	uint64_t base;
} guard_modules[MAX_GUARD_MODULES];
static int guard_module_count;

EXPORT void __sanitizer_cov_trace_pc_guard_init(uint32_t *start, uint32_t *stop)
{
	int m;

	if (start == stop || *start)
		return;
	m = __atomic_fetch_add(&guard_module_count, 1, __ATOMIC_ACQ_REL);
	if (m >= MAX_GUARD_MODULES)
		return;
	guard_modules[m].start = start;
	guard_modules[m].stop = stop;
	guard_modules[m].base = init_coverage_module((size_t)(stop - start), "sanitizer-coverage");
	for (uint32_t i = 0; start + i < stop; i++)
		start[i] = i + 1;
}

EXPORT void __sanitizer_cov_trace_pc_guard(uint32_t *guard)
{
	uint32_t edge = *guard;
	int count;

	if (!edge)
		return;
	*guard = 0;
	count = __atomic_load_n(&guard_module_count, __ATOMIC_ACQUIRE);
	for (int m = 0; m < count && m < MAX_GUARD_MODULES; m++) {
		if (guard >= guard_modules[m].start && guard < guard_modules[m].stop) {
			notify_coverage(guard_modules[m].base + edge);
			return;
		}
	}
}

/* The C++ SDK's instrumentation forwards here (with the call site). */
EXPORT void __sanitizer_cov_trace_pc_guard_internal(uint32_t *guard, uint64_t edge)
{
	(void)edge;
	__sanitizer_cov_trace_pc_guard(guard);
}

/* --- messages and randomness --- */

EXPORT void fuzz_json_data(const char *message, size_t length)
{
	send(message, length);
}

/* Every message is sent when it is given. */
EXPORT void fuzz_flush(void)
{
}

EXPORT uint64_t fuzz_get_random(void)
{
	uint64_t r = 0;
	int fd = device();

	if (fd >= 0 && sys3(SYS_read, fd, (long)&r, sizeof(r)) == sizeof(r))
		return r;
	/* Outside hvsim: the operating system's randomness. */
	sys3(SYS_getrandom, (long)&r, sizeof(r), 0);
	return r;
}

/* Older SDKs' text messages: sent as events, named after the call. */
static void text_event(const char *name, const char *message)
{
	char buf[4096];
	struct out o = { buf, 0, sizeof(buf) - 2 };

	puts_(&o, "{\"");
	puts_(&o, name);
	puts_(&o, "\":");
	put_json_string(&o, message);
	o.cap += 2;
	puts_(&o, "}");
	send(buf, o.len);
}

EXPORT void fuzz_info_message(const char *message)
{
	text_event("fuzz_info_message", message);
}

EXPORT void fuzz_error_message(const char *message)
{
	text_event("fuzz_error_message", message);
}
