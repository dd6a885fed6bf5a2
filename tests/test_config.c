/*
 * test_config.c - unit tests of lib/config: defaults, shipped presets and
 * configs, preset override rules, --set, every error class with its exact
 * message, and the write/load round trip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "suites.h"
#include "trace.h"

static const char *fixture(const char *name)
{
	static char path[RLB_PATH_MAX];

	snprintf(path, sizeof(path), "%s/fixtures/config/%s", rlb_test_srcdir(), name);
	return path;
}

static const char *shipped(const char *name)
{
	static char path[RLB_PATH_MAX];

	snprintf(path, sizeof(path), "%s/../configs/%s", rlb_test_srcdir(), name);
	return path;
}

/* Write TEXT to a scratch file NAME and return its path. */
static const char *scratch(const char *name, const char *text)
{
	static char path[RLB_PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/config-%s", rlb_test_tmpdir(), name);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(text, fp);
	ck_assert_int_eq(fclose(fp), 0);
	return path;
}

static void load_ok(struct rlb_config *cfg, const char *path,
		    const char *const *sets, size_t nsets)
{
	struct rlb_err err = { 0, "" };
	int rc = rlb_config_load(cfg, path, sets, nsets, &err);

	ck_assert_msg(rc == 0, "loading %s: %s", path ? path : "(defaults)", err.msg);
	ck_assert_int_eq(rlb_config_validate(cfg, &err), 0);
}

START_TEST(test_defaults)
{
	struct rlb_config cfg;

	rlb_config_defaults(&cfg);
	ck_assert_str_eq(cfg.path, "");
	ck_assert_int_eq(cfg.model.experts, 0);
	ck_assert_int_eq(cfg.cluster.nodes, 1);
	ck_assert_int_eq(cfg.cluster.gpus_per_node, 8);
	ck_assert(cfg.cluster.peak_tflops == 989);
	ck_assert(cfg.cluster.hbm_gbps == 2700);
	ck_assert(cfg.cluster.gemm_eff_max == 0.70);
	ck_assert(cfg.cluster.gemm_eff_half_rows == 256);
	ck_assert(cfg.cluster.nvlink_gbps == 340);
	ck_assert(cfg.cluster.nvlink_latency_us == 20);
	ck_assert(cfg.cluster.rdma_gbps == 45);
	ck_assert(cfg.cluster.rdma_latency_us == 80);
	ck_assert_int_eq(cfg.parallel.ep_size, 0);
	ck_assert_int_eq(cfg.parallel.micro_batch_tokens, 8192);
	ck_assert_int_eq(cfg.parallel.recompute, 0);
	ck_assert_int_eq(cfg.parallel.pack, RLB_PACK_IN_ORDER);
	ck_assert_str_eq(cfg.balancer.policy, "relibra");
	ck_assert_int_eq(cfg.balancer.replica_slots, 2);
	ck_assert_int_eq(cfg.balancer.min_tokens_per_replica, 256);
	ck_assert_int_eq(cfg.balancer.eplb_window, 4);
	ck_assert_int_eq(cfg.balancer.reorder, 1);
	ck_assert_int_eq(cfg.balancer.replicate, 1);
	ck_assert(cfg.balancer.migration_weight == 2.0);
	ck_assert(cfg.balancer.migration_bytes_per_param == 14);
	ck_assert(cfg.balancer.planner_overlap == 1.0);
	ck_assert_int_eq(cfg.balancer.colocate, RLB_CFG_AUTO);
	/* ep_size 0 means all GPUs */
	ck_assert_int_eq(rlb_config_gpus(&cfg), 8);
	ck_assert_int_eq(rlb_config_ep_nodes(&cfg), 1);
}
END_TEST

START_TEST(test_defaults_need_model)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };

	ck_assert_int_eq(rlb_config_load(&cfg, NULL, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "missing required keys 'model.experts', 'model.topk', "
			 "'model.hidden', 'model.expert_ffn', 'model.moe_layers'");
}
END_TEST

struct model_shape {
	const char *name;
	int experts, topk, hidden, expert_ffn, moe_layers, dense, dense_ffn;
	int shared, shared_ffn, groups, topk_groups, q_heads, kv_heads, head_dim;
	int period, offset;
	int window, full_period;	/* attention_window, full_attention_period */
	int chunk, linear_heads, gate;	/* attention_chunk, linear_value_heads, attention_output_gate */
};

static const struct model_shape shapes[] = {
	{ "deepseek-v3", 256, 8, 7168, 2048, 58, 3, 18432, 1, 2048, 8, 4, 128, 128, 192, 1, 0, 0, 0, 0, 0, 0 },
	{ "ernie-4.5-21b-a3b", 64, 6, 2560, 1536, 27, 1, 12288, 1, 3072, 0, 0, 20, 4, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "ernie-4.5-300b-a47b", 64, 8, 8192, 3584, 51, 3, 28672, 0, 0, 0, 0, 64, 8, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "glm-4.5-air", 128, 8, 4096, 1408, 45, 1, 10944, 1, 1408, 0, 0, 96, 8, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "glm-4.5", 160, 8, 5120, 1536, 89, 3, 12288, 1, 1536, 0, 0, 96, 8, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "gpt-oss-120b", 128, 4, 2880, 2880, 36, 0, 0, 0, 0, 0, 0, 64, 8, 64, 1, 0, 128, 2, 0, 0, 0 },
	{ "gpt-oss-20b", 32, 4, 2880, 2880, 24, 0, 0, 0, 0, 0, 0, 64, 8, 64, 1, 0, 128, 2, 0, 0, 0 },
	{ "kimi-k2", 384, 8, 7168, 2048, 60, 1, 18432, 1, 2048, 0, 0, 64, 64, 192, 1, 0, 0, 0, 0, 0, 0 },
	{ "llama4-maverick", 128, 1, 5120, 8192, 24, 0, 16384, 1, 8192, 0, 0, 40, 8, 128, 2, 1, 0, 4, 8192, 0, 0 },
	{ "mixtral-8x7b", 8, 2, 4096, 14336, 32, 0, 0, 0, 0, 0, 0, 32, 8, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "nemotron-3-nano-30b-a3b", 128, 6, 2688, 1856, 23, 0, 0, 1, 3712, 0, 0, 32, 2, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "nemotron-3-super-120b-a12b", 512, 22, 4096, 2688, 40, 0, 0, 1, 5376, 0, 0, 32, 2, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "olmoe", 64, 8, 2048, 1024, 16, 0, 0, 0, 0, 0, 0, 16, 16, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "qwen3-235b-a22b", 128, 8, 4096, 1536, 94, 0, 0, 0, 0, 0, 0, 64, 4, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "qwen3-30b-a3b", 128, 8, 2048, 768, 48, 0, 0, 0, 0, 0, 0, 32, 4, 128, 1, 0, 0, 0, 0, 0, 0 },
	{ "qwen3-next-80b-a3b", 512, 10, 2048, 512, 48, 0, 0, 1, 512, 0, 0, 16, 2, 256, 1, 0, 0, 4, 0, 32, 1 },
};

START_TEST(test_model_presets)
{
	const char *const *names = rlb_config_preset_names("models");
	const struct model_shape *s = &shapes[_i];
	struct rlb_config cfg;
	char set[128];
	const char *sets[1] = { set };
	int n = 0;

	while (names[n])
		n++;
	ck_assert_int_eq(n, (int)(sizeof(shapes) / sizeof(shapes[0])));
	ck_assert_str_eq(names[_i], s->name);
	snprintf(set, sizeof(set), "model.preset=%s", s->name);
	load_ok(&cfg, NULL, sets, 1);
	ck_assert_str_eq(cfg.model.name, s->name);
	ck_assert_int_eq(cfg.model.experts, s->experts);
	ck_assert_int_eq(cfg.model.topk, s->topk);
	ck_assert_int_eq(cfg.model.hidden, s->hidden);
	ck_assert_int_eq(cfg.model.expert_ffn, s->expert_ffn);
	ck_assert_int_eq(cfg.model.moe_layers, s->moe_layers);
	ck_assert_int_eq(cfg.model.first_dense_layers, s->dense);
	ck_assert_int_eq(cfg.model.dense_ffn, s->dense_ffn);
	ck_assert_int_eq(cfg.model.shared_experts, s->shared);
	ck_assert_int_eq(cfg.model.shared_expert_ffn, s->shared_ffn);
	ck_assert_int_eq(cfg.model.expert_groups, s->groups);
	ck_assert_int_eq(cfg.model.topk_groups, s->topk_groups);
	ck_assert_int_eq(cfg.model.q_heads, s->q_heads);
	ck_assert_int_eq(cfg.model.kv_heads, s->kv_heads);
	ck_assert_int_eq(cfg.model.head_dim, s->head_dim);
	ck_assert_int_eq(cfg.model.moe_layer_period, s->period);
	ck_assert_int_eq(cfg.model.moe_layer_offset, s->offset);
	ck_assert_int_eq(cfg.model.attention_window, s->window);
	ck_assert_int_eq(cfg.model.full_attention_period, s->full_period);
	ck_assert_int_eq(cfg.model.attention_chunk, s->chunk);
	ck_assert_int_eq(cfg.model.linear_value_heads, s->linear_heads);
	ck_assert_int_eq(cfg.model.attention_output_gate, s->gate);
	/* the default cluster: one node of 8, EP over all of it */
	ck_assert_int_eq(cfg.parallel.ep_size, 8);
	ck_assert_int_eq(rlb_config_experts_per_gpu(&cfg), s->experts / 8);
}
END_TEST

