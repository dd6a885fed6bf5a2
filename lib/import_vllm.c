/*
 * import_vllm.c - vLLM routed experts saved with numpy: .npy files (one
 * sequence each, [T-1, layers, topk], little-endian integers, C order),
 * or a directory of them.  The .npy header is parsed by hand; step,
 * group and sample may come from the file names (docs/jsonl-format.md).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_internal.h"
#include "sniff.h"
#include "util.h"

static const uint8_t npy_magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };

struct npy_parser {
	const uint8_t *p;
	size_t pos, end;	/* positions are file offsets */
};

static void skip_ws(struct npy_parser *ps)
{
	while (ps->pos < ps->end && (ps->p[ps->pos] == ' ' || ps->p[ps->pos] == '\t' ||
				     ps->p[ps->pos] == '\n' || ps->p[ps->pos] == '\r'))
		ps->pos++;
}

static int expect_char(struct npy_parser *ps, char c, struct rlb_err *err)
{
	skip_ws(ps);
	if (ps->pos >= ps->end || ps->p[ps->pos] != (uint8_t)c)
		return rlb_err_set(err, RLB_EPARSE,
				   "header: expected '%c' at byte %zu", c, ps->pos);
	ps->pos++;
	return 0;
}

static int parse_str(struct npy_parser *ps, char *out, size_t cap,
		     struct rlb_err *err)
{
	size_t start, n;
	uint8_t q;

	skip_ws(ps);
	start = ps->pos;
	if (ps->pos >= ps->end || (ps->p[ps->pos] != '\'' && ps->p[ps->pos] != '"'))
		return rlb_err_set(err, RLB_EPARSE,
				   "header: expected a string at byte %zu", start);
	q = ps->p[ps->pos++];
	for (n = 0; ps->pos < ps->end && ps->p[ps->pos] != q; ps->pos++) {
		if (ps->p[ps->pos] == '\\' || ps->p[ps->pos] == '\n')
			return rlb_err_set(err, RLB_EPARSE,
					   "header: unsupported character in string at byte %zu",
					   ps->pos);
		if (n + 1 >= cap)
			return rlb_err_set(err, RLB_EPARSE,
					   "header: string too long at byte %zu", start);
		out[n++] = (char)ps->p[ps->pos];
	}
	if (ps->pos >= ps->end)
		return rlb_err_set(err, RLB_EPARSE,
				   "header: unterminated string at byte %zu", start);
	ps->pos++;
	out[n] = '\0';
	return 0;
}

static int parse_word(struct npy_parser *ps, const char *w)
{
	size_t n = strlen(w);

	if (ps->end - ps->pos >= n && memcmp(ps->p + ps->pos, w, n) == 0 &&
	    (ps->pos + n == ps->end || !isalnum(ps->p[ps->pos + n]))) {
		ps->pos += n;
		return 1;
	}
	return 0;
}

static int parse_shape(struct npy_parser *ps, struct rlb_npy_header *h,
		       struct rlb_err *err)
{
	int ret = expect_char(ps, '(', err);

	if (ret != 0)
		return ret;
	h->ndim = 0;
	for (;;) {
		uint64_t v = 0;
		size_t start;

		skip_ws(ps);
		if (ps->pos < ps->end && ps->p[ps->pos] == ')') {
			ps->pos++;
			break;
		}
		start = ps->pos;
		if (ps->pos >= ps->end || !isdigit(ps->p[ps->pos]))
			return rlb_err_set(err, RLB_EPARSE,
					   "header: expected a dimension at byte %zu", start);
		while (ps->pos < ps->end && isdigit(ps->p[ps->pos])) {
			unsigned d = ps->p[ps->pos++] - '0';

			if (v > (UINT64_MAX - d) / 10)
				return rlb_err_set(err, RLB_EPARSE,
						   "header: dimension too large at byte %zu", start);
			v = v * 10 + d;
		}
		if (ps->pos < ps->end && ps->p[ps->pos] == 'L')
			ps->pos++;	/* Python 2 long */
		if (h->ndim == RLB_NPY_MAX_DIMS)
			return rlb_err_set(err, RLB_EPARSE,
					   "header: more than %d dimensions at byte %zu",
					   RLB_NPY_MAX_DIMS, start);
		h->shape[h->ndim++] = v;
		skip_ws(ps);
		if (ps->pos < ps->end && ps->p[ps->pos] == ',') {
			ps->pos++;
			continue;
		}
		ret = expect_char(ps, ')', err);
		if (ret != 0)
			return ret;
		break;
	}
	return 0;
}

