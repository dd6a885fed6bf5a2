/*
 * util.c - atomic output files, checked number parsing, a stable index
 * sort, clocks, the memory left.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <jansson.h>

#include "clocale.h"
#include "hostmem.h"
#include "util.h"

/*
 * The open temporary files, for rlb_atomic_remove_all: a slot is taken by
 * compare-and-swap, so threads may open and release files at once, and
 * the lock-free loads suit a signal handler.
 */
static _Atomic(char *) listed[RLB_ATOMIC_LISTED];

static void list_tmp(struct rlb_atomic_file *af)
{
	int i;

	af->slot = -1;
	for (i = 0; i < RLB_ATOMIC_LISTED; i++) {
		char *none = NULL;

		if (atomic_compare_exchange_strong(&listed[i], &none, af->tmp_path)) {
			af->slot = i;
			return;
		}
	}
}

static void unlist_tmp(struct rlb_atomic_file *af)
{
	if (af->slot >= 0 && af->slot < RLB_ATOMIC_LISTED)
		atomic_store(&listed[af->slot], NULL);
	af->slot = -1;
}

void rlb_atomic_remove_all(void)
{
	int i;

	for (i = 0; i < RLB_ATOMIC_LISTED; i++) {
		char *p = atomic_load(&listed[i]);

		if (p)
			unlink(p);
	}
}

uint64_t rlb_fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int std_stream(FILE *fp)
{
	return fp == stdout || fp == stderr;
}

/*
 * Where PATH is written in place, as *fp: stdout or stderr when it is the
 * file, device or pipe they go to (/dev/stdout, or the file they are
 * redirected to), else a device or a FIFO (/dev/null, >(cmd)), which a
 * rename would replace.  0 when PATH is to be written as PATH.tmp and
 * renamed, -1 when it cannot be opened.
 */
static int in_place(const char *path, FILE **fp)
{
	struct stat st, fd;

	*fp = NULL;
	if (stat(path, &st) != 0 || S_ISDIR(st.st_mode))
		return 0;
	if (fstat(STDOUT_FILENO, &fd) == 0 && fd.st_dev == st.st_dev &&
	    fd.st_ino == st.st_ino)
		*fp = stdout;
	else if (fstat(STDERR_FILENO, &fd) == 0 && fd.st_dev == st.st_dev &&
		 fd.st_ino == st.st_ino)
		*fp = stderr;
	else if (!S_ISREG(st.st_mode))
		*fp = fopen(path, "wb");
	else
		return 0;
	return *fp ? 1 : -1;
}

/* Whether another run holds TMP's lock (see create_tmp). */
static int held(const char *tmp)
{
	/* for writing: NFS emulates flock with a write lock */
	int fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int busy;

	if (fd < 0)
		return 0;
	busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);
	return busy;
}

/* Whether the open FD is the file at PATH. */
static int is_at(int fd, const char *path)
{
	struct stat fs, ps;

	return fstat(fd, &fs) == 0 && stat(path, &ps) == 0 &&
	       fs.st_dev == ps.st_dev && fs.st_ino == ps.st_ino;
}

/*
 * Create TMP and lock it: its descriptor, or -1 with errno set, EBUSY when
 * another run holds TMP.  A TMP that nobody holds is a killed run's
 * leftover (or a link, a FIFO) and is removed first, never written
 * through.  Two runs starting at once may each take the other's new file
 * for a leftover; the one that finds its file gone or locked tries again.
 * Where the file system has no locks, TMP is replaced as a leftover.
 */
static int create_tmp(const char *tmp)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);

		if (fd >= 0) {
			if ((flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) &&
			    is_at(fd, tmp))
				return fd;
			close(fd);
			continue;
		}
		if (errno != EEXIST)
			return -1;
		if (held(tmp))
			break;
		if (unlink(tmp) != 0 && errno != ENOENT)
			return -1;
	}
	errno = EBUSY;
	return -1;
}

int rlb_atomic_open(struct rlb_atomic_file *af, const char *path,
		    struct rlb_err *err)
{
	size_t n = strlen(path);
	int fd;

