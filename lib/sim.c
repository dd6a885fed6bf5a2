/*
 * sim.c - the cost model of a training step: expert compute on the slowest
 * GPU, dispatch and combine from the traffic pass (traffic.c), replica
 * copies beyond the overlap window, replica gradient reduction, migration,
 * planning and the dense part; the uniform-traffic and same-traffic
 * ideals; imbalance values kept for the summary.  docs/cost-model.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

void rlb_sim_params_init(struct rlb_sim_params *p, const struct rlb_config *cfg)
{
	const struct rlb_model_config *m = &cfg->model;
	const struct rlb_cluster_config *c = &cfg->cluster;
	/* routed experts and their token copies work in the latent, when there is one */
	double w = rlb_model_expert_width(m), f = m->expert_ffn;
	double mats = rlb_model_ffn_matrices(m);

	memset(p, 0, sizeof(*p));
	p->peak_flops = c->peak_tflops * 1e12;
	p->gemm_eff_max = c->gemm_eff_max;
	p->gemm_eff_half_rows = c->gemm_eff_half_rows;
	p->hbm_bytes_per_s = c->hbm_gbps * 1e9;
	p->nvlink_bytes_per_s = c->nvlink_gbps * 1e9;
	p->nvlink_latency_s = c->nvlink_latency_us * 1e-6;
	p->rdma_bytes_per_s = c->rdma_gbps * 1e9;
	p->rdma_latency_s = c->rdma_latency_us * 1e-6;
	p->expert_params = mats * w * f;
	p->expert_flops_per_row = 2.0 * p->expert_params;
	p->expert_weight_bytes = 2.0 * p->expert_params;
	p->expert_grad_bytes = 2.0 * p->expert_params;
	p->migration_bytes = p->expert_params * cfg->balancer.migration_bytes_per_param;
	p->token_bytes = 2.0 * w;
	p->planner_overlap = cfg->balancer.planner_overlap;
	p->passes = cfg->parallel.recompute ? 4 : 3;
	p->a2a_phases = cfg->parallel.recompute ? 6 : 4;
	p->gpus_per_node = c->gpus_per_node > 0 ? (uint32_t)rlb_config_ep_gpus_per_node(cfg) : 1;
	p->dense_time_s = m->dense_time_ms * 1e-3;
	p->hidden = m->hidden;
	p->moe_latent = m->moe_latent;
	p->q_heads = m->q_heads;
	p->kv_heads = m->kv_heads;
	p->head_dim = m->head_dim;
	p->experts = m->experts;
	p->shared_experts = m->shared_experts;
	p->shared_expert_ffn = m->shared_expert_ffn;
	p->dense_ffn = m->dense_ffn;
	p->layout = *m;
}

/* GEMM time of ROWS rows of a matrix set with these FLOPs per row and weight bytes. */
static double gemm_s(const struct rlb_sim_params *p, double rows,
		     double flops_per_row, double weight_bytes)
{
	double eta, t, floor_s;

	if (rows <= 0)
		return 0;
	eta = p->gemm_eff_max * rows / (rows + p->gemm_eff_half_rows);
	t = flops_per_row * rows / (p->peak_flops * eta);
	floor_s = weight_bytes / p->hbm_bytes_per_s;
	return t > floor_s ? t : floor_s;
}

double rlb_sim_gemm_s(const struct rlb_sim_params *p, uint64_t rows)
{
	return gemm_s(p, (double)rows, p->expert_flops_per_row, p->expert_weight_bytes);
}

void rlb_sim_opts_for_policy(struct rlb_sim_opts *o, enum rlb_policy policy)
{
	o->policy = policy;
	o->window = policy == RLB_POLICY_RELIBRA ? RLB_SIM_WINDOW_PREV_LAYER
						 : RLB_SIM_WINDOW_NONE;
	o->relay = 0;
}

/* A growable array of doubles. */
struct dvec {
	double *v;
	size_t n, cap;
};

static int dvec_reserve(struct dvec *d, size_t more)
{
	size_t cap;
	double *v;

	if (d->n + more <= d->cap)
		return 0;
	cap = d->cap ? d->cap : 1024;
	while (cap < d->n + more)
		cap *= 2;
	v = realloc(d->v, cap * sizeof(*v));
	if (!v)
		return RLB_ENOMEM;
	d->v = v;
	d->cap = cap;
	return 0;
}

enum { V_GPU_BEFORE, V_GPU_AFTER, V_NODE_BEFORE, V_NODE_AFTER, V_NODE_FLOOR, NVEC };

struct rlb_sim {
	struct rlb_sim_params p;
	struct rlb_sim_opts o;
	int have_shape;
	uint32_t layers, experts, ranks, gpn, nodes;
	uint32_t *prev_home;		/* [layers][experts] homes of the previous step */
	struct rlb_sim_summary acc;	/* sums; distributions at rlb_sim_summary */
	struct dvec vals[NVEC];		/* per (mb, layer) with rows */
	struct dvec rank_vals;		/* per micro-batch with tokens */
};

int rlb_sim_new(struct rlb_sim **out, const struct rlb_config *cfg,
		const struct rlb_sim_opts *opts, struct rlb_err *err)
{
	struct rlb_sim *sim;
	int ret;

	*out = NULL;
	sim = calloc(1, sizeof(*sim));
	if (!sim)
		return rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
	rlb_sim_params_init(&sim->p, cfg);
	if (opts) {
		sim->o = *opts;
	} else {
		enum rlb_policy pol;

		ret = rlb_policy_from_name(cfg->balancer.policy, &pol, err);
		if (ret < 0) {
			free(sim);
			return ret;
		}
		rlb_sim_opts_for_policy(&sim->o, pol);
	}
	if ((unsigned)sim->o.policy >= RLB_POLICY_COUNT ||
	    (sim->o.window != RLB_SIM_WINDOW_NONE && sim->o.window != RLB_SIM_WINDOW_PREV_LAYER)) {
		free(sim);
		return rlb_err_set(err, RLB_EINVAL, "sim: unknown policy or window");
	}
	if (!(sim->p.peak_flops > 0 && sim->p.gemm_eff_max > 0 && sim->p.hbm_bytes_per_s > 0 &&
	      sim->p.nvlink_bytes_per_s > 0 && sim->p.rdma_bytes_per_s > 0)) {
		free(sim);
		return rlb_err_set(err, RLB_EINVAL, "sim: peak, efficiency and bandwidths must be positive");
	}
	sim->acc.policy = sim->o.policy;
	*out = sim;
	return 0;
}

void rlb_sim_free(struct rlb_sim *sim)
{
	int i;

	if (!sim)
		return;
	free(sim->prev_home);
	for (i = 0; i < NVEC; i++)
		free(sim->vals[i].v);
	free(sim->rank_vals.v);
	free(sim);
}

