/*
 * plan.c - the in-memory step plan: static homes, instances appended cell
 * by cell, the invariant check every policy's output passes, the
 * per-source split (LOCALITY through lib/replicate's rule, EVEN here),
 * the text dump and the EPLB-compatible export.  The file format lives in
 * plan_io.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "clocale.h"
#include "plan.h"
#include "plan_internal.h"
#include "plan_io.h"
#include "replicate.h"
#include "util.h"

/* rlb_replicate_split reads gpu and quota with a stride of 3 uint32_t. */
_Static_assert(sizeof(struct rlb_plan_instance) == 3 * sizeof(uint32_t),
	       "struct rlb_plan_instance must be three packed uint32_t");

#define INST_STRIDE (sizeof(struct rlb_plan_instance) / sizeof(uint32_t))

static const char *const policy_names[RLB_POLICY_COUNT] = {
	"static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal",
};

const char *rlb_policy_name(enum rlb_policy p)
{
	return (unsigned)p < RLB_POLICY_COUNT ? policy_names[p] : "?";
}

int rlb_policy_from_name(const char *name, enum rlb_policy *p,
			 struct rlb_err *err)
{
	int i;

	for (i = 0; name && i < RLB_POLICY_COUNT; i++) {
		if (strcmp(name, policy_names[i]) == 0) {
			*p = (enum rlb_policy)i;
			return 0;
		}
	}
	return rlb_err_set(err, RLB_EINVAL,
			   "unknown policy '%s' (static, eplb, eplb-oracle, replicate, relibra, ideal)",
			   name ? name : "");
}

static size_t plan_cells(const struct rlb_step_plan *p)
{
	return ((size_t)p->micro_batches * p->layers) * p->experts;
}

int rlb_step_plan_init(struct rlb_step_plan *p, uint32_t step,
		       uint32_t micro_batches, uint32_t layers,
		       uint32_t experts, uint32_t ranks,
		       uint32_t gpus_per_node, uint32_t replica_slots,
		       enum rlb_split split, struct rlb_err *err)
{
	size_t le, cells, e, l, per_gpu;

	memset(p, 0, sizeof(*p));
	if (ranks < 1 || experts < 1 || experts % ranks)
		return rlb_err_set(err, RLB_EINVAL,
				   "experts (%u) must be a positive multiple of ranks (%u)",
				   experts, ranks);
	if (gpus_per_node < 1 || ranks % gpus_per_node)
		return rlb_err_set(err, RLB_EINVAL,
				   "gpus per node (%u) must divide ranks (%u)",
				   gpus_per_node, ranks);
	if (layers < 1)
		return rlb_err_set(err, RLB_EINVAL, "a plan needs at least one layer");
	if (split != RLB_SPLIT_LOCALITY && split != RLB_SPLIT_EVEN)
		return rlb_err_set(err, RLB_EINVAL, "unknown split rule %d",
				   (int)split);
	le = (size_t)layers * experts;
	if (micro_batches && le > (SIZE_MAX / sizeof(size_t) - 1) / micro_batches)
		return rlb_err_set(err, RLB_ERANGE,
				   "plan of %u micro-batches x %u layers x %u experts is too large",
				   micro_batches, layers, experts);
	cells = le * micro_batches;
	p->step = step;
	p->micro_batches = micro_batches;
	p->layers = layers;
	p->experts = experts;
	p->ranks = ranks;
	p->gpus_per_node = gpus_per_node;
	p->replica_slots = replica_slots;
	p->split = split;
	p->home = malloc(le * sizeof(*p->home));
	p->inst_first = calloc(cells + 1, sizeof(*p->inst_first));
	if (!p->home || !p->inst_first) {
		rlb_step_plan_release(p);
		return rlb_err_set(err, RLB_ENOMEM,
				   "out of memory for a plan of %zu cells", cells);
	}
	per_gpu = experts / ranks;
	for (l = 0; l < layers; l++)
		for (e = 0; e < experts; e++)
			p->home[l * experts + e] = (uint32_t)(e / per_gpu);
	return 0;
}

void rlb_step_plan_release(struct rlb_step_plan *p)
{
	if (!p)
		return;
	free(p->home);
	free(p->inst_first);
	free(p->inst);
	free(p->copies);
	rlb_schedule_release(p->sched);
	free(p->sched);
	memset(p, 0, sizeof(*p));
}

void rlb_step_plan_clear_instances(struct rlb_step_plan *p)
{
	if (p->inst_first)
		memset(p->inst_first, 0,
		       (plan_cells(p) + 1) * sizeof(*p->inst_first));
	p->ninst = 0;
	p->cur_cell = 0;
}

int rlb_step_plan_add(struct rlb_step_plan *p, uint32_t mb, uint32_t layer,
		      uint32_t expert, uint32_t gpu, uint32_t quota,
		      struct rlb_err *err)
{
	return rlb_step_plan_add_copies(p, mb, layer, expert, gpu, quota, 1, err);
}

