/*
 * test_expert.c - unit tests of lib/expert: the SwiGLU and the ungated
 * (squared ReLU) expert forward and backward against a plain
 * double-precision reference and central finite differences, the
 * bit-exact row and split invariance the executor relies on, the gated
 * bits held to a captured hash, combine, the default gates, the
 * hash-generated weights and inputs, and Adam against a hand-computed
 * step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expert.h"
#include "suites.h"

/* Shapes: the brief's tiny one, and one that crosses every tile, strip and chunk edge. */
static const struct rlb_expert_shape tiny = { 8, 4, 0 };
static const struct rlb_expert_shape odd = { 40, 300, 0 };
/* The ungated expert: the brief's small shape, and the edge-crossing one. */
static const struct rlb_expert_shape tiny2 = { 8, 6, 1 };
static const struct rlb_expert_shape odd2 = { 40, 300, 1 };

static float *fill(size_t n, uint64_t seed, float scale)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	size_t i;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = scale * ((float)(seed >> 40) * 0x1p-24f * 2.0f - 1.0f);
	}
	return p;
}

static double silu_d(double g)
{
	return g / (1.0 + exp(-g));
}

static double relu_d(double u)
{
	return u > 0 ? u : 0;
}

/*
 * The ungated reference: y = relu(x Wu)^2 Wd per row in double, u kept;
 * with dy, dx and dw of that function from the chain rule
 * (d relu(u)^2 / du = 2 relu(u)).
 */
static void ref2_forward(const struct rlb_expert_shape *s, const float *w,
			 size_t n, const double *x, double *y, double *u)
{
	size_t H = s->hidden, F = s->ffn, i, j, k;
	const float *wu = w, *wd = w + H * F;

	for (i = 0; i < n; i++) {
		for (j = 0; j < F; j++) {
			double su = 0;

			for (k = 0; k < H; k++)
				su += x[i * H + k] * wu[k * F + j];
			u[i * F + j] = su;
		}
		for (k = 0; k < H; k++) {
			double sy = 0;

			for (j = 0; j < F; j++) {
				double r = relu_d(u[i * F + j]);

				sy += r * r * wd[j * H + k];
			}
			y[i * H + k] = sy;
		}
	}
}

static void ref2_backward(const struct rlb_expert_shape *s, const float *w,
			  size_t n, const double *x, const double *u,
			  const float *dy, double *dx, double *dw)
{
	size_t H = s->hidden, F = s->ffn, i, j, k;
	const float *wu = w, *wd = w + H * F;
	double *dwu = dw, *dwd = dw + H * F;

	memset(dw, 0, 2 * H * F * sizeof(double));
	for (i = 0; i < n; i++) {
		for (k = 0; k < H; k++)
			dx[i * H + k] = 0;
		for (j = 0; j < F; j++) {
			double r = relu_d(u[i * F + j]), dh = 0, duv;

			for (k = 0; k < H; k++) {
				dh += dy[i * H + k] * wd[j * H + k];
				dwd[j * H + k] += r * r * dy[i * H + k];
			}
			duv = dh * 2 * r;
			for (k = 0; k < H; k++) {
				dwu[k * F + j] += x[i * H + k] * duv;
				dx[i * H + k] += duv * wu[k * F + j];
			}
		}
	}
}

/*
 * The reference: y = (silu(x Wg) * (x Wu)) Wd per row in double, and
 * (with dy) dx and dw of that function, straight from the chain rule;
 * an ungated shape takes ref2_* (g left alone).
 */
static void ref_forward(const struct rlb_expert_shape *s, const float *w,
			size_t n, const double *x, double *y, double *g, double *u)
{
	size_t H = s->hidden, F = s->ffn, i, j, k;
	const float *wg = w, *wu = w + H * F, *wd = w + 2 * H * F;

	if (s->ungated) {
		ref2_forward(s, w, n, x, y, u);
		return;
	}
	for (i = 0; i < n; i++) {
		for (j = 0; j < F; j++) {
			double sg = 0, su = 0;

			for (k = 0; k < H; k++) {
				sg += x[i * H + k] * wg[k * F + j];
				su += x[i * H + k] * wu[k * F + j];
			}
			g[i * F + j] = sg;
			u[i * F + j] = su;
		}
		for (k = 0; k < H; k++) {
			double sy = 0;

			for (j = 0; j < F; j++)
				sy += silu_d(g[i * F + j]) * u[i * F + j] * wd[j * H + k];
			y[i * H + k] = sy;
		}
	}
}