static int parse_descr(const char *d, size_t at, struct rlb_npy_header *h,
		       struct rlb_err *err)
{
	char order = d[0], kind = d[0] ? d[1] : 0;
	long size;
	char *end;

	if (kind == 'O')
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu is an object array (arrays of "
				   "different lengths saved as one: write one file per sequence)",
				   d, at);
	if (!order || !kind || !isdigit((unsigned char)d[2]))
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu is not an integer type", d, at);
	size = strtol(d + 2, &end, 10);
	if (*end || (kind != 'i' && kind != 'u'))
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu is not an integer type", d, at);
	if (order == '>' && size > 1)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu is big-endian", d, at);
	if (order != '<' && order != '|' && order != '>' && order != '=')
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu has an unknown byte order", d, at);
	if (kind == 'i' && size == 1)
		h->dtype = RLB_DT_I8;
	else if (kind == 'u' && size == 1)
		h->dtype = RLB_DT_U8;
	else if (kind == 'i' && size == 2)
		h->dtype = RLB_DT_I16;
	else if (kind == 'u' && size == 2)
		h->dtype = RLB_DT_U16;
	else if (kind == 'i' && size == 4)
		h->dtype = RLB_DT_I32;
	else if (kind == 'u' && size == 4)
		h->dtype = RLB_DT_U32;
	else if (kind == 'i' && size == 8)
		h->dtype = RLB_DT_I64;
	else
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "dtype '%s' at byte %zu is not supported "
				   "(int8-int64, uint8-uint32)", d, at);
	return 0;
}

/* What a file that is not a .npy file seems to be, and the way in. */
static const char *foreign_advice(const uint8_t *buf, size_t len)
{
	size_t i;

	switch (rlb_sniff(buf, len)) {
	case RLB_KIND_ZIP:
		return " (a zip archive: an .npz from numpy.savez or a torch.save file; "
		       "write each sequence's array with numpy.save)";
	case RLB_KIND_PICKLE:
		return " (a Python pickle, such as a legacy torch.save file; "
		       "write each sequence's array with numpy.save)";
	default:
		break;
	}
	for (i = 0; i < len && isspace(buf[i]); i++)
		;
	if (i < len && (buf[i] == '{' || buf[i] == '['))
		return " (JSON text: convert it to relibra's jsonl format, "
		       "docs/jsonl-format.md, and use --from jsonl)";
	return rlb_import_kind_advice(buf, len);
}

int rlb_npy_parse_header(const uint8_t *buf, size_t len,
			 struct rlb_npy_header *h, size_t *need,
			 struct rlb_err *err)
{
	struct npy_parser ps;
	size_t pre, hlen, descr_at = 0;
	int have_descr = 0, have_fortran = 0, have_shape = 0, ret;
	char key[32];