const struct rlb_sim_params *rlb_sim_params(const struct rlb_sim *sim)
{
	return &sim->p;
}

/* ------------------------------------------------------------------ */
/* Checks.                                                             */

static int check_traffic(const struct rlb_traffic *t, const struct rlb_loads *l,
			 uint32_t gpn, const char *what, struct rlb_err *err)
{
	if (!t)
		return rlb_err_set(err, RLB_EINVAL, "sim: no %s traffic", what);
	if (t->micro_batches != l->micro_batches || t->layers != l->layers ||
	    t->ranks != l->ranks || t->experts != l->experts || t->gpus_per_node != gpn)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "sim: %s traffic of %u micro-batches x %u layers x %u experts on %u ranks (%u per node), loads of %u x %u x %u on %u (%u per node)",
				   what, t->micro_batches, t->layers, t->experts, t->ranks,
				   t->gpus_per_node, l->micro_batches, l->layers, l->experts,
				   l->ranks, gpn);
	return 0;
}

/* Homes, instance bounds and GPUs of a plan within range. */
static int check_plan_ranges(const struct rlb_step_plan *p, struct rlb_err *err)
{
	size_t ncells = (size_t)p->micro_batches * p->layers * p->experts, i;

	if (!p->home || !p->inst_first)
		return rlb_err_set(err, RLB_EINVAL, "sim: plan has no placement");
	for (i = 0; i < (size_t)p->layers * p->experts; i++)
		if (p->home[i] >= p->ranks)
			return rlb_err_set(err, RLB_EINVAL, "sim: home GPU %u out of range", p->home[i]);
	for (i = 0; i < ncells; i++)
		if (p->inst_first[i] > p->inst_first[i + 1] || p->inst_first[i + 1] > p->ninst)
			return rlb_err_set(err, RLB_EINVAL, "sim: plan cell %zu has bad instance bounds", i);
	for (i = 0; i < p->inst_first[ncells]; i++)
		if (p->inst[i].gpu >= p->ranks)
			return rlb_err_set(err, RLB_EINVAL, "sim: instance GPU %u out of range", p->inst[i].gpu);
	return 0;
}

static int check_inputs(const struct rlb_sim *sim, const struct rlb_schedule *s,
			const struct rlb_loads *l, const struct rlb_step_plan *plan,
			const struct rlb_traffic *t, const struct rlb_traffic *st,
			uint32_t gpn, struct rlb_err *err)
{
	int ret;

	if (l->ranks == 0 || l->experts == 0 || l->experts % l->ranks)
		return rlb_err_set(err, RLB_EINVAL, "sim: %u experts are not a positive multiple of %u ranks",
				   l->experts, l->ranks);
	if (l->ranks % gpn)
		return rlb_err_set(err, RLB_EINVAL, "sim: %u GPUs per node do not divide %u ranks",
				   gpn, l->ranks);
	if (s->micro_batches != l->micro_batches || s->ranks != l->ranks)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "sim: schedule of %u micro-batches on %u ranks, loads of %u on %u",
				   s->micro_batches, s->ranks, l->micro_batches, l->ranks);
	if (sim->have_shape && (l->layers != sim->layers || l->experts != sim->experts ||
				l->ranks != sim->ranks))
		return rlb_err_set(err, RLB_EMISMATCH,
				   "sim: step %u has %u layers x %u experts on %u ranks, earlier steps %u x %u on %u",
				   s->step, l->layers, l->experts, l->ranks, sim->layers,
				   sim->experts, sim->ranks);
	if (plan) {
		uint32_t pgpn = plan->gpus_per_node < plan->ranks ? plan->gpus_per_node : plan->ranks;

		if (plan->micro_batches != l->micro_batches || plan->layers != l->layers ||
		    plan->experts != l->experts || plan->ranks != l->ranks || pgpn != gpn)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "sim: plan of %u micro-batches x %u layers x %u experts on %u ranks (%u per node), loads of %u x %u x %u on %u (%u per node)",
					   plan->micro_batches, plan->layers, plan->experts,
					   plan->ranks, plan->gpus_per_node, l->micro_batches,
					   l->layers, l->experts, l->ranks, gpn);
		ret = check_plan_ranges(plan, err);
		if (ret < 0)
			return ret;
	}
	ret = check_traffic(t, l, gpn, "plan", err);
	if (ret < 0)
		return ret;
	if (sim->o.relay && sim->o.policy != RLB_POLICY_IDEAL && !t->rdma_to_node)
		return rlb_err_set(err, RLB_EINVAL,
				   "sim: the relay needs the plan's traffic counted per node (rlb_traffic_count_nodes)");
	return check_traffic(st, l, gpn, "static", err);
}

/* ------------------------------------------------------------------ */
/* Terms.                                                              */

/* Busiest GPU of one network: latency + max(sent, received) / bandwidth; 0 when idle. */
static double net_s(const double *send, const double *recv, uint32_t n,
		    double latency_s, double bytes_per_s)
{
	double busy = 0;
	uint32_t g;

	for (g = 0; g < n; g++) {
		if (send[g] > busy)
			busy = send[g];
		if (recv[g] > busy)
			busy = recv[g];
	}
	return busy > 0 ? latency_s + busy / bytes_per_s : 0;
}

/* One dispatch over one network from per-GPU copy counts. */
static double copies_s(const uint64_t *send, const uint64_t *recv, uint32_t n,
		       double token_bytes, double latency_s, double bytes_per_s)
{
	uint64_t busy = 0;
	uint32_t g;

	for (g = 0; g < n; g++) {
		if (send[g] > busy)
			busy = send[g];
		if (recv[g] > busy)
			busy = recv[g];
	}
	return busy ? latency_s + (double)busy * token_bytes / bytes_per_s : 0;
}

static uint64_t sum_u64(const uint64_t *v, uint32_t n)
{
	uint64_t s = 0;
	uint32_t i;

	for (i = 0; i < n; i++)
		s += v[i];
	return s;
}

/* One dispatch at the mean volume of the static layout. */
static double mean_copies_s(const uint64_t *send, uint32_t n, double token_bytes,
			    double latency_s, double bytes_per_s)
{
	uint64_t total = sum_u64(send, n);

	return total ? latency_s + (double)total / n * token_bytes / bytes_per_s : 0;
}

/* Largest value over its mean (0 when the total is 0). */
static double max_over_mean(const uint64_t *v, uint32_t n)
{
	uint64_t max = 0, total = 0;
	uint32_t i;

	for (i = 0; i < n; i++) {
		total += v[i];
		if (v[i] > max)
			max = v[i];
	}
	return total ? (double)max * n / (double)total : 0;
}