static void ref_backward(const struct rlb_expert_shape *s, const float *w,
			 size_t n, const double *x, const double *g,
			 const double *u, const float *dy, double *dx,
			 double *dw)
{
	size_t H = s->hidden, F = s->ffn, i, j, k;
	const float *wg = w, *wu = w + H * F, *wd = w + 2 * H * F;
	double *dwg = dw, *dwu = dw + H * F, *dwd = dw + 2 * H * F;

	if (s->ungated) {
		ref2_backward(s, w, n, x, u, dy, dx, dw);
		return;
	}
	memset(dw, 0, 3 * H * F * sizeof(double));
	for (i = 0; i < n; i++) {
		for (k = 0; k < H; k++)
			dx[i * H + k] = 0;
		for (j = 0; j < F; j++) {
			double gg = g[i * F + j], uu = u[i * F + j], dh = 0;
			double sg = 1.0 / (1.0 + exp(-gg)), dgv, duv;

			for (k = 0; k < H; k++) {
				dh += dy[i * H + k] * wd[j * H + k];
				dwd[j * H + k] += silu_d(gg) * uu * dy[i * H + k];
			}
			dgv = dh * uu * (sg + gg * sg * (1 - sg));
			duv = dh * silu_d(gg);
			for (k = 0; k < H; k++) {
				dwg[k * F + j] += x[i * H + k] * dgv;
				dwu[k * F + j] += x[i * H + k] * duv;
				dx[i * H + k] += dgv * wg[k * F + j] + duv * wu[k * F + j];
			}
		}
	}
}

static double *to_double(const float *p, size_t n)
{
	double *d = malloc((n ? n : 1) * sizeof(double));
	size_t i;

	ck_assert_ptr_nonnull(d);
	for (i = 0; i < n; i++)
		d[i] = p[i];
	return d;
}

/* max |a - ref| / max |ref| over n values (ref not all zero). */
static double rel_err(const float *a, const double *ref, size_t n)
{
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double d = fabs(a[i] - ref[i]);

		num = d > num ? d : num;
		den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
	}
	ck_assert(den > 0);
	return num / den;
}

/* One problem: weights, inputs, outputs and the reference's. */
struct prob {
	struct rlb_expert_shape s;
	size_t n, np, nx, na;
	float *w, *x, *dy, *y, *act, *dx, *dw;
	double *xd, *yr, *gr, *ur, *dxr, *dwr;
};

static void prob_init(struct prob *p, const struct rlb_expert_shape *s,
		      size_t n, uint64_t seed)
{
	memset(p, 0, sizeof(*p));
	p->s = *s;
	p->n = n;
	p->np = rlb_expert_params(s);
	p->nx = n * s->hidden;
	p->na = n * rlb_expert_act_per_row(s);
	p->w = malloc(p->np * sizeof(float));
	ck_assert_ptr_nonnull(p->w);
	rlb_expert_init(s, seed, 1, 2, p->w);
	p->x = fill(p->nx, seed + 1, 1.5f);
	p->dy = fill(p->nx, seed + 2, 1.0f);
	p->y = fill(p->nx, seed + 3, 9.0f);	/* garbage: must be overwritten */
	p->act = fill(p->na, seed + 4, 9.0f);
	p->dx = fill(p->nx, seed + 5, 9.0f);
	p->dw = calloc(p->np, sizeof(float));
	p->xd = to_double(p->x, p->nx);
	p->yr = malloc((p->nx + 1) * sizeof(double));
	p->gr = malloc((n * s->ffn + 1) * sizeof(double));
	p->ur = malloc((n * s->ffn + 1) * sizeof(double));
	p->dxr = malloc((p->nx + 1) * sizeof(double));
	p->dwr = malloc(p->np * sizeof(double));
	ck_assert(p->dw && p->yr && p->gr && p->ur && p->dxr && p->dwr);
	ref_forward(s, p->w, n, p->xd, p->yr, p->gr, p->ur);
	ref_backward(s, p->w, n, p->xd, p->gr, p->ur, p->dy, p->dxr, p->dwr);
}

static void prob_free(struct prob *p)
{
	free(p->w);
	free(p->x);
	free(p->dy);
	free(p->y);
	free(p->act);
	free(p->dx);
	free(p->dw);
	free(p->xd);
	free(p->yr);
	free(p->gr);
	free(p->ur);
	free(p->dxr);
	free(p->dwr);
}

