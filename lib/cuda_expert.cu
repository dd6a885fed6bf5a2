/*
 * cuda_expert.cu - the compute of the CUDA backend (lib/backend_cuda.h):
 * the expert GEMMs through cuBLAS, the experts of a call in batches
 * (lib/cuda_plan.h): per GEMM stage one grouped call where cuBLAS takes
 * the types, else one call per row count over the experts that share it
 * (RLB_CUDA_GEMM); and its own kernels for permute, combine, SwiGLU,
 * gradient accumulation and Adam.  blas_fail is the one place that wraps
 * cuBLAS's status codes.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"

/* Experts of one GEMM call, and rows of one call (bounds scratch). */
#define BATCH_MAX 32
#define BATCH_ROWS 65536
/*
 * cuBLAS's workspace, given once so that no call allocates one (an
 * allocation can wait for the device, and a bf16-output GEMM split along
 * k needs one): 32 MiB, cuBLAS's own default on Hopper.
 */
#define BLAS_WS_BYTES ((size_t)32 << 20)

/* ------------------------------------------------------------------ */
/* cuBLAS.                                                              */

/*
 * cuBLAS is loaded when the first CUDA backend is made, not linked: its
 * load-time initialisers would run in every relibra process, CPU runs too.
 */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
				     int, int, int, const void *, const void *,
				     cudaDataType_t, int, const void *, cudaDataType_t, int,
				     const void *, void *, cudaDataType_t, int,
				     cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_grouped_ex_fn)(cublasHandle_t, const cublasOperation_t[],
					     const cublasOperation_t[], const int[], const int[],
					     const int[], const void *, const void *const[],
					     cudaDataType_t, const int[], const void *const[],
					     cudaDataType_t, const int[], const void *,
					     void *const[], cudaDataType_t, const int[], int,
					     const int[], cublasComputeType_t);
typedef cublasStatus_t (*gemm_batched_ex_fn)(cublasHandle_t, cublasOperation_t,
					     cublasOperation_t, int, int, int, const void *,
					     const void *const[], cudaDataType_t, int,
					     const void *const[], cudaDataType_t, int,
					     const void *, void *const[], cudaDataType_t, int,
					     int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
	decltype(&cublasCreate_v2) create;
	decltype(&cublasDestroy_v2) destroy;
	decltype(&cublasSetStream_v2) set_stream;
	decltype(&cublasSetWorkspace_v2) set_workspace;
	decltype(&cublasSetMathMode) set_math_mode;
	gemm_ex_fn gemm;
	gemm_batched_ex_fn gemm_batched;
	gemm_grouped_ex_fn gemm_grouped;	/* cuBLAS 12.5 and later, else NULL */
	decltype(&cublasGetStatusString) status_string;
	char error[256];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)

static void blas_load(void)
{
	static const char *const names[] = {
		"libcublas.so." BLAS_STR(CUBLAS_VER_MAJOR), "libcublas.so",
	};
	void *h = NULL;
	size_t i;

	for (i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();

		snprintf(blas.error, sizeof(blas.error), "cannot load cuBLAS (%s): %s",
			 names[0], e ? e : "not found");
		return;
	}
	*(void **)&blas.create = dlsym(h, "cublasCreate_v2");
	*(void **)&blas.destroy = dlsym(h, "cublasDestroy_v2");
	*(void **)&blas.set_stream = dlsym(h, "cublasSetStream_v2");
	*(void **)&blas.set_workspace = dlsym(h, "cublasSetWorkspace_v2");
	*(void **)&blas.set_math_mode = dlsym(h, "cublasSetMathMode");
	*(void **)&blas.gemm = dlsym(h, "cublasGemmEx");
	*(void **)&blas.gemm_batched = dlsym(h, "cublasGemmBatchedEx");
	*(void **)&blas.gemm_grouped = dlsym(h, "cublasGemmGroupedBatchedEx");
	*(void **)&blas.status_string = dlsym(h, "cublasGetStatusString");
	if (!blas.create || !blas.destroy || !blas.set_stream || !blas.set_workspace ||
	    !blas.set_math_mode ||
	    !blas.gemm || !blas.gemm_batched || !blas.status_string) {
		snprintf(blas.error, sizeof(blas.error),
			 "cannot load cuBLAS (%s): a function is missing", names[0]);
		blas.create = NULL;
	}
}

