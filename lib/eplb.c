/*
 * eplb.c - DeepSeek EPLB: balanced packing of groups onto nodes, greedy
 * replication of hot experts inside each node, balanced packing of the
 * replicas onto the node's GPUs; plus the JSON weight reader and the
 * phy2log / log2phy / logcnt JSON writer.  The rule is documented in eplb.h.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eplb.h"
#include "sniff.h"
#include "util.h"

/* Scratch arrays for one layer, sized once per rlb_eplb_rebalance call. */
struct eplb_ws {
	double *group_load;	/* [G] */
	int32_t *group_pack;	/* [G] node of each group */
	int32_t *group_rank;	/* [G] position of the group in its node */
	int32_t *log2mlog;	/* [E] logical -> node-major logical */
	int32_t *mlog2log;	/* [E] inverse */
	int32_t *mlogcnt;	/* [E] copies, node-major order */
	double *node_load;	/* [E/N] expert loads of one node */
	int32_t *phy2mlog;	/* [P/N] */
	int32_t *phyrank;	/* [P/N] */
	double *phy_load;	/* [P/N] load per copy */
	int32_t *phy_pack;	/* [P/N] GPU (in node) of each copy */
	int32_t *phy_rank;	/* [P/N] position in that GPU */
	int32_t *pphy2phy;	/* [P/N] */
	uint32_t *order;	/* [max(G, P/N)] sort output */
	uint32_t *sort_tmp;	/* [max(G, P/N)] */
	double *pack_load;	/* [max(N, X/N)] */
	int32_t *pack_items;	/* [max(N, X/N)] */
	int32_t *heap;		/* [max(N, X/N, E/N)] */
	double *key;		/* [E/N] load per copy, replication */
};

static void ws_release(struct eplb_ws *ws)
{
	free(ws->group_load);
	free(ws->group_pack);
	free(ws->group_rank);
	free(ws->log2mlog);
	free(ws->mlog2log);
	free(ws->mlogcnt);
	free(ws->node_load);
	free(ws->phy2mlog);
	free(ws->phyrank);
	free(ws->phy_load);
	free(ws->phy_pack);
	free(ws->phy_rank);
	free(ws->pphy2phy);
	free(ws->order);
	free(ws->sort_tmp);
	free(ws->pack_load);
	free(ws->pack_items);
	free(ws->heap);
	free(ws->key);
	memset(ws, 0, sizeof(*ws));
}

static size_t max3(size_t a, size_t b, size_t c)
{
	size_t m = a > b ? a : b;

	return m > c ? m : c;
}

static int ws_init(struct eplb_ws *ws, size_t G, size_t E, size_t N,
		   size_t P, size_t X)
{
	size_t ppn = P / N, lpn = E / N, gpn = X / N;
	size_t nsort = G > ppn ? G : ppn;
	size_t npack = N > gpn ? N : gpn;

	memset(ws, 0, sizeof(*ws));
	ws->group_load = calloc(G, sizeof(double));
	ws->group_pack = calloc(G, sizeof(int32_t));
	ws->group_rank = calloc(G, sizeof(int32_t));
	ws->log2mlog = calloc(E, sizeof(int32_t));
	ws->mlog2log = calloc(E, sizeof(int32_t));
	ws->mlogcnt = calloc(E, sizeof(int32_t));
	ws->node_load = calloc(lpn, sizeof(double));
	ws->phy2mlog = calloc(ppn, sizeof(int32_t));
	ws->phyrank = calloc(ppn, sizeof(int32_t));
	ws->phy_load = calloc(ppn, sizeof(double));
	ws->phy_pack = calloc(ppn, sizeof(int32_t));
	ws->phy_rank = calloc(ppn, sizeof(int32_t));
	ws->pphy2phy = calloc(ppn, sizeof(int32_t));
	ws->order = calloc(nsort, sizeof(uint32_t));
	ws->sort_tmp = calloc(nsort, sizeof(uint32_t));
	ws->pack_load = calloc(npack, sizeof(double));
	ws->pack_items = calloc(npack, sizeof(int32_t));
	ws->heap = calloc(max3(N, gpn, lpn), sizeof(int32_t));
	ws->key = calloc(lpn, sizeof(double));
	if (!ws->group_load || !ws->group_pack || !ws->group_rank ||
	    !ws->log2mlog || !ws->mlog2log || !ws->mlogcnt ||
	    !ws->node_load || !ws->phy2mlog || !ws->phyrank ||
	    !ws->phy_load || !ws->phy_pack || !ws->phy_rank ||
	    !ws->pphy2phy || !ws->order || !ws->sort_tmp ||
	    !ws->pack_load || !ws->pack_items || !ws->heap || !ws->key) {
		ws_release(ws);
		return RLB_ENOMEM;
	}
	return 0;
}