static void check_forward(const struct rlb_expert_shape *s, size_t n)
{
	struct prob p;
	size_t i, j, F = s->ffn, A = rlb_expert_act_per_row(s);

	prob_init(&p, s, n, 11);
	rlb_expert_forward(s, p.w, n, p.x, p.y, p.act);
	ck_assert_double_le(rel_err(p.y, p.yr, p.nx), 1e-5);
	for (i = 0; i < n; i++)
		for (j = 0; j < F; j++) {
			double u = p.ur[i * F + j];

			/* a row's act: g then u, or u alone ungated */
			if (!s->ungated) {
				double g = p.gr[i * F + j];

				ck_assert_double_le(fabs(p.act[i * A + j] - g), 1e-5 * (1 + fabs(g)));
			}
			ck_assert_double_le(fabs(p.act[i * A + A - F + j] - u), 1e-5 * (1 + fabs(u)));
		}
	prob_free(&p);
}

START_TEST(test_forward_reference)
{
	check_forward(&tiny, 5);
	check_forward(&odd, 13);
}
END_TEST

START_TEST(test_ungated_forward_reference)
{
	check_forward(&tiny2, 5);
	check_forward(&odd2, 13);
}
END_TEST

static void check_backward(const struct rlb_expert_shape *s, size_t n)
{
	struct prob p;
	size_t m, k;

	prob_init(&p, s, n, 21);
	rlb_expert_forward(s, p.w, n, p.x, p.y, p.act);
	rlb_expert_backward(s, p.w, n, p.x, p.act, p.dy, p.dx, p.dw);
	ck_assert_double_le(rel_err(p.dx, p.dxr, p.nx), 1e-5);
	/* each matrix on its own scale */
	m = rlb_expert_matrices(s);
	for (k = 0; k < m; k++)
		ck_assert_double_le(rel_err(p.dw + k * p.np / m, p.dwr + k * p.np / m,
					    p.np / m), 1e-5);
	prob_free(&p);
}

START_TEST(test_backward_reference)
{
	check_backward(&tiny, 5);
	check_backward(&odd, 13);
}
END_TEST

START_TEST(test_ungated_backward_reference)
{
	check_backward(&tiny2, 5);
	check_backward(&odd2, 13);
}
END_TEST

/* loss = sum(y * r) of the double reference, r = dy; x and w as given. */
static double ref_loss(const struct prob *p, const double *x, const float *w)
{
	double *y = malloc(p->nx * sizeof(double));
	double *g = malloc(p->n * p->s.ffn * sizeof(double));
	double *u = malloc(p->n * p->s.ffn * sizeof(double));
	double l = 0;
	size_t i;

	ck_assert(y && g && u);
	ref_forward(&p->s, w, p->n, x, y, g, u);
	for (i = 0; i < p->nx; i++)
		l += y[i] * p->dy[i];
	free(y);
	free(g);
	free(u);
	return l;
}

/*
 * dx and dw against central differences of the double reference's loss,
 * at inputs XI and weights WI (every matrix's first, inner and last).
 */
static void check_finite_differences(const struct rlb_expert_shape *s,
				     const size_t *wi, size_t nwi)
{
	static const size_t xi[] = { 0, 3, 9, 22, 39 };
	struct prob p;
	double *xp;
	float *wp;
	const double hx = 1e-4;
	const float hw = 1.0f / 1024;	/* exact in float around the weights */
	size_t t;

	prob_init(&p, s, 5, 31);
	rlb_expert_forward(&p.s, p.w, p.n, p.x, p.y, p.act);
	rlb_expert_backward(&p.s, p.w, p.n, p.x, p.act, p.dy, p.dx, p.dw);
	xp = to_double(p.x, p.nx);
	for (t = 0; t < sizeof(xi) / sizeof(xi[0]); t++) {
		size_t i = xi[t];
		double lp, lm, fd;

		xp[i] = p.xd[i] + hx;
		lp = ref_loss(&p, xp, p.w);
		xp[i] = p.xd[i] - hx;
		lm = ref_loss(&p, xp, p.w);
		xp[i] = p.xd[i];
		fd = (lp - lm) / (2 * hx);
		ck_assert_double_le(fabs(p.dx[i] - fd), 1e-4 * (1 + fabs(fd)));
	}
	wp = malloc(p.np * sizeof(float));
	ck_assert_ptr_nonnull(wp);
	memcpy(wp, p.w, p.np * sizeof(float));
	for (t = 0; t < nwi; t++) {
		size_t i = wi[t];
		double lp, lm, fd, step;

		ck_assert_uint_lt(i, p.np);
		wp[i] = p.w[i] + hw;
		step = (double)wp[i] - p.w[i];
		lp = ref_loss(&p, p.xd, wp);
		wp[i] = p.w[i] - hw;
		step += (double)p.w[i] - wp[i];
		lm = ref_loss(&p, p.xd, wp);
		wp[i] = p.w[i];
		fd = (lp - lm) / step;
		ck_assert_double_le(fabs(p.dw[i] - fd), 1e-4 * (1 + fabs(fd)));
	}
	free(wp);
	free(xp);
	prob_free(&p);
}