START_TEST(test_cluster_presets)
{
	static const struct {
		const char *name;
		int nodes, gpn, ep, ep_nodes;
		double hbm_gbps, peak, nvlink;
	} c[] = {
		{ "b200-8x8", 8, 8, 64, 8, 6200, 2250, 680 },
		/* EP 64 of the rack's 72 GPUs: one NVLink domain */
		{ "gb200-nvl72", 1, 72, 64, 1, 6400, 2500, 680 },
		{ "h100-1x8", 1, 8, 8, 1, 2700, 989, 340 }, { "h100-4x8", 4, 8, 32, 4, 2700, 989, 340 },
		{ "h100-8x8", 8, 8, 64, 8, 2700, 989, 340 }, { "h200-8x8", 8, 8, 64, 8, 3800, 989, 340 },
	};
	const char *const *names = rlb_config_preset_names("clusters");
	struct rlb_config cfg;
	char set[128], ep[64];
	const char *sets[3] = { "model.preset=qwen3-30b-a3b", set, ep };
	size_t i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		ck_assert_ptr_nonnull(names[i]);
		ck_assert_str_eq(names[i], c[i].name);
		snprintf(set, sizeof(set), "cluster.preset=%s", c[i].name);
		snprintf(ep, sizeof(ep), "parallel.ep_size=%d", c[i].ep);
		load_ok(&cfg, NULL, sets, c[i].ep == c[i].nodes * c[i].gpn ? 2 : 3);
		ck_assert_str_eq(cfg.cluster.name, c[i].name);
		ck_assert_int_eq(cfg.cluster.nodes, c[i].nodes);
		ck_assert_int_eq(cfg.cluster.gpus_per_node, c[i].gpn);
		ck_assert(cfg.cluster.hbm_gbps == c[i].hbm_gbps);
		ck_assert(cfg.cluster.peak_tflops == c[i].peak);
		ck_assert(cfg.cluster.nvlink_gbps == c[i].nvlink);
		ck_assert(cfg.cluster.rdma_gbps == 45);
		ck_assert_int_eq(rlb_config_ep_size(&cfg), c[i].ep);
		ck_assert_int_eq(rlb_config_ep_nodes(&cfg), c[i].ep_nodes);
		ck_assert_int_eq(rlb_config_ep_gpus_per_node(&cfg), c[i].ep / c[i].ep_nodes);
	}
	ck_assert_ptr_null(names[i]);
	ck_assert_ptr_null(rlb_config_preset_names("bogus")[0]);
}
END_TEST

static const char *const full_configs[] = {
	"deepseek-v3-h100-8x8", "qwen3-235b-a22b-h100-4x8", "qwen3-235b-a22b-h100-8x8",
	"qwen3-30b-a3b-h100-1x8", "tiny-2x2",
};

START_TEST(test_shipped_configs)
{
	const char *const *names = rlb_config_preset_names(NULL);
	const char *name = full_configs[_i];
	struct rlb_config a, b;
	char file[128], text[128];

	ck_assert_str_eq(names[_i], name);
	snprintf(file, sizeof(file), "%s.yaml", name);
	load_ok(&a, shipped(file), NULL, 0);
	ck_assert_str_eq(a.path, shipped(file));
	/* the same config pulled in as a built-in preset */
	snprintf(text, sizeof(text), "preset: %s\n", name);
	load_ok(&b, scratch(file, text), NULL, 0);
	ck_assert_mem_eq(&a.model, &b.model, sizeof(a.model));
	ck_assert_mem_eq(&a.cluster, &b.cluster, sizeof(a.cluster));
	ck_assert_mem_eq(&a.parallel, &b.parallel, sizeof(a.parallel));
	ck_assert_mem_eq(&a.balancer, &b.balancer, sizeof(a.balancer));
	ck_assert_mem_eq(&a.workload, &b.workload, sizeof(a.workload));
	/* by name alone (no such file here): no error left behind */
	{
		struct rlb_err err = {0};
		struct rlb_config c;

		ck_assert_int_eq(rlb_config_load(&c, name, NULL, 0, &err), 0);
		ck_assert_int_eq(err.code, 0);
		ck_assert_str_eq(err.msg, "");
		ck_assert_mem_eq(&a.model, &c.model, sizeof(a.model));
	}
}
END_TEST

START_TEST(test_shipped_values)
{
	struct rlb_config cfg;

	load_ok(&cfg, shipped("tiny-2x2.yaml"), NULL, 0);
	ck_assert_int_eq(cfg.model.experts, 16);
	ck_assert_int_eq(cfg.model.topk, 2);
	ck_assert_int_eq(cfg.model.moe_layers, 4);
	ck_assert_int_eq(cfg.model.hidden, 64);
	ck_assert_int_eq(cfg.model.expert_ffn, 32);
	ck_assert_int_eq(cfg.cluster.nodes, 2);
	ck_assert_int_eq(cfg.cluster.gpus_per_node, 2);
	ck_assert_int_eq(cfg.parallel.ep_size, 4);
	ck_assert_int_eq(cfg.parallel.micro_batch_tokens, 512);
	ck_assert_int_eq(cfg.workload.steps, 3);
	ck_assert_int_eq(rlb_config_experts_per_gpu(&cfg), 4);
	ck_assert_int_eq(rlb_config_ep_nodes(&cfg), 2);

	load_ok(&cfg, shipped("qwen3-235b-a22b-h100-4x8.yaml"), NULL, 0);
	ck_assert_str_eq(cfg.model.name, "qwen3-235b-a22b");
	ck_assert_int_eq(rlb_config_gpus(&cfg), 32);
	ck_assert_int_eq(cfg.parallel.ep_size, 32);
	ck_assert_int_eq(rlb_config_experts_per_gpu(&cfg), 4);
	ck_assert_int_eq(rlb_config_ep_nodes(&cfg), 4);

	load_ok(&cfg, shipped("qwen3-235b-a22b-h100-8x8.yaml"), NULL, 0);
	ck_assert_int_eq(cfg.parallel.ep_size, 64);
	ck_assert_int_eq(rlb_config_experts_per_gpu(&cfg), 2);

	load_ok(&cfg, shipped("qwen3-30b-a3b-h100-1x8.yaml"), NULL, 0);
	ck_assert_int_eq(cfg.parallel.ep_size, 8);
	ck_assert_int_eq(cfg.model.moe_layers, 48);
	ck_assert_int_eq(cfg.workload.steps, 3);
	ck_assert_int_eq(cfg.workload.prompts_per_step, 16);
	ck_assert_int_eq(cfg.workload.samples_per_prompt, 8);
}
END_TEST

START_TEST(test_preset_overrides)
{
	struct rlb_config cfg;
	const char *p;

	/* keys override the preset wherever the preset key is written */
	p = scratch("ov1.yaml", "model:\n  experts: 64\n  preset: qwen3-30b-a3b\n");
	load_ok(&cfg, p, NULL, 0);
	ck_assert_int_eq(cfg.model.experts, 64);
	ck_assert_int_eq(cfg.model.topk, 8);
	ck_assert_int_eq(cfg.model.hidden, 2048);

	/* a model preset replaces the whole model section of an earlier preset */
	p = scratch("ov2.yaml", "model:\n  preset: deepseek-v3\n");
	{
		const char *sets[] = { "model.preset=qwen3-30b-a3b", "model.topk=4" };

		load_ok(&cfg, p, sets, 2);
	}
	ck_assert_str_eq(cfg.model.name, "qwen3-30b-a3b");
	ck_assert_int_eq(cfg.model.first_dense_layers, 0);
	ck_assert_int_eq(cfg.model.shared_experts, 0);
	ck_assert_int_eq(cfg.model.expert_groups, 0);
	ck_assert_int_eq(cfg.model.topk, 4);

	/* a full preset, then keys of the including file */
	p = scratch("ov3.yaml", "parallel: {micro_batch_tokens: 1024}\npreset: tiny-2x2\n"
			       "cluster: {hbm_gbps: 3000}\n");
	load_ok(&cfg, p, NULL, 0);
	ck_assert_int_eq(cfg.parallel.micro_batch_tokens, 1024);
	ck_assert_int_eq(cfg.model.experts, 16);
	ck_assert_int_eq(cfg.cluster.nodes, 2);
	ck_assert(cfg.cluster.hbm_gbps == 3000);

	/* --set after the file */
	{
		const char *sets[] = { "parallel.micro_batch_tokens=2048", "cluster.nodes=4",
				       "parallel.ep_size=8" };

		load_ok(&cfg, p, sets, 3);
	}
	ck_assert_int_eq(cfg.parallel.micro_batch_tokens, 2048);
	ck_assert_int_eq(cfg.parallel.ep_size, 8);
	ck_assert_int_eq(cfg.cluster.nodes, 4);

	/* ep_size 0 resolves to every GPU of the final cluster */
	p = scratch("ov4.yaml", "model: {preset: olmoe}\ncluster: {nodes: 2}\nparallel: {ep_size: 0}\n");
	{
		const char *sets[] = { "cluster.nodes=4" };

		load_ok(&cfg, p, sets, 1);
	}
	ck_assert_int_eq(cfg.parallel.ep_size, 32);

	/* a local model preset next to the config, itself based on a built-in */
	load_ok(&cfg, fixture("uses-local.yaml"), NULL, 0);
	ck_assert_str_eq(cfg.model.name, "local");
	ck_assert_int_eq(cfg.model.experts, 32);
	ck_assert_int_eq(cfg.model.topk, 8);
	ck_assert_int_eq(cfg.model.moe_layers, 16);
}
END_TEST