/* Item a before b in balanced packing: strictly heavier. */
static int heavier(const void *w, uint32_t a, uint32_t b)
{
	return ((const double *)w)[a] > ((const double *)w)[b];
}

/*
 * A min-heap of indices by KEY, lower index first on ties: the pick a
 * linear "first minimum" scan makes.
 */
static int heap_before(const double *key, int32_t a, int32_t b)
{
	return key[a] < key[b] || (key[a] == key[b] && a < b);
}

static inline void heap_sift_down(int32_t *heap, size_t n, const double *key,
				  size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		int32_t t;

		if (l < n && heap_before(key, heap[l], heap[m]))
			m = l;
		if (r < n && heap_before(key, heap[r], heap[m]))
			m = r;
		if (m == i)
			return;
		t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

/*
 * Balanced packing of n items of load w onto `packs` packs of n/packs items
 * each: pack[i] and rank[i] (position inside the pack) per item.  The
 * lightest pack with room is found with a heap ordered by (load, index),
 * which picks exactly the pack a linear "first minimum" scan would.
 */
static void balanced_packing(const double *w, size_t n, size_t packs,
			     int32_t *pack, int32_t *rank,
			     struct eplb_ws *ws)
{
	size_t per = n / packs, i, heap_n = packs;

	if (per == 1) {
		for (i = 0; i < n; i++) {
			pack[i] = (int32_t)i;
			rank[i] = 0;
		}
		return;
	}
	for (i = 0; i < n; i++)
		ws->order[i] = (uint32_t)i;
	/* by descending weight, equal weights in index order */
	rlb_sort_stable(ws->order, ws->sort_tmp, n, heavier, w);
	for (i = 0; i < packs; i++) {
		ws->pack_load[i] = 0.0;
		ws->pack_items[i] = 0;
		ws->heap[i] = (int32_t)i;	/* all 0: index order is a heap */
	}
	for (i = 0; i < n; i++) {
		int32_t item = (int32_t)ws->order[i], p = ws->heap[0];

		pack[item] = p;
		rank[item] = ws->pack_items[p];
		ws->pack_load[p] += w[item];
		if ((size_t)++ws->pack_items[p] == per)
			ws->heap[0] = ws->heap[--heap_n];
		heap_sift_down(ws->heap, heap_n, ws->pack_load, 0);
	}
}

/*
 * Replicate nlog experts of load w into nphy copies: copy i < nlog is expert
 * i; each further copy goes to the expert with the highest w / count (lowest
 * index on ties).  Fills phy2log[nphy], rank[nphy] and cnt[nlog].
 */
static void replicate_experts(const double *w, size_t nlog, size_t nphy,
			      int32_t *phy2log, int32_t *rank, int32_t *cnt,
			      struct eplb_ws *ws)
{
	size_t i;

	for (i = 0; i < nlog; i++) {
		phy2log[i] = (int32_t)i;
		rank[i] = 0;
		cnt[i] = 1;
		ws->key[i] = -w[i];	/* min-heap: minus the load per copy */
		ws->heap[i] = (int32_t)i;
	}
	if (nphy == nlog)
		return;
	for (i = nlog / 2; i-- > 0;)
		heap_sift_down(ws->heap, nlog, ws->key, i);
	for (i = nlog; i < nphy; i++) {
		int32_t e = ws->heap[0];

		phy2log[i] = e;
		rank[i] = cnt[e];
		cnt[e]++;
		ws->key[e] = -(w[e] / cnt[e]);
		heap_sift_down(ws->heap, nlog, ws->key, 0);
	}
}

/* One layer: fill phy2log[P], phyrank[P], logcnt[E]. */
static void rebalance_layer(const double *w, size_t E, size_t P, size_t G,
			    size_t N, size_t X, int32_t *phy2log,
			    int32_t *phyrank, int32_t *logcnt,
			    struct eplb_ws *ws)
{
	size_t group_size = E / G, groups_per_node = G / N;
	size_t lpn = E / N, ppn = P / N, gpus_per_node = X / N;
	size_t slots_per_gpu = P / X;
	size_t g, e, n, j, q;

	/* 1. groups onto nodes */
	for (g = 0; g < G; g++) {
		double s = 0.0;

		for (j = 0; j < group_size; j++)
			s += w[g * group_size + j];
		ws->group_load[g] = s;
	}
	balanced_packing(ws->group_load, G, N, ws->group_pack,
			 ws->group_rank, ws);
	for (e = 0; e < E; e++) {
		g = e / group_size;
		ws->log2mlog[e] = (int32_t)(((size_t)ws->group_pack[g] *
					     groups_per_node +
					     (size_t)ws->group_rank[g]) *
					    group_size + e % group_size);
		ws->mlog2log[ws->log2mlog[e]] = (int32_t)e;
	}

	for (n = 0; n < N; n++) {
		int32_t *cnt = ws->mlogcnt + n * lpn;

		/* 2. replicas inside the node */
		for (j = 0; j < lpn; j++)
			ws->node_load[j] = w[ws->mlog2log[n * lpn + j]];
		replicate_experts(ws->node_load, lpn, ppn, ws->phy2mlog,
				  ws->phyrank, cnt, ws);

		/* 3. replicas onto the node's GPUs */
		for (j = 0; j < ppn; j++) {
			int32_t m = ws->phy2mlog[j];

			ws->phy_load[j] = ws->node_load[m] / cnt[m];
		}
		balanced_packing(ws->phy_load, ppn, gpus_per_node,
				 ws->phy_pack, ws->phy_rank, ws);
		for (j = 0; j < ppn; j++)
			ws->pphy2phy[(size_t)ws->phy_pack[j] * slots_per_gpu +
				     (size_t)ws->phy_rank[j]] = (int32_t)j;
		for (q = 0; q < ppn; q++) {
			size_t src = (size_t)ws->pphy2phy[q];

			phy2log[n * ppn + q] =
				ws->mlog2log[n * lpn + (size_t)ws->phy2mlog[src]];
			phyrank[n * ppn + q] = ws->phyrank[src];
		}
	}
	for (e = 0; e < E; e++)
		logcnt[e] = ws->mlogcnt[ws->log2mlog[e]];
}

int rlb_eplb_check(size_t num_layers, size_t num_experts,
		   const struct rlb_eplb_params *p, struct rlb_err *err)
{
	if (num_layers < 1)
		return rlb_err_set(err, RLB_EINVAL, "weights have no layers");
	if (num_layers > RLB_EPLB_MAX_LAYERS)
		return rlb_err_set(err, RLB_EINVAL,
				   "too many layers (%zu, at most %u)",
				   num_layers, RLB_EPLB_MAX_LAYERS);
	if (num_experts < 1)
		return rlb_err_set(err, RLB_EINVAL, "weights have no experts");
	if (num_experts > RLB_EPLB_MAX_EXPERTS)
		return rlb_err_set(err, RLB_EINVAL,
				   "too many experts (%zu, at most %u)",
				   num_experts, RLB_EPLB_MAX_EXPERTS);
	if (p->num_slots > RLB_EPLB_MAX_SLOTS)
		return rlb_err_set(err, RLB_EINVAL,
				   "too many slots (%u, at most %u)",
				   p->num_slots, RLB_EPLB_MAX_SLOTS);
	if (p->num_groups < 1)
		return rlb_err_set(err, RLB_EINVAL, "groups must be at least 1");
	if (p->num_nodes < 1)
		return rlb_err_set(err, RLB_EINVAL, "nodes must be at least 1");
	if (p->num_gpus < 1)
		return rlb_err_set(err, RLB_EINVAL, "gpus must be at least 1");
	if (p->num_gpus % p->num_nodes)
		return rlb_err_set(err, RLB_EINVAL,
				   "gpus (%u) must be a multiple of nodes (%u)",
				   p->num_gpus, p->num_nodes);
	if (p->num_slots % p->num_gpus || p->num_slots == 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "slots (%u) must be a positive multiple of gpus (%u)",
				   p->num_slots, p->num_gpus);
	if (num_experts % p->num_groups)
		return rlb_err_set(err, RLB_EINVAL,
				   "experts (%zu) must be a multiple of groups (%u)",
				   num_experts, p->num_groups);
	if (p->num_slots < num_experts)
		return rlb_err_set(err, RLB_EINVAL,
				   "slots (%u) must be at least the number of experts (%zu)",
				   p->num_slots, num_experts);
	return 0;
}

void rlb_eplb_result_release(struct rlb_eplb_result *res)
{
	if (!res)
		return;
	free(res->phy2log);
	free(res->phyrank);
	free(res->log2phy);
	free(res->logcnt);
	memset(res, 0, sizeof(*res));
}

int rlb_eplb_rebalance(const double *weight, size_t num_layers,
		       size_t num_experts, const struct rlb_eplb_params *p,
		       struct rlb_eplb_result *res, struct rlb_err *err)
{
	struct eplb_ws ws;
	size_t E = num_experts, P, G, N, X, l, e, s, max_count = 0;
	int ret;

	memset(res, 0, sizeof(*res));
	memset(&ws, 0, sizeof(ws));
	ret = rlb_eplb_check(num_layers, num_experts, p, err);
	if (ret)
		goto out;
	for (l = 0; l < num_layers; l++) {
		for (e = 0; e < E; e++) {
			double v = weight[l * E + e];

			if (!isfinite(v)) {
				ret = rlb_err_set(err, RLB_EINVAL,
						  "weight of layer %zu, expert %zu is not finite",
						  l, e);
				goto out;
			}
			if (v < 0) {
				ret = rlb_err_set(err, RLB_EINVAL,
						  "weight of layer %zu, expert %zu is negative (%g)",
						  l, e, v);
				goto out;
			}
		}
	}

	P = p->num_slots;
	X = p->num_gpus;
	res->hierarchical = p->num_groups % p->num_nodes == 0;
	G = res->hierarchical ? p->num_groups : 1;
	N = res->hierarchical ? p->num_nodes : 1;
	res->num_layers = num_layers;
	res->num_experts = E;
	res->num_slots = P;
	res->num_gpus = p->num_gpus;
	res->num_nodes = p->num_nodes;
	res->slots_per_gpu = (uint32_t)(P / X);
	res->phy2log = calloc(num_layers * P, sizeof(int32_t));
	res->phyrank = calloc(num_layers * P, sizeof(int32_t));
	res->logcnt = calloc(num_layers * E, sizeof(int32_t));
	if (!res->phy2log || !res->phyrank || !res->logcnt ||
	    ws_init(&ws, G, E, N, P, X)) {
		ret = rlb_err_set(err, RLB_ENOMEM,
				  "out of memory for eplb of %zu layers, %zu slots",
				  num_layers, P);
		goto out;
	}
	for (l = 0; l < num_layers; l++) {
		rebalance_layer(weight + l * E, E, P, G, N, X,
				res->phy2log + l * P, res->phyrank + l * P,
				res->logcnt + l * E, &ws);
		for (e = 0; e < E; e++)
			if ((size_t)res->logcnt[l * E + e] > max_count)
				max_count = (size_t)res->logcnt[l * E + e];
	}

	res->max_count = max_count;
	if (max_count > SIZE_MAX / sizeof(int32_t) / E / num_layers ||
	    !(res->log2phy = malloc(num_layers * E * max_count *
				    sizeof(int32_t)))) {
		ret = rlb_err_set(err, RLB_ENOMEM,
				  "out of memory for log2phy of %zu layers, %zu experts, %zu replicas",
				  num_layers, E, max_count);
		goto out;
	}
	for (s = 0; s < num_layers * E * max_count; s++)
		res->log2phy[s] = -1;
	for (l = 0; l < num_layers; l++)
		for (s = 0; s < P; s++) {
			size_t le = (size_t)res->phy2log[l * P + s];
			size_t r = (size_t)res->phyrank[l * P + s];

			res->log2phy[(l * E + le) * max_count + r] = (int32_t)s;
		}
out:
	ws_release(&ws);
	if (ret)
		rlb_eplb_result_release(res);
	return ret;
}

const int32_t *rlb_eplb_gpu_experts(const struct rlb_eplb_result *res,
				    size_t layer, uint32_t gpu)
{
	if (!res->phy2log || layer >= res->num_layers || gpu >= res->num_gpus)
		return NULL;
	return res->phy2log + layer * res->num_slots +
	       (size_t)gpu * res->slots_per_gpu;
}

/* "an object", "a string", ... for messages. */
static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER:
	case JSON_REAL: return "a number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	case JSON_NULL: return "null";
	}
	return "an unknown value";
}

