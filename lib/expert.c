/*
 * expert.c - the MoE layer math of train-step on the CPU (expert.h): the
 * SwiGLU expert and the ungated squared-ReLU expert, forward and backward
 * as blocked fp32 matrix products, the default gate rule, Adam, and the
 * hash-generated weights and inputs.
 *
 * Determinism.  Every output element is a sum in one fixed order that
 * depends only on the shape, never on n, on the row's place in the batch
 * or on the blocking below:
 *   g, u (forward)   k = 0 .. hidden-1 ascending, starting from +0
 *   y (forward)      j = 0 .. ffn-1 ascending, starting from +0
 *   dh = dy w_down^T c = 0 .. hidden-1 ascending
 *   dx               j = 0 .. ffn-1 ascending, per j the gate term then
 *                    the up term (ungated: the up term alone)
 *   dw               rows in the order given, added straight into dw
 * so a row's y and dx are the same bits alone or in any batch, and two
 * calls over rows [0, a) and [a, n) leave the same dw bits as one call.
 * The products use GCC/Clang vector extensions (element-wise + and *
 * only): 4-float vectors everywhere, plus an 8-float AVX2 copy on x86-64
 * picked at run time where the CPU has it; both do the same operations
 * per element, so they give the same bits.  The build must not contract
 * a * b + c into fused multiply-adds (-std=c11 keeps GCC's
 * -ffp-contract=off; the AVX2 copy does not enable FMA).
 *
 * Hash.  rlb_expert_init, rlb_hidden_init and rlb_default_gates draw from
 * splitmix64's finaliser mix(z): the key is folded one field at a time,
 * h = mix(h ^ field), starting from h = mix(seed ^ domain) with a per-use
 * domain constant, and each value is mix(h ^ index).  The top 24 bits of
 * a value map to [-1, 1) exactly as (int)(v >> 40) / 2^23 - 1; the
 * gates' u_k is (v >> 11) / 2^53 in [0, 1).  Weights are that value
 * times 1 / sqrt(fan_in): hidden for w_gate and w_up, ffn for w_down.
 * Any rank can thus rebuild any expert's weights or any token's input
 * with no communication.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "expert.h"

#if !defined(__GNUC__)
#error "expert.c needs the GCC/Clang vector extensions"
#endif

typedef float rlb_v4 __attribute__((vector_size(16)));
#if defined(__x86_64__)
typedef float rlb_v8 __attribute__((vector_size(32)));
#endif

/*
 * Register tile: MR rows by two vectors (NR = 2 W floats, W = 4 or 8)
 * of the output, kept in 2 MR vector registers.
 */
#define MR 6
/* Widest tile (the AVX2 one). */
#define NR_MAX 16
/* Depth of one pass over the products (the packed B strip is KC x NR). */
#define KC 256
/* Rows per block of the expert (scratch is about 5 * RB * FC floats). */
#define RB 256
/* ffn columns per chunk of the expert. */
#define FC 256
/* The blocks used when the scratch cannot be allocated. */
#define RB_SMALL 16
#define FC_SMALL 64
/* Padding of scratch rows, in floats. */
#define PAD 16
/* Rows of A per block when A is read transposed (the weight gradients). */
#define MC_T 96

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

/*
 * One operand of a product: element (r, c) at p[r * rs + c * cs].  With
 * p2 set (B operands only), row r is taken from p for even r and from p2
 * for odd r, both at row r / 2: the gate and up terms interleaved.
 */
struct opnd {
	const float *p;
	const float *p2;
	size_t rs;
	size_t cs;
};

/*
 * Pack B rows [k0, k0 + kc), columns [j0, j0 + cols) into bp[kc][nr],
 * zero-padded; k0 is even (a multiple of KC).
 */
