/*
 * container.c - the container that traces (.rrt) and plans (.rlp) share:
 * bounds-checked reads, offset-naming errors, and the seek table in zstd's
 * seekable format that lists the header frame, the data frames and the
 * index frame (trace_format/SPEC.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sniff.h"
#include "trace_impl.h"
#include "util.h"

int rlb_rrt_open(const char *path, const char *kind, int *fd,
		 uint64_t *file_bytes, struct rlb_err *err)
{
	struct stat st;

	*file_bytes = 0;
	/* O_NONBLOCK: opening a FIFO would wait for a writer; it is refused */
	*fd = open(path, O_RDONLY | O_NONBLOCK);
	if (*fd < 0)
		return rlb_err_errno(err, RLB_EIO, "cannot open %s '%s'", kind, path);
	if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode))
		return rlb_err_set(err, RLB_EIO,
				   "cannot read %s '%s': not a regular file",
				   kind, path);
	*file_bytes = (uint64_t)st.st_size;
	return 0;
}

const char *rlb_rrt_probe(const char *path)
{
	enum rlb_kind k = rlb_sniff_path(path);

	return k == RLB_KIND_TRACE ? "trace" : k == RLB_KIND_PLAN ? "plan" : NULL;
}

int rlb_rrt_read_at(int fd, const char *path, uint64_t file_bytes, uint64_t off,
		    void *buf, size_t n, struct rlb_err *err)
{
	uint8_t *p = buf;

	if (off > file_bytes || n > file_bytes - off)
		return rlb_err_set(err, RLB_ETRUNC,
				   "offset %llu: %zu bytes needed, file ends at %llu",
				   (unsigned long long)off, n,
				   (unsigned long long)file_bytes);
	while (n) {
		ssize_t got = pread(fd, p, n, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return rlb_err_errno(err, RLB_EIO, "cannot read '%s'", path);
		if (got == 0)
			return rlb_err_set(err, RLB_ETRUNC,
					   "offset %llu: file ends early",
					   (unsigned long long)off);
		p += got;
		off += (uint64_t)got;
		n -= (size_t)got;
	}
	return 0;
}

int rlb_rrt_at_err(struct rlb_err *err, int code, const char *what, uint64_t off,
		   const char *fmt, ...)
{
	char msg[RLB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return rlb_err_set(err, code, "%s at offset %llu: %s", what,
			   (unsigned long long)off, msg);
}

int rlb_rrt_read_header_frame(int fd, const char *path, uint64_t file_bytes,
			      const char *kind, uint32_t max_bytes,
			      uint8_t **content, uint32_t *bytes, struct rlb_err *err)
{
	uint8_t b[8], *hc;
	uint32_t hsize;
	int ret;

	*content = NULL;
	if (file_bytes < 8)
		return rlb_rrt_at_err(err, RLB_ETRUNC, "header", 0,
				      "file is %llu bytes, too short for a %s",
				      (unsigned long long)file_bytes, kind);
	ret = rlb_rrt_read_at(fd, path, file_bytes, 0, b, 8, err);
	if (ret)
		return ret;
	if (rlb_get_u32(b) != RRT_HEADER_MAGIC) {
		/* a file of another kind is named as such, not by its magic */
		enum rlb_kind k = rlb_sniff_fd(fd);

		if (k != RLB_KIND_UNKNOWN)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 0,
					      "the file is %s, not a relibra %s%s", rlb_kind_name(k),
					      kind, rlb_kind_hint(k));
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 0,
				      "not a relibra %s (magic 0x%08x)", kind,
				      rlb_get_u32(b));
	}
	hsize = rlb_get_u32(b + 4);
	if (hsize > max_bytes)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "header", 4,
				      "size %u exceeds the limit %u", hsize, max_bytes);
	if (8 + (uint64_t)hsize > file_bytes)
		return rlb_rrt_at_err(err, RLB_ETRUNC, "header", 0,
				      "cut at end of file (%llu of %u bytes present)",
				      (unsigned long long)file_bytes, 8 + hsize);
	hc = malloc(hsize ? hsize : 1);
	if (!hc)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = rlb_rrt_read_at(fd, path, file_bytes, 8, hc, hsize, err);
	if (ret) {
		free(hc);
		return ret;
	}
	*content = hc;
	*bytes = hsize;
	return 0;
}