	memset(h, 0, sizeof(*h));
	if (need)
		*need = 0;
	if (len < 8) {
		if (need)
			*need = 8;
		return rlb_err_set(err, RLB_ETRUNC,
				   "file ends at byte %zu inside the .npy preamble", len);
	}
	if (memcmp(buf, npy_magic, sizeof(npy_magic)) != 0)
		return rlb_err_set(err, RLB_EPARSE,
				   "not a .npy file: bad magic at byte 0%s",
				   foreign_advice(buf, len));
	h->version_major = buf[6];
	h->version_minor = buf[7];
	if (h->version_major < 1 || h->version_major > 3 || h->version_minor != 0)
		return rlb_err_set(err, RLB_EVERSION,
				   "unsupported .npy version %u.%u at byte 6",
				   h->version_major, h->version_minor);
	pre = h->version_major == 1 ? 10 : 12;
	if (len < pre) {
		if (need)
			*need = pre;
		return rlb_err_set(err, RLB_ETRUNC,
				   "file ends at byte %zu inside the .npy preamble", len);
	}
	hlen = h->version_major == 1 ? rlb_get_u16(buf + 8) : rlb_get_u32(buf + 8);
	if (hlen > (1u << 20))
		return rlb_err_set(err, RLB_EPARSE,
				   "header length %zu at byte 8 is implausible", hlen);
	if (len < pre + hlen) {
		if (need)
			*need = pre + hlen;
		return rlb_err_set(err, RLB_ETRUNC,
				   "file ends at byte %zu inside the .npy header (%zu bytes from byte %zu)",
				   len, hlen, pre);
	}
	h->data_offset = pre + hlen;
	ps.p = buf;
	ps.pos = pre;
	ps.end = pre + hlen;
	ret = expect_char(&ps, '{', err);
	if (ret != 0)
		return ret;
	for (;;) {
		size_t at;

		skip_ws(&ps);
		if (ps.pos < ps.end && ps.p[ps.pos] == '}') {
			ps.pos++;
			break;
		}
		at = ps.pos;
		ret = parse_str(&ps, key, sizeof(key), err);
		if (ret != 0)
			return ret;
		ret = expect_char(&ps, ':', err);
		if (ret != 0)
			return ret;
		skip_ws(&ps);
		if (strcmp(key, "descr") == 0 && !have_descr) {
			descr_at = ps.pos;
			ret = parse_str(&ps, h->descr, sizeof(h->descr), err);
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
			if (parse_word(&ps, "True"))
				h->fortran_order = 1;
			else if (parse_word(&ps, "False"))
				h->fortran_order = 0;
			else
				ret = rlb_err_set(err, RLB_EPARSE,
						  "header: expected True or False at byte %zu",
						  ps.pos);
			have_fortran = 1;
		} else if (strcmp(key, "shape") == 0 && !have_shape) {
			ret = parse_shape(&ps, h, err);
			have_shape = 1;
		} else {
			ret = rlb_err_set(err, RLB_EPARSE,
					  "header: unexpected key '%s' at byte %zu", key, at);
		}
		if (ret != 0)
			return ret;
		skip_ws(&ps);
		if (ps.pos < ps.end && ps.p[ps.pos] == ',') {
			ps.pos++;
			continue;
		}
		ret = expect_char(&ps, '}', err);
		if (ret != 0)
			return ret;
		break;
	}
	skip_ws(&ps);
	if (ps.pos != ps.end)
		return rlb_err_set(err, RLB_EPARSE,
				   "header: unexpected text after the dictionary at byte %zu",
				   ps.pos);
	if (!have_descr || !have_fortran || !have_shape)
		return rlb_err_set(err, RLB_EPARSE,
				   "header at byte %zu lacks '%s'", pre,
				   !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
	return parse_descr(h->descr, descr_at, h, err);
}

/* ---- files ------------------------------------------------------------- */

struct npy_file {
	char *path;
	int64_t step, group, sample;	/* from the name, -1 where absent */
};

/* step<N>, group<N>, sample<N> parts of the file name (docs/jsonl-format.md). */
static void name_ids(struct npy_file *f)
{
	const char *base = strrchr(f->path, '/');
	const char *p;

	base = base ? base + 1 : f->path;
	f->step = f->group = f->sample = -1;
	for (p = base; *p;) {
		static const char *const keys[] = { "step", "group", "sample" };
		int64_t *dst[] = { &f->step, &f->group, &f->sample };
		const char *e = p;
		size_t i;

		while (isalnum((unsigned char)*e))
			e++;
		for (i = 0; i < 3; i++) {
			size_t kl = strlen(keys[i]);
			const char *d = p + kl;
			uint64_t v = 0;

			if ((size_t)(e - p) <= kl || strncmp(p, keys[i], kl) != 0)
				continue;
			while (d < e && isdigit((unsigned char)*d) && v <= UINT32_MAX)
				v = v * 10 + (uint64_t)(*d++ - '0');
			if (d == e && v <= UINT32_MAX)
				*dst[i] = (int64_t)v;
		}
		p = *e ? e + 1 : e;
	}
}

static int cmp_files(const void *a, const void *b)
{
	const struct npy_file *x = a, *y = b;
	int64_t sx = x->step < 0 ? 0 : x->step, sy = y->step < 0 ? 0 : y->step;
	int c;

	if (sx != sy)
		return sx < sy ? -1 : 1;
	c = rlb_natural_cmp(x->path, y->path);
	return c ? c : strcmp(x->path, y->path);	/* step01 before step1 */
}

static int read_exact(FILE *fp, uint8_t *buf, size_t n, const char *name,
		      size_t *got, struct rlb_err *err)
{
	*got = fread(buf, 1, n, fp);
	if (*got < n && ferror(fp))
		return rlb_err_errno(err, RLB_EIO, "cannot read '%s'", name);
	return 0;
}

static int import_file(struct rlb_importer *im, const struct npy_file *f,
		       struct rlb_err *err)
{
	struct rlb_import_ids in = { f->step, f->group, f->sample };
	uint8_t pre[12], *hdr = NULL, *data = NULL;
	struct rlb_npy_header h;
	struct rlb_import_raw raw;
	uint64_t count, need_bytes, have;
	uint16_t *ids = NULL;
	size_t got, need = 0, esz;
	struct stat st;
	uint32_t step;
	FILE *fp;
	int ret, named = 0;	/* named: the message needs no file prefix */