/* Does cell (mb, layer, expert) have an instance on GPU? */
static int has_instance(const struct rlb_step_plan *p, uint32_t mb, uint32_t layer,
			uint32_t expert, uint32_t gpu)
{
	uint32_t n, i;
	const struct rlb_plan_instance *in = rlb_step_plan_cell(p, mb, layer, expert, &n);

	for (i = 0; i < n; i++)
		if (in[i].gpu == gpu)
			return 1;
	return 0;
}

/*
 * What a layer costs besides its routed experts, by kind: a decoder
 * layer's (no layer_pattern) by its attention kind, as a MoE layer
 * (attention, projections, router, shared experts) or a dense one
 * (attention, projections, dense FFN); a pattern layer's by its letter.
 */
enum {
	K_DECODER_MOE = 0,			/* + the attention kind */
	K_DECODER_DENSE = RLB_ATT_KINDS,	/* + the attention kind */
	K_ROUTER = 2 * RLB_ATT_KINDS,		/* 'E': router and shared experts */
	K_MLP,					/* '-': a dense FFN */
	K_ATTENTION,				/* '*': full attention and its projections */
	K_MAMBA,				/* 'M': a Mamba-2 mixer */
	NKINDS
};

/* Per-step workspace. */
struct work {
	uint32_t R, E, nodes, gpn, mbs, layers;
	double *tok, *ctx, *ctxw;	/* [mb][rank] tokens, causal context sums (full, windowed or chunked) */
	double *fwd;			/* [mb][NKINDS] forward time of one layer of each kind */
	double dense_n[NKINDS];		/* the model's layers that are not MoE, of each kind */
	double *before_n;		/* [layer][NKINDS] of them since the previous MoE layer */
	unsigned char *moe_kind;	/* [layer] kind of the MoE layer */
	uint64_t *erows;		/* [E] rows per expert */
	uint64_t *gpu_static, *gpu_plan, *node_a, *node_b; /* [R], [R], [nodes], [nodes] */
	double *gpu_t;			/* [R] forward expert time */
	double *ns, *nr, *rs, *rr;	/* [R] bytes per GPU of one exchange */
	uint64_t *relay;		/* [4][R] copies of the relayed dispatch: RDMA and NVLink, sent and received */
	double *vals;			/* [mbs * layers][NVEC] */
	size_t nvals;
};

static void work_free(struct work *w)
{
	free(w->tok);
	free(w->ctx);
	free(w->ctxw);
	free(w->fwd);
	free(w->before_n);
	free(w->moe_kind);
	free(w->erows);
	free(w->gpu_static);
	free(w->gpu_plan);
	free(w->node_a);
	free(w->node_b);
	free(w->gpu_t);
	free(w->ns);
	free(w->nr);
	free(w->rs);
	free(w->rr);
	free(w->relay);
	free(w->vals);
}

static int work_alloc(struct work *w, const struct rlb_loads *l, uint32_t gpn)
{
	size_t mr = (size_t)l->micro_batches * l->ranks, ml = (size_t)l->micro_batches * l->layers;

	memset(w, 0, sizeof(*w));
	w->R = l->ranks;
	w->E = l->experts;
	w->gpn = gpn;
	w->nodes = l->ranks / gpn;
	w->mbs = l->micro_batches;
	w->layers = l->layers;
	w->tok = calloc(mr + 1, sizeof(double));
	w->ctx = calloc(mr + 1, sizeof(double));
	w->ctxw = calloc(mr + 1, sizeof(double));
	w->fwd = calloc(((size_t)w->mbs + 1) * NKINDS, sizeof(double));
	w->before_n = calloc(((size_t)w->layers + 1) * NKINDS, sizeof(double));
	w->moe_kind = calloc((size_t)w->layers + 1, 1);
	w->erows = calloc(w->E, sizeof(uint64_t));
	w->gpu_static = calloc(w->R, sizeof(uint64_t));
	w->gpu_plan = calloc(w->R, sizeof(uint64_t));
	w->node_a = calloc(w->nodes, sizeof(uint64_t));
	w->node_b = calloc(w->nodes, sizeof(uint64_t));
	w->gpu_t = calloc(w->R, sizeof(double));
	w->ns = calloc(w->R, sizeof(double));
	w->nr = calloc(w->R, sizeof(double));
	w->rs = calloc(w->R, sizeof(double));
	w->rr = calloc(w->R, sizeof(double));
	w->relay = calloc((size_t)4 * w->R, sizeof(uint64_t));
	w->vals = calloc(ml * NVEC + 1, sizeof(double));
	if (!w->tok || !w->ctx || !w->ctxw || !w->fwd || !w->before_n || !w->moe_kind ||
	    !w->erows ||
	    !w->gpu_static || !w->gpu_plan || !w->node_a || !w->node_b || !w->gpu_t ||
	    !w->ns || !w->nr || !w->rs || !w->rr || !w->relay || !w->vals)
		return RLB_ENOMEM;
	return 0;
}

static void clear_exchange(struct work *w)
{
	memset(w->ns, 0, w->R * sizeof(double));
	memset(w->nr, 0, w->R * sizeof(double));
	memset(w->rs, 0, w->R * sizeof(double));
	memset(w->rr, 0, w->R * sizeof(double));
}

/* BYTES from GPU a to GPU b: NVLink inside a node, else RDMA. */
static void exchange(struct work *w, uint32_t a, uint32_t b, double bytes,
		     double *nvlink_bytes, double *rdma_bytes)
{
	if (a / w->gpn == b / w->gpn) {
		w->ns[a] += bytes;
		w->nr[b] += bytes;
		*nvlink_bytes += bytes;
	} else {
		w->rs[a] += bytes;
		w->rr[b] += bytes;
		*rdma_bytes += bytes;
	}
}


/* Time of the exchange in w: both networks at once, the slower sets it. */
static double exchange_s(const struct rlb_sim_params *p, const struct work *w)
{
	double n = net_s(w->ns, w->nr, w->R, p->nvlink_latency_s, p->nvlink_bytes_per_s);
	double r = net_s(w->rs, w->rr, w->R, p->rdma_latency_s, p->rdma_bytes_per_s);

	return n > r ? n : r;
}

/* Causal context of T tokens from position ST, each attending to at most WIN positions. */
static double window_ctx(double st, double t, double win)
{
	double a = st + 1, b = st + t;	/* the positions each token attends to, a .. b */

	if (b <= win)
		return t * (a + b) / 2;
	if (a > win)
		return t * win;
	return (win - a + 1) * (a + win) / 2 + (b - win) * win;
}

/*
 * Causal context of T tokens from position ST when each attends within
 * its aligned chunk of C positions: the token at position p to p mod C + 1.
 */
static double chunk_ctx(double st, double t, double c)
{
	double off = fmod(st, c), head, full, tail;

	if (off + t <= c)		/* inside one chunk */
		return t * (2 * off + t + 1) / 2;
	head = c - off;			/* the rest of the first chunk */
	full = floor((t - head) / c);	/* whole chunks after it */
	tail = t - head - full * c;	/* the start of the last one */
	return head * (off + 1 + c) / 2 + full * c * (c + 1) / 2 + tail * (tail + 1) / 2;
}