size_t rlb_rrt_seek_table_bytes(size_t n)
{
	return 8 + (n + 2) * RRT_SEEK_ENTRY + RRT_SEEK_FOOTER;
}

uint8_t *rlb_rrt_seek_table_begin(uint8_t *out, size_t n, uint32_t head_bytes)
{
	rlb_put_u32(out, RRT_SEEK_MAGIC);
	rlb_put_u32(out + 4, (uint32_t)(rlb_rrt_seek_table_bytes(n) - 8));
	return rlb_rrt_seek_entry_put(out + 8, head_bytes, 0);
}

uint8_t *rlb_rrt_seek_entry_put(uint8_t *p, uint32_t csize, uint32_t dsize)
{
	rlb_put_u32(p, csize);
	rlb_put_u32(p + 4, dsize);
	return p + RRT_SEEK_ENTRY;
}

void rlb_rrt_seek_table_end(uint8_t *p, size_t n, uint32_t index_bytes)
{
	p = rlb_rrt_seek_entry_put(p, index_bytes, 0);
	rlb_put_u32(p, (uint32_t)(n + 2));
	p[4] = 0;
	rlb_put_u32(p + 5, RRT_SEEKABLE_MAGIC);
}

int rlb_rrt_seek_table_read(int fd, const char *path, uint64_t file_bytes,
			    uint64_t data_start, uint64_t n,
			    const struct rrt_seek_limits *lim,
			    int (*frame)(void *ctx, uint64_t off, uint32_t csize,
				     uint32_t dsize, struct rlb_err *err),
			    void *ctx, uint64_t *index_off, uint64_t *index_bytes,
			    struct rlb_err *err)
{
	uint8_t fh[8], *ent = NULL;
	uint64_t tsize = 8 + n * RRT_SEEK_ENTRY + RRT_SEEK_FOOTER, toff, pos, i;
	int ret;

	if (n < 2 || n - 2 > lim->max_frames || tsize > file_bytes - data_start)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table",
				      file_bytes - RRT_SEEK_FOOTER,
				      "%llu frames do not fit in the file",
				      (unsigned long long)n);
	toff = file_bytes - tsize;
	ret = rlb_rrt_read_at(fd, path, file_bytes, toff, fh, 8, err);
	if (ret)
		return ret;
	if (rlb_get_u32(fh) != RRT_SEEK_MAGIC || rlb_get_u32(fh + 4) != tsize - 8)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table", toff,
				      "bad frame header");
	ent = malloc((size_t)(n * RRT_SEEK_ENTRY));
	if (!ent)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = rlb_rrt_read_at(fd, path, file_bytes, toff + 8, ent,
			      (size_t)(n * RRT_SEEK_ENTRY), err);
	if (ret)
		goto out;
	pos = 0;
	for (i = 0; i < n; i++) {
		uint64_t c = rlb_get_u32(ent + i * RRT_SEEK_ENTRY);
		uint32_t d = rlb_get_u32(ent + i * RRT_SEEK_ENTRY + 4);
		int ok;

		if (i == 0)
			ok = c == data_start && d == 0;
		else if (i == n - 1)
			ok = d == 0 && c >= lim->min_index_bytes;
		else
			ok = d >= lim->min_raw && d <= lim->max_raw && c >= 9;
		if (!ok || c > toff - pos) {
			ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table",
					     toff + 8 + i * RRT_SEEK_ENTRY,
					     "bad entry %llu (%llu bytes, %u raw)",
					     (unsigned long long)i,
					     (unsigned long long)c, d);
			goto out;
		}
		if (i > 0 && i < n - 1) {
			ret = frame(ctx, pos, (uint32_t)c, d, err);
			if (ret)
				goto out;
		}
		pos += c;
	}
	if (pos != toff) {
		ret = rlb_rrt_at_err(err, RLB_ECORRUPT, "seek table", toff,
				     "frames add up to %llu bytes, the table starts at %llu",
				     (unsigned long long)pos, (unsigned long long)toff);
		goto out;
	}
	*index_bytes = rlb_get_u32(ent + (n - 1) * RRT_SEEK_ENTRY);
	*index_off = toff - *index_bytes;
out:
	free(ent);
	return ret;
}