ALWAYS_INLINE void pack_b(const struct opnd *b, size_t k0, size_t kc,
			  size_t j0, size_t cols, float *bp, size_t nr)
{
	size_t k, t;

	if (cols < nr)
		memset(bp, 0, kc * nr * sizeof(float));
	if (!b->p2 && b->cs == 1) {
		const float *src = b->p + k0 * b->rs + j0;

		if (cols == nr)
			for (k = 0; k < kc; k++)
				memcpy(bp + k * nr, src + k * b->rs, nr * sizeof(float));
		else
			for (k = 0; k < kc; k++)
				memcpy(bp + k * nr, src + k * b->rs, cols * sizeof(float));
		return;
	}
	for (t = 0; t < cols; t++) {
		const float *src = b->p + (j0 + t) * b->cs;
		float *dst = bp + t;

		if (!b->p2) {
			src += k0 * b->rs;
			for (k = 0; k < kc; k++)
				dst[k * nr] = src[k * b->rs];
		} else {
			const float *src2 = b->p2 + (j0 + t) * b->cs + k0 / 2 * b->rs;

			src += k0 / 2 * b->rs;
			for (k = 0; k + 1 < kc; k += 2) {
				dst[k * nr] = src[k / 2 * b->rs];
				dst[(k + 1) * nr] = src2[k / 2 * b->rs];
			}
			if (k < kc)
				dst[k * nr] = src[k / 2 * b->rs];
		}
	}
}

/* Load or store n <= 2 w floats of one tile row as two w-float vectors. */
ALWAYS_INLINE void row_load(const float *c, size_t n, size_t w, void *lo,
			    void *hi)
{
	if (n == 2 * w) {
		memcpy(lo, c, w * sizeof(float));
		memcpy(hi, c + w, w * sizeof(float));
	} else if (n > w) {
		memcpy(lo, c, w * sizeof(float));
		memcpy(hi, c + w, (n - w) * sizeof(float));
	} else {
		memcpy(lo, c, n * sizeof(float));
	}
}

ALWAYS_INLINE void row_store(float *c, size_t n, size_t w, const void *lo,
			     const void *hi)
{
	if (n == 2 * w) {
		memcpy(c, lo, w * sizeof(float));
		memcpy(c + w, hi, w * sizeof(float));
	} else if (n > w) {
		memcpy(c, lo, w * sizeof(float));
		memcpy(c + w, hi, (n - w) * sizeof(float));
	} else {
		memcpy(c, lo, n * sizeof(float));
	}
}

/*
 * RLB_GEMM(SFX, VT, W, ATTR) defines, for vectors VT of W floats:
 *
 * tile_SFX: c[rows][cols] (row stride ldc) = (load ? c : 0) + sum over
 * k < kc of a(r, k) * bp[k], in k order; rows <= MR, cols <= 2 W.
 * Missing rows repeat row 0 and are not stored, so every stored element
 * sees the same operations whatever the tile's fill.
 *
 * gemm_SFX: C[M][N] (row stride ldc) = (acc ? C : 0) + A[M][K] B[K][N],
 * each element summed in k order.  Loops: depth blocks of KC, row blocks
 * of mc (A's block stays in L2), 2 W-wide column strips of B packed once
 * per row block (L1), MR-row tiles.
 */