/* Grow the instance array (and the copies beside it) to hold one more. */
static int inst_grow(struct rlb_step_plan *p, struct rlb_err *err)
{
	size_t cap = p->inst_cap ? p->inst_cap * 2 : 1024;
	struct rlb_plan_instance *n;

	if (cap > SIZE_MAX / sizeof(*n))
		return rlb_err_set(err, RLB_ENOMEM,
				   "out of memory for plan instances");
	n = realloc(p->inst, cap * sizeof(*n));
	if (!n)
		return rlb_err_set(err, RLB_ENOMEM,
				   "out of memory for %zu plan instances", cap);
	p->inst = n;
	if (p->copies) {
		uint32_t *c = realloc(p->copies, cap * sizeof(*c));

		if (!c)
			return rlb_err_set(err, RLB_ENOMEM,
					   "out of memory for %zu plan instances",
					   cap);
		p->copies = c;
	}
	p->inst_cap = cap;
	return 0;
}

int rlb_step_plan_add_copies(struct rlb_step_plan *p, uint32_t mb,
			     uint32_t layer, uint32_t expert, uint32_t gpu,
			     uint32_t quota, uint32_t copies,
			     struct rlb_err *err)
{
	size_t c, k;
	int ret;

	if (mb >= p->micro_batches || layer >= p->layers ||
	    expert >= p->experts)
		return rlb_err_set(err, RLB_EINVAL,
				   "mb %u, layer %u, expert %u: cell outside the plan (%u micro-batches, %u layers, %u experts)",
				   mb, layer, expert, p->micro_batches,
				   p->layers, p->experts);
	c = ((size_t)mb * p->layers + layer) * p->experts + expert;
	if (p->ninst && c < p->cur_cell)
		return rlb_err_set(err, RLB_EINVAL,
				   "mb %u, layer %u, expert %u: cells must be filled in (mb, layer, expert) order",
				   mb, layer, expert);
	if (copies == 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "mb %u, layer %u, expert %u: 0 copies on gpu %u (an instance is at least one)",
				   mb, layer, expert, gpu);
	if (copies > 1 && p->split != RLB_SPLIT_EVEN)
		return rlb_err_set(err, RLB_EINVAL,
				   "mb %u, layer %u, expert %u: %u copies on gpu %u (only an even split has more than one)",
				   mb, layer, expert, copies, gpu);
	if (p->ninst == p->inst_cap) {
		ret = inst_grow(p, err);
		if (ret)
			return ret;
	}
	if (copies > 1 && !p->copies) {
		p->copies = malloc(p->inst_cap * sizeof(*p->copies));
		if (!p->copies)
			return rlb_err_set(err, RLB_ENOMEM,
					   "out of memory for %zu plan instances",
					   p->inst_cap);
		for (k = 0; k < p->ninst; k++)
			p->copies[k] = 1;
	}
	/* skipped cells (and the new one) start at the current end */
	for (k = p->ninst ? p->cur_cell + 1 : 0; k <= c; k++)
		p->inst_first[k] = p->ninst;
	p->inst[p->ninst].expert = expert;
	p->inst[p->ninst].gpu = gpu;
	p->inst[p->ninst].quota = quota;
	if (p->copies)
		p->copies[p->ninst] = copies;
	p->ninst++;
	p->inst_first[c + 1] = p->ninst;
	p->cur_cell = c;
	return 0;
}

/*
 * Rows source s sends to copies [b, b + w) of C under EVEN (plan.h):
 * floor(load / C) each, and one more to the copies whose offset
 * (k - s) mod C is below load mod C.
 */
static uint64_t even_rows(uint32_t load, uint32_t C, uint32_t s, uint32_t b,
			  uint32_t w)
{
	uint64_t r = load % C, start = ((uint64_t)b + C - s % C) % C;
	uint64_t end = start + w, more;

	/* the offsets of the copies are the cyclic run [start, end) */
	if (end <= C)
		more = start < r ? (end < r ? end : r) - start : 0;
	else
		more = (start < r ? r - start : 0) + (end - C < r ? end - C : r);
	return (uint64_t)(load / C) * w + more;
}

/* Sum over sources of the EVEN share of copies [b, b + w) of C. */
static uint64_t even_quota(const struct rlb_loads *l, uint32_t mb,
			   uint32_t layer, uint32_t e, uint32_t C, uint32_t b,
			   uint32_t w)
{
	uint64_t q = 0;
	uint32_t s;

	for (s = 0; s < l->ranks; s++)
		q += even_rows(l->count[rlb_loads_index(l, mb, layer, s, e)],
			       C, s, b, w);
	return q;
}

#define CELL_FMT "mb %u, layer %u, expert %u: "

