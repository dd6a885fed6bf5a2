/*
 * reorder.c - fuzz target: relibra's cross-node reordering (lib/reorder).
 * The input gives the shape, bytes 0-3: nodes (1-6), GPUs per node (1-4),
 * experts per GPU (1-3), micro-batches (1-8); byte 4: bit 0 a previous
 * placement (the static one shuffled by the input), bit 1 a migration
 * cost, bit 2 sampled tokens for colocate; then each (micro-batch, expert)
 * load as a u16, little-endian (missing bytes read as 0), then with bit 2
 * a token count (0-63) and ids per token (1-4) and the ids (byte mod
 * E + 1, so some are past the experts), then the shuffle from what is
 * left.  With and without perturbation rounds, a placement must hold E/G
 * experts per GPU, score what rlb_reorder_objective_rows says plus the
 * colocate rows of the nodes its tokens reach (counted here), be no worse
 * than any start, count its moves right, and come out the same again with
 * the plain C swap loop (rlb_reorder_simd 0); the rounds must never do worse than the swaps alone, and lower
 * the objective exactly when one is kept.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fuzz.h"
#include "reorder.h"

#define MAX_E (6 * 4 * 3)
#define MAX_M 8
#define MAX_T 64
#define MAX_K 4

struct input {
	const uint8_t *p;
	size_t n;
};

static uint32_t take(struct input *in, size_t bytes)
{
	uint32_t v = 0;
	size_t i;

	for (i = 0; i < bytes; i++) {
		if (in->n) {
			v |= (uint32_t)in->p[0] << (8 * i);
			in->p++;
			in->n--;
		}
	}
	return v;
}

/* The nodes that tok's tokens reach under home (ids >= E skipped). */
static double reached(const struct rlb_reorder_tokens *tok, const uint32_t *home,
		      uint32_t E, uint32_t g)
{
	double c = 0;
	uint32_t t, x, y;

	for (t = 0; tok && t < tok->n; t++)
		for (x = 0; x < tok->topk; x++) {
			const uint16_t *id = tok->ids + (size_t)t * tok->topk;
			int seen = id[x] >= E;

			for (y = 0; !seen && y < x; y++)
				seen = id[y] < E && home[id[y]] / g == home[id[x]] / g;
			c += !seen;
		}
	return c;
}

static void check(struct rlb_reorder *r, const uint64_t *load, uint32_t M,
		  const uint32_t *prev, const struct rlb_reorder_tokens *tok)
{
	const struct rlb_reorder_params *p = &r->p;
	uint32_t G = p->num_gpus, g = p->gpus_per_node, E = p->num_experts;
	uint32_t cnt[6 * 4] = { 0 }, home[MAX_E], e, moved = 0;
	double obj;

	if (rlb_reorder_run(r, load, M, prev, tok, NULL) != 0)
		abort();
	for (e = 0; e < E; e++) {
		if (r->res.home[e] >= G)
			abort();
		cnt[r->res.home[e]]++;
		moved += r->res.home[e] / g != (prev ? prev[e] : e / (E / G)) / g;
	}
	for (e = 0; e < G; e++)
		if (cnt[e] != E / G)
			abort();
	if (moved != r->res.moved || r->res.kept > p->rounds)
		abort();
	obj = r->res.objective_rows;
	if (obj > r->res.start_rows[RLB_REORDER_START_PREV] ||
	    obj > r->res.start_rows[RLB_REORDER_START_STATIC] ||
	    obj > r->res.start_rows[RLB_REORDER_START_LPT])
		abort();
	if (obj != rlb_reorder_objective_rows(r, load, M, r->res.home, prev) +
		   (tok && tok->n ? p->colocate_rows * reached(tok, r->res.home, E, g) : 0))
		abort();
	memcpy(home, r->res.home, E * sizeof(uint32_t));
	rlb_reorder_simd = 0;
	if (rlb_reorder_run(r, load, M, prev, tok, NULL) != 0 ||
	    memcmp(home, r->res.home, E * sizeof(uint32_t)) != 0 ||
	    r->res.objective_rows != obj)
		abort();
	rlb_reorder_simd = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	uint32_t N = 1 + take(&in, 1) % 6, g = 1 + take(&in, 1) % 4;
	uint32_t epg = 1 + take(&in, 1) % 3, M = 1 + take(&in, 1) % MAX_M;
	uint32_t flags = take(&in, 1), G = N * g, E = G * epg, e, i;
	static uint64_t load[MAX_M * MAX_E];
	static uint16_t ids[MAX_T * MAX_K];
	struct rlb_reorder_tokens tok = { 0, 1, ids };
	uint32_t prev[MAX_E];
	struct rlb_reorder_params p = { .num_gpus = G, .gpus_per_node = g,
		.num_experts = E, .row_s = 1.0,
		.migration_s = flags & 2 ? 40.0 : 0.0,
		.colocate_rows = flags & 4 ? 0.5 : 0.0 };
	struct rlb_reorder plain, rounds;
	double alone;

	for (i = 0; i < M * E; i++)
		load[i] = take(&in, 2);
	if (flags & 4) {
		tok.n = take(&in, 1) % MAX_T;
		tok.topk = 1 + take(&in, 1) % MAX_K;
		for (i = 0; i < tok.n * tok.topk; i++)
			ids[i] = (uint16_t)(take(&in, 1) % (E + 1));
	}
	for (e = 0; e < E; e++)
		prev[e] = e / epg;
	for (e = E; e > 1; e--) {
		uint32_t j = take(&in, 1) % e, t = prev[e - 1];

		prev[e - 1] = prev[j];
		prev[j] = t;
	}
	if (rlb_reorder_init(&plain, &p, NULL) != 0)
		abort();
	p.rounds = RLB_REORDER_ROUNDS;
	if (rlb_reorder_init(&rounds, &p, NULL) != 0)
		abort();
	check(&plain, load, M, flags & 1 ? prev : NULL, flags & 4 ? &tok : NULL);
	if (plain.res.kept != 0)
		abort();
	alone = plain.res.objective_rows;
	check(&rounds, load, M, flags & 1 ? prev : NULL, flags & 4 ? &tok : NULL);
	if (rounds.res.objective_rows > alone ||
	    (rounds.res.kept > 0) != (rounds.res.objective_rows < alone))
		abort();
	rlb_reorder_release(&plain);
	rlb_reorder_release(&rounds);
	return 0;
}