#define RLB_GEMM(SFX, VT, W, ATTR)						\
ALWAYS_INLINE ATTR void								\
tile_##SFX(size_t kc, const float *a, size_t ars, size_t aks,			\
	   const float *bp, float *c, size_t ldc, int load, size_t rows,	\
	   size_t cols)								\
{										\
	const float *a0 = a, *a1 = a, *a2 = a, *a3 = a, *a4 = a, *a5 = a;	\
	VT c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0};		\
	VT d0 = {0}, d1 = {0}, d2 = {0}, d3 = {0}, d4 = {0}, d5 = {0};		\
	size_t k;								\
										\
	if (rows > 1)								\
		a1 = a + ars;							\
	if (rows > 2)								\
		a2 = a + 2 * ars;						\
	if (rows > 3)								\
		a3 = a + 3 * ars;						\
	if (rows > 4)								\
		a4 = a + 4 * ars;						\
	if (rows > 5)								\
		a5 = a + 5 * ars;						\
	if (load) {								\
		row_load(c, cols, W, &c0, &d0);					\
		if (rows > 1)							\
			row_load(c + ldc, cols, W, &c1, &d1);			\
		if (rows > 2)							\
			row_load(c + 2 * ldc, cols, W, &c2, &d2);		\
		if (rows > 3)							\
			row_load(c + 3 * ldc, cols, W, &c3, &d3);		\
		if (rows > 4)							\
			row_load(c + 4 * ldc, cols, W, &c4, &d4);		\
		if (rows > 5)							\
			row_load(c + 5 * ldc, cols, W, &c5, &d5);		\
	}									\
	for (k = 0; k < kc; k++) {						\
		VT b, e;							\
		size_t o = k * aks;						\
		float x0 = a0[o], x1 = a1[o], x2 = a2[o];			\
		float x3 = a3[o], x4 = a4[o], x5 = a5[o];			\
										\
		memcpy(&b, bp + k * 2 * W, sizeof(b));				\
		memcpy(&e, bp + k * 2 * W + W, sizeof(e));			\
		c0 += x0 * b;							\
		d0 += x0 * e;							\
		c1 += x1 * b;							\
		d1 += x1 * e;							\
		c2 += x2 * b;							\
		d2 += x2 * e;							\
		c3 += x3 * b;							\
		d3 += x3 * e;							\
		c4 += x4 * b;							\
		d4 += x4 * e;							\
		c5 += x5 * b;							\
		d5 += x5 * e;							\
	}									\
	row_store(c, cols, W, &c0, &d0);					\
	if (rows > 1)								\
		row_store(c + ldc, cols, W, &c1, &d1);				\
	if (rows > 2)								\
		row_store(c + 2 * ldc, cols, W, &c2, &d2);			\
	if (rows > 3)								\
		row_store(c + 3 * ldc, cols, W, &c3, &d3);			\
	if (rows > 4)								\
		row_store(c + 4 * ldc, cols, W, &c4, &d4);			\
	if (rows > 5)								\
		row_store(c + 5 * ldc, cols, W, &c5, &d5);			\
}										\
										\
static ATTR void								\
gemm_##SFX(size_t M, size_t N, size_t K, const struct opnd *a,			\
	   const struct opnd *b, float *c, size_t ldc, int acc, size_t mc)	\
{										\
	float bp[KC * 2 * W] __attribute__((aligned(32)));			\
	size_t k0, i0, j, i;							\
										\
	for (k0 = 0; k0 < K; k0 += KC) {					\
		size_t kc = min_sz(KC, K - k0);					\
		int load = acc || k0 > 0;					\
										\
		for (i0 = 0; i0 < M; i0 += mc) {				\
			size_t i1 = min_sz(M, i0 + mc);				\
										\
			for (j = 0; j < N; j += 2 * W) {			\
				size_t cols = min_sz(2 * W, N - j);		\
										\
				pack_b(b, k0, kc, j, cols, bp, 2 * W);		\
				for (i = i0; i < i1; i += MR) {			\
					size_t rows = min_sz(MR, i1 - i);	\
					const float *ap = a->p + i * a->rs +	\
							  k0 * a->cs;		\
					float *cp = c + i * ldc + j;		\
										\
					if (rows == MR && cols == 2 * W)	\
						tile_##SFX(kc, ap, a->rs,	\
							   a->cs, bp, cp, ldc,	\
							   load, MR, 2 * W);	\
					else					\
						tile_##SFX(kc, ap, a->rs,	\
							   a->cs, bp, cp, ldc,	\
							   load, rows, cols);	\
				}						\
			}							\
		}								\
	}									\
}

RLB_GEMM(base, rlb_v4, 4, )
#if defined(__x86_64__)
RLB_GEMM(avx2, rlb_v8, 8, __attribute__((target("avx2"))))
#endif

/*
 * C[M][N] (row stride ldc) = (acc ? C : 0) + A[M][K] B[K][N], with the
 * AVX2 kernel where the CPU has it: the same operations element by
 * element, so the same bits either way.
 */
static void gemm(size_t M, size_t N, size_t K, const struct opnd *a,
		 const struct opnd *b, float *c, size_t ldc, int acc, size_t mc)
{
	size_t i;

	if (K == 0) {
		if (!acc)
			for (i = 0; i < M; i++)
				memset(c + i * ldc, 0, N * sizeof(float));
		return;
	}
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2")) {
		gemm_avx2(M, N, K, a, b, c, ldc, acc, mc);
		return;
	}
#endif
	gemm_base(M, N, K, a, b, c, ldc, acc, mc);
}

/* sigmoid(g), and silu(g) = g * sigmoid(g), the same bits in both passes. */
static inline float sigmoid(float g)
{
	return 1.0f / (1.0f + expf(-g));
}