START_TEST(test_backward_finite_differences)
{
	/* tiny: w_gate 0..31, w_up 32..63, w_down 64..95 */
	static const size_t wi[] = { 0, 7, 13, 31, 32, 45, 64, 70, 95 };

	check_finite_differences(&tiny, wi, sizeof(wi) / sizeof(wi[0]));
}
END_TEST

START_TEST(test_ungated_finite_differences)
{
	/* tiny2: w_up 0..47, w_down 48..95 */
	static const size_t wi[] = { 0, 5, 13, 29, 47, 48, 53, 70, 95 };

	check_finite_differences(&tiny2, wi, sizeof(wi) / sizeof(wi[0]));
}
END_TEST

START_TEST(test_dw_accumulates)
{
	struct prob p;
	float *once, *dx2;
	size_t i;

	prob_init(&p, &odd, 9, 41);
	once = malloc(p.np * sizeof(float));
	dx2 = malloc(p.nx * sizeof(float));
	ck_assert(once && dx2);
	rlb_expert_forward(&p.s, p.w, p.n, p.x, p.y, p.act);
	rlb_expert_backward(&p.s, p.w, p.n, p.x, p.act, p.dy, p.dx, p.dw);
	memcpy(once, p.dw, p.np * sizeof(float));
	rlb_expert_backward(&p.s, p.w, p.n, p.x, p.act, p.dy, dx2, p.dw);
	/* dx is overwritten, not accumulated: the same bits twice */
	ck_assert_mem_eq(p.dx, dx2, p.nx * sizeof(float));
	for (i = 0; i < p.np; i++)
		ck_assert_float_le(fabsf(p.dw[i] - 2 * once[i]),
				   1e-6f * (1 + fabsf(once[i])));
	free(once);
	free(dx2);
	prob_free(&p);
}
END_TEST

/*
 * A row's y and act are the same bits alone or in any batch; backward
 * over [0, a) then [a, n) leaves the same dw bits as one call over all
 * rows (the row order is the summation order), and the same dx.  n
 * crosses the row blocks, ffn the ffn chunks.
 */
static void check_rows_and_splits(const struct rlb_expert_shape s)
{
	const size_t n = 300, H = s.hidden, A = rlb_expert_act_per_row(&s);
	struct prob p;
	float *y1 = malloc(H * sizeof(float)), *a1 = malloc(A * sizeof(float));
	float *dw2 = NULL, *dx2 = NULL;
	size_t i, cut;

	ck_assert(y1 && a1);
	prob_init(&p, &s, n, 51);
	rlb_expert_forward(&s, p.w, n, p.x, p.y, p.act);
	for (i = 0; i < n; i += 7) {
		rlb_expert_forward(&s, p.w, 1, p.x + i * H, y1, a1);
		ck_assert_mem_eq(y1, p.y + i * H, H * sizeof(float));
		ck_assert_mem_eq(a1, p.act + i * A, A * sizeof(float));
	}
	rlb_expert_backward(&s, p.w, n, p.x, p.act, p.dy, p.dx, p.dw);
	dw2 = calloc(p.np, sizeof(float));
	dx2 = malloc(p.nx * sizeof(float));
	ck_assert(dw2 && dx2);
	for (cut = 0; cut <= n; cut += 137) {
		memset(dw2, 0, p.np * sizeof(float));
		rlb_expert_backward(&s, p.w, cut, p.x, p.act, p.dy, dx2, dw2);
		rlb_expert_backward(&s, p.w, n - cut, p.x + cut * H, p.act + cut * A,
				    p.dy + cut * H, dx2 + cut * H, dw2);
		ck_assert_mem_eq(dw2, p.dw, p.np * sizeof(float));
		ck_assert_mem_eq(dx2, p.dx, p.nx * sizeof(float));
	}
	free(y1);
	free(a1);
	free(dw2);
	free(dx2);
	prob_free(&p);
}