/* The kind of hidden layer I, a MoE layer when MOE. */
static int layer_kind(const struct rlb_model_config *m, long i, int moe)
{
	switch (rlb_model_layer_block(m, i)) {
	case RLB_BLOCK_MOE:
		return K_ROUTER;
	case RLB_BLOCK_MLP:
		return K_MLP;
	case RLB_BLOCK_ATTENTION:
		return K_ATTENTION;
	case RLB_BLOCK_MAMBA:
		return K_MAMBA;
	default:
		return (moe ? K_DECODER_MOE : K_DECODER_DENSE) + rlb_model_layer_attention(m, i);
	}
}

/*
 * The layers' kinds: of each MoE layer, of the other layers before it
 * (since the previous MoE layer), and of all the model's other layers
 * (those after the last MoE layer included).
 */
static void layer_kinds(const struct rlb_sim_params *p, struct work *w)
{
	const struct rlb_model_config *m = &p->layout;
	long j, i, prev = -1, hidden = rlb_model_hidden_layers(m);

	for (j = 0; j <= m->moe_layers; j++) {
		long at = j < m->moe_layers ? rlb_model_moe_layer_index(m, j) : hidden;

		for (i = prev + 1; i < at; i++) {
			int kind = layer_kind(m, i, 0);

			w->dense_n[kind] += 1;
			if (j < (long)w->layers)
				w->before_n[(size_t)j * NKINDS + kind] += 1;
		}
		if (j < (long)w->layers)
			w->moe_kind[j] = (unsigned char)layer_kind(m, at, 1);
		prev = at;
	}
}

/* Tokens and causal context sums per (micro-batch, rank) from the chunks. */
static void dense_context(const struct rlb_sim_params *p, const struct rlb_schedule *s,
			  struct work *w)
{
	size_t c;

	for (c = 0; c < s->nchunks; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];
		double n = ch->tokens, st = ch->start;
		size_t at = (size_t)ch->mb * w->R + ch->rank;

		if (ch->mb >= w->mbs || ch->rank >= w->R)
			continue;
		w->tok[at] += n;
		w->ctx[at] += n * st + n * (n + 1) / 2;
		if (p->layout.attention_window > 0)
			w->ctxw[at] += window_ctx(st, n, p->layout.attention_window);
		else if (p->layout.attention_chunk > 0)
			w->ctxw[at] += chunk_ctx(st, n, p->layout.attention_chunk);
	}
}

/* The chunk length of linear attention's kernels (docs/cost-model.md). */
#define LINEAR_CHUNK 64.0
/* Mamba-2's chunk length and convolution width (Nemotron-H's chunk_size, conv_kernel). */
#define MAMBA_CHUNK 128.0
#define MAMBA_CONV 4.0

/*
 * A Mamba-2 mixer's forward FLOPs per token, H heads of P (d = H P), G
 * groups of B and C of state size N, as the SSD kernels run it in chunks
 * of Q = 128: in_proj to z, x, B, C and dt, 2 h (2 d + 2 G N + H); the
 * depthwise causal conv1d over x, B and C, 2 * 4 (d + 2 G N); per chunk
 * and group C B^T, 2 Q G N per token; its product with x per head,
 * 2 Q d; the chunk's state B^T x per head, 2 d N; the output of the
 * state before the chunk, C times it, 2 d N; out_proj, 2 d h.  The decay
 * cumsum, the passing of states between chunks (d N per chunk), the D
 * skip and the gated RMSNorm are elementwise and left out.
 */
static double mamba_flops_per_token(const struct rlb_model_config *m)
{
	double h = m->hidden, H = m->mamba_heads, N = m->mamba_state;
	double G = m->mamba_groups > 0 ? m->mamba_groups : 1, d = H * m->mamba_head_dim;

	return 2 * h * (2 * d + 2 * G * N + H) + 2 * MAMBA_CONV * (d + 2 * G * N) +
	       2 * MAMBA_CHUNK * G * N + 2 * MAMBA_CHUNK * d + 2 * d * N + 2 * d * N +
	       2 * d * h;
}

/* The per-token figures of the dense part, the same for every rank. */
struct dense_shape {
	double rate;			/* FLOP/s at the GEMM efficiency ceiling */
	double gate;			/* 1 with attention_output_gate */
	int mla;
	double mla_v, mla_per_tok;	/* value head and projections of MLA */
	double lin_per_tok;		/* a linear-attention layer's FLOPs */
	double mamba_per_tok;		/* a Mamba-2 mixer's FLOPs */
	double mats, shared_flops_per_row, shared_bytes;
};

/*
 * Multi-head latent attention, per token: the query (through its
 * compressed width when q_lora_rank is set), the compressed keys and
 * values with the shared rotary key, their expansion to every head's key
 * (the part without rope) and value, and the output.  A linear-attention
 * layer's token mixing is its projections (q, k, v, output gate, decay
 * and beta, out) and its chunked recurrence: per token and value head,
 * the state read (w h), update (k^T v) and applied (q h), 6 dk dv, and
 * within the chunk K K^T, the WY products A (beta k) and A (beta v),
 * Q K^T and its product with the values, 2 * 64 * (3 dk + 2 dv), as
 * flash-linear-attention's chunk_gated_delta_rule runs them.
 */
static void dense_shape_init(struct dense_shape *d, const struct rlb_sim_params *p)
{
	const struct rlb_model_config *m = &p->layout;
	double q = p->q_heads, hd = p->head_dim, rope = m->qk_rope_head_dim;
	double ql = m->q_lora_rank;
	double hk = m->linear_key_heads, hv = m->linear_value_heads;
	double dk = m->linear_key_head_dim, dv = m->linear_value_head_dim;

	d->rate = p->peak_flops * p->gemm_eff_max;
	d->gate = m->attention_output_gate ? 1 : 0;
	d->mla = m->kv_lora_rank > 0;
	d->mla_v = m->v_head_dim > 0 ? m->v_head_dim : hd;
	d->mla_per_tok = 2 * ((ql > 0 ? p->hidden * ql + ql * q * hd : p->hidden * q * hd) +
			      p->hidden * (m->kv_lora_rank + rope) +
			      m->kv_lora_rank * q * (hd - rope + d->mla_v) + q * d->mla_v * p->hidden);
	d->lin_per_tok = 2 * p->hidden * (2 * hk * dk + 2 * hv * dv + 2 * hv) +
			 2 * hv * dv * p->hidden +
			 hv * (6 * dk * dv + 2 * LINEAR_CHUNK * (3 * dk + 2 * dv));
	d->mamba_per_tok = mamba_flops_per_token(m);
	d->mats = rlb_model_ffn_matrices(m);
	d->shared_flops_per_row = 2.0 * d->mats * p->hidden * p->shared_expert_ffn;
	d->shared_bytes = 2.0 * d->mats * p->hidden * p->shared_expert_ffn;
}