	fp = fopen(f->path, "rb");
	if (!fp)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", f->path);
	if (fstat(fileno(fp), &st) != 0) {
		ret = rlb_err_errno(err, RLB_EIO, "cannot stat '%s'", f->path);
		named = 1;
		goto out;
	}
	ret = read_exact(fp, pre, sizeof(pre), f->path, &got, err);
	named = ret != 0;
	if (ret != 0)
		goto out;
	ret = rlb_npy_parse_header(pre, got, &h, &need, err);
	if (ret == RLB_ETRUNC && need > got && got == sizeof(pre)) {
		hdr = malloc(need);
		if (!hdr) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			named = 1;
			goto out;
		}
		memcpy(hdr, pre, got);
		ret = read_exact(fp, hdr + got, need - got, f->path, &got, err);
		named = ret != 0;
		if (ret != 0)
			goto out;
		ret = rlb_npy_parse_header(hdr, sizeof(pre) + got, &h, NULL, err);
	}
	if (ret != 0)
		goto out;
	if (h.fortran_order) {
		ret = rlb_err_set(err, RLB_EUNSUPPORTED,
				  "fortran_order True is not supported (save a C-order array: np.ascontiguousarray)");
		goto out;
	}
	if (h.ndim != 3) {
		ret = rlb_err_set(err, RLB_EMISMATCH,
				  "shape has %u dimensions, expected 3 (tokens, layers, topk)%s",
				  h.ndim, h.ndim == 4 ? "; a batch of sequences: write one file "
				  "per sequence, without padding rows" : "");
		goto out;
	}
	esz = rlb_import_dtype_bytes(h.dtype);
	if (h.shape[1] != 0 && h.shape[2] != 0 &&
	    (h.shape[0] > UINT64_MAX / h.shape[1] / h.shape[2] / esz)) {
		ret = rlb_err_set(err, RLB_ERANGE, "shape is too large");
		goto out;
	}
	count = h.shape[0] * h.shape[1] * h.shape[2];
	need_bytes = count * esz;
	have = st.st_size > (off_t)h.data_offset ? (uint64_t)st.st_size - h.data_offset : 0;
	if (have < need_bytes) {
		ret = rlb_err_set(err, RLB_ETRUNC,
				  "truncated: the array needs %" PRIu64 " bytes from byte %" PRIu64
				  ", the file ends at byte %" PRIu64,
				  need_bytes, h.data_offset, (uint64_t)st.st_size);
		goto out;
	}
	if (have > need_bytes) {
		ret = rlb_err_set(err, RLB_ECORRUPT,
				  "%" PRIu64 " bytes after the array data at byte %" PRIu64,
				  have - need_bytes, h.data_offset + need_bytes);
		goto out;
	}
	if (h.shape[2] != im->topk) {
		ret = rlb_err_set(err, RLB_EMISMATCH,
				  "shape (%" PRIu64 ", %" PRIu64 ", %" PRIu64 "): topk %" PRIu64
				  ", the config has %" PRIu32,
				  h.shape[0], h.shape[1], h.shape[2], h.shape[2], im->topk);
		goto out;
	}
	{
		struct rlb_layer_map map;

		ret = rlb_importer_layer_map(im, h.shape[1], &map, err);
		if (ret != 0) {
			rlb_err_prefix(err, "shape (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
				       h.shape[0], h.shape[1], h.shape[2]);
			goto out;
		}
	}
	if (h.shape[0] > RLB_TRACE_MAX_SEQ_TOKENS) {
		ret = rlb_err_set(err, RLB_ERANGE, "%" PRIu64 " rows is above the limit of %u",
				  h.shape[0], RLB_TRACE_MAX_SEQ_TOKENS);
		goto out;
	}
	ret = rlb_importer_step(im, in.step, &step, err);
	if (ret != 0)
		goto out;
	data = malloc(need_bytes + 1);
	ids = malloc((size_t)h.shape[0] * im->moe_layers * im->topk * sizeof(*ids) + 1);
	if (!data || !ids) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		named = 1;
		goto out;
	}
	if (fseeko(fp, (off_t)h.data_offset, SEEK_SET) != 0) {
		ret = rlb_err_errno(err, RLB_EIO, "cannot seek in '%s'", f->path);
		named = 1;
		goto out;
	}
	ret = read_exact(fp, data, need_bytes, f->path, &got, err);
	named = ret != 0;
	if (ret != 0)
		goto out;
	if (got != need_bytes) {
		ret = rlb_err_set(err, RLB_ETRUNC,
				  "truncated: the file ends at byte %" PRIu64,
				  h.data_offset + got);
		goto out;
	}
	memset(&raw, 0, sizeof(raw));
	raw.data = data;
	raw.dtype = h.dtype;
	raw.rows = h.shape[0];
	raw.layers = h.shape[1];
	raw.topk = h.shape[2];
	raw.byte_base = (int64_t)h.data_offset;
	ret = rlb_import_convert(im, &raw, ids, NULL, err);
	if (ret != 0)
		goto out;
	im->records++;
	ret = rlb_importer_emit_token_major(im, step, &in, (uint32_t)h.shape[0],
					    ids, NULL, err);