START_TEST(test_rows_and_splits_bit_exact)
{
	check_rows_and_splits(odd);
	check_rows_and_splits(odd2);
}
END_TEST

/* FNV-1a over the floats' bit patterns, each from its low byte up. */
static uint64_t bits_hash(uint64_t h, const float *p, size_t n)
{
	size_t i;
	int b;

	for (i = 0; i < n; i++) {
		uint32_t v;

		memcpy(&v, &p[i], sizeof(v));
		for (b = 0; b < 4; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 0x100000001b3ULL;
		}
	}
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ULL

/*
 * The SwiGLU expert's bits as the code gave them before the ungated
 * expert was added beside it: weights of rlb_expert_init, the saved
 * activations, and all of y, act, dx and dw after one forward and one
 * backward, for the tiny shape and one crossing every tile and chunk
 * edge.  A change to the gated math, its summation order, its blocking
 * or the weights' hash changes them.  w and act are products of + and *
 * alone and must match on every machine; y, dx and dw also pass through
 * libm's expf, so they are held to their hash only where expf gives the
 * bits it gave at capture (glibc 2.36, x86-64), checked first.  The
 * ungated expert's bits, captured when it was written, use no libm and
 * are held everywhere.
 */
START_TEST(test_golden_bits)
{
	static const struct {
		struct rlb_expert_shape s;
		size_t n;
		uint64_t seed, w, act, exp, all;
	} g[] = {
		{ { 8, 6, 0 }, 5, 71, 0x394134b596c5fa75ULL, 0xead74e34107e6e7eULL,
		  0x0f95c07b790aa646ULL, 0xd72bd036af6b70fbULL },
		{ { 40, 300, 0 }, 13, 73, 0xbd142cdcc5d519dfULL, 0x067565d8e26d15a3ULL,
		  0x3ae17a9303a66e0cULL, 0x6acfe41c9c0d22a9ULL },
		{ { 8, 6, 1 }, 5, 71, 0xa9e010b4390e37c7ULL, 0x81f499e398ac19fdULL,
		  FNV_INIT, 0x912b9579f34b00caULL },
		{ { 40, 300, 1 }, 13, 73, 0x5f99a468f5b92169ULL, 0x7b077b949743c7f2ULL,
		  FNV_INIT, 0x2f267e2964822a10ULL },
	};
	size_t t, i, j;

	for (t = 0; t < sizeof(g) / sizeof(g[0]); t++) {
		const struct rlb_expert_shape *s = &g[t].s;
		size_t n = g[t].n, F = s->ffn, np = rlb_expert_params(s);
		size_t nx = n * s->hidden, na = n * rlb_expert_act_per_row(s);
		float *w = malloc(np * sizeof(float)), *y = malloc(nx * sizeof(float));
		float *act = malloc(na * sizeof(float)), *dx = malloc(nx * sizeof(float));
		float *dw = calloc(np, sizeof(float));
		float *x = fill(nx, g[t].seed + 1, 1.5f), *dy = fill(nx, g[t].seed + 2, 1.0f);
		uint64_t h = FNV_INIT, he = FNV_INIT;

		ck_assert(w && y && act && dx && dw);
		ck_assert_uint_eq(na, (s->ungated ? 1 : 2) * n * F);
		rlb_expert_init(s, g[t].seed, 1, 2, w);
		rlb_expert_forward(s, w, n, x, y, act);
		rlb_expert_backward(s, w, n, x, act, dy, dx, dw);
		ck_assert_msg(bits_hash(FNV_INIT, w, np) == g[t].w,
			      "%u x %u (ungated %u): the weights changed", s->hidden,
			      s->ffn, s->ungated);
		ck_assert_msg(bits_hash(FNV_INIT, act, na) == g[t].act,
			      "%u x %u (ungated %u): the forward's saved activations changed",
			      s->hidden, s->ffn, s->ungated);
		for (i = 0; i < n && !s->ungated; i++)
			for (j = 0; j < F; j++) {
				float e = expf(-act[i * 2 * F + j]);

				he = bits_hash(he, &e, 1);
			}
		h = bits_hash(h, y, nx);
		h = bits_hash(h, act, na);
		h = bits_hash(h, dx, nx);
		h = bits_hash(h, dw, np);
		if (he == g[t].exp)
			ck_assert_msg(h == g[t].all,
				      "%u x %u (ungated %u): the forward or backward changed",
				      s->hidden, s->ffn, s->ungated);
		else
			fprintf(stderr, "test_golden_bits: %u x %u: this libm's expf differs from the capture's; y, dx and dw not compared\n",
				s->hidden, s->ffn);
		free(w);
		free(y);
		free(act);
		free(dx);
		free(dw);
		free(x);
		free(dy);
	}
}
END_TEST

static void check_zero_rows(const struct rlb_expert_shape *s)
{
	struct prob p;
	float *w0, *dw0;

	prob_init(&p, s, 3, 61);
	memcpy(p.dw, p.w, p.np * sizeof(float));
	w0 = malloc((2 * p.nx + p.na) * sizeof(float));
	dw0 = malloc(p.np * sizeof(float));
	ck_assert(w0 && dw0);
	memcpy(w0, p.y, p.nx * sizeof(float));
	memcpy(w0 + p.nx, p.dx, p.nx * sizeof(float));
	memcpy(w0 + 2 * p.nx, p.act, p.na * sizeof(float));
	memcpy(dw0, p.dw, p.np * sizeof(float));
	rlb_expert_forward(&p.s, p.w, 0, p.x, p.y, p.act);
	rlb_expert_backward(&p.s, p.w, 0, p.x, p.act, p.dy, p.dx, p.dw);
	rlb_expert_forward(&p.s, p.w, 0, NULL, NULL, NULL);
	rlb_expert_backward(&p.s, p.w, 0, NULL, NULL, NULL, NULL, p.dw);
	rlb_combine_rows(0, 8, NULL, NULL, NULL);
	ck_assert_mem_eq(w0, p.y, p.nx * sizeof(float));
	ck_assert_mem_eq(w0 + p.nx, p.dx, p.nx * sizeof(float));
	ck_assert_mem_eq(w0 + 2 * p.nx, p.act, p.na * sizeof(float));
	ck_assert_mem_eq(dw0, p.dw, p.np * sizeof(float));
	free(w0);
	free(dw0);
	prob_free(&p);
}

START_TEST(test_zero_rows_noop)
{
	check_zero_rows(&tiny);
	check_zero_rows(&tiny2);
}
END_TEST

START_TEST(test_combine)
{
	const float gate[2] = { 0.25f, -2.0f };
	const float y[6] = { 4, 8, -12, 1, 0.5f, 3 };
	float out[6] = { 1, 1, 1, 10, 20, 30 };
	const float want[6] = { 2, 3, -2, 8, 19, 24 };

	rlb_combine_rows(2, 3, gate, y, out);
	ck_assert_mem_eq(out, want, sizeof(want));
	rlb_combine_rows(1, 3, gate + 1, y + 3, out + 3);
	ck_assert_float_eq(out[3], 6);
	ck_assert_float_eq(out[4], 18);
	ck_assert_float_eq(out[5], 18);
}
END_TEST

START_TEST(test_default_gates)
{
	float g[8], g2[8], g3[8];
	uint32_t k, topk, pos;
	int differ = 0;

	for (topk = 1; topk <= 8; topk++)
		for (pos = 0; pos < 50; pos++) {
			double sum = 0;

			rlb_default_gates(7, 3, pos, 2, topk, g);
			rlb_default_gates(7, 3, pos, 2, topk, g2);
			ck_assert_mem_eq(g, g2, topk * sizeof(float));
			for (k = 0; k < topk; k++) {
				ck_assert(g[k] > 0 && g[k] <= 1);
				sum += g[k];
				if (k == 0)
					continue;
				/* l_k - l_(k-1) in (-0.75, -0.25) */
				ck_assert_double_lt(g[k] / g[k - 1], exp(-0.25) + 1e-6);
				ck_assert_double_gt(g[k] / g[k - 1], exp(-0.75) - 1e-6);
			}
			ck_assert_double_le(fabs(sum - 1), 1e-6);
		}
	rlb_default_gates(7, 3, 4, 2, 1, g);
	ck_assert_float_eq(g[0], 1.0f);
	/* other tokens, layers and seeds get other gates */
	rlb_default_gates(7, 3, 4, 2, 8, g);
	rlb_default_gates(7, 3, 5, 2, 8, g2);
	differ += memcmp(g, g2, sizeof(g)) != 0;
	rlb_default_gates(7, 4, 4, 2, 8, g2);
	differ += memcmp(g, g2, sizeof(g)) != 0;
	rlb_default_gates(7, 3, 4, 3, 8, g2);
	differ += memcmp(g, g2, sizeof(g)) != 0;
	rlb_default_gates(8, 3, 4, 2, 8, g2);
	differ += memcmp(g, g2, sizeof(g)) != 0;
	/* the hash keys are not merely summed: (seq, pos) swapped differs */
	rlb_default_gates(7, 4, 3, 2, 8, g3);
	rlb_default_gates(7, 3, 4, 2, 8, g2);
	differ += memcmp(g3, g2, sizeof(g)) != 0;
	ck_assert_int_eq(differ, 5);
	rlb_default_gates(7, 3, 4, 2, 0, NULL);
}
END_TEST

START_TEST(test_expert_init)
{
	const struct rlb_expert_shape s = { 16, 9, 0 };
	size_t np = rlb_expert_params(&s), hf = 16 * 9, i;
	float *a = malloc(np * sizeof(float)), *b = malloc(np * sizeof(float));
	double ain = 1 / sqrt(16.0), aff = 1 / sqrt(9.0), mx_in = 0, mx_ff = 0, mean = 0;

	ck_assert(a && b);
	ck_assert_uint_eq(np, 3 * hf);
	ck_assert_uint_eq(rlb_expert_act_per_row(&s), 18);
	rlb_expert_init(&s, 5, 1, 2, a);
	rlb_expert_init(&s, 5, 1, 2, b);
	ck_assert_mem_eq(a, b, np * sizeof(float));
	for (i = 0; i < np; i++) {
		double v = fabs(a[i]);

		mean += a[i];
		if (i < 2 * hf) {
			ck_assert_double_le(v, ain);
			mx_in = v > mx_in ? v : mx_in;
		} else {
			ck_assert_double_le(v, aff);
			mx_ff = v > mx_ff ? v : mx_ff;
		}
	}
	/* spread over the interval, centred */
	ck_assert_double_gt(mx_in, 0.9 * ain);
	ck_assert_double_gt(mx_ff, 0.8 * aff);
	ck_assert_double_lt(fabs(mean / np), 0.1 * ain);
	rlb_expert_init(&s, 5, 1, 3, b);
	ck_assert(memcmp(a, b, np * sizeof(float)) != 0);
	rlb_expert_init(&s, 5, 2, 2, b);
	ck_assert(memcmp(a, b, np * sizeof(float)) != 0);
	rlb_expert_init(&s, 5, 2, 1, b);
	ck_assert(memcmp(a, b, np * sizeof(float)) != 0);
	rlb_expert_init(&s, 6, 1, 2, b);
	ck_assert(memcmp(a, b, np * sizeof(float)) != 0);
	free(a);
	free(b);
}
END_TEST

/*
 * The ungated expert holds two matrices and saves u alone; its weights
 * are the gated expert's w_up and w_down, bit for bit (the same hash
 * indices), so the two kinds start from the same up and down.
 */
START_TEST(test_ungated_sizes_and_init)
{
	const struct rlb_expert_shape g = { 16, 9, 0 }, s = { 16, 9, 1 };
	size_t hf = 16 * 9;
	float *a = malloc(3 * hf * sizeof(float)), *b = malloc(3 * hf * sizeof(float));

	ck_assert(a && b);
	ck_assert_uint_eq(rlb_expert_matrices(&g), 3);
	ck_assert_uint_eq(rlb_expert_matrices(&s), 2);
	ck_assert_uint_eq(rlb_expert_params(&s), 2 * hf);
	ck_assert_uint_eq(rlb_expert_act_per_row(&s), 9);
	ck_assert_uint_eq(rlb_expert_params(&tiny2), 96);
	ck_assert_uint_eq(rlb_expert_act_per_row(&tiny2), 6);
	rlb_expert_init(&g, 5, 1, 2, a);
	/* the block ends at 2 hf: what follows is left alone */
	b[2 * hf] = 12345.0f;
	rlb_expert_init(&s, 5, 1, 2, b);
	ck_assert_mem_eq(b, a + hf, 2 * hf * sizeof(float));
	ck_assert_float_eq(b[2 * hf], 12345.0f);
	free(a);
	free(b);
}
END_TEST

START_TEST(test_hidden_init)
{
	float a[64], b[64];
	double mean = 0;
	int i;

	rlb_hidden_init(3, 1, 2, 3, 64, a);
	rlb_hidden_init(3, 1, 2, 3, 64, b);
	ck_assert_mem_eq(a, b, sizeof(a));
	for (i = 0; i < 64; i++) {
		ck_assert(a[i] >= -1.0f && a[i] < 1.0f);
		mean += a[i];
	}
	ck_assert_double_lt(fabs(mean / 64), 0.3);
	rlb_hidden_init(3, 1, 2, 4, 64, b);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	rlb_hidden_init(3, 1, 3, 3, 64, b);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	rlb_hidden_init(3, 2, 2, 3, 64, b);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	rlb_hidden_init(4, 1, 2, 3, 64, b);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	/* a prefix of a longer row is the shorter row */
	rlb_hidden_init(3, 1, 2, 3, 10, b);
	ck_assert_mem_eq(a, b, 10 * sizeof(float));
}
END_TEST

START_TEST(test_adam)
{
	struct rlb_adam ad = { 0.1f, 0.9f, 0.999f, 1e-8f, 1 };
	float w[3] = { 1, 1, 1 }, g[3] = { 0.5f, -2, 0 }, m[3] = { 0 }, v[3] = { 0 };
	float g2[3] = { 1, 1, 1 };
	/* the expectations use the hyper-parameters as stored (fp32) */
	double b1 = ad.beta1, b2 = ad.beta2, lr = ad.lr, eps = ad.eps;
	double md[3], vd[3], wd[3];
	int i;

	/* first step: m_hat = g, v_hat = g^2, so w -= lr * g / (|g| + eps) */
	rlb_adam_update(&ad, 3, w, g, m, v);
	ck_assert_double_le(fabs(w[0] - (1 - lr * 0.5 / (0.5 + eps))), 1e-6);
	ck_assert_double_le(fabs(w[1] - (1 + lr * 2 / (2 + eps))), 1e-6);
	ck_assert_float_eq(w[2], 1.0f);
	ck_assert_double_le(fabs(m[0] - (1 - b1) * 0.5), 1e-8);
	ck_assert_double_le(fabs(m[1] + (1 - b1) * 2), 1e-8);
	ck_assert_double_le(fabs(v[0] - (1 - b2) * 0.25), 1e-10);
	ck_assert_double_le(fabs(v[1] - (1 - b2) * 4), 1e-10);
	ck_assert_float_eq(v[2], 0.0f);
	/* second step, computed in double */
	for (i = 0; i < 3; i++) {
		md[i] = b1 * m[i] + (1 - b1) * g2[i];
		vd[i] = b2 * v[i] + (1 - b2) * g2[i] * g2[i];
		wd[i] = w[i] - lr * (md[i] / (1 - b1 * b1)) /
			(sqrt(vd[i] / (1 - b2 * b2)) + eps);
	}
	ad.t = 2;
	rlb_adam_update(&ad, 3, w, g2, m, v);
	for (i = 0; i < 3; i++) {
		ck_assert_double_le(fabs(m[i] - md[i]), 1e-7);
		ck_assert_double_le(fabs(v[i] - vd[i]), 1e-9);
		ck_assert_double_le(fabs(w[i] - wd[i]), 1e-6);
	}
	rlb_adam_update(&ad, 0, NULL, NULL, NULL, NULL);
}
END_TEST

Suite *rlb_suite_expert(void)
{
	Suite *s = suite_create("expert");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_forward_reference);
	tcase_add_test(tc, test_backward_reference);
	tcase_add_test(tc, test_backward_finite_differences);
	tcase_add_test(tc, test_ungated_forward_reference);
	tcase_add_test(tc, test_ungated_backward_reference);
	tcase_add_test(tc, test_ungated_finite_differences);
	tcase_add_test(tc, test_dw_accumulates);
	tcase_add_test(tc, test_rows_and_splits_bit_exact);
	tcase_add_test(tc, test_golden_bits);
	tcase_add_test(tc, test_zero_rows_noop);
	tcase_add_test(tc, test_combine);
	tcase_add_test(tc, test_default_gates);
	tcase_add_test(tc, test_expert_init);
	tcase_add_test(tc, test_ungated_sizes_and_init);
	tcase_add_test(tc, test_hidden_init);
	tcase_add_test(tc, test_adam);
	suite_add_tcase(s, tc);
	return s;
}