/* The structure and quotas of one cell (count >= 1 instances from f). */
static int check_cell(const struct rlb_step_plan *p, const struct rlb_loads *l,
		      uint32_t mb, uint32_t layer, uint32_t e, size_t f,
		      uint32_t count, uint64_t *slots, struct rlb_err *err)
{
	const struct rlb_plan_instance *in = p->inst + f;
	uint32_t home = p->home[(size_t)layer * p->experts + e], i, s;
	uint32_t max_slots = p->experts / p->ranks + p->replica_slots;
	uint64_t C = 0;
	uint64_t qsum = 0, load = 0;

	for (i = 0; i < count; i++) {
		uint32_t w = rlb_step_plan_copies(p, f + i);

		if (w == 0 || (w > 1 && p->split != RLB_SPLIT_EVEN) || w > max_slots)
			return rlb_err_set(err, RLB_ECORRUPT,
					   CELL_FMT "instance %u stands for %u copies (%s)",
					   mb, layer, e, i, w,
					   w == 0 ? "at least 1" :
					   w > max_slots ? "more than a gpu's slots" :
					   "only an even split has more than 1");
		C += w;
		if (in[i].expert != e)
			return rlb_err_set(err, RLB_ECORRUPT,
					   CELL_FMT "instance %u names expert %u",
					   mb, layer, e, i, in[i].expert);
		if (in[i].gpu >= p->ranks)
			return rlb_err_set(err, RLB_ECORRUPT,
					   CELL_FMT "instance %u is on gpu %u, beyond the %u gpus",
					   mb, layer, e, i, in[i].gpu, p->ranks);
	}
	if (in[0].gpu != home)
		return rlb_err_set(err, RLB_ECORRUPT,
				   CELL_FMT "first instance is on gpu %u, not on the home gpu %u",
				   mb, layer, e, in[0].gpu, home);
	for (i = 1; i < count; i++) {
		if (in[i].gpu == home || (i > 1 && in[i].gpu == in[i - 1].gpu))
			return rlb_err_set(err, RLB_ECORRUPT,
					   CELL_FMT "two instances on gpu %u",
					   mb, layer, e, in[i].gpu);
		if (i > 1 && in[i].gpu < in[i - 1].gpu)
			return rlb_err_set(err, RLB_ECORRUPT,
					   CELL_FMT "replicas are not in ascending gpu order (gpu %u after gpu %u)",
					   mb, layer, e, in[i].gpu, in[i - 1].gpu);
	}
	for (i = 0; i < count; i++) {
		slots[in[i].gpu] += rlb_step_plan_copies(p, f + i);
		qsum += in[i].quota;
	}
	if (!l)
		return 0;
	for (s = 0; s < l->ranks; s++)
		load += l->count[rlb_loads_index(l, mb, layer, s, e)];
	if (qsum != load)
		return rlb_err_set(err, RLB_ECORRUPT,
				   CELL_FMT "quotas sum to %llu, the load is %llu",
				   mb, layer, e, (unsigned long long)qsum,
				   (unsigned long long)load);
	if (C > UINT32_MAX)
		return rlb_err_set(err, RLB_ECORRUPT, CELL_FMT "%llu copies",
				   mb, layer, e, (unsigned long long)C);
	if (p->split == RLB_SPLIT_EVEN && C > 1) {
		uint32_t b = 0;

		for (i = 0; i < count; i++) {
			uint32_t w = rlb_step_plan_copies(p, f + i);
			uint64_t want = even_quota(l, mb, layer, e, (uint32_t)C, b, w);

			b += w;
			if (in[i].quota != want)
				return rlb_err_set(err, RLB_ECORRUPT,
						   CELL_FMT "instance %u (gpu %u) has quota %u, the even split gives %llu",
						   mb, layer, e, i, in[i].gpu,
						   in[i].quota,
						   (unsigned long long)want);
		}
	}
	return 0;
}

int rlb_step_plan_check(const struct rlb_step_plan *p,
			const struct rlb_loads *l, struct rlb_err *err)
{
	size_t cells = plan_cells(p), c;
	uint32_t mb, layer, e, g, per_gpu, max_slots;
	uint64_t *slots = NULL;
	int ret = 0;

	if (p->split != RLB_SPLIT_LOCALITY && p->split != RLB_SPLIT_EVEN)
		return rlb_err_set(err, RLB_ECORRUPT, "unknown split rule %d",
				   (int)p->split);
	if (p->ranks < 1 || p->experts < 1 || p->experts % p->ranks ||
	    p->gpus_per_node < 1 || p->ranks % p->gpus_per_node ||
	    p->layers < 1)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "bad shape: %u experts, %u ranks, %u gpus per node, %u layers",
				   p->experts, p->ranks, p->gpus_per_node,
				   p->layers);
	if (l && (l->micro_batches != p->micro_batches ||
		  l->layers != p->layers || l->ranks != p->ranks ||
		  l->experts != p->experts))
		return rlb_err_set(err, RLB_EINVAL,
				   "loads are %u x %u x %u x %u (micro-batches x layers x ranks x experts), the plan is %u x %u x %u x %u",
				   l->micro_batches, l->layers, l->ranks,
				   l->experts, p->micro_batches, p->layers,
				   p->ranks, p->experts);
	for (layer = 0; layer < p->layers; layer++)
		for (e = 0; e < p->experts; e++)
			if (p->home[(size_t)layer * p->experts + e] >= p->ranks)
				return rlb_err_set(err, RLB_ECORRUPT,
						   "layer %u, expert %u: home gpu %u is beyond the %u gpus",
						   layer, e,
						   p->home[(size_t)layer * p->experts + e],
						   p->ranks);
	if (p->inst_first[0] != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "first cell starts at instance %zu, not 0",
				   p->inst_first[0]);
	slots = calloc(p->ranks, sizeof(*slots));
	if (!slots)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	per_gpu = p->experts / p->ranks;
	max_slots = per_gpu + p->replica_slots;
	c = 0;
	for (mb = 0; mb < p->micro_batches; mb++) {
		for (layer = 0; layer < p->layers; layer++) {
			memset(slots, 0, p->ranks * sizeof(*slots));
			for (e = 0; e < p->experts; e++, c++) {
				size_t f = p->inst_first[c];
				size_t n = p->inst_first[c + 1];

				if (n <= f || f > p->ninst) {
					ret = rlb_err_set(err, RLB_ECORRUPT,
							  CELL_FMT "no instance",
							  mb, layer, e);
					goto out;
				}
				if (n > p->ninst) {
					ret = rlb_err_set(err, RLB_ECORRUPT,
							  CELL_FMT "instances up to %zu listed, %zu stored",
							  mb, layer, e, n, p->ninst);
					goto out;
				}
				if (n - f > p->ranks) {
					ret = rlb_err_set(err, RLB_ECORRUPT,
							  CELL_FMT "%zu instances, more than the %u gpus",
							  mb, layer, e, n - f, p->ranks);
					goto out;
				}
				ret = check_cell(p, l, mb, layer, e, f,
						 (uint32_t)(n - f), slots, err);
				if (ret)
					goto out;
			}
			for (g = 0; g < p->ranks; g++) {
				if (slots[g] > max_slots) {
					ret = rlb_err_set(err, RLB_ECORRUPT,
							  "mb %u, layer %u: gpu %u holds %llu copies, more than its %u slots (%u experts per gpu + %u replica slots)",
							  mb, layer, g, (unsigned long long)slots[g],
							  max_slots, per_gpu,
							  p->replica_slots);
					goto out;
				}
			}
		}
	}
	if (p->inst_first[cells] != p->ninst)
		ret = rlb_err_set(err, RLB_ECORRUPT,
				  "%zu instances stored, the cells list %zu",
				  p->ninst, p->inst_first[cells]);