int rlb_eplb_weights_from_json(const struct json_t *root, const char *name,
			       double **weight, size_t *num_layers,
			       size_t *num_experts, struct rlb_err *err)
{
	double *w = NULL;
	size_t rows, cols = 0, r, c;
	int ret = 0;

	*weight = NULL;
	*num_layers = 0;
	*num_experts = 0;
	if (!json_is_array(root)) {
		ret = rlb_err_set(err, RLB_EPARSE,
				  "weights '%s': expected an array of rows (layers), got %s",
				  name, json_kind(root));
		goto out;
	}
	rows = json_array_size(root);
	if (rows == 0) {
		ret = rlb_err_set(err, RLB_EPARSE,
				  "weights '%s': expected an array of rows (layers), got an empty array",
				  name);
		goto out;
	}
	if (rows > RLB_EPLB_MAX_LAYERS) {
		ret = rlb_err_set(err, RLB_EPARSE,
				  "weights '%s': too many rows (%zu, at most %u)",
				  name, rows, RLB_EPLB_MAX_LAYERS);
		goto out;
	}
	/* the shape first: no allocation for rows that are not there */
	for (r = 0; r < rows; r++) {
		const json_t *row = json_array_get(root, r);

		if (!json_is_array(row)) {
			ret = rlb_err_set(err, RLB_EPARSE,
					  "weights '%s': row %zu: expected an array of numbers (one per expert), got %s",
					  name, r, json_kind(row));
			goto out;
		}
		if (r == 0) {
			cols = json_array_size(row);
			if (cols == 0) {
				ret = rlb_err_set(err, RLB_EPARSE,
						  "weights '%s': row 0 is empty",
						  name);
				goto out;
			}
			if (cols > RLB_EPLB_MAX_EXPERTS) {
				ret = rlb_err_set(err, RLB_EPARSE,
						  "weights '%s': too many columns (%zu, at most %u)",
						  name, cols, RLB_EPLB_MAX_EXPERTS);
				goto out;
			}
		} else if (json_array_size(row) != cols) {
			ret = rlb_err_set(err, RLB_EPARSE,
					  "weights '%s': row %zu has %zu columns, row 0 has %zu",
					  name, r, json_array_size(row), cols);
			goto out;
		}
	}
	w = malloc(rows * cols * sizeof(double));
	if (!w) {
		ret = rlb_err_set(err, RLB_ENOMEM,
				  "weights '%s': out of memory for %zu x %zu",
				  name, rows, cols);
		goto out;
	}
	for (r = 0; r < rows; r++) {
		const json_t *row = json_array_get(root, r);

		for (c = 0; c < cols; c++) {
			const json_t *v = json_array_get(row, c);
			double d;

			if (!json_is_number(v)) {
				ret = rlb_err_set(err, RLB_EPARSE,
						  "weights '%s': row %zu, column %zu: expected a number, got %s",
						  name, r, c, json_kind(v));
				goto out;
			}
			d = json_number_value(v);
			if (d < 0) {
				ret = rlb_err_set(err, RLB_EPARSE,
						  "weights '%s': row %zu, column %zu: weight %g is negative",
						  name, r, c, d);
				goto out;
			}
			w[r * cols + c] = d;
		}
	}
	*weight = w;
	w = NULL;
	*num_layers = rows;
	*num_experts = cols;
out:
	free(w);
	return ret;
}

