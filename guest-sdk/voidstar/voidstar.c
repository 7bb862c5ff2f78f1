/*
 * libvoidstar for hvsim: the library the Antithesis SDKs (Rust, Go, C++,
 * Python, Java, .NET) load from /usr/lib/libvoidstar.so, and through which
 * they send everything when it is there. hvsim puts this one in every Linux
 * guest; it forwards to hvsim's channel, /dev/hvsim:
 *
 *  - fuzz_json_data: one write is one message, of any length;
 *  - fuzz_get_random: 8 bytes of the run's seeded stream, which hvsim
 *    re-keys for every branch of an exploration; each draw is announced
 *    first ({"hvsim_draw":{}}), so that the explorer can snapshot there
 *    and choose the value in later branches;
 *  - coverage (init_coverage_module, notify_coverage, and the
 *    SanitizerCoverage trace-pc-guard callbacks): each edge sets its bit in
 *    the guest's coverage map, which every process maps from /dev/hvsim and
 *    hvsim reads between exits: no system call per edge, and hvsim sees a
 *    new edge as soon as the machine next stops (docs/sdk-protocol.md);
 *  - the calls the Go SDK's first instrumentation declared (fuzz_getchar,
 *    fuzz_putchar, fuzz_coin_flip, fuzz_set_source_name, fuzz_exit, and
 *    the text messages): input from the same seeded stream, the rest sent
 *    as events.
 *
 * Exported functions never call each other by name: a program may export
 * its own definition of any of them (the C++ SDK exports
 * __sanitizer_cov_trace_pc_guard and forwards it here), and a call by
 * name from inside this library would reach the program's instead, which
 * forwards back here, without end. Each does its work in a static helper.
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

static size_t init_module(size_t edge_count, const char *symbol_file_name)
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

EXPORT size_t init_coverage_module(size_t edge_count, const char *symbol_file_name)
{
	return init_module(edge_count, symbol_file_name);
}

/* Marks an edge reached. */
static void notify(size_t edge_plus_module)
{
	uint8_t *m = map();
	unsigned bit = coverage_bit(edge_plus_module);

	if (m)
		__atomic_fetch_or(&m[bit / 8], (uint8_t)(1u << (bit % 8)), __ATOMIC_RELAXED);
}

/* False: the caller need not call again for this edge. */
EXPORT bool notify_coverage(size_t edge_plus_module)
{
	notify(edge_plus_module);
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
	guard_modules[m].base = init_module((size_t)(stop - start), "sanitizer-coverage");
	for (uint32_t i = 0; start + i < stop; i++)
		start[i] = i + 1;
}

static void trace_pc_guard(uint32_t *guard)
{
	uint32_t edge = *guard;
	int count;

	if (!edge)
		return;
	*guard = 0;
	count = __atomic_load_n(&guard_module_count, __ATOMIC_ACQUIRE);
	for (int m = 0; m < count && m < MAX_GUARD_MODULES; m++) {
		if (guard >= guard_modules[m].start && guard < guard_modules[m].stop) {
			notify(guard_modules[m].base + edge);
			return;
		}
	}
}

EXPORT void __sanitizer_cov_trace_pc_guard(uint32_t *guard)
{
	trace_pc_guard(guard);
}

/*
 * The C++ SDK's instrumentation exports __sanitizer_cov_trace_pc_guard
 * itself and forwards here, with the call site. The edge is still the
 * guard's number in its module: call sites move with every build and
 * every load address, guard numbers do not.
 */
EXPORT void __sanitizer_cov_trace_pc_guard_internal(uint32_t *guard, uint64_t call_site)
{
	(void)call_site;
	trace_pc_guard(guard);
}

/* --- messages and randomness --- */

EXPORT void fuzz_json_data(const char *message, size_t length)
{
	send(message, length);
}

/* A draw, announced so that the explorer can decide its value: the
 * announcement and the read that follows are one draw to hvsim (the next
 * read of at most 8 bytes after it). `options`: how many outcomes the
 * caller makes of the value (0: unknown). */