static int blas_fail(struct rlb_err *err, cublasStatus_t s, const char *what)
{
	return rlb_err_set(err, RLB_ECUDA, "%s: %s", what, blas.status_string ?
			   blas.status_string(s) : "cuBLAS error");
}

#define CB(call, what) \
	do { cublasStatus_t s_ = (call); \
	     if (s_ != CUBLAS_STATUS_SUCCESS) return blas_fail(err, s_, what); } while (0)

int rlb_cuda_blas_init(struct cuda_priv *p, struct rlb_err *err)
{
	if (pthread_once(&blas_once, blas_load) != 0 || !blas.create)
		return rlb_err_set(err, RLB_EUNSUPPORTED, "%s",
				   blas.error[0] ? blas.error : "cannot load cuBLAS");
	CB(blas.create(&p->blas), "cublasCreate");
	CB(blas.set_math_mode(p->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
	CU(cudaMalloc(&p->blas_ws, BLAS_WS_BYTES), "cudaMalloc (cuBLAS workspace)");
	return 0;
}

void rlb_cuda_blas_release(struct cuda_priv *p)
{
	if (p->blas)
		blas.destroy(p->blas);
	if (p->blas_ws)
		cudaFree(p->blas_ws);
	p->blas = NULL;
	p->blas_ws = NULL;
}

/* ------------------------------------------------------------------ */
/* Kernels.                                                             */

/* Pointer arrays of a batched GEMM, passed by value so no host buffer must live on. */
struct ptr_args {
	const void *p[3 * BATCH_MAX];
	unsigned n;
};

static __global__ void k_ptrs(struct ptr_args a, const void **dst)
{
	unsigned i = threadIdx.x;

	if (i < a.n)
		dst[i] = a.p[i];
}

static __global__ void k_gather(size_t n, uint32_t width, const uint32_t *idx,
			 const float *scale, const bf16 *src, bf16 *dst)
{
	for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
		const bf16 *from = src + (size_t)idx[i] * width;
		bf16 *to = dst + i * width;

		if (scale) {
			float s = scale[i];

			for (uint32_t j = threadIdx.x; j < width; j += blockDim.x)
				to[j] = __float2bfloat16(s * __bfloat162float(from[j]));
		} else {
			for (uint32_t j = threadIdx.x; j < width; j += blockDim.x)
				to[j] = from[j];
		}
	}
}

/* inout[t] += sum over k ascending of gate * y[idx], in fp32, rounded once. */
static __global__ void k_combine(size_t ntok, uint32_t topk, uint32_t hidden,
			  const uint32_t *idx, const float *gate, const bf16 *y,
			  bf16 *inout)
{
	for (size_t t = blockIdx.x; t < ntok; t += gridDim.x)
		for (uint32_t j = threadIdx.x; j < hidden; j += blockDim.x) {
			float acc = __bfloat162float(inout[t * hidden + j]);

			for (uint32_t k = 0; k < topk; k++) {
				size_t r = t * topk + k;
				size_t row = idx ? idx[r] : r;
				float g = gate ? gate[r] : 1.0f;

				acc += g * __bfloat162float(y[row * hidden + j]);
			}
			inout[t * hidden + j] = __float2bfloat16(acc);
		}
}

/* Per-job pointers and rows of a batched elementwise kernel (blockIdx.y is the job). */
struct job_args {
	const void *a[BATCH_MAX];
	const void *b[BATCH_MAX];
	void *c[BATCH_MAX];
	void *d[BATCH_MAX];
	size_t rows[BATCH_MAX];
};

__device__ static float sigmoidf_(float g)
{
	return 1.0f / (1.0f + expf(-g));
}

/*
 * The SwiGLU kernels take a row a block (blockIdx.x strides the rows) and
 * two columns a thread where ffn is even (the rows are then 4-byte
 * aligned: buffers and scratch start aligned, rows are whole pairs).
 */
static __device__ void swiglu_fwd_at(const bf16 *act, bf16 *h, uint32_t ffn, uint32_t j)
{
	float g = __bfloat162float(act[j]), u = __bfloat162float(act[ffn + j]);

	h[j] = __float2bfloat16(g * sigmoidf_(g) * u);
}

/* h = silu(g) * u from act rows [g | u]. */
static __global__ void k_swiglu_fwd(struct job_args a, uint32_t ffn)
{
	size_t rows = a.rows[blockIdx.y];

	for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const bf16 *act = (const bf16 *)a.a[blockIdx.y] + r * 2 * ffn;
		bf16 *h = (bf16 *)a.c[blockIdx.y] + r * ffn;

		if (ffn % 2 == 0) {
			const __nv_bfloat162 *g2 = (const __nv_bfloat162 *)act;
			const __nv_bfloat162 *u2 = (const __nv_bfloat162 *)(act + ffn);
			__nv_bfloat162 *h2 = (__nv_bfloat162 *)h;

			for (uint32_t j = threadIdx.x; j < ffn / 2; j += blockDim.x) {
				float2 g = __bfloat1622float2(g2[j]), u = __bfloat1622float2(u2[j]);

				h2[j] = __floats2bfloat162_rn(g.x * sigmoidf_(g.x) * u.x,
							      g.y * sigmoidf_(g.y) * u.y);
			}
		} else {
			for (uint32_t j = threadIdx.x; j < ffn; j += blockDim.x)
				swiglu_fwd_at(act, h, ffn, j);
		}
	}
}