out:
	free(slots);
	return ret;
}

/* Cell c's instances; 0 when it is not filled (or the plan not valid). */
static uint32_t cell_count(const struct rlb_step_plan *p, size_t c)
{
	if (p->inst_first[c + 1] <= p->inst_first[c] ||
	    p->inst_first[c + 1] > p->ninst ||
	    p->inst_first[c + 1] - p->inst_first[c] > p->ranks)
		return 0;
	return (uint32_t)(p->inst_first[c + 1] - p->inst_first[c]);
}

void rlb_step_plan_split(const struct rlb_step_plan *p,
			 const struct rlb_loads *l, uint32_t mb,
			 uint32_t layer, uint32_t expert, uint32_t *rows)
{
	const struct rlb_plan_instance *in;
	const uint32_t *load;
	uint32_t n, s, i;
	size_t c;

	if (l->micro_batches != p->micro_batches || l->layers != p->layers ||
	    l->ranks != p->ranks || l->experts != p->experts ||
	    mb >= p->micro_batches || layer >= p->layers ||
	    expert >= p->experts)
		return;
	c = ((size_t)mb * p->layers + layer) * p->experts + expert;
	n = cell_count(p, c);
	if (n == 0)
		return;
	in = p->inst + p->inst_first[c];
	load = l->count + rlb_loads_index(l, mb, layer, 0, expert);
	if (p->split == RLB_SPLIT_EVEN) {
		uint32_t C = 0, b, w;

		for (i = 0; i < n; i++)
			C += rlb_step_plan_copies(p, p->inst_first[c] + i);
		for (s = 0; s < p->ranks; s++)
			for (i = 0, b = 0; i < n; i++, b += w) {
				w = rlb_step_plan_copies(p, p->inst_first[c] + i);
				rows[(size_t)s * n + i] = (uint32_t)
					even_rows(load[(size_t)s * p->experts],
						  C, s, b, w);
			}
		return;
	}
	rlb_replicate_split(p->ranks, p->gpus_per_node, &in[0].gpu,
			    &in[0].quota, INST_STRIDE, n, load, p->experts,
			    rows, n);
}