static uint64_t draw(unsigned options)
{
	static const char unknown[] = "{\"hvsim_draw\":{}}";
	uint64_t r = 0;
	int fd = device();

	if (fd >= 0) {
		if (options) {
			char buf[64];
			struct out o = { buf, 0, sizeof(buf) };

			puts_(&o, "{\"hvsim_draw\":{\"options\":");
			put_u64(&o, options);
			puts_(&o, "}}");
			send(buf, o.len);
		} else {
			send(unknown, sizeof(unknown) - 1);
		}
		if (sys3(SYS_read, fd, (long)&r, sizeof(r)) == sizeof(r))
			return r;
	}
	/* Outside hvsim: the operating system's randomness. */
	sys3(SYS_getrandom, (long)&r, sizeof(r), 0);
	return r;
}

EXPORT uint64_t fuzz_get_random(void)
{
	return draw(0);
}

/* A byte of input: from the same stream, so it branches like the rest. */
EXPORT int fuzz_getchar(void)
{
	return (int)(draw(256) & 0xff);
}

EXPORT bool fuzz_coin_flip(void)
{
	return (draw(2) & 1) == 0;
}

/* Messages named after the call, with a JSON string or number. */
static void named_event(const char *name, const char *text, size_t text_len, const int64_t *number)
{
	char buf[4096];
	struct out o = { buf, 0, sizeof(buf) - 2 };
	char s[4096 - 64];
	size_t n = text_len < sizeof(s) - 1 ? text_len : sizeof(s) - 1;

	puts_(&o, "{\"");
	puts_(&o, name);
	puts_(&o, "\":");
	if (number) {
		if (*number < 0)
			put(&o, "-", 1);
		put_u64(&o, *number < 0 ? -(uint64_t)*number : (uint64_t)*number);
	} else {
		for (size_t i = 0; i < n; i++)
			s[i] = text[i] ? text[i] : ' ';
		s[n] = 0;
		put_json_string(&o, s);
	}
	o.cap += 2;
	puts_(&o, "}");
	send(buf, o.len);
}

static size_t length(const char *s)
{
	size_t n = 0;

	while (s && s[n])
		n++;
	return n;
}

/* Older SDKs' text messages: sent as events, named after the call. */
EXPORT void fuzz_info_message(const char *message)
{
	named_event("fuzz_info_message", message, length(message), 0);
}

EXPORT void fuzz_error_message(const char *message)
{
	named_event("fuzz_error_message", message, length(message), 0);
}

EXPORT void fuzz_set_source_name(const char *name)
{
	named_event("fuzz_set_source_name", name, length(name), 0);
}

/*
 * fuzz_putchar's text, sent as one "fuzz_putchar" event at each newline,
 * when the buffer is full, and at fuzz_flush or fuzz_exit. One buffer per
 * process, taken with a spin lock (threads that print at once interleave
 * by character, as they would on a terminal).
 */
static char putchar_buf[1024];
static size_t putchar_len;
static int putchar_lock;

static void putchar_flush_locked(void)
{
	if (putchar_len)
		named_event("fuzz_putchar", putchar_buf, putchar_len, 0);
	putchar_len = 0;
}

static void putchar_take(void)
{
	while (__atomic_exchange_n(&putchar_lock, 1, __ATOMIC_ACQUIRE))
		;
}

static void putchar_give(void)
{
	__atomic_store_n(&putchar_lock, 0, __ATOMIC_RELEASE);
}

EXPORT int fuzz_putchar(char c)
{
	putchar_take();
	putchar_buf[putchar_len++] = c;
	if (c == '\n' || putchar_len == sizeof(putchar_buf))
		putchar_flush_locked();
	putchar_give();
	return (unsigned char)c;
}

/* Messages are sent when given; only fuzz_putchar's text waits. */
EXPORT void fuzz_flush(void)
{
	putchar_take();
	putchar_flush_locked();
	putchar_give();
}

/*
 * The Go instrumentation's FuzzExit(status): the status is reported (an
 * event) and the text flushed; the program's own exit follows, so this
 * returns.
 */
EXPORT void fuzz_exit(int status)
{
	int64_t s = status;

	putchar_take();
	putchar_flush_locked();
	putchar_give();
	named_event("fuzz_exit", 0, 0, &s);
}