/* dg, du and h of one element from g, u and dh. */
static __device__ void swiglu_bwd_one(float g, float u, float d, float *dg, float *du,
				      float *h)
{
	float sg = sigmoidf_(g), silu = g * sg;

	*dg = d * u * (sg * (1.0f + g * (1.0f - sg)));
	*du = d * silu;
	*h = silu * u;
}

/* From act [g | u] and dh: dgu [dg | du] and h (for dw_down). */
static __global__ void k_swiglu_bwd(struct job_args a, uint32_t ffn)
{
	size_t rows = a.rows[blockIdx.y];

	for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
		const bf16 *act = (const bf16 *)a.a[blockIdx.y] + r * 2 * ffn;
		const bf16 *dh = (const bf16 *)a.b[blockIdx.y] + r * ffn;
		bf16 *dgu = (bf16 *)a.c[blockIdx.y] + r * 2 * ffn;
		bf16 *h = (bf16 *)a.d[blockIdx.y] + r * ffn;

		if (ffn % 2 == 0) {
			const __nv_bfloat162 *g2 = (const __nv_bfloat162 *)act;
			const __nv_bfloat162 *u2 = (const __nv_bfloat162 *)(act + ffn);
			const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)dh;
			__nv_bfloat162 *dg2 = (__nv_bfloat162 *)dgu;
			__nv_bfloat162 *du2 = (__nv_bfloat162 *)(dgu + ffn);
			__nv_bfloat162 *h2 = (__nv_bfloat162 *)h;

			for (uint32_t j = threadIdx.x; j < ffn / 2; j += blockDim.x) {
				float2 g = __bfloat1622float2(g2[j]), u = __bfloat1622float2(u2[j]);
				float2 d = __bfloat1622float2(d2[j]);
				float dgx, dgy, dux, duy, hx, hy;

				swiglu_bwd_one(g.x, u.x, d.x, &dgx, &dux, &hx);
				swiglu_bwd_one(g.y, u.y, d.y, &dgy, &duy, &hy);
				dg2[j] = __floats2bfloat162_rn(dgx, dgy);
				du2[j] = __floats2bfloat162_rn(dux, duy);
				h2[j] = __floats2bfloat162_rn(hx, hy);
			}
		} else {
			for (uint32_t j = threadIdx.x; j < ffn; j += blockDim.x) {
				float dg, du, hv;

				swiglu_bwd_one(__bfloat162float(act[j]), __bfloat162float(act[ffn + j]),
					       __bfloat162float(dh[j]), &dg, &du, &hv);
				dgu[j] = __float2bfloat16(dg);
				dgu[ffn + j] = __float2bfloat16(du);
				h[j] = __float2bfloat16(hv);
			}
		}
	}
}