/* what --eplb-weights takes, in messages */
#define WEIGHTS_WANT "a weight matrix ([layers][experts] JSON)"

int rlb_eplb_weights_load(const char *path, double **weight,
			  size_t *num_layers, size_t *num_experts,
			  struct rlb_err *err)
{
	int is_stdin = strcmp(path, "-") == 0;
	json_error_t jerr;
	json_t *root = NULL;
	FILE *fp;
	int ret = 0;

	*weight = NULL;
	*num_layers = 0;
	*num_experts = 0;
	fp = is_stdin ? stdin : fopen(path, "rb");
	if (!fp)
		return rlb_err_errno(err, RLB_EIO,
				     "cannot open weights '%s'", path);
	root = json_loadf(fp, 0, &jerr);
	if (!root) {
		int line, column, byte;

		rlb_json_error_where(&jerr, &line, &column, &byte);
		if (ferror(fp))
			ret = rlb_err_errno(err, RLB_EIO,
					    "cannot read weights '%s'", path);
		else if ((ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 1,
						RLB_KIND_UNKNOWN, path, WEIGHTS_WANT, NULL)))
			;
		else
			ret = rlb_err_set(err, RLB_EPARSE,
					  "weights '%s': invalid JSON at line %d, column %d (byte %d): %s",
					  path, line, column, byte, jerr.text);
		goto out;
	}
	/* a relibra JSON file or a config.json: named, not "got an object" */
	if (!json_is_object(root) ||
	    !(ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 0, RLB_KIND_UNKNOWN,
				    path, WEIGHTS_WANT, NULL)))
		ret = rlb_eplb_weights_from_json(root, path, weight, num_layers,
						 num_experts, err);