START_TEST(test_set_good)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char set[128];
	const char *sets[] = {
		"model.preset=olmoe",
		"model.name=\"my model: \\\"x\\\"\"",
		"cluster.name=",
		"cluster.gemm_eff_max=0.5",
		"cluster.rdma_latency_us=1e2",
		"parallel.recompute=yes",
		"parallel.pack=ffd",
		"balancer.policy=eplb-oracle",
		"balancer.reorder=off",
		"balancer.replicate=False",
		"balancer.colocate=Yes",
		" workload.len_sigma = 1.25",
		"workload.first_step=+7",
	};

	load_ok(&cfg, NULL, sets, sizeof(sets) / sizeof(sets[0]));
	ck_assert_str_eq(cfg.model.name, "my model: \"x\"");
	ck_assert_str_eq(cfg.cluster.name, "");
	ck_assert(cfg.cluster.gemm_eff_max == 0.5);
	ck_assert(cfg.cluster.rdma_latency_us == 100);
	ck_assert_int_eq(cfg.parallel.recompute, 1);
	ck_assert_int_eq(cfg.parallel.pack, RLB_PACK_FFD);
	ck_assert_str_eq(cfg.balancer.policy, "eplb-oracle");
	ck_assert_int_eq(cfg.balancer.reorder, 0);
	ck_assert_int_eq(cfg.balancer.replicate, 0);
	ck_assert_int_eq(cfg.balancer.colocate, 1);
	ck_assert(cfg.workload.len_sigma == 1.25);
	ck_assert_int_eq(cfg.workload.first_step, 7);

	/* rlb_config_set on a loaded config: checked, not validated */
	ck_assert_int_eq(rlb_config_set(&cfg, "model.topk=2", &err), 0);
	ck_assert_int_eq(cfg.model.topk, 2);
	ck_assert_int_eq(rlb_config_set(&cfg, "model.experts=32", &err), 0);
	ck_assert_int_eq(rlb_config_set(&cfg, "model.topk=40", &err), 0);
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "'model.topk' 40 exceeds 'model.experts' 32");
	ck_assert_int_eq(rlb_config_set(&cfg, "model.topk=0", &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "--set 'model.topk=0': value 0 for 'model.topk' is out of range [1, 64]");
	ck_assert_int_eq(cfg.model.topk, 40);

	/*
	 * A string key's value as written needs no YAML quotes ('*' and '-'
	 * start a layer pattern), but is still a YAML scalar otherwise:
	 * blanks around it dropped, quotes removed, empty for ~ and null.
	 */
	ck_assert_int_eq(rlb_config_set(&cfg, "model.layer_pattern = *E-E ", &err), 0);
	ck_assert_str_eq(cfg.model.layer_pattern, "*E-E");
	ck_assert_int_eq(rlb_config_set(&cfg, "model.name= \"a: b\"", &err), 0);
	ck_assert_str_eq(cfg.model.name, "a: b");
	ck_assert_int_eq(rlb_config_set(&cfg, "model.name=~", &err), 0);
	ck_assert_str_eq(cfg.model.name, "");
	ck_assert_int_eq(rlb_config_set(&cfg, "cluster.name=my h200", &err), 0);
	ck_assert_str_eq(cfg.cluster.name, "my h200");
	ck_assert_int_eq(rlb_config_set(&cfg, "cluster.name=null", &err), 0);
	ck_assert_str_eq(cfg.cluster.name, "");
	ck_assert_int_eq(rlb_config_set(&cfg, "model.layer_pattern=NULL", &err), 0);
	ck_assert_str_eq(cfg.model.layer_pattern, "");
	/* a latent MoE's latent: below the hidden width; 0 for none */
	ck_assert_int_eq(rlb_config_set(&cfg, "model.topk=2", &err), 0);
	ck_assert_int_eq(rlb_model_expert_width(&cfg.model), cfg.model.hidden);
	ck_assert_int_eq(rlb_config_set(&cfg, "model.moe_latent=16", &err), 0);
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	ck_assert_int_eq(rlb_model_expert_width(&cfg.model), 16);
	snprintf(set, sizeof(set), "model.moe_latent=%d", cfg.model.hidden);
	ck_assert_int_eq(rlb_config_set(&cfg, set, &err), 0);
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	snprintf(set, sizeof(set), "'model.moe_latent' %d is not below 'model.hidden' %d",
		 cfg.model.hidden, cfg.model.hidden);
	ck_assert_str_eq(err.msg, set);
}
END_TEST

static const struct {
	const char *set, *msg;
} bad_sets[] = {
	{ "model.expers=16",
	  "unknown key 'model.expers' (did you mean 'model.experts'?)" },
	{ "experts=16", "unknown key 'experts' (did you mean 'model.experts'?)" },
	{ "parallel.experts=16", "unknown key 'parallel.experts' (did you mean 'model.experts'?)" },
	{ "zzz.yyy=1", "unknown key 'zzz.yyy'" },
	{ "model=1", "'model' is a section: set one of its keys, e.g. 'model.experts'" },
	{ "preset=tiny-2x2",
	  "a full preset cannot be applied with --set (name it with 'preset:' in the config file)" },
	{ "parallel.preset=x", "unknown key 'parallel.preset'" },
	{ "model.experts", "expected KEY=VALUE, e.g. parallel.micro_batch_tokens=4096" },
	{ "model.experts=many", "expected an integer for 'model.experts', got 'many'" },
	{ "model.experts=", "expected an integer for 'model.experts', got an empty value" },
	{ "model.experts=[1, 2]", "expected an integer for 'model.experts', got a sequence" },
	{ "model.experts={a: 1}", "expected an integer for 'model.experts', got a mapping" },
	{ "model.experts=1.5", "expected an integer for 'model.experts', got '1.5'" },
	{ "model.experts=0", "value 0 for 'model.experts' is out of range [1, 65535]" },
	{ "model.experts=99999999999999999999",
	  "value 99999999999999999999 for 'model.experts' is out of range [1, 65535]" },
	/* one past what a trace holds (RLB_TRACE_MAX_*) */
	{ "model.experts=65536", "value 65536 for 'model.experts' is out of range [1, 65535]" },
	{ "model.topk=65", "value 65 for 'model.topk' is out of range [1, 64]" },
	{ "model.moe_layers=1025", "value 1025 for 'model.moe_layers' is out of range [1, 1024]" },
	{ "model.first_dense_layers=1025",
	  "value 1025 for 'model.first_dense_layers' is out of range [0, 1024]" },
	{ "cluster.peak_tflops=0", "value 0 for 'cluster.peak_tflops' is out of range [1e-06, 1000000]" },
	{ "cluster.peak_tflops=nan", "expected a number for 'cluster.peak_tflops', got 'nan'" },
	{ "cluster.peak_tflops=1e999", "expected a number for 'cluster.peak_tflops', got '1e999'" },
	{ "workload.segment_min=0", "value 0 for 'workload.segment_min' is out of range (at least 1)" },
	{ "workload.segment_max=99999999999",
	  "value 99999999999 for 'workload.segment_max' is too large (at most 2147483647)" },
	{ "parallel.recompute=maybe",
	  "expected a boolean (true or false) for 'parallel.recompute', got 'maybe'" },
	{ "balancer.colocate=automatic",
	  "expected a boolean (true or false) or auto for 'balancer.colocate', got 'automatic'" },
	{ "balancer.reorder=auto",
	  "expected a boolean (true or false) for 'balancer.reorder', got 'auto'" },
	{ "parallel.pack=fifo",
	  "expected one of in-order, ffd, dynamic for 'parallel.pack', got 'fifo' (did you mean 'ffd'?)" },
	{ "parallel.pack=random", "expected one of in-order, ffd, dynamic for 'parallel.pack', got 'random'" },
	{ "balancer.policy=eplb_oracle",
	  "expected one of static, eplb, eplb-oracle, replicate, relibra, ideal for "
	  "'balancer.policy', got 'eplb_oracle' (did you mean 'eplb-oracle'?)" },
	{ "model.name='abc",
	  "syntax error: found unexpected end of stream (while scanning a quoted scalar at line 1)" },
	{ "model.name=0123456789012345678901234567890123456789012345678901234567890123",
	  "value '012345678901234567890123456789012345678901234567...' for 'model.name' "
	  "is too long (at most 63 bytes)" },
	{ "model.preset=qwen3", "unknown model preset 'qwen3' (did you mean 'qwen3-235b-a22b'?)" },
	{ "cluster.preset=h300-8x8", "unknown cluster preset 'h300-8x8' (did you mean 'h100-8x8'?)" },
	{ "cluster.preset=", "expected a preset name for 'cluster.preset', got an empty value" },
	{ "model.preset=a/b", "invalid model preset name 'a/b' (letters, digits, '-', '_', '.')" },
	/* a YAML file is UTF-8 text; a --set value need not be */
	{ "cluster.name=h\x91", "value for 'cluster.name' is not UTF-8 text" },
	{ "cluster.name=\"a\\0b\"", "value for 'cluster.name' holds a NUL character" },
};