	memset(af, 0, sizeof(*af));
	af->slot = -1;
	af->lock = -1;
	if (n == 0)	/* not ".tmp" renamed to nothing at the end */
		return rlb_err_set(err, RLB_EINVAL, "an empty output path");
	af->path = strdup(path);
	if (!af->path)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (strcmp(path, "-") == 0) {
		af->fp = stdout;
		return 0;
	}
	switch (in_place(path, &af->fp)) {
	case 1:
		return 0;
	case -1:
		rlb_err_errno(err, RLB_EIO, "cannot open '%s'", path);
		rlb_atomic_abort(af);
		return RLB_EIO;
	}
	af->tmp_path = malloc(n + 5);
	if (!af->tmp_path) {
		rlb_atomic_abort(af);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	memcpy(af->tmp_path, path, n);
	memcpy(af->tmp_path + n, ".tmp", 5);
	/* the lock stays with af->lock when the stream's copy is closed */
	af->lock = create_tmp(af->tmp_path);
	if (af->lock >= 0) {
		list_tmp(af);
		fd = fcntl(af->lock, F_DUPFD_CLOEXEC, 0);
		if (fd >= 0 && !(af->fp = fdopen(fd, "wb")))
			close(fd);
		if (!af->fp) {
			int e = errno;

			unlink(af->tmp_path);
			errno = e;
		}
	}
	if (!af->fp) {
		if (errno == EBUSY)
			rlb_err_set(err, RLB_EIO, "another run is writing '%s' (its '%s' is locked)",
				    path, af->tmp_path);
		else
			rlb_err_errno(err, RLB_EIO, "cannot create '%s'", af->tmp_path);
		rlb_atomic_abort(af);
		return RLB_EIO;
	}
	return 0;
}

const char *rlb_atomic_name(const struct rlb_atomic_file *af)
{
	if (af->tmp_path)
		return af->tmp_path;
	return af->path && strcmp(af->path, "-") ? af->path : "stdout";
}

/* fflush fp: 0, or -1 with errno set when it or an earlier write failed. */
static int flush(FILE *fp)
{
	if (fflush(fp) != 0)
		return -1;
	if (ferror(fp)) {
		errno = EIO;	/* the failed write's errno is gone */
		return -1;
	}
	return 0;
}

int rlb_atomic_sync(struct rlb_atomic_file *af, struct rlb_err *err)
{
	int ret = 0;

	if (af->synced)
		return 0;
	if (!af->fp)
		return rlb_err_set(err, RLB_EINVAL, "output file is not open");
	if (!af->tmp_path) {
		if (flush(af->fp) != 0)
			ret = af->fp == stdout ?
			      rlb_err_errno(err, RLB_EIO, "cannot write to stdout") :
			      rlb_err_errno(err, RLB_EIO, "cannot write '%s'",
					    rlb_atomic_name(af));
		if (!std_stream(af->fp) && fclose(af->fp) != 0 && ret == 0)
			ret = rlb_err_errno(err, RLB_EIO, "cannot write '%s'",
					    rlb_atomic_name(af));
	} else {
		if (flush(af->fp) != 0 || fsync(fileno(af->fp)) != 0)
			ret = rlb_err_errno(err, RLB_EIO, "cannot write '%s'", af->tmp_path);
		if (fclose(af->fp) != 0 && ret == 0)
			ret = rlb_err_errno(err, RLB_EIO, "cannot write '%s'", af->tmp_path);
	}
	af->fp = NULL;
	af->synced = 1;
	if (ret != 0)
		rlb_atomic_abort(af);
	return ret;
}

int rlb_atomic_sync_after(struct rlb_atomic_file *af, int ret,
			  struct rlb_err *err)
{
	if (ret != 0 && ret != RLB_EIO)
		return ret;
	return rlb_atomic_sync(af, err);
}

int rlb_atomic_commit(struct rlb_atomic_file *af, struct rlb_err *err)
{
	int ret = rlb_atomic_sync(af, err);

	if (ret != 0)
		return ret;
	if (af->tmp_path && rename(af->tmp_path, af->path) != 0) {
		ret = rlb_err_errno(err, RLB_EIO, "cannot rename '%s' to '%s'",
				    af->tmp_path, af->path);
		unlink(af->tmp_path);
	}
	af->synced = 0;		/* renamed or removed: nothing to remove */
	rlb_atomic_abort(af);
	return ret;
}

void rlb_atomic_abort(struct rlb_atomic_file *af)
{
	if (!af)
		return;
	if (af->fp && !std_stream(af->fp))
		fclose(af->fp);
	if (af->tmp_path && (af->fp || af->synced))
		unlink(af->tmp_path);
	if (af->tmp_path) {
		unlist_tmp(af);
		if (af->lock >= 0)
			close(af->lock);	/* after the unlink or rename */
	}
	free(af->path);
	free(af->tmp_path);
	memset(af, 0, sizeof(*af));
}

/*
 * The base of a number as the command line writes it: hexadecimal after
 * 0x, else decimal (010 is ten, not octal eight); 0 when it starts with
 * a space, which strtoull would skip.
 */
static int num_base(const char *s)
{
	if (isspace((unsigned char)*s))
		return 0;
	if (*s == '-' || *s == '+')
		s++;
	return s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 16 : 10;
}

int rlb_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		  const char *what, struct rlb_err *err)
{
	int base = num_base(s);
	char *end = (char *)s;
	long long v = 0;

	errno = 0;
	if (base)
		v = strtoll(s, &end, base);
	if (end == s || *end != '\0')
		return rlb_err_set(err, RLB_EPARSE,
				   "%s: expected an integer, got '%s'", what, s);
	if (errno == ERANGE || v < min || v > max)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: %s is out of range [%" PRId64 ", %" PRId64 "]",
				   what, s, min, max);
	*out = v;
	return 0;
}