/* Forward time t[NKINDS] of one layer of each kind on rank R of micro-batch MB. */
static void rank_times(const struct rlb_sim_params *p, const struct dense_shape *d,
		       const struct work *w, uint32_t mb, uint32_t r, double *t)
{
	size_t at = (size_t)mb * w->R + r;
	double tok = w->tok[at];
	double proj = d->mla ? tok * d->mla_per_tok :
		      2 * tok * p->hidden *
		      ((2 + d->gate) * p->q_heads + 2 * p->kv_heads) * p->head_dim;
	/* the router on the hidden width; latent MoE's projections down and back up */
	double router = 2 * tok * p->hidden * p->experts + 4 * tok * p->hidden * p->moe_latent;
	double ffn = 2.0 * d->mats * tok * p->hidden * p->dense_ffn;
	double shared = p->shared_experts *
			gemm_s(p, tok, d->shared_flops_per_row, d->shared_bytes);
	double full = 0;
	int k;

	for (k = 0; k < RLB_ATT_KINDS; k++) {
		double ctx = (k == RLB_ATT_WINDOW || k == RLB_ATT_CHUNK ? w->ctxw : w->ctx)[at];
		double mix = k == RLB_ATT_LINEAR ? tok * d->lin_per_tok :
			     d->mla ? proj + 2 * ctx * p->q_heads * (p->head_dim + d->mla_v) :
			     proj + 4 * ctx * p->q_heads * p->head_dim;

		t[K_DECODER_MOE + k] = (mix + router) / d->rate + shared;
		t[K_DECODER_DENSE + k] = (mix + ffn) / d->rate;
		if (k == RLB_ATT_FULL)
			full = mix;
	}
	t[K_ROUTER] = router / d->rate + shared;
	t[K_MLP] = ffn / d->rate;
	t[K_ATTENTION] = full / d->rate;
	t[K_MAMBA] = tok * d->mamba_per_tok / d->rate;
}

/*
 * Forward time per micro-batch of one layer of each kind, besides its
 * routed experts, on the slowest rank (each kind's own; see layer_kind).
 * model.dense_time_ms sets every kind's to its forward share.
 */
static void dense_times(const struct rlb_sim_params *p, const struct rlb_schedule *s,
			struct work *w)
{
	struct dense_shape d;
	double t[NKINDS];
	uint32_t mb, r;
	int k;

	layer_kinds(p, w);
	dense_context(p, s, w);
	dense_shape_init(&d, p);
	for (mb = 0; mb < w->mbs; mb++) {
		double *fwd = &w->fwd[(size_t)mb * NKINDS];

		if (p->dense_time_s > 0) {
			for (k = 0; k < NKINDS; k++)
				fwd[k] = p->dense_time_s / p->passes;
			continue;
		}
		for (r = 0; r < w->R; r++) {
			rank_times(p, &d, w, mb, r, t);
			for (k = 0; k < NKINDS; k++)
				if (t[k] > fwd[k])
					fwd[k] = t[k];
		}
	}
}

static void time_add(struct rlb_sim_time *a, const struct rlb_sim_time *b)
{
	a->total_s += b->total_s;
	a->dense_s += b->dense_s;
	a->expert_s += b->expert_s;
	a->a2a_s += b->a2a_s;
	a->a2a_rdma_s += b->a2a_rdma_s;
	a->a2a_nvlink_s += b->a2a_nvlink_s;
	a->a2a_even_s += b->a2a_even_s;
	a->a2a_senders_s += b->a2a_senders_s;
	a->replication_s += b->replication_s;
	a->grad_reduce_s += b->grad_reduce_s;
	a->migration_s += b->migration_s;
	a->planning_s += b->planning_s;
}

static void time_total(struct rlb_sim_time *a)
{
	a->total_s = a->dense_s + a->expert_s + a->a2a_s + a->replication_s +
		     a->grad_reduce_s + a->migration_s + a->planning_s;
}

static void bytes_add(struct rlb_sim_bytes *a, const struct rlb_sim_bytes *b)
{
	a->a2a_rdma += b->a2a_rdma;
	a->a2a_nvlink += b->a2a_nvlink;
	a->replica_rdma += b->replica_rdma;
	a->replica_nvlink += b->replica_nvlink;
	a->grad_rdma += b->grad_rdma;
	a->grad_nvlink += b->grad_nvlink;
	a->migration_rdma += b->migration_rdma;
	a->migration_nvlink += b->migration_nvlink;
}

/*
 * Replica weight copies and gradient reductions of one (mb, layer).  A
 * replica present on the same GPU in the previous micro-batch keeps its
 * weights (no copy); one present in the next keeps accumulating its
 * gradient (no reduction yet).  Copies of an expert that share a GPU
 * (EPLB) count as replicas each but share one weight copy, one GEMM and
 * one gradient.
 */
static void replicas(const struct rlb_sim *sim, const struct rlb_step_plan *plan,
		     uint32_t mb, uint32_t layer, struct work *w, double window_s,
		     struct rlb_sim_step *st, double *repl_s, double *grad_s)
{
	const struct rlb_sim_params *p = &sim->p;
	uint32_t e, i, n;

	clear_exchange(w);
	for (e = 0; e < w->E; e++) {
		const struct rlb_plan_instance *in = rlb_step_plan_cell(plan, mb, layer, e, &n);
		size_t f = (size_t)(in - plan->inst);

		/* an EPLB instance may stand for several copies: each is a replica */
		st->replicas += rlb_step_plan_copies(plan, f) - 1;
		for (i = 1; i < n; i++) {
			st->replicas += rlb_step_plan_copies(plan, f + i);
			if (mb > 0 && has_instance(plan, mb - 1, layer, e, in[i].gpu))
				continue;
			st->replica_copies++;
			exchange(w, in[0].gpu, in[i].gpu, p->expert_weight_bytes,
				 &st->bytes.replica_nvlink, &st->bytes.replica_rdma);
		}
	}
	*repl_s = exchange_s(p, w) - window_s;
	if (*repl_s < 0)
		*repl_s = 0;
	clear_exchange(w);
	for (e = 0; e < w->E; e++) {
		const struct rlb_plan_instance *in = rlb_step_plan_cell(plan, mb, layer, e, &n);

		for (i = 1; i < n; i++) {
			if (mb + 1 < w->mbs && has_instance(plan, mb + 1, layer, e, in[i].gpu))
				continue;
			exchange(w, in[i].gpu, in[0].gpu, p->expert_grad_bytes,
				 &st->bytes.grad_nvlink, &st->bytes.grad_rdma);
		}
	}
	*grad_s = exchange_s(p, w);
}