int rlb_step_plan_split_cells(const struct rlb_step_plan *p,
			      const struct rlb_loads *l, uint32_t mb,
			      uint32_t layer, uint32_t **split, size_t *cap,
			      size_t *first, struct rlb_err *err)
{
	uint32_t e, n;
	size_t total = 0;

	for (e = 0; e < p->experts; e++) {
		n = cell_count(p, ((size_t)mb * p->layers + layer) * p->experts + e);
		first[e] = total;
		total += (size_t)n * p->ranks;
	}
	first[p->experts] = total;
	if (rlb_grow(split, cap, total ? total : 1, sizeof(**split)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	memset(*split, 0, total * sizeof(**split));
	for (e = 0; e < p->experts; e++)
		rlb_step_plan_split(p, l, mb, layer, e, *split + first[e]);
	return 0;
}

int rlb_step_plan_route_split(const struct rlb_step_plan *p, uint32_t mb,
			      uint32_t layer, uint32_t rank,
			      const uint32_t *split, const size_t *first,
			      const uint16_t *ids, size_t ntok, uint32_t topk,
			      uint32_t *cursor, uint32_t *which,
			      struct rlb_err *err)
{
	uint32_t E = p->experts, e, n, k, i;
	size_t t;

	/* cursor[2e]: e's instance taking rows; cursor[2e + 1]: rows it has left */
	for (e = 0; e < E; e++) {
		n = (uint32_t)((first[e + 1] - first[e]) / p->ranks);
		cursor[2 * e] = 0;
		cursor[2 * e + 1] = n ? split[first[e] + (size_t)rank * n] : 0;
	}
	/* Each row to the first instance that still takes rows from this rank. */
	for (t = 0; t < ntok; t++)
		for (k = 0; k < topk; k++) {
			uint32_t *cur;

			e = ids[t * topk + k];
			if (e >= E)
				return rlb_err_set(err, RLB_EINVAL,
						   "token %zu: expert id %u, the plan has %u experts",
						   t, e, E);
			n = (uint32_t)((first[e + 1] - first[e]) / p->ranks);
			cur = cursor + 2 * e;
			if (n == 0)
				return rlb_err_set(err, RLB_EINVAL,
						   "step %u mb %u layer %u: expert %u has no instance in the plan",
						   p->step, mb, layer, e);
			while (cur[1] == 0) {
				if (++cur[0] >= n)
					return rlb_err_set(err, RLB_EMISMATCH,
							   "step %u mb %u layer %u: rank %u has more rows of expert %u than its loads",
							   p->step, mb, layer, rank, e);
				cur[1] = split[first[e] + (size_t)rank * n + cur[0]];
			}
			cur[1]--;
			which[t * topk + k] = cur[0];
		}
	for (e = 0; e < E; e++) {
		uint32_t left;

		n = (uint32_t)((first[e + 1] - first[e]) / p->ranks);
		left = n ? cursor[2 * e + 1] : 0;
		for (i = cursor[2 * e] + 1; i < n; i++)
			left += split[first[e] + (size_t)rank * n + i];
		if (left)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "step %u mb %u layer %u: rank %u has fewer rows of expert %u than its loads",
					   p->step, mb, layer, rank, e);
	}
	return 0;
}

int rlb_step_plan_route(const struct rlb_step_plan *p,
			const struct rlb_loads *l, uint32_t mb, uint32_t layer,
			uint32_t rank, const uint16_t *ids, size_t ntok,
			uint32_t topk, size_t *inst, struct rlb_err *err)
{
	uint32_t E = p->experts, *split = NULL, *cursor, *which;
	size_t *first, cap = 0, t;
	int ret;

	if (l->micro_batches != p->micro_batches || l->layers != p->layers ||
	    l->ranks != p->ranks || l->experts != E)
		return rlb_err_set(err, RLB_EINVAL,
				   "loads of %u x %u x %u x %u, the plan is %u x %u x %u x %u",
				   l->micro_batches, l->layers, l->ranks, l->experts,
				   p->micro_batches, p->layers, p->ranks, E);
	if (mb >= p->micro_batches || layer >= p->layers || rank >= p->ranks)
		return rlb_err_set(err, RLB_EINVAL,
				   "mb %u, layer %u, rank %u: outside the plan's %u x %u x %u",
				   mb, layer, rank, p->micro_batches, p->layers, p->ranks);
	if (topk == 0)
		return rlb_err_set(err, RLB_EINVAL, "topk 0: a token routes to at least one expert");
	first = malloc(((size_t)E + 1) * sizeof(*first));
	cursor = malloc((2 * (size_t)E + 1) * sizeof(*cursor));
	which = malloc((ntok * topk + 1) * sizeof(*which));
	ret = first && cursor && which ? 0 :
	      rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (ret == 0)
		ret = rlb_step_plan_split_cells(p, l, mb, layer, &split, &cap,
						first, err);
	if (ret == 0)
		ret = rlb_step_plan_route_split(p, mb, layer, rank, split, first,
						ids, ntok, topk, cursor, which,
						err);
	for (t = 0; ret == 0 && t < ntok * topk; t++)
		inst[t] = p->inst_first[((size_t)mb * p->layers + layer) * E + ids[t]] +
			  which[t];
	free(split);
	free(first);
	free(cursor);
	free(which);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Text dump                                                            */

static int plan_write_text_c(FILE *fp, const struct rlb_plan_header *h,
			     const struct rlb_step_plan *p, struct rlb_err *err)
{
	uint32_t mb, l, e, k, n;

	if (h) {
		fprintf(fp, "plan %u.%u: policy %s, split %s, pack %s\n",
			h->version_major, h->version_minor,
			rlb_policy_name(h->policy),
			h->split == RLB_SPLIT_EVEN ? "even" : "locality",
			rlb_pack_name(h->pack));
		fprintf(fp, "options: replica_slots %u, min_tokens_per_replica %u, eplb_window %u, micro_batch_tokens %u, migration_weight %.17g, reorder %d, replicate %d, colocate %d, relay %d\n",
			h->replica_slots, h->min_tokens_per_replica,
			h->eplb_window, h->micro_batch_tokens,
			h->migration_weight, h->reorder, h->replicate,
			h->colocate, h->relay);
		fprintf(fp, "shape: layers %u, experts %u, topk %u, ranks %u, gpus_per_node %u\n",
			h->layers, h->experts, h->topk, h->ranks,
			h->gpus_per_node);
		fprintf(fp, "trace: model '%s', hash 0x%016llx, steps %u..%u (%u)\n",
			h->model, (unsigned long long)h->trace_hash,
			h->trace_first_step, h->trace_last_step,
			h->trace_steps);
	}
	if (p) {
		fprintf(fp, "step %u: %u micro-batches, %zu replicas, %u migrated experts, planner %llu ns\n",
			p->step, p->micro_batches,
			p->ninst - (size_t)p->micro_batches * p->layers * p->experts,
			p->migrated_experts, (unsigned long long)p->planner_ns);
		for (l = 0; l < p->layers; l++) {
			fprintf(fp, "  homes layer %u:", l);
			for (e = 0; e < p->experts; e++)
				fprintf(fp, " %u", p->home[(size_t)l * p->experts + e]);
			fputc('\n', fp);
		}
		for (mb = 0; mb < p->micro_batches; mb++) {
			for (l = 0; l < p->layers; l++) {
				fprintf(fp, "  mb %u, layer %u:", mb, l);
				for (e = 0; e < p->experts; e++) {
					const struct rlb_plan_instance *in =
						rlb_step_plan_cell(p, mb, l, e, &n);

					size_t f = (size_t)(in - p->inst);

					fprintf(fp, " %u[", e);
					for (k = 0; k < n; k++) {
						uint32_t w = rlb_step_plan_copies(p, f + k);

						fprintf(fp, "%s%u", k ? " " : "", in[k].gpu);
						if (w > 1)
							fprintf(fp, "x%u", w);
						fprintf(fp, ":%u", in[k].quota);
					}
					fputc(']', fp);
				}
				fputc('\n', fp);
			}
		}
		if (p->sched) {
			/* per (mb, rank): its chunks as seq:start+tokens */
			const struct rlb_schedule *sc = p->sched;
			size_t c;
			uint32_t r;

			fprintf(fp, "  schedule: %zu sequences in %zu chunks\n",
				sc->nseqs, sc->nchunks);
			for (mb = 0; mb < sc->micro_batches; mb++)
				for (r = 0; r < sc->ranks; r++) {
					fprintf(fp, "  mb %u, rank %u:", mb, r);
					for (c = 0; c < sc->nchunks; c++)
						if (sc->chunks[c].mb == mb &&
						    sc->chunks[c].rank == r)
							fprintf(fp, " %u:%u+%u",
								sc->chunks[c].seq,
								sc->chunks[c].start,
								sc->chunks[c].tokens);
					fputc('\n', fp);
				}
		}
	}
	if (ferror(fp))
		return rlb_err_set(err, RLB_EIO, "cannot write the plan text");
	return 0;
}

/* plan_write_text_c in the C locale (clocale.h) */
int rlb_plan_write_text(FILE *fp, const struct rlb_plan_header *h,
			const struct rlb_step_plan *p, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = plan_write_text_c(fp, h, p, err);

	rlb_clocale_end(before);
	return ret;
}

/* ------------------------------------------------------------------ */
/* JSON dump                                                            */

json_t *rlb_plan_header_json(const struct rlb_plan_header *h)
{
	char version[16], hash[17];

	snprintf(version, sizeof(version), "%u.%u", h->version_major, h->version_minor);
	snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)h->trace_hash);
	return json_pack("{s:s, s:s, s:s, s:s,"
			 " s:{s:I, s:I, s:I, s:I, s:f, s:b, s:b, s:b, s:b},"
			 " s:{s:I, s:I, s:I, s:I, s:I},"
			 " s:{s:s, s:s, s:I, s:I, s:I}}",
			 "version", version,
			 "policy", rlb_policy_name(h->policy),
			 "split", h->split == RLB_SPLIT_EVEN ? "even" : "locality",
			 "pack", rlb_pack_name(h->pack),
			 "options",
			 "replica_slots", (json_int_t)h->replica_slots,
			 "min_tokens_per_replica", (json_int_t)h->min_tokens_per_replica,
			 "eplb_window", (json_int_t)h->eplb_window,
			 "micro_batch_tokens", (json_int_t)h->micro_batch_tokens,
			 "migration_weight", h->migration_weight,
			 "reorder", h->reorder, "replicate", h->replicate,
			 "colocate", h->colocate, "relay", h->relay,
			 "shape",
			 "layers", (json_int_t)h->layers,
			 "experts", (json_int_t)h->experts,
			 "topk", (json_int_t)h->topk,
			 "ranks", (json_int_t)h->ranks,
			 "gpus_per_node", (json_int_t)h->gpus_per_node,
			 "trace",
			 "model", h->model, "hash", hash,
			 "first_step", (json_int_t)h->trace_first_step,
			 "last_step", (json_int_t)h->trace_last_step,
			 "steps", (json_int_t)h->trace_steps);
}