/* The heap form and the key getter, for foreign function interfaces. */
/*
 * rlb_config_set leaves cfg unchanged on failure, also where a preset
 * fails after resetting its section and applying some of its keys.
 */
START_TEST(test_set_failed_preset)
{
	struct rlb_config cfg, before;
	struct rlb_err err = { 0, "" };
	char dir[RLB_PATH_MAX], path[RLB_PATH_MAX + 32];
	FILE *fp;

	snprintf(dir, sizeof(dir), "%s/config-set-preset", rlb_test_tmpdir());
	mkdir(dir, 0777);
	snprintf(path, sizeof(path), "%s/models", dir);
	mkdir(path, 0777);
	snprintf(path, sizeof(path), "%s/models/bad.yaml", dir);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs("model: {name: bad, experts: 32, topk: 99}\n", fp);
	ck_assert_int_eq(fclose(fp), 0);
	snprintf(path, sizeof(path), "%s/c.yaml", dir);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs("preset: tiny-2x2\n", fp);
	ck_assert_int_eq(fclose(fp), 0);

	load_ok(&cfg, path, NULL, 0);
	before = cfg;
	ck_assert_int_eq(rlb_config_set(&cfg, "model.preset=bad", &err), RLB_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "value 99 for 'model.topk' is out of range [1, 64]"));
	ck_assert_mem_eq(&cfg, &before, sizeof(cfg));
	ck_assert_str_eq(cfg.model.name, "tiny");
}
END_TEST