static __global__ void k_acc_add(size_t n, float *dst, const float *src)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] += src[i];
}

struct adam_args {
	float lr, b1, b2, eps, c1, c2, scale;
};

/* lib/expert.c's rlb_adam_update on the fp32 master, then the bf16 copy. */
static __global__ void k_adam(size_t n, struct adam_args a, const float *g,
		       float *master, float *m, float *v, bf16 *w)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = a.scale * g[i];
		float mi = a.b1 * m[i] + (1.0f - a.b1) * gi;
		float vi = a.b2 * v[i] + (1.0f - a.b2) * gi * gi;
		float wi = master[i] - a.lr * (mi * a.c1) / (sqrtf(vi * a.c2) + a.eps);

		m[i] = mi;
		v[i] = vi;
		master[i] = wi;
		w[i] = __float2bfloat16(wi);
	}
}

/* ------------------------------------------------------------------ */
/* Row movement.                                                        */

int rlb_cuda_gather(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		    uint32_t width, const uint32_t *idx, const float *scale,
		    const void *src, void *dst, struct rlb_err *err)
{
	(void)be;
	if (!n || !width)
		return 0;
	k_gather<<<blocks_for(n, 1), 128, 0, q->s>>>(n, width, idx, scale,
						     (const bf16 *)src, (bf16 *)dst);
	LAUNCHED("gather kernel");
	return 0;
}