/* Migration of homes that moved since the previous step (whole step at once). */
static double migration(const struct rlb_sim *sim, const uint32_t *prev,
			const uint32_t *home, struct work *w, struct rlb_sim_step *st)
{
	size_t i, n = (size_t)w->layers * w->E;

	clear_exchange(w);
	for (i = 0; i < n; i++) {
		if (prev[i] == home[i])
			continue;
		if (prev[i] / w->gpn == home[i] / w->gpn)
			st->moved_in_node++;
		else
			st->migrated_experts++;
		exchange(w, prev[i], home[i], sim->p.migration_bytes,
			 &st->bytes.migration_nvlink, &st->bytes.migration_rdma);
	}
	return exchange_s(&sim->p, w);
}

/* Imbalance values of one (mb, layer) into v[NVEC]; 0 when it has no rows. */
static int imbalance(const struct rlb_step_plan *plan, uint32_t layer, int ideal,
		     struct work *w, double *v)
{
	uint32_t g, e;
	uint64_t total = 0;

	for (g = 0; g < w->R; g++)
		total += w->gpu_static[g];
	if (total == 0)
		return 0;
	memset(w->node_a, 0, w->nodes * sizeof(uint64_t));
	memset(w->node_b, 0, w->nodes * sizeof(uint64_t));
	for (g = 0; g < w->R; g++) {
		w->node_a[g / w->gpn] += w->gpu_static[g];
		w->node_b[g / w->gpn] += w->gpu_plan[g];
	}
	v[V_GPU_BEFORE] = max_over_mean(w->gpu_static, w->R);
	v[V_NODE_BEFORE] = max_over_mean(w->node_a, w->nodes);
	v[V_GPU_AFTER] = ideal ? 1 : max_over_mean(w->gpu_plan, w->R);
	v[V_NODE_AFTER] = ideal ? 1 : max_over_mean(w->node_b, w->nodes);
	if (ideal) {
		v[V_NODE_FLOOR] = 1;
	} else if (!plan) {
		v[V_NODE_FLOOR] = v[V_NODE_BEFORE];
	} else {
		memset(w->node_a, 0, w->nodes * sizeof(uint64_t));
		for (e = 0; e < w->E; e++)
			w->node_a[plan->home[(size_t)layer * w->E + e] / w->gpn] += w->erows[e];
		v[V_NODE_FLOOR] = max_over_mean(w->node_a, w->nodes);
	}
	return 1;
}

/* Rows per expert of (mb, layer), static GPU rows, the ideal's compute. */
static double expert_rows(const struct rlb_sim_params *p, const struct rlb_loads *l,
			  uint32_t mb, uint32_t layer, struct work *w)
{
	uint32_t s, e, epr = w->E / w->R;
	double sum = 0;

	memset(w->erows, 0, w->E * sizeof(uint64_t));
	memset(w->gpu_static, 0, w->R * sizeof(uint64_t));
	for (s = 0; s < w->R; s++) {
		const uint32_t *row = l->count + rlb_loads_index(l, mb, layer, s, 0);

		for (e = 0; e < w->E; e++)
			w->erows[e] += row[e];
	}
	for (e = 0; e < w->E; e++) {
		w->gpu_static[e / epr] += w->erows[e];
		sum += rlb_sim_gemm_s(p, w->erows[e]);
	}
	return sum / w->R;
}

/* The policy's rows and forward expert time per GPU; returns the slowest. */
static double plan_compute(const struct rlb_sim_params *p, const struct rlb_step_plan *plan,
			   uint32_t mb, uint32_t layer, struct work *w)
{
	uint32_t g, e, i, n, epr = w->E / w->R;
	double max = 0;

	memset(w->gpu_plan, 0, w->R * sizeof(uint64_t));
	memset(w->gpu_t, 0, w->R * sizeof(double));
	for (e = 0; e < w->E; e++) {
		const struct rlb_plan_instance *in;

		if (!plan) {
			w->gpu_plan[e / epr] += w->erows[e];
			w->gpu_t[e / epr] += rlb_sim_gemm_s(p, w->erows[e]);
			continue;
		}
		in = rlb_step_plan_cell(plan, mb, layer, e, &n);
		for (i = 0; i < n; i++) {
			w->gpu_plan[in[i].gpu] += in[i].quota;
			w->gpu_t[in[i].gpu] += rlb_sim_gemm_s(p, in[i].quota);
		}
	}
	for (g = 0; g < w->R; g++)
		if (w->gpu_t[g] > max)
			max = w->gpu_t[g];
	return max;
}

/*
 * One phase of a (micro-batch, layer)'s all-to-all, in seconds: its time
 * (the slower of RDMA and NVLink) and parts, and the informational times
 * with the copies spread evenly and with the busiest sender alone.
 */
struct a2a {
	double s, rdma_s, nvlink_s, even_s, senders_s;
};

/* One phase of copies per GPU: the busiest GPU sets each network. */
static struct a2a a2a_copies(const struct rlb_sim_params *p, const uint64_t *rs,
			     const uint64_t *rr, const uint64_t *ns,
			     const uint64_t *nr, uint32_t R)
{
	double r_s, n_s, er_s, en_s, sr_s, sn_s;
	struct a2a a;

	r_s = copies_s(rs, rr, R, p->token_bytes, p->rdma_latency_s, p->rdma_bytes_per_s);
	n_s = copies_s(ns, nr, R, p->token_bytes, p->nvlink_latency_s, p->nvlink_bytes_per_s);
	er_s = mean_copies_s(rs, R, p->token_bytes, p->rdma_latency_s, p->rdma_bytes_per_s);
	en_s = mean_copies_s(ns, R, p->token_bytes, p->nvlink_latency_s,
			     p->nvlink_bytes_per_s);
	sr_s = copies_s(rs, rs, R, p->token_bytes, p->rdma_latency_s, p->rdma_bytes_per_s);
	sn_s = copies_s(ns, ns, R, p->token_bytes, p->nvlink_latency_s,
			p->nvlink_bytes_per_s);
	a.s = r_s > n_s ? r_s : n_s;
	a.rdma_s = r_s;
	a.nvlink_s = n_s;
	a.even_s = er_s > en_s ? er_s : en_s;
	a.senders_s = sr_s > sn_s ? sr_s : sn_s;
	return a;
}

/*
 * The relayed dispatch of traffic t's cell ml into w->relay (RDMA sent,
 * received, NVLink sent, received): per pair of nodes S != N, lane j of S
 * sends share_j of the C copies its node sends to N, C / g each and one
 * more for the C mod g lanes with the most copies (ties: the lower lane);
 * a lane's copies beyond its share cross NVLink to the lanes short of
 * theirs, and at N from the relaying lane's rail GPU to the original one
 * (docs/cost-model.md, "The relayed dispatch").
 */
