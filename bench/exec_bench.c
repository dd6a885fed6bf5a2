/*
 * exec_bench.c - train-step on the CPU backend against the cost model: a
 * scaled-down qwen3-30b-a3b (128 experts, top-8, narrow experts, few
 * layers) on 8 virtual ranks, under the static, eplb-oracle and relibra
 * plans.  Prints per policy the measured expert critical path (the sum
 * over micro-batches and layers of the slowest rank's forward + backward
 * thread CPU time) next to the simulator's compute-only prediction
 * (expert_s), their ratio, and both speedups over static.
 *
 * The simulator is given a linear compute model for the comparison
 * (gemm_eff_half_rows 0: the same efficiency at every row count, and no
 * HBM floor), because a CPU's time per row does not grow with the batch
 * the way a GPU's grouped GEMM does; the ranking and the magnitude of the
 * speedups are what must hold.  Its peak is a CPU core's (74 GFLOP/s
 * measured by expert_bench, here 0.1 TFLOP/s at the 0.7 efficiency), so
 * that the planners weigh these narrow experts' compute against the links
 * as they would full-size experts on a GPU: at 989 TFLOP/s no replica of
 * a 128 x 64 expert pays for its gradient's trip home, and relibra's plan
 * would be the static layout's.
 *
 * The measured runs repeat ROUNDS times (default 3), the policies
 * interleaved, and each keeps its fastest: a run's figure moves by up to
 * 20% with what else the machine does.
 *
 * usage: exec_bench [-c CONFIG] [--set KEY=VALUE]... [-d DIR] [-r ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "exec.h"
#include "relibra.h"

#define NPOL 3
#define MAX_SETS 64

static const enum rlb_policy pols[NPOL] = {
	RLB_POLICY_STATIC, RLB_POLICY_EPLB_ORACLE, RLB_POLICY_RELIBRA,
};

static const char *const scaled[] = {
	"model.hidden=128", "model.expert_ffn=64", "model.moe_layers=4",
	"cluster.gemm_eff_half_rows=0", "cluster.hbm_gbps=1000000",
	"cluster.peak_tflops=0.1",
	"parallel.micro_batch_tokens=512", "workload.steps=2",
	"workload.prompts_per_step=8", "workload.samples_per_prompt=4",
	"workload.len_median=256", "workload.len_max=1024",
	"workload.len_min=32",
};

static int die(const char *what, const struct rlb_err *err)
{
	fprintf(stderr, "exec_bench: %s: %s\n", what, err->msg);
	return 1;
}

int main(int argc, char **argv)
{
	const char *cfg_path = "configs/qwen3-30b-a3b-h100-1x8.yaml", *dir = "/tmp";
	const char *sets[MAX_SETS];
	size_t nsets = 0, i;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	struct rlb_trace_header th;
	struct rlb_trace_writer *tw;
	struct rlb_trace_reader *tr;
	struct rlb_planner_policy pol[NPOL];
	struct rlb_planner_opts po;
	const uint32_t *steps;
	size_t nsteps;
	char trace[1024], plan[NPOL][1024];
	double sim[NPOL], meas[NPOL];
	uint64_t tokens = 0;
	int a, rounds = 3;

	for (i = 0; i < sizeof(scaled) / sizeof(scaled[0]); i++)
		sets[nsets++] = scaled[i];
	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "-c") && a + 1 < argc) {
			cfg_path = argv[++a];
		} else if (!strcmp(argv[a], "--set") && a + 1 < argc && nsets < MAX_SETS) {
			sets[nsets++] = argv[++a];
		} else if (!strcmp(argv[a], "-d") && a + 1 < argc) {
			dir = argv[++a];
		} else if (!strcmp(argv[a], "-r") && a + 1 < argc) {
			rounds = atoi(argv[++a]);
			if (rounds < 1 || rounds > 100) {
				fprintf(stderr, "exec_bench: -r wants 1 to 100 rounds\n");
				return 2;
			}
		} else {
			fprintf(stderr, "usage: exec_bench [-c CONFIG] [--set KEY=VALUE]... [-d DIR]\n");
			return 2;
		}
	}
	if (rlb_config_load(&cfg, cfg_path, sets, nsets, &err))
		return die("config", &err);

	/* The trace. */
	snprintf(trace, sizeof(trace), "%s/exec_bench-%ld.rrt", dir, (long)getpid());
	memset(&th, 0, sizeof(th));
	rlb_trace_header_from_config(&th, &cfg);
	if (rlb_trace_writer_open(&tw, trace, &th, NULL, &err) ||
	    rlb_synth_generate(&cfg, 1, 0, tw, NULL, NULL, &err) ||
	    rlb_trace_writer_close(tw, &err))
		return die("capture", &err);

	/* Plans and the simulator's figures, in one pass. */
	if (rlb_trace_reader_open(&tr, trace, &err) ||
	    rlb_trace_reader_steps(tr, &steps, &nsteps, &err))
		return die("trace", &err);
	memset(pol, 0, sizeof(pol));
	memset(&po, 0, sizeof(po));
	po.pack = cfg.parallel.pack;
	po.last_step = UINT32_MAX;
	for (i = 0; i < NPOL; i++) {
		struct rlb_plan_header ph;

		rlb_balance_opts_from_config(&pol[i].opts, &cfg);
		pol[i].opts.policy = pols[i];
		snprintf(plan[i], sizeof(plan[i]), "%s/exec_bench-%ld-%s.rlp", dir,
			 (long)getpid(), rlb_policy_name(pols[i]));
		rlb_plan_header_init(&ph, &cfg, &pol[i].opts, po.pack,
				     rlb_trace_reader_header(tr), steps, nsteps);
		if (rlb_plan_writer_open(&pol[i].writer, plan[i], &ph, NULL, &err))
			return die("plan", &err);
	}
	if (rlb_planner_run(tr, &cfg, &po, pol, NPOL, NULL, &err))
		return die("plan", &err);
	rlb_trace_reader_free(tr);
	for (i = 0; i < NPOL; i++) {
		if (rlb_plan_writer_close(pol[i].writer, &err))
			return die("plan", &err);
		sim[i] = pol[i].summary.policy_time.expert_s /
			 (pol[i].summary.steps ? pol[i].summary.steps : 1);
		rlb_planner_policy_release(&pol[i]);
	}

	/* The measured runs: the fastest of ROUNDS, policies interleaved. */
	for (i = 0; i < (size_t)NPOL * rounds; i++) {
		size_t p = i % NPOL;
		struct rlb_exec_opts o;
		struct rlb_exec_summary s;
		struct rlb_world *w;
		struct rlb_exec *ex;

		rlb_exec_opts_defaults(&o);
		if (rlb_world_virtual_new(&w, (uint32_t)cfg.parallel.ep_size, &err) ||
		    rlb_exec_new(&ex, w, &cfg, trace, plan[p], &o, &err) ||
		    rlb_exec_run(ex, NULL, NULL, &err))
			return die(rlb_policy_name(pols[p]), &err);
		rlb_exec_summary(ex, &s);
		if (i < NPOL || s.critical_path_s < meas[p])
			meas[p] = s.critical_path_s;
		tokens = s.tokens;
		rlb_exec_free(ex);
		rlb_world_free(w);
	}
	for (i = 0; i < NPOL; i++)
		unlink(plan[i]);
	unlink(trace);

	printf("exec_bench: %s scaled to hidden %d, expert_ffn %d, %d MoE layers (%d experts, top-%d),\n"
	       "  %d virtual ranks, cpu backend, %zu steps, %llu tokens; simulator: linear compute model\n",
	       cfg.model.name, cfg.model.hidden, cfg.model.expert_ffn, cfg.model.moe_layers,
	       cfg.model.experts, cfg.model.topk, cfg.parallel.ep_size, nsteps,
	       (unsigned long long)tokens);
	printf("%-12s %14s %14s %10s %10s %10s %8s\n", "policy", "simulated s", "measured s",
	       "meas/sim", "sim x", "meas x", "gap");
	for (i = 0; i < NPOL; i++) {
		double sx = sim[i] > 0 ? sim[0] / sim[i] : 0;
		double mx = meas[i] > 0 ? meas[0] / meas[i] : 0;

		printf("%-12s %14.6g %14.6g %10.4g %9.3fx %9.3fx %+7.1f%%\n",
		       rlb_policy_name(pols[i]), sim[i], meas[i],
		       sim[i] > 0 ? meas[i] / sim[i] : 0, sx, mx,
		       sx > 0 ? 100 * (mx / sx - 1) : 0);
	}
	printf("(expert critical path per step: simulated expert_s, measured forward + backward thread CPU time\n"
	       " of the slowest rank summed over micro-batches and layers, fastest of %d runs; x: speedup\n"
	       " over static; gap: measured speedup / simulated speedup - 1)\n", rounds);
	return 0;
}