out:
	if (ret != 0 && !named)
		rlb_err_prefix(err, "%s", f->path);
	free(hdr);
	free(data);
	free(ids);
	fclose(fp);
	return ret;
}

int rlb_import_vllm(struct rlb_importer *im, const char *path,
		    struct rlb_err *err)
{
	struct npy_file *files = NULL;
	char **list = NULL;
	size_t n = 0, i;
	struct stat st;
	int ret = 0;

	if (im->gates)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "vllm .npy files carry no gate weights (drop --gates)");
	if (stat(path, &st) != 0)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", path);
	if (S_ISDIR(st.st_mode)) {
		ret = rlb_import_list_dir(path, ".npy", &list, &n, err);
		if (ret == RLB_ENOTFOUND && err) {
			size_t len = strlen(err->msg);

			snprintf(err->msg + len, sizeof(err->msg) - len,
				 " (vllm reads arrays written by numpy.save, one .npy "
				 "file per sequence)");
		}
		if (ret != 0)
			return ret;
	} else if (!S_ISREG(st.st_mode)) {
		/* The data's size is checked against the file's before reading. */
		return rlb_err_set(err, RLB_EINVAL,
				   "vllm input '%s' is not a regular file nor a directory "
				   "(a pipe cannot be read: save the .npy file first)", path);
	} else {
		list = malloc(sizeof(*list));
		if (list)
			list[0] = strdup(path);
		if (!list || !list[0]) {
			free(list);
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		}
		n = 1;
	}
	files = calloc(n, sizeof(*files));
	if (!files) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		files[i].path = list[i];
		name_ids(&files[i]);
	}
	if (im->opts->step < 0)
		qsort(files, n, sizeof(*files), cmp_files);
	for (i = 0; i < n; i++) {
		ret = import_file(im, &files[i], err);
		if (ret != 0)
			break;
		if (im->progress)
			im->progress(im->progress_ctx, i + 1, n, "files");
	}
out:
	free(files);
	rlb_import_free_list(list, n);
	return ret;
}