uint32_t rlb_expert_matrices(const struct rlb_expert_shape *s)
{
	return s->ungated ? 2 : 3;
}

size_t rlb_expert_params(const struct rlb_expert_shape *s)
{
	return rlb_expert_matrices(s) * (size_t)s->hidden * s->ffn;
}

size_t rlb_expert_act_per_row(const struct rlb_expert_shape *s)
{
	return (s->ungated ? 1 : 2) * (size_t)s->ffn;
}

/*
 * Scratch for blocks of rb rows by fc ffn columns: `per` matrices of
 * rb x fc whose rows are padded by PAD floats (row strides that are large
 * powers of two make the tile's rows collide in the cache).  RB x FC from
 * the heap, else RB_SMALL x FC_SMALL from `small` (the same bits either
 * way, only the blocking changes).
 */
static float *scratch_get(size_t n, size_t ffn, size_t per, float *small,
			  size_t *rb, size_t *fc)
{
	float *p;

	*rb = min_sz(RB, n);
	*fc = min_sz(FC, ffn);
	p = malloc(*rb * per * (*fc + PAD) * sizeof(float));
	if (p)
		return p;
	*rb = min_sz(RB_SMALL, n);
	*fc = min_sz(FC_SMALL, ffn);
	return small;
}

/*
 * relu(u), keeping a NaN (u < 0 is false for it) so that a diverged run
 * shows in y as it does through silu.
 */
static inline float relu(float u)
{
	return u < 0.0f ? 0.0f : u;
}

/*
 * Either expert's forward, gated: g = x w_gate, u = x w_up, h = silu(g) u;
 * ungated: u = x w_up, h = relu(u)^2; then y = h w_down.
 */
void rlb_expert_forward(const struct rlb_expert_shape *s, const float *w,
			size_t n, const float *x, float *y, float *act)
{
	size_t H = s->hidden, F = s->ffn, A = rlb_expert_act_per_row(s);
	size_t gate = s->ungated ? 0 : H * F;	/* w_gate's floats, before w_up */
	const float *wg = w, *wu = w + gate, *wd = wu + H * F;
	float small[RB_SMALL * (FC_SMALL + PAD)];
	float *h = NULL;
	size_t rb, fc, r0, j0, i, j;

	if (n == 0 || H == 0)
		goto out;
	if (F == 0) {
		memset(y, 0, n * H * sizeof(float));
		goto out;
	}
	h = scratch_get(n, F, 1, small, &rb, &fc);
	for (r0 = 0; r0 < n; r0 += rb) {
		size_t m = min_sz(rb, n - r0);
		const float *xb = x + r0 * H;
		float *ab = act + r0 * A, *yb = y + r0 * H;

		for (j0 = 0; j0 < F; j0 += fc) {
			size_t f = min_sz(fc, F - j0);
			struct opnd ax = { xb, NULL, H, 1 };
			struct opnd bg = { wg + j0, NULL, F, 1 };
			struct opnd bu = { wu + j0, NULL, F, 1 };
			size_t ld = f + PAD;
			struct opnd ah = { h, NULL, ld, 1 };
			struct opnd bd = { wd + j0 * H, NULL, H, 1 };

			if (s->ungated) {
				gemm(m, f, H, &ax, &bu, ab + j0, A, 0, m);
				for (i = 0; i < m; i++)
					for (j = 0; j < f; j++) {
						float r = relu(ab[i * A + j0 + j]);

						h[i * ld + j] = r * r;
					}
			} else {
				gemm(m, f, H, &ax, &bg, ab + j0, A, 0, m);
				gemm(m, f, H, &ax, &bu, ab + F + j0, A, 0, m);
				for (i = 0; i < m; i++)
					for (j = 0; j < f; j++) {
						float g = ab[i * A + j0 + j];
						float u = ab[i * A + F + j0 + j];

						h[i * ld + j] = g * sigmoid(g) * u;
					}
			}
			gemm(m, H, f, &ah, &bd, yb, H, j0 > 0, m);
		}
	}
out:
	if (h != small)
		free(h);
}