/* [mb][layer][expert][instance] = [gpu, quota, copies] */
static json_t *instances_json(const struct rlb_step_plan *p)
{
	json_t *mbs = json_array(), *layers, *experts, *insts;
	uint32_t mb, l, e, k, n;

	for (mb = 0; mbs && mb < p->micro_batches; mb++) {
		layers = json_array();
		if (json_array_append_new(mbs, layers))
			goto fail;
		for (l = 0; l < p->layers; l++) {
			experts = json_array();
			if (json_array_append_new(layers, experts))
				goto fail;
			for (e = 0; e < p->experts; e++) {
				const struct rlb_plan_instance *in = rlb_step_plan_cell(p, mb, l, e, &n);
				size_t f = (size_t)(in - p->inst);

				insts = json_array();
				if (json_array_append_new(experts, insts))
					goto fail;
				for (k = 0; k < n; k++)
					if (json_array_append_new(insts,
						json_pack("[I, I, I]", (json_int_t)in[k].gpu,
							  (json_int_t)in[k].quota,
							  (json_int_t)rlb_step_plan_copies(p, f + k))))
						goto fail;
			}
		}
	}
	return mbs;
fail:
	json_decref(mbs);
	return NULL;
}

json_t *rlb_step_plan_json(const struct rlb_step_plan *p, int dump)
{
	json_t *j, *homes, *row;
	uint32_t l, e;

	j = json_pack("{s:I, s:I, s:I, s:I, s:I}",
		      "step", (json_int_t)p->step,
		      "micro_batches", (json_int_t)p->micro_batches,
		      "replicas", (json_int_t)(p->ninst - (size_t)p->micro_batches *
						 p->layers * p->experts),
		      "migrated_experts", (json_int_t)p->migrated_experts,
		      "planner_ns", (json_int_t)p->planner_ns);
	if (!j || !dump)
		return j;
	homes = json_array();
	if (json_object_set_new(j, "homes", homes))
		goto fail;
	for (l = 0; l < p->layers; l++) {
		row = json_array();
		if (json_array_append_new(homes, row))
			goto fail;
		for (e = 0; e < p->experts; e++)
			if (json_array_append_new(row,
				json_integer(p->home[(size_t)l * p->experts + e])))
				goto fail;
	}
	if (json_object_set_new(j, "instances", instances_json(p)) ||
	    (p->sched && json_object_set_new(j, "schedule", rlb_schedule_step_json(p->sched))))
		goto fail;
	return j;
fail:
	json_decref(j);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* EPLB export                                                          */

/* 1 when expert e has a replica on gpu in cell (mb, layer). */
static int cell_has(const struct rlb_step_plan *p, uint32_t mb,
		    uint32_t layer, uint32_t e, uint32_t gpu)
{
	size_t c = ((size_t)mb * p->layers + layer) * p->experts + e, k;

	for (k = p->inst_first[c] + 1; k < p->inst_first[c + 1]; k++)
		if (p->inst[k].gpu == gpu)
			return 1;
	return 0;
}

int rlb_plan_eplb_export(const struct rlb_step_plan *p,
			 const struct rlb_plan_eplb_opts *o,
			 struct rlb_eplb_result *res, struct rlb_err *err)
{
	int64_t mb = o ? o->micro_batch : RLB_PLAN_EPLB_STEP;
	int slot_order = o ? o->slot_order : 0;
	uint32_t G = p->ranks, E = p->experts, L = p->layers;
	uint32_t spg, l, e, g;
	size_t P, s, k, maxc = 1;
	uint32_t *fill = NULL, *ranks_seen = NULL;
	int ret = 0;

	memset(res, 0, sizeof(*res));
	/* a zeroed or released plan, not one from a reader or a balancer */
	if (G < 1 || E < 1 || E % G || p->gpus_per_node < 1 ||
	    G % p->gpus_per_node || L < 1)
		return rlb_err_set(err, RLB_EINVAL,
				   "bad shape: %u experts, %u ranks, %u gpus per node, %u layers",
				   E, G, p->gpus_per_node, L);
	spg = E / G + p->replica_slots;
	P = (size_t)G * spg;
	if (mb != RLB_PLAN_EPLB_STEP && (mb < 0 || mb >= p->micro_batches))
		return rlb_err_set(err, RLB_EINVAL,
				   "micro-batch %lld is out of range (the step has %u)",
				   (long long)mb, p->micro_batches);
	if (E > RLB_EPLB_MAX_EXPERTS || P > RLB_EPLB_MAX_SLOTS ||
	    L > RLB_EPLB_MAX_LAYERS)
		return rlb_err_set(err, RLB_ERANGE,
				   "%u layers, %u experts and %zu slots exceed EPLB's limits",
				   L, E, P);
	res->num_layers = L;
	res->num_experts = E;
	res->num_slots = P;
	res->num_gpus = G;
	res->num_nodes = G / p->gpus_per_node;
	res->slots_per_gpu = spg;
	res->phy2log = malloc((size_t)L * P * sizeof(int32_t));
	res->phyrank = malloc((size_t)L * P * sizeof(int32_t));
	res->logcnt = calloc((size_t)L * E, sizeof(int32_t));
	fill = calloc(G, sizeof(*fill));
	ranks_seen = calloc(E, sizeof(*ranks_seen));
	if (!res->phy2log || !res->phyrank || !res->logcnt || !fill ||
	    !ranks_seen) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory for the eplb export");
		goto out;
	}
	for (l = 0; l < L; l++) {
		int32_t *phy = res->phy2log + (size_t)l * P;
		int32_t *rk = res->phyrank + (size_t)l * P;
		int32_t *lc = res->logcnt + (size_t)l * E;

		memset(fill, 0, G * sizeof(*fill));
		/* homes: experts by id land on their GPU in ascending order */
		for (e = 0; e < E; e++) {
			g = p->home[(size_t)l * E + e];
			if (g >= G || fill[g] >= spg) {
				ret = rlb_err_set(err, RLB_EINVAL,
						  "layer %u: expert %u's home gpu %u is invalid or full",
						  l, e, g);
				goto out;
			}
			phy[(size_t)g * spg + fill[g]] = (int32_t)e;
			rk[(size_t)g * spg + fill[g]] = 0;
			fill[g]++;
			lc[e] = 1;
		}
		/* replicas, ascending expert id per GPU */
		for (e = 0; e < E && (mb != RLB_PLAN_EPLB_STEP || p->micro_batches); e++) {
			uint32_t m0 = mb == RLB_PLAN_EPLB_STEP ? 0 : (uint32_t)mb;
			size_t c = ((size_t)m0 * L + l) * E + e;

			/* the home's further copies, then each replica's */
			for (k = p->inst_first[c]; k < p->inst_first[c + 1]; k++) {
				uint32_t m, rg = p->inst[k].gpu, w;
				int everywhere = 1;

				w = rlb_step_plan_copies(p, k) - (k == p->inst_first[c]);
				for (m = 1; w && k > p->inst_first[c] &&
					    mb == RLB_PLAN_EPLB_STEP &&
					    m < p->micro_batches && everywhere; m++)
					everywhere = cell_has(p, m, l, e, rg);
				for (; everywhere && w; w--) {
					if (rg >= G || fill[rg] >= spg) {
						ret = rlb_err_set(err, RLB_EINVAL,
								  "layer %u: gpu %u holds more experts than its %u slots",
								  l, rg, spg);
						goto out;
					}
					phy[(size_t)rg * spg + fill[rg]] = (int32_t)e;
					rk[(size_t)rg * spg + fill[rg]] = lc[e]++;
					fill[rg]++;
				}
			}
		}
		/* slots left over: copies of the GPU's own experts */
		for (g = 0; g < G; g++) {
			uint32_t used = fill[g];

			if (used == 0) {
				ret = rlb_err_set(err, RLB_EINVAL,
						  "layer %u: gpu %u holds no expert; EPLB needs every slot filled",
						  l, g);
				goto out;
			}
			for (k = used; k < spg; k++) {
				int32_t x = phy[(size_t)g * spg + (k - used) % used];

				phy[(size_t)g * spg + k] = x;
				rk[(size_t)g * spg + k] = lc[x]++;
			}
		}
		for (e = 0; e < E; e++)
			if ((size_t)lc[e] > maxc)
				maxc = (size_t)lc[e];
	}
	res->max_count = maxc;
	res->log2phy = malloc((size_t)L * E * maxc * sizeof(int32_t));
	if (!res->log2phy) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory for the eplb export");
		goto out;
	}
	for (l = 0; l < L; l++) {
		const int32_t *phy = res->phy2log + (size_t)l * P;
		const int32_t *rk = res->phyrank + (size_t)l * P;
		int32_t *lp = res->log2phy + (size_t)l * E * maxc;

		for (s = 0; s < (size_t)E * maxc; s++)
			lp[s] = -1;
		memset(ranks_seen, 0, E * sizeof(*ranks_seen));
		for (s = 0; s < P; s++) {
			size_t at = slot_order ? ranks_seen[phy[s]]++ : (size_t)rk[s];

			lp[(size_t)phy[s] * maxc + at] = (int32_t)s;
		}
	}