int rlb_cuda_combine(struct rlb_backend *be, struct rlb_queue *q,
		     size_t ntok, uint32_t topk, uint32_t hidden,
		     const uint32_t *idx, const float *gate, const void *y,
		     void *inout, struct rlb_err *err)
{
	(void)be;
	if (!ntok || !hidden || !topk)
		return 0;
	k_combine<<<blocks_for(ntok, 1), 128, 0, q->s>>>(ntok, topk, hidden, idx, gate,
							 (const bf16 *)y, (bf16 *)inout);
	LAUNCHED("combine kernel");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Expert math.                                                         */

/*
 * A GEMM in cuBLAS terms (column-major): C = alpha op(A) op(B) + beta C,
 * A and B bf16, C bf16 or fp32, fp32 accumulation, alpha 1.
 */
struct gemm_shape {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	cudaDataType_t ctype;
	float beta;
};

static struct gemm_shape shape(cublasOperation_t ta, cublasOperation_t tb,
			       size_t m, size_t n, size_t k, size_t lda, size_t ldb,
			       size_t ldc, cudaDataType_t ctype, float beta)
{
	struct gemm_shape g;

	g.ta = ta;
	g.tb = tb;
	g.m = (int)m;
	g.n = (int)n;
	g.k = (int)k;
	g.lda = (int)lda;
	g.ldb = (int)ldb;
	g.ldc = (int)ldc;
	g.ctype = ctype;
	g.beta = beta;
	return g;
}

/* Which dimension of a stage's GEMMs is the job's rows. */
enum { VARY_N, VARY_K };

static struct gemm_shape with_rows(const struct gemm_shape *g, int vary, size_t rows)
{
	struct gemm_shape s = *g;

	if (vary == VARY_N)
		s.n = (int)rows;
	else
		s.k = (int)rows;
	return s;
}

static int gemm_one(struct cuda_priv *p, const struct gemm_shape *g, const void *A,
		    const void *B, void *C, struct rlb_err *err)
{
	const float alpha = 1.0f;

	CB(blas.gemm(p->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha, A, CUDA_R_16BF,
		     g->lda, B, CUDA_R_16BF, g->ldb, &g->beta, C, g->ctype, g->ldc,
		     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
	return 0;
}

/* cuBLAS's grouped GEMM over a stage's runs of equal rows: 1 done, 0 not taken. */
static int gemm_grouped(struct cuda_priv *p, void **ptrs, const struct gemm_shape *g,
			int vary, const size_t *rows, unsigned count,
			const unsigned *first, const unsigned *len, unsigned nrun,
			struct rlb_err *err)
{
	cublasOperation_t ta[BATCH_MAX], tb[BATCH_MAX];
	int m[BATCH_MAX], n[BATCH_MAX], k[BATCH_MAX], size[BATCH_MAX];
	int lda[BATCH_MAX], ldb[BATCH_MAX], ldc[BATCH_MAX];
	float alpha[BATCH_MAX], beta[BATCH_MAX];
	int fp32 = g->ctype == CUDA_R_32F;
	cublasStatus_t st;
	unsigned i;

	if (!blas.gemm_grouped || !p->gemm_grouped || p->grouped_bad[fp32])
		return 0;
	for (i = 0; i < nrun; i++) {
		struct gemm_shape s = with_rows(g, vary, rows[first[i]]);

		ta[i] = s.ta;
		tb[i] = s.tb;
		m[i] = s.m;
		n[i] = s.n;
		k[i] = s.k;
		lda[i] = s.lda;
		ldb[i] = s.ldb;
		ldc[i] = s.ldc;
		alpha[i] = 1.0f;
		beta[i] = s.beta;
		size[i] = (int)len[i];
	}
	st = blas.gemm_grouped(p->blas, ta, tb, m, n, k, alpha, (const void *const *)ptrs,
			       CUDA_R_16BF, lda, (const void *const *)(ptrs + count),
			       CUDA_R_16BF, ldb, beta, (void *const *)(ptrs + 2 * count),
			       g->ctype, ldc, (int)nrun, size, CUBLAS_COMPUTE_32F);
	if (st == CUBLAS_STATUS_SUCCESS)
		return 1;
	if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
		return blas_fail(err, st, "cublasGemmGroupedBatchedEx");
	p->grouped_bad[fp32] = 1;	/* these types: one call per row count from now on */
	return 0;
}

/*
 * One GEMM stage over the COUNT jobs of a batch, job i's GEMM of shape G
 * but for its rows (rows[i], ascending), which are its n (VARY_N) or its k
 * (VARY_K), on A[i], B[i], C[i].  One job: cublasGemmEx; more: the
 * pointer arrays written on the device (k_ptrs, into PTRS), then one
 * grouped GEMM, or one call per run of equal rows.
 */
static int gemm_stage(struct rlb_backend *be, struct rlb_queue *q, void **ptrs,
		      const struct gemm_shape *g, int vary, const size_t *rows,
		      unsigned count, const void *const *A, const void *const *B,
		      void *const *C, struct rlb_err *err)
{
	struct cuda_priv *p = priv(be);
	unsigned first[BATCH_MAX], len[BATCH_MAX], nrun = 0, i, j;
	const float alpha = 1.0f;
	struct ptr_args a;
	int ret;

	if (count == 0)
		return 0;
	if (count > BATCH_MAX)
		return rlb_err_set(err, RLB_EINVAL, "GEMM stage of %u jobs", count);
	if (count == 1) {
		struct gemm_shape s = with_rows(g, vary, rows[0]);

		return gemm_one(p, &s, A[0], B[0], C[0], err);
	}
	for (i = 0; i < count; i = j) {
		for (j = i + 1; j < count && rows[j] == rows[i]; j++)
			;
		first[nrun] = i;
		len[nrun++] = j - i;
	}
	memset(&a, 0, sizeof(a));
	for (i = 0; i < count; i++) {
		a.p[i] = A[i];
		a.p[count + i] = B[i];
		a.p[2 * count + i] = C[i];
	}
	a.n = 3 * count;
	k_ptrs<<<1, 3 * BATCH_MAX, 0, q->s>>>(a, (const void **)ptrs);
	LAUNCHED("pointer kernel");
	if (nrun > 1) {
		ret = gemm_grouped(p, ptrs, g, vary, rows, count, first, len, nrun, err);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	for (i = 0; i < nrun; i++) {
		struct gemm_shape s = with_rows(g, vary, rows[first[i]]);
		unsigned o = first[i];

		if (len[i] == 1) {
			ret = gemm_one(p, &s, A[o], B[o], C[o], err);
			if (ret)
				return ret;
			continue;
		}
		CB(blas.gemm_batched(p->blas, s.ta, s.tb, s.m, s.n, s.k, &alpha,
				     (const void *const *)(ptrs + o), CUDA_R_16BF, s.lda,
				     (const void *const *)(ptrs + count + o), CUDA_R_16BF, s.ldb,
				     &s.beta, (void *const *)(ptrs + 2 * count + o), s.ctype,
				     s.ldc, (int)len[i], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmBatchedEx");
	}
	return 0;
}

static const char *off(const void *p, size_t elems, size_t bytes)
{
	return (const char *)p + elems * bytes;
}

/* Grid of a per-row kernel over jobs of at most ROWS rows. */
static dim3 row_grid(size_t rows, unsigned count)
{
	return dim3(rows == 0 ? 1 : rows > 8192 ? 8192 : (unsigned)rows, count);
}

/*
 * A batch: COUNT jobs (jobs[sel[i]]), rows[i] rows each, ascending, and
 * at[i] the first row of job i among the batch's N rows (for scratch).
 */
struct batch {
	const struct rlb_expert_job *jobs;
	const size_t *sel;
	unsigned count;
	size_t rows[BATCH_MAX], at[BATCH_MAX], n;
};

#define PTRS_BYTES align_up(3 * BATCH_MAX * sizeof(void *))

/*
 * Forward of a batch (weights [H][gate | up] then down, k_gu_layout):
 *   act = x w_gu      ([rows][2 ffn]: [g | u], saved for backward)
 *   h = silu(g) * u   (scratch)
 *   y = h w_down
 */
static int forward_batch(struct rlb_backend *be, struct rlb_queue *q,
			 const struct rlb_expert_shape *s, const struct batch *b,
			 struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F;
	const void *A[BATCH_MAX], *B[BATCH_MAX];
	void *C[BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void *sc = NULL, **ptrs;
	char *hbuf;
	unsigned i;
	int ret;

	ret = scratch(q, PTRS_BYTES + b->n * F * sizeof(bf16), &sc, err);
	if (ret)
		return ret;
	ptrs = (void **)sc;
	hbuf = (char *)sc + PTRS_BYTES;
	for (i = 0; i < b->count; i++) {
		A[i] = b->jobs[b->sel[i]].w;
		B[i] = b->jobs[b->sel[i]].x;
		C[i] = b->jobs[b->sel[i]].act;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, 2 * F, 0, H, 2 * F, H, 2 * F, CUDA_R_16BF, 0.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < b->count; i++) {
		ja.a[i] = b->jobs[b->sel[i]].act;
		ja.c[i] = hbuf + b->at[i] * F * sizeof(bf16);
		ja.rows[i] = b->rows[i];
	}
	k_swiglu_fwd<<<row_grid(b->rows[b->count - 1], b->count), 128, 0, q->s>>>(ja, (uint32_t)F);
	LAUNCHED("SwiGLU kernel");
	for (i = 0; i < b->count; i++) {
		A[i] = off(b->jobs[b->sel[i]].w, 2 * hf, sizeof(bf16));
		B[i] = ja.c[i];
		C[i] = b->jobs[b->sel[i]].y;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_N, H, 0, F, H, F, H, CUDA_R_16BF, 0.0f);
	return gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
}

/*
 * Backward of a batch (bf16 activations and their gradients, the weight
 * gradients added in fp32):
 *   dh = dy w_down^T              dgu = [dg | du], h from act and dh
 *   g_down += h^T dy              g_gu += x^T dgu
 *   dx = dgu w_gu^T
 */
static int backward_batch(struct rlb_backend *be, struct rlb_queue *q,
			  const struct rlb_expert_shape *s, const struct batch *b,
			  struct rlb_err *err)
{
	size_t H = s->hidden, F = s->ffn, hf = H * F, n = b->n;
	size_t o_dh = PTRS_BYTES;
	size_t o_dgu = o_dh + align_up(n * F * sizeof(bf16));
	size_t o_h = o_dgu + align_up(n * 2 * F * sizeof(bf16));
	size_t total = o_h + n * F * sizeof(bf16);
	const void *A[BATCH_MAX], *B[BATCH_MAX];
	void *C[BATCH_MAX];
	struct job_args ja;
	struct gemm_shape g;
	void **ptrs;
	char *sc = NULL;
	unsigned i;
	int ret;

	ret = scratch(q, total, (void **)&sc, err);
	if (ret)
		return ret;
	ptrs = (void **)sc;
#define JOB(i) (&b->jobs[b->sel[i]])
#define DH(i) (sc + o_dh + b->at[i] * F * sizeof(bf16))
#define DGU(i) (sc + o_dgu + b->at[i] * 2 * F * sizeof(bf16))
#define HB(i) (sc + o_h + b->at[i] * F * sizeof(bf16))
	/* dh^T (F x rows) = w_down (row-major F x H, seen as H x F), transposed, times dy^T */
	for (i = 0; i < b->count; i++) {
		A[i] = off(JOB(i)->w, 2 * hf, sizeof(bf16));
		B[i] = JOB(i)->dy;
		C[i] = DH(i);
	}
	g = shape(CUBLAS_OP_T, CUBLAS_OP_N, F, 0, H, H, H, F, CUDA_R_16BF, 0.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	memset(&ja, 0, sizeof(ja));
	for (i = 0; i < b->count; i++) {
		ja.a[i] = JOB(i)->act;
		ja.b[i] = DH(i);
		ja.c[i] = DGU(i);
		ja.d[i] = HB(i);
		ja.rows[i] = b->rows[i];
	}
	k_swiglu_bwd<<<row_grid(b->rows[b->count - 1], b->count), 128, 0, q->s>>>(ja, (uint32_t)F);
	LAUNCHED("SwiGLU backward kernel");
	/* g_down (H x F column-major) += dy^T h */
	for (i = 0; i < b->count; i++) {
		A[i] = JOB(i)->dy;
		B[i] = HB(i);
		C[i] = (void *)off(JOB(i)->g, 2 * hf, sizeof(float));
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, H, F, 0, H, F, H, CUDA_R_32F, 1.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_K, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	/* g_gu (2F x H column-major: [H][g | u]) += dgu^T x */
	for (i = 0; i < b->count; i++) {
		A[i] = DGU(i);
		B[i] = JOB(i)->x;
		C[i] = JOB(i)->g;
	}
	g = shape(CUBLAS_OP_N, CUBLAS_OP_T, 2 * F, H, 0, 2 * F, H, 2 * F, CUDA_R_32F, 1.0f);
	ret = gemm_stage(be, q, ptrs, &g, VARY_K, b->rows, b->count, A, B, C, err);
	if (ret)
		return ret;
	/* dx^T (H x rows) = w_gu^T (H x 2F) dgu^T */
	for (i = 0; i < b->count; i++) {
		A[i] = JOB(i)->w;
		B[i] = DGU(i);
		C[i] = JOB(i)->dx;
	}
#undef JOB
#undef DH
#undef DGU
#undef HB
	g = shape(CUBLAS_OP_T, CUBLAS_OP_N, H, 0, 2 * F, 2 * F, 2 * F, H, CUDA_R_16BF, 0.0f);
	return gemm_stage(be, q, ptrs, &g, VARY_N, b->rows, b->count, A, B, C, err);
}

/*
 * The handle on q's stream, with our workspace: cublasSetStream puts
 * cuBLAS's own pool back, so both go together, and only on a change.
 */
static int blas_on(struct cuda_priv *p, struct rlb_queue *q, struct rlb_err *err)
{
	if (p->blas_stream == q->s)
		return 0;
	CB(blas.set_stream(p->blas, q->s), "cublasSetStream");
	CB(blas.set_workspace(p->blas, p->blas_ws, BLAS_WS_BYTES), "cublasSetWorkspace");
	p->blas_stream = q->s;
	return 0;
}

typedef int (*batch_fn)(struct rlb_backend *be, struct rlb_queue *q,
			const struct rlb_expert_shape *s, const struct batch *b,
			struct rlb_err *err);

/* The jobs in batches (rlb_gemm_batches), each run by FN. */
static int run_batches(struct rlb_backend *be, struct rlb_queue *q,
		       const struct rlb_expert_shape *s,
		       const struct rlb_expert_job *jobs, size_t njobs,
		       batch_fn fn, struct rlb_err *err)
{
	size_t *rows = NULL, *order = NULL, nb = 0, i, k;
	struct rlb_gemm_batch *batches = NULL;
	int ret = 0;

	if (njobs == 0)
		return 0;
	if (s->hidden == 0 || s->ffn == 0)
		return rlb_err_set(err, RLB_EINVAL, "empty expert shape");
	ret = rlb_cuda_gated_only(s, err);
	if (ret)
		return ret;
	rows = (size_t *)malloc(njobs * sizeof(*rows));
	order = (size_t *)malloc(njobs * sizeof(*order));
	batches = (struct rlb_gemm_batch *)malloc(njobs * sizeof(*batches));
	if (!rows || !order || !batches) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < njobs; i++)
		rows[i] = jobs[i].rows;
	ret = rlb_gemm_batches(rows, njobs, BATCH_MAX, BATCH_ROWS, order, batches, &nb, err);
	if (ret == 0)
		ret = blas_on(priv(be), q, err);
	for (i = 0; ret == 0 && i < nb; i++) {
		struct batch b;

		b.jobs = jobs;
		b.sel = order + batches[i].first;
		b.count = (unsigned)batches[i].count;
		b.n = 0;
		for (k = 0; k < b.count; k++) {
			b.rows[k] = jobs[b.sel[k]].rows;
			b.at[k] = b.n;
			b.n += b.rows[k];
		}
		ret = fn(be, q, s, &b, err);
	}
out:
	free(rows);
	free(order);
	free(batches);
	return ret;
}

int rlb_cuda_expert_forward(struct rlb_backend *be, struct rlb_queue *q,
			    const struct rlb_expert_shape *s,
			    const struct rlb_expert_job *jobs, size_t njobs,
			    struct rlb_err *err)
{
	return run_batches(be, q, s, jobs, njobs, forward_batch, err);
}

/* fp32 accumulation: the order of rows and replicas changes the last bits. */
int rlb_cuda_expert_backward(struct rlb_backend *be, struct rlb_queue *q,
			     const struct rlb_expert_shape *s,
			     const struct rlb_expert_job *jobs, size_t njobs,
			     struct rlb_err *err)
{
	return run_batches(be, q, s, jobs, njobs, backward_batch, err);
}

int rlb_cuda_acc_add(struct rlb_backend *be, struct rlb_queue *q, size_t n,
		     void *dst, const void *src, struct rlb_err *err)
{
	(void)be;
	if (!n)
		return 0;
	k_acc_add<<<blocks_for(n, 256), 256, 0, q->s>>>(n, (float *)dst, (const float *)src);
	LAUNCHED("accumulate kernel");
	return 0;
}

int rlb_cuda_adam(struct rlb_backend *be, struct rlb_queue *q,
		  const struct rlb_adam *a, size_t n, float scale, void *w,
		  const void *g, void *opt, struct rlb_err *err)
{
	uint32_t t = a->t ? a->t : 1;
	struct adam_args x;
	float *o = (float *)opt;

	(void)be;
	if (!n)
		return 0;
	x.lr = a->lr;
	x.b1 = a->beta1;
	x.b2 = a->beta2;
	x.eps = a->eps;
	x.c1 = (float)(1.0 / (1.0 - pow(a->beta1, t)));
	x.c2 = (float)(1.0 / (1.0 - pow(a->beta2, t)));
	x.scale = scale;
	k_adam<<<blocks_for(n, 256), 256, 0, q->s>>>(n, x, (const float *)g, o, o + n,
						     o + 2 * n, (bf16 *)w);
	LAUNCHED("Adam kernel");
	return 0;
}