/*
 * Either expert's backward, dh = dy w_down^T first.  Gated: dg = dh u
 * silu'(g), du = dh silu(g); dw_gate += x^T dg, dw_up += x^T du, dx =
 * [dg du] [w_gate w_up]^T.  Ungated: du = dh 2 relu(u); dw_up += x^T du,
 * dx = du w_up^T.  Both: dw_down += h^T dy, h recomputed as the forward
 * made it.
 */
void rlb_expert_backward(const struct rlb_expert_shape *s, const float *w,
			 size_t n, const float *x, const float *act,
			 const float *dy, float *dx, float *dw)
{
	size_t H = s->hidden, F = s->ffn, A = rlb_expert_act_per_row(s);
	size_t gate = s->ungated ? 0 : H * F;	/* w_gate's floats, before w_up */
	const float *wg = w, *wu = w + gate, *wd = wu + H * F;
	float *dwg = dw, *dwu = dw + gate, *dwd = dwu + H * F;
	float small[5 * RB_SMALL * (FC_SMALL + PAD)];
	float *buf = NULL;
	size_t rb, fc, r0, j0, i, j;

	if (n == 0 || H == 0)
		goto out;
	if (F == 0) {
		memset(dx, 0, n * H * sizeof(float));
		goto out;
	}
	/* h and dh, and for the gated expert du and [dg du] interleaved */
	buf = scratch_get(n, F, s->ungated ? 2 : 5, small, &rb, &fc);
	for (r0 = 0; r0 < n; r0 += rb) {
		size_t m = min_sz(rb, n - r0);
		const float *xb = x + r0 * H, *dyb = dy + r0 * H;
		const float *ab = act + r0 * A;
		float *dxb = dx + r0 * H;

		for (j0 = 0; j0 < F; j0 += fc) {
			size_t f = min_sz(fc, F - j0), ld = f + PAD;
			float *h = buf, *dv = h + rb * (fc + PAD);
			struct opnd ady = { dyb, NULL, H, 1 };
			struct opnd bdt = { wd + j0 * H, NULL, 1, H };
			struct opnd axt = { xb, NULL, 1, H };
			struct opnd bdv = { dv, NULL, ld, 1 };
			struct opnd aht = { h, NULL, 1, ld };
			struct opnd bdy = { dyb, NULL, H, 1 };

			/* dh = dy w_down[chunk]^T, into dv */
			gemm(m, f, H, &ady, &bdt, dv, ld, 0, m);
			if (s->ungated) {
				struct opnd adv = { dv, NULL, ld, 1 };
				struct opnd but = { wu + j0, NULL, 1, F };

				/* dv = du */
				for (i = 0; i < m; i++)
					for (j = 0; j < f; j++) {
						float r = relu(ab[i * A + j0 + j]);

						h[i * ld + j] = r * r;
						dv[i * ld + j] *= 2.0f * r;
					}
				/* dw_up[:, chunk] += x^T du */
				gemm(H, f, m, &axt, &bdv, dwu + j0, F, 1, MC_T);
				/* dx (+)= du w_up[chunk]^T */
				gemm(m, H, f, &adv, &but, dxb, H, j0 > 0, m);
			} else {
				size_t ldu = 2 * f + PAD;
				float *du = dv + rb * (fc + PAD), *dgu = du + rb * (fc + PAD);
				struct opnd bdu = { du, NULL, ld, 1 };
				struct opnd adgu = { dgu, NULL, ldu, 1 };
				struct opnd bgu = { wg + j0, wu + j0, 1, F };

				/* dv = dg */
				for (i = 0; i < m; i++)
					for (j = 0; j < f; j++) {
						float g = ab[i * A + j0 + j];
						float u = ab[i * A + F + j0 + j];
						float sg = sigmoid(g), silu = g * sg;
						float dh = dv[i * ld + j];
						float vg = dh * u * (sg * (1.0f + g * (1.0f - sg)));
						float vu = dh * silu;

						h[i * ld + j] = silu * u;
						dv[i * ld + j] = vg;
						du[i * ld + j] = vu;
						dgu[i * ldu + 2 * j] = vg;
						dgu[i * ldu + 2 * j + 1] = vu;
					}
				/* dw_gate[:, chunk] += x^T dg; dw_up likewise */
				gemm(H, f, m, &axt, &bdv, dwg + j0, F, 1, MC_T);
				gemm(H, f, m, &axt, &bdu, dwu + j0, F, 1, MC_T);
				/* dx (+)= [dg du] [w_gate w_up][chunk]^T, interleaved */
				gemm(m, H, 2 * f, &adgu, &bgu, dxb, H, j0 > 0, m);
			}
			/* dw_down[chunk, :] += h^T dy */
			gemm(f, H, m, &aht, &bdy, dwd + j0 * H, H, 1, MC_T);
		}
	}
out:
	if (buf != small)
		free(buf);
}