START_TEST(test_new_get)
{
	const char *sets[] = { "parallel.pack=dynamic", "model.name=t \"q\"",
			       "balancer.reorder=off", "cluster.gemm_eff_max=0.55" };
	struct rlb_err err = { 0, "" };
	struct rlb_config *cfg;
	char buf[64], tiny[4];

	cfg = rlb_config_new(shipped("tiny-2x2.yaml"), sets, 4, &err);
	ck_assert_msg(cfg != NULL, "%s", err.msg);
	ck_assert_int_eq(rlb_config_get(cfg, "parallel.ep_size", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "4");
	ck_assert_int_eq(cfg->parallel.pack, RLB_PACK_DYNAMIC);
	ck_assert_int_eq(rlb_config_get(cfg, "parallel.pack", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "dynamic");
	ck_assert_int_eq(rlb_config_get(cfg, "model.name", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "t \"q\"");
	ck_assert_int_eq(rlb_config_get(cfg, "balancer.reorder", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "false");
	ck_assert_int_eq(rlb_config_get(cfg, "balancer.colocate", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "auto");
	ck_assert_int_eq(rlb_config_get(cfg, "balancer.policy", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "relibra");
	ck_assert_int_eq(rlb_config_get(cfg, "cluster.gemm_eff_max", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "0.55");
	ck_assert_int_eq(rlb_config_get(cfg, "cluster.peak_tflops", buf, sizeof(buf), &err), 0);
	ck_assert_str_eq(buf, "0.01");
	/* Unknown keys (with a suggestion), a section, a short buffer. */
	ck_assert_int_eq(rlb_config_get(cfg, "parallel.ep_sise", buf, sizeof(buf), &err),
			 RLB_ENOTFOUND);
	ck_assert_str_eq(err.msg, "unknown key 'parallel.ep_sise' (did you mean 'parallel.ep_size'?)");
	ck_assert_int_eq(rlb_config_get(cfg, "parallel", buf, sizeof(buf), &err), RLB_ENOTFOUND);
	ck_assert_int_eq(rlb_config_get(cfg, "cluster.preset", buf, sizeof(buf), &err),
			 RLB_ENOTFOUND);
	ck_assert_str_eq(err.msg, "'cluster.preset' has no value: a preset sets the section's keys when the configuration is loaded");
	ck_assert_int_eq(rlb_config_get(cfg, "nosuch.key", buf, sizeof(buf), &err), RLB_ENOTFOUND);
	ck_assert_int_eq(rlb_config_get(cfg, "model.name", tiny, sizeof(tiny), &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "the value of 'model.name' takes 6 bytes, the buffer 4");
	/* rlb_config_set checks the key alone; rlb_config_validate the rest. */
	ck_assert_int_eq(rlb_config_set(cfg, "parallel.ep_size=-1", &err), RLB_ECONFIG);
	ck_assert_int_eq(cfg->parallel.ep_size, 4);
	ck_assert_int_eq(rlb_config_set(cfg, "parallel.ep_size=3", &err), 0);
	ck_assert_int_eq(rlb_config_validate(cfg, &err), RLB_ECONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "'parallel.ep_size' 3 is neither a multiple of 'cluster.gpus_per_node' 2 nor below it"));
	rlb_config_free(cfg);
	rlb_config_free(NULL);
	/* A failing load gives NULL and says why. */
	ck_assert_ptr_null(rlb_config_new(fixture("no-such-file.yaml"), NULL, 0, &err));
	ck_assert_int_eq(err.code, RLB_EIO);
	ck_assert_ptr_null(rlb_config_new(NULL, (const char *[]){ "model.experts=0" }, 1, &err));
	ck_assert_int_eq(err.code, RLB_ECONFIG);
}
END_TEST

START_TEST(test_set_bad)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	const char *sets[2] = { "model.preset=olmoe", bad_sets[_i].set };
	char want[RLB_PATH_MAX + RLB_ERR_MSG_MAX];

	snprintf(want, sizeof(want), "--set '%s': %s", bad_sets[_i].set, bad_sets[_i].msg);
	ck_assert_int_eq(rlb_config_load(&cfg, NULL, sets, 2, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);
	/* a failed load leaves the defaults */
	ck_assert_int_eq(cfg.model.experts, 0);
}
END_TEST

/* The model's shape may reach the trace format's limits (and no further). */
START_TEST(test_trace_limits)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	const char *at_limit[] = { "model.preset=olmoe", "model.experts=64", "model.topk=64",
				   "model.moe_layers=1024" };
	const char *past[] = { "model.preset=olmoe", "model.moe_layers=1025" };

	ck_assert_uint_eq(RLB_TRACE_MAX_EXPERTS, 65535);
	ck_assert_uint_eq(RLB_TRACE_MAX_TOPK, 64);
	ck_assert_uint_eq(RLB_TRACE_MAX_LAYERS, 1024);
	/* topk and moe_layers at the limit: a whole load validates */
	ck_assert_msg(rlb_config_load(&cfg, NULL, at_limit, 4, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(cfg.model.topk, 64);
	ck_assert_int_eq(cfg.model.moe_layers, 1024);
	/* experts at the limit (65535 = 3 x 5 x 17 x 257 divides by no ep_size here) */
	ck_assert_int_eq(rlb_config_set(&cfg, "model.experts=65535", &err), 0);
	ck_assert_int_eq(cfg.model.experts, 65535);
	ck_assert_int_eq(rlb_config_set(&cfg, "model.experts=65536", &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "--set 'model.experts=65536': value 65536 for 'model.experts' "
			 "is out of range [1, 65535]");
	ck_assert_int_eq(rlb_config_set(&cfg, "model.topk=65", &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "--set 'model.topk=65': value 65 for 'model.topk' "
			 "is out of range [1, 64]");
	ck_assert_int_eq(cfg.model.experts, 65535);
	ck_assert_int_eq(cfg.model.topk, 64);
	ck_assert_int_eq(rlb_config_load(&cfg, NULL, past, 2, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "--set 'model.moe_layers=1025': value 1025 for "
			 "'model.moe_layers' is out of range [1, 1024]");
}
END_TEST

/* Every error class: the fixture and the exact message after its path. */
static const struct {
	const char *file, *msg;
} bad_files[] = {
	{ "syntax.yaml",
	  ":5:9: syntax error: did not find expected ',' or '}' (while parsing a flow mapping at line 4)\n"
	  "  parallel:\n"
	  "          ^" },
	{ "two-docs.yaml",
	  ":4:1: a second YAML document (a config holds one)\n"
	  "  model: {preset: olmoe}\n"
	  "  ^" },
	{ "unknown-key.yaml",
	  ":4:3: unknown key 'model.expers' (did you mean 'experts'?)\n"
	  "    expers: 16\n"
	  "    ^" },
	{ "complex-key.yaml",
	  ":3:3: expected a plain key at the top level, got a sequence\n"
	  "  ? [model]\n"
	  "    ^" },
	{ "complex-key-section.yaml",
	  ":4:5: expected a plain key in 'model', got a mapping\n"
	  "    ? {topk: 2}\n"
	  "      ^" },
	{ "unknown-section.yaml",
	  ":2:1: unknown key 'modle' (did you mean 'model'?)\n"
	  "  modle:\n"
	  "  ^" },
	{ "duplicate.yaml",
	  ":6:3: duplicate key 'model.topk' (first at line 4)\n"
	  "    topk: 2\n"
	  "    ^" },
	{ "wrong-type.yaml",
	  ":4:12: expected an integer for 'model.experts', got 'many'\n"
	  "    experts: many\n"
	  "             ^" },
	{ "wrong-kind.yaml",
	  ":5:5: expected an integer for 'model.experts', got a mapping\n"
	  "      routed: 64\n"
	  "      ^" },
	{ "wrong-section.yaml",
	  ":2:8: expected a mapping for 'model', got a scalar (a preset is named with "
	  "'model: {preset: NAME}')\n"
	  "  model: olmoe\n"
	  "         ^" },
	{ "bad-enum.yaml",
	  ":4:11: expected one of static, eplb, eplb-oracle, replicate, relibra, ideal for "
	  "'balancer.policy', got 'eplb_oracle' (did you mean 'eplb-oracle'?)\n"
	  "    policy: eplb_oracle\n"
	  "            ^" },
	{ "range.yaml",
	  ":4:17: value 1.5 for 'cluster.gemm_eff_max' is out of range [1e-06, 1]\n"
	  "    gemm_eff_max: 1.5\n"
	  "                  ^" },
	{ "missing.yaml",
	  ":2:1: missing required keys 'model.topk', 'model.hidden', 'model.expert_ffn'\n"
	  "  model:\n"
	  "  ^" },
	{ "missing-model.yaml",
	  ": missing required keys 'model.experts', 'model.topk', 'model.hidden', "
	  "'model.expert_ffn', 'model.moe_layers'" },
	{ "ep-multiple.yaml",
	  ":6:3: 'parallel.ep_size' 12 is neither a multiple of 'cluster.gpus_per_node' 8 nor below it\n"
	  "    ep_size: 12\n"
	  "    ^" },
	{ "ep-exceeds.yaml",
	  ":5:3: 'parallel.ep_size' 16 exceeds the cluster's 8 GPUs ('cluster.nodes' 1 x "
	  "'cluster.gpus_per_node' 8)\n"
	  "    ep_size: 16\n"
	  "    ^" },
	{ "experts-ep.yaml",
	  ":6:3: 'model.experts' 8 is not divisible by 'parallel.ep_size' 16\n"
	  "    ep_size: 16\n"
	  "    ^" },
	{ "topk.yaml",
	  ":4:3: 'model.topk' 12 exceeds 'model.experts' 8\n"
	  "    topk: 12\n"
	  "    ^" },
	{ "groups.yaml",
	  ":4:3: 'model.expert_groups' 6 does not divide 'model.experts' 256\n"
	  "    expert_groups: 6\n"
	  "    ^" },
	{ "topk-groups.yaml",
	  ":4:3: 'model.topk_groups' 9 exceeds 'model.expert_groups' 8\n"
	  "    topk_groups: 9\n"
	  "    ^" },
	{ "topk-group-experts.yaml",
	  ":5:3: 'model.topk' 8 exceeds 'model.topk_groups' 1 x 4 experts per group "
	  "('model.experts' 256 / 'model.expert_groups' 64)\n"
	  "    topk_groups: 1\n"
	  "    ^" },
	{ "len.yaml",
	  ":4:3: 'workload.len_min' 4096 exceeds 'workload.len_max' 2048\n"
	  "    len_min: 4096\n"
	  "    ^" },
	{ "segment.yaml",
	  ":5:3: 'workload.segment_min' 64 exceeds 'workload.segment_max' 16\n"
	  "    segment_min: 64\n"
	  "    ^" },
	{ "unknown-preset.yaml",
	  ":3:11: unknown model preset 'qwen3-30b' (did you mean 'qwen3-30b-a3b'?)\n"
	  "    preset: qwen3-30b\n"
	  "            ^" },
	{ "cycle-a.yaml",
	  ":2:9: preset cycle: 'cycle-b' -> 'cycle-a' -> 'cycle-b'\n"
	  "  preset: cycle-b\n"
	  "          ^" },
};

START_TEST(test_error_fixtures)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char path[RLB_PATH_MAX], want[RLB_PATH_MAX + RLB_ERR_MSG_MAX];

	snprintf(path, sizeof(path), "%s", fixture(bad_files[_i].file));
	snprintf(want, sizeof(want), "%s%s", path, bad_files[_i].msg);
	ck_assert_int_eq(rlb_config_load(&cfg, path, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);
}
END_TEST

START_TEST(test_error_in_preset)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char want[RLB_PATH_MAX + RLB_ERR_MSG_MAX];

	/* positions inside a preset name the preset's file */
	snprintf(want, sizeof(want), "%s:9:13: value -1 for 'model.head_dim' is out of range [0, 4096]\n"
		 "    head_dim: -1\n"
		 "              ^", fixture("models/broken.yaml"));
	ck_assert_int_eq(rlb_config_load(&cfg, fixture("uses-broken.yaml"), NULL, 0, &err),
			 RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);

	/* a model preset holds only a model section */
	snprintf(want, sizeof(want), "%s:3:1: unknown key 'cluster' (a model preset holds only "
		 "a 'model' section)\n  cluster: {nodes: 2}\n  ^", fixture("models/with-cluster.yaml"));
	ck_assert_int_eq(rlb_config_load(&cfg, fixture("uses-with-cluster.yaml"), NULL, 0, &err),
			 RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);
}
END_TEST

START_TEST(test_error_misc)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char want[RLB_PATH_MAX + RLB_ERR_MSG_MAX];
	const char *p;

	ck_assert_int_eq(rlb_config_load(&cfg, "no-such-config.yaml", NULL, 0, &err), RLB_EIO);
	ck_assert_str_eq(err.msg, "cannot open config 'no-such-config.yaml': No such file or directory");

	p = scratch("full-as-model.yaml", "preset: olmoe\n");
	snprintf(want, sizeof(want), "%s:1:9: unknown preset 'olmoe' ('olmoe' is a model preset: "
		 "use 'model: {preset: olmoe}')\n  preset: olmoe\n          ^", p);
	ck_assert_int_eq(rlb_config_load(&cfg, p, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);

	p = scratch("seq.yaml", "- a\n- b\n");
	snprintf(want, sizeof(want), "%s:1:1: expected a mapping at the top level, got a sequence\n"
		 "  - a\n  ^", p);
	ck_assert_int_eq(rlb_config_load(&cfg, p, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);

	/* ep_size from the cluster: the cluster key the user wrote is blamed */
	p = scratch("ep-default.yaml", "model: {preset: mixtral-8x7b}\ncluster: {nodes: 2}\n");
	snprintf(want, sizeof(want), "%s:2:11: 'model.experts' 8 is not divisible by "
		 "the EP size 16 ('parallel.ep_size' 0: all the cluster's GPUs, 'cluster.nodes' 2 x "
		 "'cluster.gpus_per_node' 8)\n  cluster: {nodes: 2}\n            ^", p);
	ck_assert_int_eq(rlb_config_load(&cfg, p, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);
	{
		const char *sets[] = { "model.preset=mixtral-8x7b", "cluster.preset=h100-4x8" };

		ck_assert_int_eq(rlb_config_load(&cfg, NULL, sets, 2, &err), RLB_ECONFIG);
		ck_assert_str_eq(err.msg, "--set 'model.preset=mixtral-8x7b': 'model.experts' 8 "
				 "is not divisible by the EP size 32 ('parallel.ep_size' 0: all the cluster's GPUs, "
				 "'cluster.nodes' 4 x 'cluster.gpus_per_node' 8)");
	}

	/* from --set, the --set is named */
	{
		const char *sets[] = { "model.preset=olmoe", "parallel.ep_size=12" };

		ck_assert_int_eq(rlb_config_load(&cfg, NULL, sets, 2, &err), RLB_ECONFIG);
		ck_assert_str_eq(err.msg, "--set 'parallel.ep_size=12': 'parallel.ep_size' 12 "
				 "is neither a multiple of 'cluster.gpus_per_node' 8 nor below it");
	}

	/* empty documents are all defaults */
	p = scratch("empty.yaml", "# nothing\n");
	{
		const char *sets[] = { "model.preset=olmoe" };

		load_ok(&cfg, p, sets, 1);
	}
	ck_assert_int_eq(cfg.model.experts, 64);
}
END_TEST

START_TEST(test_limits)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char set[128], want[RLB_PATH_MAX + RLB_ERR_MSG_MAX], *big;
	const char *sets[1] = { set };
	const char *p;
	FILE *fp;

	/* deep flow nesting is refused before libyaml sees it */
	snprintf(set, sizeof(set), "model.experts=%.65s", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
		 "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
	snprintf(want, sizeof(want), "--set '%s': brackets nested more than 64 deep", set);
	ck_assert_int_eq(rlb_config_load(&cfg, NULL, sets, 1, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);

	/* a long --set is shortened in its message, so that the reason fits */
	big = malloc(2048);
	ck_assert_ptr_nonnull(big);
	snprintf(big, 2048, "model.layer_pattern=");
	memset(big + strlen(big), 'E', 1100);
	big[20 + 1100] = '\0';
	sets[0] = big;
	ck_assert_int_eq(rlb_config_load(&cfg, NULL, sets, 1, &err), RLB_ECONFIG);
	ck_assert_msg(strncmp(err.msg, "--set 'model.layer_pattern=EEE", 30) == 0, "%s", err.msg);
	ck_assert_msg(strstr(err.msg, "...': value 'EEE"), "%s", err.msg);
	ck_assert_msg(strstr(err.msg, "' for 'model.layer_pattern' is too long (at most 1024 bytes)"),
		      "%s", err.msg);
	free(big);
	sets[0] = set;

	/* a file over 1 MiB is not a config */
	p = scratch("big.yaml", "");
	big = malloc((1u << 20) + 2);
	ck_assert_ptr_nonnull(big);
	memset(big, '#', (1u << 20) + 1);
	big[(1u << 20) + 1] = '\0';
	fp = fopen(p, "w");
	fputs(big, fp);
	fclose(fp);
	free(big);
	snprintf(want, sizeof(want), "%s: file is too large for a config (over 1048576 bytes)", p);
	ck_assert_int_eq(rlb_config_load(&cfg, p, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, want);
}
END_TEST

/* Every prefix and many byte changes of a config load or fail cleanly. */
START_TEST(test_corrupt_input)
{
	static const char text[] =
		"model:\n  preset: olmoe\n  topk: 4\n"
		"cluster: {preset: h100-4x8, nodes: 2}\n"
		"parallel: {ep_size: 16, pack: ffd}\n"
		"balancer:\n  policy: 'eplb'\n  reorder: no\n"
		"workload:\n  len_sigma: 0.5\n  segment_max: \"600\"\n";
	static const char flips[] = { '\0', ':', '[', '{', '"', '\'', '\t', '\n', '#', '&',
				      '*', '-', '9', (char)0xff, (char)0xc3 };
	struct rlb_config cfg;
	struct rlb_err err;
	char buf[sizeof(text)], path[RLB_PATH_MAX];
	size_t len = sizeof(text) - 1, n, i, f;
	FILE *fp;
	int rc;

	snprintf(path, sizeof(path), "%s/config-corrupt.yaml", rlb_test_tmpdir());
	for (n = 0; n <= len + len * sizeof(flips); n++) {
		memcpy(buf, text, sizeof(text));
		if (n <= len) {
			i = n;			/* a prefix of i bytes */
		} else {
			i = len;
			f = (n - len - 1) % sizeof(flips);
			buf[(n - len - 1) / sizeof(flips)] = flips[f];
		}
		fp = fopen(path, "wb");
		ck_assert_ptr_nonnull(fp);
		ck_assert_uint_eq(fwrite(buf, 1, i, fp), i);
		fclose(fp);
		memset(&err, 0, sizeof(err));
		rc = rlb_config_load(&cfg, path, NULL, 0, &err);
		ck_assert_msg(rc == 0 || rc == RLB_ECONFIG, "case %zu: rc %d", n, rc);
		if (n == len)
			ck_assert_msg(rc == 0, "the whole text: %s", err.msg);
		if (rc)
			ck_assert_msg(strncmp(err.msg, path, strlen(path)) == 0,
				      "case %zu: %s", n, err.msg);
	}
}
END_TEST

START_TEST(test_validate_programmatic)
{
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };

	rlb_config_defaults(&cfg);
	cfg.model.experts = 16;
	cfg.model.topk = 2;
	cfg.model.hidden = 64;
	cfg.model.expert_ffn = 32;
	cfg.model.moe_layers = 2;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.cluster.gpus_per_node = 3;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "'model.experts' 16 is not divisible by the EP size 3 "
			 "('parallel.ep_size' 0: all the cluster's GPUs, 'cluster.nodes' 1 x "
			 "'cluster.gpus_per_node' 3)");
	cfg.cluster.gpus_per_node = 8;
	cfg.cluster.nvlink_gbps = -1;
	strcpy(cfg.path, "x.yaml");
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: value -1 for 'cluster.nvlink_gbps' is out of range [1e-06, 1000000]");
	cfg.cluster.nvlink_gbps = 340;
	cfg.model.shared_experts = 1;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.shared_experts' 1 needs 'model.shared_expert_ffn'");
	cfg.model.shared_experts = 0;
	cfg.model.q_heads = 6;
	cfg.model.kv_heads = 4;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.kv_heads' 4 does not divide 'model.q_heads' 6");
	cfg.model.q_heads = 8;
	cfg.model.expert_groups = 4;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.expert_groups' 4 needs 'model.topk_groups' between 1 and 4");
	cfg.model.topk_groups = 2;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	/* interleaved MoE layers */
	ck_assert_int_eq(cfg.model.moe_layer_period, 1);
	cfg.model.moe_layer_period = 2;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.moe_layer_period' 2 needs 'model.dense_ffn'");
	cfg.model.dense_ffn = 128;
	cfg.model.moe_layer_offset = 2;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.moe_layer_offset' 2 is not below "
			 "'model.moe_layer_period' 2");
	cfg.model.moe_layer_offset = 1;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.model.moe_layer_period = 65;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: value 65 for 'model.moe_layer_period' is out of range [1, 64]");
	cfg.model.moe_layer_period = 1;
	cfg.model.moe_layer_offset = 0;
	/* sliding-window attention */
	cfg.model.full_attention_period = 2;	/* without a window: every layer full */
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.model.attention_window = 128;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.model.attention_window = -1;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: value -1 for 'model.attention_window' is out of "
			 "range [0, 16777216]");
	/* multi-head latent attention */
	cfg.model.attention_window = 0;
	cfg.model.v_head_dim = 128;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.v_head_dim' needs 'model.kv_lora_rank' "
			 "(multi-head latent attention)");
	cfg.model.kv_lora_rank = 512;
	/* MLA without its heads: no head_dim (d - rope < 0), then no q_heads */
	cfg.model.qk_rope_head_dim = 64;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.kv_lora_rank' 512 needs 'model.q_heads' and "
			 "'model.head_dim' (multi-head latent attention's query/key heads)");
	cfg.model.head_dim = 192;
	cfg.model.q_heads = 0;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.kv_lora_rank' 512 needs 'model.q_heads' and "
			 "'model.head_dim' (multi-head latent attention's query/key heads)");
	cfg.model.q_heads = 8;
	cfg.model.qk_rope_head_dim = 192;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'model.qk_rope_head_dim' 192 is not below "
			 "'model.head_dim' 192 (the query/key head, its rotary part included)");
	cfg.model.qk_rope_head_dim = 64;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.model.kv_lora_rank = cfg.model.v_head_dim = cfg.model.qk_rope_head_dim = 0;
	cfg.model.head_dim = 0;
	/* linear attention: all four keys, and not with a window */
	cfg.model.attention_window = 128;
	cfg.model.linear_value_heads = 32;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: more than one of 'model.linear_value_heads', "
			 "'model.attention_window' and 'model.attention_chunk': the layers that are "
			 "not full are linear, windowed or chunked");
	cfg.model.attention_window = 0;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: linear attention needs all of 'model.linear_key_heads', "
			 "'model.linear_value_heads', 'model.linear_key_head_dim' and "
			 "'model.linear_value_head_dim'");
	cfg.model.linear_key_heads = 16;
	cfg.model.linear_key_head_dim = 128;
	cfg.model.linear_value_head_dim = 128;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.model.linear_key_heads = cfg.model.linear_value_heads = 0;
	cfg.model.linear_key_head_dim = cfg.model.linear_value_head_dim = 0;
	cfg.model.full_attention_period = 0;
	cfg.parallel.pack = RLB_PACK_DYNAMIC;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), 0);
	cfg.parallel.pack = (enum rlb_pack)7;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'parallel.pack' has no value 7");
	/* data control and schedule files come with a plan, never from a config */
	cfg.parallel.pack = RLB_PACK_DATA_CONTROL;
	ck_assert_int_eq(rlb_config_validate(&cfg, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "x.yaml: 'parallel.pack' has no value 2");
}
END_TEST

/*
 * The layer layout against the models' own rules: for every hidden layer
 * i, whether it is MoE, computed the way each model's code does.
 */
START_TEST(test_layer_layout)
{
	static const struct {
		const char *model;
		int first_dense, moe, period, offset, hidden;
	} cases[] = {
		/* Llama 4 Maverick: interleave_moe_layer_step 2, 48 layers */
		{ "llama4", 0, 24, 2, 1, 48 },
		/* Jamba: expert_layer_period 2, expert_layer_offset 1, 32 layers */
		{ "jamba", 0, 16, 2, 1, 32 },
		/* Megatron --moe-layer-freq 4, 24 layers */
		{ "megatron", 0, 6, 4, 0, 24 },
		/* DeepSeek-V3: first_k_dense_replace 3, 61 layers */
		{ "deepseek", 3, 58, 1, 0, 61 },
	};
	struct rlb_model_config m;
	size_t c;

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		long i, j = 0, dense = 0, run = 0;

		memset(&m, 0, sizeof(m));
		m.first_dense_layers = cases[c].first_dense;
		m.moe_layers = cases[c].moe;
		m.moe_layer_period = cases[c].period;
		m.moe_layer_offset = cases[c].offset;
		ck_assert_int_eq(rlb_model_hidden_layers(&m), cases[c].hidden);
		ck_assert_int_eq(rlb_model_dense_layers(&m), cases[c].hidden - cases[c].moe);
		for (i = 0; i < cases[c].hidden; i++) {
			int is_moe;

			if (!strcmp(cases[c].model, "llama4") || !strcmp(cases[c].model, "jamba"))
				is_moe = (i + 1) % 2 == 0;
			else if (!strcmp(cases[c].model, "megatron"))
				is_moe = i % 4 == 0;
			else
				is_moe = i >= 3;
			ck_assert_int_eq(rlb_model_moe_layer_of(&m, i), is_moe ? j : -1);
			ck_assert_int_eq(rlb_model_layer_block(&m, i), RLB_BLOCK_DECODER);
			if (!is_moe) {
				dense++;
				run++;
				continue;
			}
			ck_assert_msg(rlb_model_moe_layer_index(&m, j) == i, "%s: MoE layer %ld",
				      cases[c].model, j);
			ck_assert_int_eq(rlb_model_dense_before(&m, j), run);
			j++;
			run = 0;
		}
		ck_assert_int_eq(j, cases[c].moe);
		ck_assert_int_eq(rlb_model_dense_before(&m, j), run);	/* after the last */
		ck_assert_int_eq(dense, rlb_model_dense_layers(&m));
	}
	m.moe_layer_period = 0;		/* a struct made without the defaults */
	m.moe_layer_offset = 0;
	ck_assert_int_eq(rlb_model_hidden_layers(&m), 61);
}
END_TEST

/*
 * Which layers attend within the window, against the models' own rules:
 * gpt-oss's layer_types (sliding on even layers), Gemma 3's
 * sliding_window_pattern 6 (every sixth layer full), Mistral's window on
 * every layer, and no window (whatever the period); Qwen3-Next's linear
 * attention with full_attention_interval 4.
 */
START_TEST(test_attention_layout)
{
	static const struct {
		const char *model;
		int window, period;
	} cases[] = {
		{ "gpt-oss", 128, 2 }, { "gemma3", 1024, 6 }, { "mistral", 4096, 0 }, { "none", 0, 2 },
	};
	struct rlb_model_config m;
	size_t c;
	long i;

	memset(&m, 0, sizeof(m));
	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		m.attention_window = cases[c].window;
		m.full_attention_period = cases[c].period;
		for (i = 0; i < 48; i++) {
			int sliding;

			if (!strcmp(cases[c].model, "gpt-oss"))
				sliding = i % 2 == 0;
			else if (!strcmp(cases[c].model, "gemma3"))
				sliding = (i + 1) % 6 != 0;
			else
				sliding = cases[c].window > 0;
			ck_assert_msg((rlb_model_layer_attention(&m, i) == RLB_ATT_WINDOW) == sliding, "%s: layer %ld",
				      cases[c].model, i);
		}
	}
	/* Llama 4: chunked attention but on every fourth (NoPE) layer */
	memset(&m, 0, sizeof(m));
	m.attention_chunk = 8192;
	m.full_attention_period = 4;
	for (i = 0; i < 48; i++)
		ck_assert_int_eq(rlb_model_layer_attention(&m, i),
				 (i + 1) % 4 == 0 ? RLB_ATT_FULL : RLB_ATT_CHUNK);
	/* Qwen3-Next: full_attention_interval 4, Gated DeltaNet on the others */
	memset(&m, 0, sizeof(m));
	m.full_attention_period = 4;
	m.linear_key_heads = 16;
	m.linear_value_heads = 32;
	m.linear_key_head_dim = m.linear_value_head_dim = 128;
	for (i = 0; i < 48; i++)
		ck_assert_int_eq(rlb_model_layer_attention(&m, i),
				 (i + 1) % 4 == 0 ? RLB_ATT_FULL : RLB_ATT_LINEAR);
}
END_TEST

/*
 * A layer pattern, against NVIDIA Nemotron 3 Nano's hybrid_override_pattern
 * read by hand: the MoE layers are the 'E's, the layers between them
 * the others; and what a pattern refuses.
 */
START_TEST(test_layer_pattern)
{
	static const char nano[] = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
	/* the 'E' positions, counted by hand from the pattern above */
	static const long moe_at[] = {
		1, 3, 6, 8, 10, 13, 15, 17, 20, 22, 24, 27, 29, 31, 34, 36, 38, 40,
		43, 45, 47, 49, 51,
	};
	static const struct {
		const char *set, *msg;
	} bad[] = {
		{ "model.layer_pattern=ME*x",
		  "'model.layer_pattern' has 'x' at layer 3 (expected E, M, * or -)" },
		{ "model.moe_layers=22",
		  "'model.moe_layers' 22 is not the 23 MoE layers ('E') of 'model.layer_pattern'" },
		{ "model.first_dense_layers=1",
		  "'model.first_dense_layers' with 'model.layer_pattern': the pattern gives every layer" },
		{ "model.attention_window=128",
		  "'model.attention_window' with 'model.layer_pattern': a pattern's attention layers ('*') attend in full" },
		{ "model.mamba_state=0",
		  "'model.layer_pattern' has Mamba-2 layers ('M') and needs 'model.mamba_heads'" },
		{ "model.mamba_groups=7", "'model.mamba_groups' 7 does not divide 'model.mamba_heads' 64" },
		{ "model.moe_layer_period=2",
		  "'model.moe_layer_period' with 'model.layer_pattern': the pattern gives every layer" },
		{ "model.moe_layer_offset=1",
		  "'model.moe_layer_offset' with 'model.layer_pattern': the pattern gives every layer" },
		{ "model.attention_chunk=64",
		  "'model.attention_chunk' with 'model.layer_pattern': a pattern's attention layers ('*') attend in full" },
		{ "model.full_attention_period=4",
		  "'model.full_attention_period' with 'model.layer_pattern': a pattern's attention layers ('*') attend in full" },
		{ "model.linear_value_heads=8",
		  "'model.linear_value_heads' with 'model.layer_pattern': a pattern's attention layers ('*') attend in full" },
	};
	const char *path = scratch("nano.yaml",
		"model:\n  experts: 128\n  topk: 6\n  hidden: 2688\n  expert_ffn: 1856\n"
		"  moe_layers: 23\n  layer_pattern: \"MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\"\n"
		"  gated_ffn: false\n  mamba_heads: 64\n  mamba_head_dim: 64\n  mamba_state: 128\n"
		"  mamba_groups: 8\n");
	const char *sets[] = { "model.layer_pattern=*E*-", "model.moe_layers=1",
			       "model.mamba_heads=0", "model.mamba_head_dim=0",
			       "model.mamba_state=0", "model.dense_ffn=512", "model.mamba_groups=0" };
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	const struct rlb_model_config *m = &cfg.model;
	long i, j = 0;
	size_t b;

	load_ok(&cfg, path, NULL, 0);
	ck_assert_str_eq(m->layer_pattern, nano);
	ck_assert_int_eq(m->gated_ffn, 0);
	ck_assert_int_eq(rlb_model_ffn_matrices(m), 2);
	ck_assert_int_eq(rlb_model_hidden_layers(m), 52);
	ck_assert_int_eq(rlb_model_dense_layers(m), 29);
	for (i = 0; i < 52; i++) {
		int is_moe = j < 23 && moe_at[j] == i;

		ck_assert_int_eq(rlb_model_moe_layer_of(m, i), is_moe ? j : -1);
		ck_assert_int_eq(rlb_model_layer_block(m, i),
				 nano[i] == 'E' ? RLB_BLOCK_MOE : nano[i] == 'M' ? RLB_BLOCK_MAMBA :
				 RLB_BLOCK_ATTENTION);
		if (is_moe) {
			ck_assert_int_eq(rlb_model_moe_layer_index(m, j), i);
			ck_assert_int_eq(rlb_model_dense_before(m, j),
					 j ? moe_at[j] - moe_at[j - 1] - 1 : 1);
			j++;
		}
	}
	ck_assert_int_eq(j, 23);
	ck_assert_int_eq(rlb_model_dense_before(m, 23), 0);	/* the pattern ends with E */
	ck_assert_int_eq(rlb_model_moe_layer_of(m, 52), -1);
	ck_assert_int_eq(rlb_model_moe_layer_of(m, -1), -1);
	for (b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		ck_assert_int_eq(rlb_config_load(&cfg, path, &bad[b].set, 1, &err), RLB_ECONFIG);
		ck_assert_msg(strstr(err.msg, bad[b].msg), "%s: %s", bad[b].set, err.msg);
	}
	/* a pattern that starts with '*' or '-' needs no YAML quotes in --set */
	ck_assert_int_eq(rlb_config_load(&cfg, path, sets, 5, &err), RLB_ECONFIG);
	ck_assert_msg(strstr(err.msg, "needs 'model.dense_ffn'"), "%s", err.msg);
	ck_assert_int_eq(rlb_config_load(&cfg, path, sets, 6, &err), RLB_ECONFIG);
	ck_assert_msg(strstr(err.msg, "the 'model.mamba_*' keys need Mamba-2 layers"), "%s", err.msg);
	load_ok(&cfg, path, sets, 7);
	ck_assert_int_eq(rlb_model_hidden_layers(m), 4);
	ck_assert_int_eq(rlb_model_layer_block(m, 3), RLB_BLOCK_MLP);
	ck_assert_int_eq(rlb_model_dense_before(m, 1), 2);
	/* an unquoted pattern that starts with '*' is a YAML alias: the error says to quote it */
	path = scratch("unquoted.yaml", "preset: tiny-2x2\nmodel:\n  layer_pattern: *E*E*E*E\n");
	ck_assert_int_eq(rlb_config_load(&cfg, path, NULL, 0, &err), RLB_ECONFIG);
	ck_assert_msg(strstr(err.msg, "(while scanning an alias at line 3); a value that starts "
			     "with '*', such as a layer pattern, needs quotes"), "%s", err.msg);
	/* defaults: gated FFNs, no pattern */
	load_ok(&cfg, NULL, (const char *[]){ "model.preset=olmoe" }, 1);
	ck_assert_int_eq(rlb_model_ffn_matrices(m), 3);
	ck_assert_str_eq(m->layer_pattern, "");
	/* the Mamba-2 keys without a pattern */
	ck_assert_int_eq(rlb_config_load(&cfg, NULL, (const char *[]){ "model.preset=olmoe",
					 "model.mamba_heads=4" }, 2, &err), RLB_ECONFIG);
	ck_assert_msg(strstr(err.msg, "--set 'model.mamba_heads=4': the 'model.mamba_*' keys need a "
			     "'model.layer_pattern' with Mamba-2 layers ('M')"), "%s", err.msg);
}
END_TEST

START_TEST(test_pack_names)
{
	struct rlb_err err = { 0, "" };
	enum rlb_pack p = RLB_PACK_IN_ORDER;

	ck_assert_str_eq(rlb_pack_name(RLB_PACK_IN_ORDER), "in-order");
	ck_assert_str_eq(rlb_pack_name(RLB_PACK_FFD), "ffd");
	ck_assert_int_eq(rlb_pack_from_name("ffd", &p, &err), 0);
	ck_assert_int_eq(p, RLB_PACK_FFD);
	ck_assert_int_eq(rlb_pack_from_name("in-order", &p, &err), 0);
	ck_assert_int_eq(p, RLB_PACK_IN_ORDER);
	ck_assert_str_eq(rlb_pack_name(RLB_PACK_DYNAMIC), "dynamic");
	ck_assert_str_eq(rlb_pack_name(RLB_PACK_DATA_CONTROL), "data-control");
	ck_assert_str_eq(rlb_pack_name(RLB_PACK_FILE), "file");
	ck_assert_str_eq(rlb_pack_name((enum rlb_pack)9), "unknown");
	ck_assert_int_eq(rlb_pack_from_name("dynamic", &p, &err), 0);
	ck_assert_int_eq(p, RLB_PACK_DYNAMIC);
	ck_assert_int_eq(rlb_pack_from_name("fifo", &p, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "unknown packing rule 'fifo' (expected in-order, ffd or dynamic)");
	/* names of schedules that come with a plan are not rules */
	ck_assert_int_eq(rlb_pack_from_name("data-control", &p, &err), RLB_EINVAL);
}
END_TEST

/* Load, write, load the output: the same struct and the same text. */
static void round_trip(const char *path, const char *const *sets, size_t nsets,
		       const char *tag)
{
	struct rlb_config a, b;
	struct rlb_err err = { 0, "" };
	char out1[RLB_PATH_MAX], out2[RLB_PATH_MAX], *t1, *t2;
	size_t n1, n2;
	FILE *fp;

	load_ok(&a, path, sets, nsets);
	snprintf(out1, sizeof(out1), "%s/config-rt-%s-1.yaml", rlb_test_tmpdir(), tag);
	snprintf(out2, sizeof(out2), "%s/config-rt-%s-2.yaml", rlb_test_tmpdir(), tag);
	fp = fopen(out1, "w");
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_config_write_yaml(&a, fp, &err), 0);
	fclose(fp);
	load_ok(&b, out1, NULL, 0);
	ck_assert_mem_eq(&a.model, &b.model, sizeof(a.model));
	ck_assert_mem_eq(&a.cluster, &b.cluster, sizeof(a.cluster));
	ck_assert_mem_eq(&a.parallel, &b.parallel, sizeof(a.parallel));
	ck_assert_mem_eq(&a.balancer, &b.balancer, sizeof(a.balancer));
	ck_assert_mem_eq(&a.workload, &b.workload, sizeof(a.workload));
	fp = fopen(out2, "w");
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_config_write_yaml(&b, fp, &err), 0);
	fclose(fp);

	fp = fopen(out1, "r");
	t1 = calloc(1, 65536);
	n1 = fread(t1, 1, 65535, fp);
	fclose(fp);
	fp = fopen(out2, "r");
	t2 = calloc(1, 65536);
	n2 = fread(t2, 1, 65535, fp);
	fclose(fp);
	ck_assert_uint_eq(n1, n2);
	ck_assert_str_eq(t1, t2);
	/* every key is written */
	ck_assert_ptr_nonnull(strstr(t1, "\n  token_noise: "));
	ck_assert_ptr_nonnull(strstr(t1, "\n  pack: "));
	free(t1);
	free(t2);
}