static void relay_copies(const struct rlb_traffic *t, size_t ml, struct work *w)
{
	const uint32_t R = w->R, g = w->gpn, nodes = w->nodes;
	const uint32_t *to_node = t->rdma_to_node + ml * R * nodes;
	uint64_t *rs = w->relay, *rr = rs + R, *ns = rr + R, *nr = ns + R;
	uint32_t S, N, j, k;

	memset(rs, 0, 2 * R * sizeof(uint64_t));
	memcpy(ns, t->nvlink_send + ml * R, R * sizeof(uint64_t));
	memcpy(nr, t->nvlink_recv + ml * R, R * sizeof(uint64_t));
	for (S = 0; S < nodes; S++)
		for (N = 0; N < nodes; N++) {
			uint64_t C = 0;

			if (N == S)
				continue;
			for (j = 0; j < g; j++)
				C += to_node[(S * g + j) * nodes + N];
			for (j = 0; j < g; j++) {
				uint64_t c = to_node[(S * g + j) * nodes + N], share;
				uint32_t above = 0;	/* lanes ahead of j for the remainder */

				for (k = 0; k < g; k++) {
					uint64_t ck = to_node[(S * g + k) * nodes + N];

					above += ck > c || (ck == c && k < j);
				}
				share = C / g + (above < C % g);
				rs[S * g + j] += share;
				rr[N * g + j] += share;
				if (c > share) {	/* hands c - share over, gets them back at N */
					ns[S * g + j] += c - share;
					nr[N * g + j] += c - share;
				} else {		/* relays share - c for others */
					nr[S * g + j] += share - c;
					ns[N * g + j] += share - c;
				}
			}
		}
}

/*
 * Traffic t's copies of cell ml as they go; with RELAY the relayed
 * dispatch where its phase is shorter.
 */
static struct a2a a2a_of(const struct rlb_sim_params *p, const struct rlb_traffic *t,
			 size_t ml, int relay, struct work *w, const uint64_t **sent)
{
	const uint32_t R = w->R;
	struct a2a a, r;

	*sent = t->nvlink_send + ml * R;
	a = a2a_copies(p, t->rdma_send + ml * R, t->rdma_recv + ml * R,
		       t->nvlink_send + ml * R, t->nvlink_recv + ml * R, R);
	if (!relay || w->gpn < 2 || w->nodes < 2)
		return a;
	relay_copies(t, ml, w);
	r = a2a_copies(p, w->relay, w->relay + R, w->relay + 2 * R, w->relay + 3 * R, R);
	if (!(r.s < a.s))
		return a;
	*sent = w->relay + 2 * R;
	return r;
}

/* The ideal's: the static layout's copies of cell ml at the mean. */
static struct a2a a2a_ideal(const struct rlb_sim_params *p,
			    const struct rlb_traffic *static_t, size_t ml, uint32_t R)
{
	struct a2a a;

	a.rdma_s = mean_copies_s(static_t->rdma_send + ml * R, R, p->token_bytes,
				 p->rdma_latency_s, p->rdma_bytes_per_s);
	a.nvlink_s = mean_copies_s(static_t->nvlink_send + ml * R, R, p->token_bytes,
				   p->nvlink_latency_s, p->nvlink_bytes_per_s);
	a.s = a.rdma_s > a.nvlink_s ? a.rdma_s : a.nvlink_s;
	a.even_s = a.senders_s = a.s;
	return a;
}

/* Add a cell's dense, expert and all-to-all times (phases of a) to tm. */
static void cell_add(struct rlb_sim_time *tm, double dense, double expert,
		     double phases, const struct a2a *a)
{
	tm->dense_s += dense;
	tm->expert_s += expert;
	tm->a2a_s += phases * a->s;
	tm->a2a_rdma_s += phases * a->rdma_s;
	tm->a2a_nvlink_s += phases * a->nvlink_s;
	tm->a2a_even_s += phases * a->even_s;
	tm->a2a_senders_s += phases * a->senders_s;
}

/* Step st into the run's sums. */
static void acc_add(struct rlb_sim_summary *acc, const struct rlb_sim_step *st)
{
	if (acc->steps++ == 0)
		acc->first_step = st->step;
	acc->last_step = st->step;
	acc->micro_batches += st->micro_batches;
	acc->tokens += st->tokens;
	time_add(&acc->policy_time, &st->policy);
	time_add(&acc->ideal, &st->ideal);
	time_add(&acc->same_traffic_ideal, &st->same_traffic_ideal);
	bytes_add(&acc->bytes, &st->bytes);
	acc->replicas += st->replicas;
	acc->replica_slots += st->replica_slots;
	acc->replica_copies += st->replica_copies;
	acc->migrated_experts += st->migrated_experts;
	acc->moved_in_node += st->moved_in_node;
	acc->planner_ns += st->planner_ns;
}

int rlb_sim_add_step(struct rlb_sim *sim, const struct rlb_schedule *s,
		     const struct rlb_loads *l,
		     const struct rlb_step_plan *plan,
		     const struct rlb_traffic *t,
		     const struct rlb_traffic *static_t,
		     struct rlb_sim_step *out, struct rlb_err *err)
{
	const struct rlb_sim_params *p = &sim->p;
	int ideal = sim->o.policy == RLB_POLICY_IDEAL;
	struct rlb_sim_time *pol, *idl, *sti;
	struct rlb_sim_step st;
	struct work w;
	uint32_t gpn, mb, layer, R;
	uint32_t *home = NULL, *prev = NULL;
	size_t nhome, c, k, nrank = 0;
	int ret, i;

	memset(&w, 0, sizeof(w));
	memset(&st, 0, sizeof(st));
	if (!static_t)
		static_t = t;
	gpn = p->gpus_per_node < l->ranks ? p->gpus_per_node : l->ranks;
	if (gpn == 0)
		gpn = 1;
	ret = check_inputs(sim, s, l, plan, t, static_t, gpn, err);
	if (ret < 0)
		return ret;
	if (work_alloc(&w, l, gpn) < 0) {
		ret = rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
		goto out;
	}
	R = w.R;
	nhome = (size_t)l->layers * l->experts;
	home = malloc((nhome ? nhome : 1) * sizeof(*home));
	if (!home) {
		ret = rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
		goto out;
	}
	for (c = 0; c < nhome; c++)
		home[c] = plan && !ideal ? plan->home[c]
					 : (uint32_t)(c % l->experts) / (l->experts / R);
	if (!sim->have_shape) {
		prev = malloc((nhome ? nhome : 1) * sizeof(*prev));
		if (!prev) {
			ret = rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
			goto out;
		}
		for (c = 0; c < nhome; c++)
			prev[c] = (uint32_t)(c % l->experts) / (l->experts / R);
	}
	for (i = 0; i < NVEC; i++)
		if (dvec_reserve(&sim->vals[i], (size_t)l->micro_batches * l->layers) < 0) {
			ret = rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
			goto out;
		}
	/* into the reserved room, counted in only when the step succeeds */
	if (dvec_reserve(&sim->rank_vals, s->micro_batches) < 0 ||
	    rlb_schedule_rank_balance(s, sim->rank_vals.v + sim->rank_vals.n, &nrank) < 0) {
		ret = rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
		goto out;
	}