int rlb_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out,
		  const char *what, struct rlb_err *err)
{
	int base = num_base(s);
	char *end = (char *)s;
	unsigned long long v = 0;

	/* not "--plan"; and "-0", though 0, is no way to write a count */
	if (*s == '-' && isdigit((unsigned char)s[1]))
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: expected an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'",
				   what, min, max, s);
	errno = 0;
	if (base)
		v = strtoull(s, &end, base);
	if (end == s || *end != '\0')
		return rlb_err_set(err, RLB_EPARSE,
				   "%s: expected a non-negative integer, got '%s'",
				   what, s);
	if (errno == ERANGE || v < min || v > max)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: %s is out of range [%" PRIu64 ", %" PRIu64 "]",
				   what, s, min, max);
	*out = v;
	return 0;
}

static int parse_double_c(const char *s, double min, double max, double *out,
			  const char *what, struct rlb_err *err)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || isnan(v))
		return rlb_err_set(err, RLB_EPARSE,
				   "%s: expected a number, got '%s'", what, s);
	if (errno == ERANGE || v < min || v > max)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: %s is out of range [%g, %g]", what, s,
				   min, max);
	*out = v;
	return 0;
}

/* parse_double_c in the C locale (clocale.h) */
int rlb_parse_double(const char *s, double min, double max, double *out,
		     const char *what, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = parse_double_c(s, min, max, out, what, err);

	rlb_clocale_end(before);
	return ret;
}

int rlb_grow(void *pp, size_t *cap, size_t need, size_t size)
{
	void **p = pp;
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	if (n > SIZE_MAX / size)
		return -1;
	q = realloc(*p, n * size);
	if (!q)
		return -1;
	*p = q;
	*cap = n;
	return 0;
}

void rlb_sort_stable(uint32_t *idx, uint32_t *tmp, size_t n,
		     rlb_before_fn before, const void *ctx)
{
	uint32_t *src = idx, *dst = tmp, *t;
	size_t width, i;

	for (width = 1; width < n; width *= 2) {
		for (i = 0; i < n; i += 2 * width) {
			size_t mid = n - i > width ? i + width : n;
			size_t hi = n - mid > width ? mid + width : n;
			size_t a = i, b = mid, k = i;

			/* the right run goes first only when strictly before */
			while (a < mid && b < hi)
				dst[k++] = before(ctx, src[b], src[a]) ? src[b++] : src[a++];
			while (a < mid)
				dst[k++] = src[a++];
			while (b < hi)
				dst[k++] = src[b++];
		}
		t = src;
		src = dst;
		dst = t;
	}
	if (src != idx)
		memcpy(idx, src, n * sizeof(*idx));
}

size_t rlb_utf8_len(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned c = p[0], n, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 1, cp = c & 0x1F;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 2, cp = c & 0x0F;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 3, cp = c & 0x07;
	else
		return 0;
	for (i = 1; i <= n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3F);
	}
	if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
	    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n + 1;
}

int rlb_utf8_ok(const char *s)
{
	size_t n;

	for (; *s; s += n)
		if ((n = rlb_utf8_len(s)) == 0)
			return 0;
	return 1;
}

json_t *rlb_json_real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

void rlb_json_error_where(const struct json_error_t *je, int *line, int *column,
			  int *byte)
{
	enum json_error_code code = json_error_code(je);
	/* jansson counts the byte before a bad one, and the last at the end */
	int next = code == json_error_invalid_utf8 ||
		   code == json_error_premature_end_of_input;

	*line = je->line;
	*column = je->column + next;
	*byte = je->position + next;
}

json_t *rlb_json_text(const char *s)
{
	size_t n, len = strlen(s), k = 0;
	char *t;
	json_t *j;

	if (rlb_utf8_ok(s))
		return json_string(s);
	/* each bad byte becomes U+FFFD (3 bytes) */
	t = malloc(3 * len + 1);
	if (!t)
		return NULL;
	for (; *s; s += n) {
		n = rlb_utf8_len(s);
		if (n) {
			memcpy(t + k, s, n);
			k += n;
		} else {
			memcpy(t + k, "\xef\xbf\xbd", 3);
			k += 3;
			n = 1;
		}
	}
	t[k] = '\0';
	j = json_string(t);
	free(t);
	return j;
}

uint64_t rlb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t rlb_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the C locale (clocale.h) ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void)
{
	c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

locale_t rlb_clocale_begin(void)
{
	pthread_once(&c_locale_once, c_locale_make);
	return c_locale ? uselocale(c_locale) : (locale_t)0;
}

void rlb_clocale_end(locale_t before)
{
	if (before)
		uselocale(before);
}

/* hostmem.h */
double rlb_host_mem_available(const char **what)
{
	FILE *fp = fopen("/proc/meminfo", "r");
	char line[256];
	double kb = -1;
	long pages, psize;

	if (fp) {
		while (kb < 0 && fgets(line, sizeof(line), fp))
			if (sscanf(line, "MemAvailable: %lf kB", &kb) != 1)
				kb = -1;
		fclose(fp);
	}
	if (kb > 0) {
		*what = "available";
		return kb * 1024;
	}
	pages = sysconf(_SC_PHYS_PAGES);
	psize = sysconf(_SC_PAGESIZE);
	*what = "in all";
	return pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
}