START_TEST(test_round_trip)
{
	char file[128], tag[64];
	size_t i;

	for (i = 0; i < sizeof(full_configs) / sizeof(full_configs[0]); i++) {
		snprintf(file, sizeof(file), "%s.yaml", full_configs[i]);
		round_trip(shipped(file), NULL, 0, full_configs[i]);
	}
	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		char set[128];
		const char *sets[] = { set, "cluster.preset=h200-8x8", "parallel.ep_size=8" };

		snprintf(set, sizeof(set), "model.preset=%s", shapes[i].name);
		snprintf(tag, sizeof(tag), "model-%s", shapes[i].name);
		round_trip(NULL, sets, 3, tag);
	}
	{
		/* awkward values: quotes in names, non-round doubles, every enum */
		const char *sets[] = {
			"model.preset=olmoe", "model.name='a \"quoted\": name\\'",
			"cluster.hbm_gbps=2718.281828459045", "cluster.gemm_eff_max=0.1",
			"workload.len_sigma=0.30000000000000004", "parallel.pack=ffd",
			"balancer.policy=ideal", "parallel.recompute=true",
		};

		round_trip(NULL, sets, sizeof(sets) / sizeof(sets[0]), "awkward");
	}
	{
		/*
		 * characters a YAML reader refuses or folds when written raw:
		 * C1 controls (NEL is a line break), the noncharacters U+FFFE
		 * and U+FFFF
		 */
		const char *sets[] = {
			"model.preset=olmoe",
			"model.name=\"nel\\x85 c1\\x80\\x9f \\ufffe\\uffff end\"",
			"cluster.name=\"a\\u0085b\\u2028c\\u00a0d\"",
		};

		round_trip(NULL, sets, sizeof(sets) / sizeof(sets[0]), "unprintable");
	}
}
END_TEST