	st.step = s->step;
	st.micro_batches = l->micro_batches;
	for (c = 0; c < s->nchunks; c++)
		st.tokens += s->chunks[c].tokens;
	pol = &st.policy;
	idl = &st.ideal;
	sti = &st.same_traffic_ideal;
	dense_times(p, s, &w);

	for (mb = 0; mb < l->micro_batches; mb++) {
		const double *fwd = &w.fwd[(size_t)mb * NKINDS];
		double dense_layers = 0, comp_prev = 0;

		for (i = 0; i < NKINDS; i++)
			dense_layers += w.dense_n[i] * fwd[i];
		dense_layers *= p->passes;

		pol->dense_s += dense_layers;
		idl->dense_s += dense_layers;
		sti->dense_s += dense_layers;
		for (layer = 0; layer < l->layers; layer++) {
			size_t ml = (size_t)mb * l->layers + layer;
			const struct rlb_traffic *pt = ideal ? static_t : t;
			double moe_dense_f = fwd[w.moe_kind[layer]];
			const double *before = &w.before_n[(size_t)layer * NKINDS];
			double dense = p->passes * moe_dense_f;
			double comp_ideal, comp, phases = p->a2a_phases;
			const uint64_t *nvl_sent;
			struct a2a ia, pa;

			comp_ideal = expert_rows(p, l, mb, layer, &w);
			comp = plan_compute(p, ideal ? NULL : plan, mb, layer, &w);
			if (ideal)
				comp = comp_ideal;
			ia = a2a_ideal(p, static_t, ml, R);
			/* the ideal policy's own all-to-all is the ideal's */
			nvl_sent = pt->nvlink_send + ml * R;
			pa = ideal ? ia : a2a_of(p, t, ml, sim->o.relay, &w, &nvl_sent);
			cell_add(idl, dense, p->passes * comp_ideal, phases, &ia);
			cell_add(sti, dense, p->passes * comp_ideal, phases, &pa);
			cell_add(pol, dense, p->passes * comp, phases, &pa);
			/* the relay moves no RDMA copy to another node, only lanes */
			st.bytes.a2a_rdma += phases * p->token_bytes *
				(double)sum_u64(pt->rdma_send + ml * R, R);
			st.bytes.a2a_nvlink += phases * p->token_bytes *
				(double)sum_u64(nvl_sent, R);

			if (plan && !ideal) {
				double window = 0, repl_s, grad_s;

				/* the other layers between the two MoE layers run in it too */
				if (sim->o.window == RLB_SIM_WINDOW_PREV_LAYER) {
					window = comp_prev;
					for (i = 0; i < NKINDS; i++)
						window += before[i] * fwd[i];
					window += moe_dense_f;
				}
				replicas(sim, plan, mb, layer, &w, window, &st, &repl_s, &grad_s);
				pol->replication_s += repl_s;
				pol->grad_reduce_s += grad_s;
			}
			comp_prev = comp;
			if (imbalance(ideal ? NULL : plan, layer, ideal, &w, w.vals + w.nvals * NVEC))
				w.nvals++;
		}
	}
	if (plan && !ideal) {
		st.replica_slots = (uint64_t)l->micro_batches * l->layers * R * plan->replica_slots;
		st.planner_ns = plan->planner_ns;
		pol->planning_s = (double)plan->planner_ns * 1e-9 * (1 - p->planner_overlap);
	}
	pol->migration_s = migration(sim, sim->have_shape ? sim->prev_home : prev, home, &w, &st);
	time_total(pol);
	time_total(idl);
	time_total(sti);
	st.tokens_per_s = pol->total_s > 0 ? (double)st.tokens / pol->total_s : 0;
	st.fraction_of_ideal = pol->total_s > 0 ? idl->total_s / pol->total_s : 0;

	/* Commit: nothing below fails. */
	if (!sim->have_shape) {
		sim->have_shape = 1;
		sim->layers = l->layers;
		sim->experts = l->experts;
		sim->ranks = l->ranks;
		sim->gpn = gpn;
		sim->nodes = l->ranks / gpn;
		sim->prev_home = prev;
		prev = NULL;
	}
	memcpy(sim->prev_home, home, nhome * sizeof(*home));
	for (k = 0; k < w.nvals; k++)
		for (i = 0; i < NVEC; i++)
			sim->vals[i].v[sim->vals[i].n++] = w.vals[k * NVEC + i];
	sim->rank_vals.n += nrank;
	acc_add(&sim->acc, &st);
	if (out)
		*out = st;
	ret = 0;
out:
	work_free(&w);
	free(home);
	free(prev);
	return ret;
}

int rlb_sim_summary(const struct rlb_sim *sim, struct rlb_sim_summary *sum,
		    struct rlb_err *err)
{
	struct rlb_dist *d[NVEC];
	double *tmp;
	size_t n = sim->vals[0].n, nr = sim->rank_vals.n, most = n > nr ? n : nr;
	int i;

	*sum = sim->acc;
	d[V_GPU_BEFORE] = &sum->gpu_before;
	d[V_GPU_AFTER] = &sum->gpu_after;
	d[V_NODE_BEFORE] = &sum->node_before;
	d[V_NODE_AFTER] = &sum->node_after;
	d[V_NODE_FLOOR] = &sum->node_floor;
	tmp = malloc((most ? most : 1) * sizeof(*tmp));
	if (!tmp)
		return rlb_err_set(err, RLB_ENOMEM, "sim: out of memory");
	for (i = 0; i < NVEC; i++) {
		if (n)
			memcpy(tmp, sim->vals[i].v, n * sizeof(*tmp));
		rlb_dist_compute(d[i], tmp, n);
	}
	if (nr)
		memcpy(tmp, sim->rank_vals.v, nr * sizeof(*tmp));
	rlb_dist_compute(&sum->rank_tokens, tmp, nr);
	free(tmp);
	if (sum->steps)
		sum->step_time_s = sum->policy_time.total_s / (double)sum->steps;
	if (sum->policy_time.total_s > 0) {
		sum->tokens_per_s = (double)sum->tokens / sum->policy_time.total_s;
		sum->fraction_of_ideal = sum->ideal.total_s / sum->policy_time.total_s;
		sum->fraction_of_same_traffic_ideal =
			sum->same_traffic_ideal.total_s / sum->policy_time.total_s;
	}
	sum->slot_use = sum->replica_slots ? (double)sum->replicas / (double)sum->replica_slots : 0;
	return 0;
}