void rlb_combine_rows(size_t n, uint32_t hidden, const float *gate,
		      const float *y, float *y_out)
{
	size_t i, c;

	for (i = 0; i < n; i++) {
		float gi = gate[i];
		const float *yr = y + i * hidden;
		float *o = y_out + i * hidden;

		for (c = 0; c < hidden; c++)
			o[c] += gi * yr[c];
	}
}

/* Domains of the hash, so the three streams never share keys. */
#define DOMAIN_GATES 0x67617465735f7631ULL	/* "gates_v1" */
#define DOMAIN_INIT 0x696e69745f5f7631ULL	/* "init__v1" */
#define DOMAIN_HIDDEN 0x68696464656e7631ULL	/* "hiddenv1" */

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A value's top 24 bits as a float in [-1, 1), exactly. */
static float unit_signed(uint64_t v)
{
	return (float)((int32_t)(v >> 40) - (1 << 23)) * 0x1p-23f;
}

/* l_k = -0.5 k + 0.25 u_k of the token whose key hash is h. */
static double gate_logit(uint64_t h, uint32_t k)
{
	return -0.5 * k + 0.25 * ((double)(mix(h ^ k) >> 11) * 0x1p-53);
}

void rlb_default_gates(uint64_t seed, uint32_t seq, uint32_t pos,
		       uint32_t layer, uint32_t topk, float *gates)
{
	uint64_t h = mix(mix(mix(mix(seed ^ DOMAIN_GATES) ^ seq) ^ pos) ^ layer);
	double sum = 0, l0 = gate_logit(h, 0);
	uint32_t k;

	/* l_0 is the largest logit (they decrease), so exp(l_k - l_0) <= 1 */
	for (k = 0; k < topk; k++)
		sum += exp(gate_logit(h, k) - l0);
	for (k = 0; k < topk; k++)
		gates[k] = (float)(exp(gate_logit(h, k) - l0) / sum);
}

void rlb_expert_init(const struct rlb_expert_shape *s, uint64_t seed,
		     uint32_t layer, uint32_t expert, float *w)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F, i;
	uint64_t h = mix(mix(mix(seed ^ DOMAIN_INIT) ^ layer) ^ expert);
	float a_in = H ? (float)(1.0 / sqrt((double)H)) : 0;
	float a_ffn = F ? (float)(1.0 / sqrt((double)F)) : 0;
	/* an ungated expert is the gated one's up and down: indices from hf */
	size_t skip = s->ungated ? hf : 0;

	for (i = skip; i < 3 * hf; i++)
		w[i - skip] = unit_signed(mix(h ^ i)) * (i < 2 * hf ? a_in : a_ffn);
}

void rlb_hidden_init(uint64_t seed, uint32_t step, uint32_t seq,
		     uint32_t pos, uint32_t hidden, float *x)
{
	uint64_t h = mix(mix(mix(mix(seed ^ DOMAIN_HIDDEN) ^ step) ^ seq) ^ pos);
	uint32_t i;

	for (i = 0; i < hidden; i++)
		x[i] = unit_signed(mix(h ^ i));
}

void rlb_adam_update(const struct rlb_adam *a, size_t n, float *w,
		     const float *g, float *m, float *v)
{
	uint32_t t = a->t ? a->t : 1;
	float b1 = a->beta1, b2 = a->beta2;
	float c1 = (float)(1.0 / (1.0 - pow(b1, t)));
	float c2 = (float)(1.0 / (1.0 - pow(b2, t)));
	size_t i;

	for (i = 0; i < n; i++) {
		float mi = b1 * m[i] + (1.0f - b1) * g[i];
		float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];

		m[i] = mi;
		v[i] = vi;
		w[i] -= a->lr * (mi * c1) / (sqrtf(vi * c2) + a->eps);
	}
}