out:
	free(fill);
	free(ranks_seen);
	if (ret)
		rlb_eplb_result_release(res);
	return ret;
}

struct json_t *rlb_plan_eplb_export_json(const struct rlb_step_plan *p,
					 const struct rlb_plan_eplb_opts *o,
					 struct rlb_err *err)
{
	struct rlb_eplb_result res;
	json_t *obj = NULL, *body = NULL;
	int64_t mb = o ? o->micro_batch : RLB_PLAN_EPLB_STEP;
	int bad;

	if (rlb_plan_eplb_export(p, o, &res, err))
		return NULL;
	body = rlb_eplb_result_to_json(&res, err);
	obj = json_object();
	bad = !body || !obj;
	if (!bad)
		bad = json_object_set_new(obj, "step", json_integer(p->step)) ||
		      json_object_set_new(obj, "micro_batch",
					  mb == RLB_PLAN_EPLB_STEP ? json_null() :
					  json_integer(mb)) ||
		      json_object_set_new(obj, "num_gpus", json_integer(res.num_gpus)) ||
		      json_object_set_new(obj, "slots_per_gpu",
					  json_integer(res.slots_per_gpu)) ||
		      json_object_set_new(obj, "log2phy_order",
					  json_string(o && o->slot_order ?
						      "slot" : "replica")) ||
		      json_object_set(obj, "phy2log", json_object_get(body, "phy2log")) ||
		      json_object_set(obj, "log2phy", json_object_get(body, "log2phy")) ||
		      json_object_set(obj, "logcnt", json_object_get(body, "logcnt"));
	json_decref(body);
	rlb_eplb_result_release(&res);
	if (bad) {
		json_decref(obj);
		rlb_err_set(err, RLB_ENOMEM, "out of memory for the eplb JSON");
		return NULL;
	}
	return obj;
}