Suite *rlb_suite_config(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_set_timeout(tc, 60);

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_defaults_need_model);
	tcase_add_loop_test(tc, test_model_presets, 0, (int)(sizeof(shapes) / sizeof(shapes[0])));
	tcase_add_test(tc, test_cluster_presets);
	tcase_add_loop_test(tc, test_shipped_configs, 0,
			    (int)(sizeof(full_configs) / sizeof(full_configs[0])));
	tcase_add_test(tc, test_shipped_values);
	tcase_add_test(tc, test_preset_overrides);
	tcase_add_test(tc, test_set_good);
	tcase_add_test(tc, test_set_failed_preset);
	tcase_add_test(tc, test_new_get);
	tcase_add_loop_test(tc, test_set_bad, 0, (int)(sizeof(bad_sets) / sizeof(bad_sets[0])));
	tcase_add_test(tc, test_trace_limits);
	tcase_add_loop_test(tc, test_error_fixtures, 0,
			    (int)(sizeof(bad_files) / sizeof(bad_files[0])));
	tcase_add_test(tc, test_error_in_preset);
	tcase_add_test(tc, test_error_misc);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_corrupt_input);
	tcase_add_test(tc, test_validate_programmatic);
	tcase_add_test(tc, test_layer_layout);
	tcase_add_test(tc, test_attention_layout);
	tcase_add_test(tc, test_layer_pattern);
	tcase_add_test(tc, test_pack_names);
	tcase_add_test(tc, test_round_trip);
	suite_add_tcase(s, tc);
	return s;
}