out:
	json_decref(root);
	if (!is_stdin)
		fclose(fp);
	return ret;
}

/* A JSON array of n int32 values, or NULL. */
static json_t *int_array(const int32_t *v, size_t n)
{
	json_t *a = json_array();
	size_t i;

	if (!a)
		return NULL;
	for (i = 0; i < n; i++) {
		if (json_array_append_new(a, json_integer(v[i]))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* Rows of length n from v[rows][n] appended to array a; 0 or -1. */
static int append_rows(json_t *a, const int32_t *v, size_t rows, size_t n)
{
	size_t r;

	for (r = 0; r < rows; r++)
		if (json_array_append_new(a, int_array(v + r * n, n)))
			return -1;
	return 0;
}

struct json_t *rlb_eplb_result_to_json(const struct rlb_eplb_result *res,
				       struct rlb_err *err)
{
	json_t *obj = json_object(), *phy2log = json_array();
	json_t *log2phy = json_array(), *logcnt = json_array();
	size_t l, E = res->num_experts;
	int bad = !obj || !phy2log || !log2phy || !logcnt;

	if (!bad)
		bad = append_rows(phy2log, res->phy2log, res->num_layers,
				  res->num_slots) ||
		      append_rows(logcnt, res->logcnt, res->num_layers, E);
	for (l = 0; !bad && l < res->num_layers; l++) {
		json_t *layer = json_array();

		if (json_array_append_new(log2phy, layer) ||
		    append_rows(layer, res->log2phy + l * E * res->max_count,
				E, res->max_count))
			bad = 1;
	}
	if (!bad)
		bad = json_object_set(obj, "phy2log", phy2log) ||
		      json_object_set(obj, "log2phy", log2phy) ||
		      json_object_set(obj, "logcnt", logcnt);
	json_decref(phy2log);
	json_decref(log2phy);
	json_decref(logcnt);
	if (bad) {
		json_decref(obj);
		rlb_err_set(err, RLB_ENOMEM, "out of memory for the eplb JSON");
		return NULL;
	}
	return obj;
}

char *rlb_eplb_result_to_string(const struct rlb_eplb_result *res,
				struct rlb_err *err)
{
	json_t *obj = rlb_eplb_result_to_json(res, err);
	char *s;

	if (!obj)
		return NULL;
	s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(obj);
	if (!s)
		rlb_err_set(err, RLB_ENOMEM, "out of memory for the eplb JSON");
	return s;
}
