/*
 * test_config_hf.c - unit tests of lib/config_hf: every shipped model
 * preset made again from its model's config.json (tests/fixtures/hf/),
 * each family's layout and window rules on small configs, and every
 * error: bad JSON, missing and mistyped fields, layouts relibra cannot
 * describe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "config_hf.h"
#include "suites.h"

/* Write TEXT to a scratch file NAME and return its path. */
static const char *scratch(const char *name, const char *text)
{
	static char path[RLB_PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/hf-%s", rlb_test_tmpdir(), name);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(text, fp);
	ck_assert_int_eq(fclose(fp), 0);
	return path;
}

static void assert_same_model(const struct rlb_model_config *a,
			      const struct rlb_model_config *b, const char *what)
{
#define SAME(f) ck_assert_msg(a->f == b->f, "%s: " #f " %d, expected %d", what, a->f, b->f)
	ck_assert_str_eq(a->name, b->name);
	SAME(experts);
	SAME(topk);
	SAME(hidden);
	SAME(expert_ffn);
	SAME(moe_latent);
	SAME(moe_layers);
	SAME(first_dense_layers);
	SAME(moe_layer_period);
	SAME(moe_layer_offset);
	SAME(dense_ffn);
	SAME(shared_experts);
	SAME(shared_expert_ffn);
	SAME(expert_groups);
	SAME(topk_groups);
	SAME(q_heads);
	SAME(kv_heads);
	SAME(head_dim);
	SAME(kv_lora_rank);
	SAME(q_lora_rank);
	SAME(qk_rope_head_dim);
	SAME(v_head_dim);
	SAME(attention_output_gate);
	SAME(attention_chunk);
	SAME(linear_key_heads);
	SAME(linear_value_heads);
	SAME(linear_key_head_dim);
	SAME(linear_value_head_dim);
	SAME(attention_window);
	SAME(full_attention_period);
	SAME(gated_ffn);
	SAME(mamba_heads);
	SAME(mamba_head_dim);
	SAME(mamba_state);
	SAME(mamba_groups);
	ck_assert_str_eq(a->layer_pattern, b->layer_pattern);
#undef SAME
}

/* Every shipped model preset equals what its config.json gives. */
START_TEST(test_shipped_presets)
{
	const char *const *names = rlb_config_preset_names("models");
	const char *name = names[_i];
	struct rlb_hf_model hm;
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char path[RLB_PATH_MAX], set[128];
	const char *sets[1] = { set };

	if (!name)
		return;
	snprintf(path, sizeof(path), "%s/fixtures/hf/%s.json", rlb_test_srcdir(), name);
	ck_assert_msg(rlb_hf_model_load(&hm, path, name, &err) == 0, "%s", err.msg);
	snprintf(set, sizeof(set), "model.preset=%s", name);
	ck_assert_msg(rlb_config_load(&cfg, NULL, sets, 1, &err) == 0, "%s", err.msg);
	assert_same_model(&hm.model, &cfg.model, name);
}
END_TEST

/* The model of the config.json TEXT (named "m"), which must load. */
static void load(struct rlb_hf_model *hm, const char *text)
{
	struct rlb_err err = { 0, "" };

	ck_assert_msg(rlb_hf_model_load(hm, scratch("ok.json", text), "m", &err) == 0, "%s",
		      err.msg);
}

/* The error of the config.json TEXT: CODE, and MSG after "PATH: ". */
static void refused(const char *text, int code, const char *msg)
{
	struct rlb_hf_model hm;
	struct rlb_err err = { 0, "" };
	const char *path = scratch("bad.json", text);
	char want[2 * RLB_PATH_MAX];

	ck_assert_int_eq(rlb_hf_model_load(&hm, path, NULL, &err), code);
	snprintf(want, sizeof(want), "%s%s%s", path, msg[0] == ':' ? "" : ": ", msg);
	ck_assert_str_eq(err.msg, want);
}

#define BASE "\"hidden_size\": 64, \"intermediate_size\": 256, \"num_attention_heads\": 4, " \
	     "\"num_key_value_heads\": 2, \"num_experts_per_tok\": 2, "

/* Each family's rules, on configs of a few layers. */
START_TEST(test_family_rules)
{
	struct rlb_hf_model hm, hm2;

	/* DeepSeek-V2-Lite's shape: fused shared experts, first dense layer */
	load(&hm, "{" BASE "\"num_hidden_layers\": 5, \"first_k_dense_replace\": 1, "
	     "\"n_routed_experts\": 8, \"moe_intermediate_size\": 32, \"n_shared_experts\": 2, "
	     "\"qk_nope_head_dim\": 24, \"qk_rope_head_dim\": 8, \"kv_lora_rank\": 16, "
	     "\"q_lora_rank\": null, \"v_head_dim\": 20, \"_name_or_path\": \"a/B-1\"}");
	ck_assert_int_eq(hm.model.first_dense_layers, 1);
	ck_assert_int_eq(hm.model.moe_layers, 4);
	ck_assert_int_eq(hm.model.dense_ffn, 256);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 64);
	ck_assert_int_eq(hm.model.kv_heads, 4);		/* MLA: as many as the query heads */
	ck_assert_int_eq(hm.model.head_dim, 32);
	ck_assert_int_eq(hm.model.kv_lora_rank, 16);
	ck_assert_int_eq(hm.model.q_lora_rank, 0);		/* a full query projection */
	ck_assert_int_eq(hm.model.qk_rope_head_dim, 8);
	ck_assert_int_eq(hm.model.v_head_dim, 20);
	ck_assert_str_eq(hm.model.name, "m");
	ck_assert_str_eq(hm.from[RLB_HF_SHARED_FFN], "moe_intermediate_size * n_shared_experts 2");
	/* Ling (bailing_moe): num_shared_experts, fused as DeepSeek's */
	load(&hm, "{\"model_type\": \"bailing_moe\", " BASE "\"num_hidden_layers\": 4, "
	     "\"first_k_dense_replace\": 1, \"num_experts\": 8, \"moe_intermediate_size\": 32, "
	     "\"num_shared_experts\": 2}");
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 64);
	ck_assert_str_eq(hm.from[RLB_HF_SHARED_FFN], "moe_intermediate_size * num_shared_experts 2");
	/* Granite's shared_intermediate_size (Granite 4.0-H-Tiny's MoE widths) */
	load(&hm, "{\"model_type\": \"granitemoeshared\", \"hidden_size\": 1536, "
	     "\"intermediate_size\": 512, \"shared_intermediate_size\": 1024, "
	     "\"num_local_experts\": 64, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 4, "
	     "\"num_attention_heads\": 12, \"num_key_value_heads\": 4}");
	ck_assert_int_eq(hm.model.expert_ffn, 512);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 1024);
	ck_assert_str_eq(hm.from[RLB_HF_SHARED_FFN], "shared_intermediate_size");
	/* JetMoE-8B: a mixture of attention heads, 16 per expert, top 2 */
	load(&hm, "{\"model_type\": \"jetmoe\", \"hidden_size\": 2048, "
	     "\"intermediate_size\": 5632, \"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
	     "\"num_hidden_layers\": 24, \"num_key_value_heads\": 16, \"kv_channels\": 128}");
	ck_assert_int_eq(hm.model.q_heads, 32);
	ck_assert_int_eq(hm.model.kv_heads, 16);
	ck_assert_int_eq(hm.model.head_dim, 128);
	ck_assert_int_eq(hm.model.expert_ffn, 5632);
	ck_assert_str_eq(hm.from[RLB_HF_HEAD_DIM], "kv_channels");
	/* 0 is none (MiniMax-M2) */
	load(&hm, "{\"model_type\": \"minimax_m2\", " BASE "\"num_hidden_layers\": 2, "
	     "\"num_local_experts\": 8, \"shared_intermediate_size\": 0}");
	ck_assert_int_eq(hm.model.shared_experts, 0);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 0);
	/* Arctic: a residual MLP of hidden_size beside the experts; moe_layer_frequency */
	load(&hm, "{\"model_type\": \"arctic\", \"hidden_size\": 7168, "
	     "\"intermediate_size\": 4864, \"num_local_experts\": 128, \"num_experts_per_tok\": 2, "
	     "\"num_hidden_layers\": 35, \"num_attention_heads\": 56, \"num_key_value_heads\": 8, "
	     "\"moe_layer_frequency\": 1, \"use_residual\": true, \"parallel_attn_mlp_res\": true}");
	ck_assert_int_eq(hm.model.moe_layers, 35);
	ck_assert_int_eq(hm.model.expert_ffn, 4864);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 7168);
	ck_assert_int_eq(hm.model.head_dim, 128);
	load(&hm, "{\"model_type\": \"arctic\", " BASE "\"num_local_experts\": 8, "
	     "\"num_hidden_layers\": 5, \"moe_layer_frequency\": 2, \"use_residual\": false}");
	ck_assert_int_eq(hm.model.moe_layers, 2);	/* layers 1 and 3 */
	ck_assert_int_eq(hm.model.first_dense_layers, 1);
	ck_assert_int_eq(hm.model.moe_layer_period, 2);
	ck_assert_int_eq(hm.model.moe_layer_offset, 0);
	ck_assert_int_eq(hm.model.dense_ffn, 256);	/* as wide as the experts */
	ck_assert_int_eq(hm.model.shared_experts, 0);
	ck_assert_str_eq(hm.from[RLB_HF_MOE_LAYERS], "num_hidden_layers 5, moe_layer_frequency");
	/* moe_layer_freq 2 after 3 dense layers: MoE at 4, 6, 8 of 9 */
	load(&hm, "{" BASE "\"num_hidden_layers\": 9, \"first_k_dense_replace\": 3, "
	     "\"moe_layer_freq\": 2, \"n_routed_experts\": 8, \"moe_intermediate_size\": 32}");
	ck_assert_int_eq(hm.model.moe_layers, 3);
	ck_assert_int_eq(hm.model.first_dense_layers, 3);
	ck_assert_int_eq(hm.model.moe_layer_period, 2);
	ck_assert_int_eq(hm.model.moe_layer_offset, 1);
	ck_assert_int_eq(rlb_model_moe_layer_index(&hm.model, 0), 4);
	ck_assert_int_eq(rlb_model_moe_layer_index(&hm.model, 2), 8);
	/* Qwen MoE: decoder_sparse_step 3 (MoE at 2, 5, 8), a shared expert of its own */
	load(&hm, "{" BASE "\"num_hidden_layers\": 9, \"decoder_sparse_step\": 3, "
	     "\"num_experts\": 6, \"moe_intermediate_size\": 32, "
	     "\"shared_expert_intermediate_size\": 128, \"mlp_only_layers\": []}");
	ck_assert_int_eq(hm.model.moe_layers, 3);
	ck_assert_int_eq(hm.model.first_dense_layers, 0);
	ck_assert_int_eq(hm.model.moe_layer_period, 3);
	ck_assert_int_eq(hm.model.moe_layer_offset, 2);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 128);
	/* mlp_only_layers that leave a periodic layout: the first two dense */
	load(&hm, "{" BASE "\"num_hidden_layers\": 6, \"mlp_only_layers\": [0, 1], "
	     "\"num_experts\": 6, \"moe_intermediate_size\": 32}");
	ck_assert_int_eq(hm.model.first_dense_layers, 2);
	ck_assert_int_eq(hm.model.moe_layers, 4);
	ck_assert_str_eq(hm.from[RLB_HF_MOE_LAYERS], "num_hidden_layers 6, all layers, "
			 "mlp_only_layers");
	/* Llama 4: an explicit moe_layers list is the same as the step */
	load(&hm, "{\"model_type\": \"llama4\", \"text_config\": {\"model_type\": \"llama4_text\", "
	     BASE "\"num_hidden_layers\": 6, \"interleave_moe_layer_step\": 2, "
	     "\"num_local_experts\": 4, \"intermediate_size_mlp\": 512}}");
	load(&hm2, "{\"model_type\": \"llama4\", \"text_config\": {\"model_type\": \"llama4_text\", "
	     BASE "\"num_hidden_layers\": 6, \"moe_layers\": [1, 3, 5], "
	     "\"num_local_experts\": 4, \"intermediate_size_mlp\": 512}}");
	assert_same_model(&hm2.model, &hm.model, "llama4 moe_layers");
	ck_assert_int_eq(hm.model.dense_ffn, 512);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 256);
	/* no head_dim: hidden / heads; one group limits nothing */
	load(&hm, "{" BASE "\"num_hidden_layers\": 2, \"num_local_experts\": 4, "
	     "\"n_group\": 1, \"topk_group\": 1}");
	ck_assert_int_eq(hm.model.head_dim, 16);
	ck_assert_int_eq(hm.model.expert_groups, 0);
	ck_assert_int_eq(hm.model.expert_ffn, 256);
	/* group-limited routing */
	load(&hm, "{" BASE "\"num_hidden_layers\": 2, \"num_local_experts\": 8, "
	     "\"n_group\": 4, \"topk_group\": 2}");
	ck_assert_int_eq(hm.model.expert_groups, 4);
	ck_assert_int_eq(hm.model.topk_groups, 2);
#define ERNIE "\"hidden_size\": 64, \"intermediate_size\": 256, \"num_attention_heads\": 4, " \
	      "\"num_key_value_heads\": 2, \"moe_num_experts\": 8, \"moe_k\": 2, " \
	      "\"moe_intermediate_size\": 32, \"num_hidden_layers\": 6, "
	/* ERNIE 4.5: MoE from the start index to the end (absent, null or -1: the last) */
	load(&hm, "{" ERNIE "\"moe_layer_start_index\": 2, \"moe_num_shared_experts\": 2}");
	ck_assert_int_eq(hm.model.experts, 8);
	ck_assert_int_eq(hm.model.topk, 2);
	ck_assert_int_eq(hm.model.first_dense_layers, 2);
	ck_assert_int_eq(hm.model.moe_layers, 4);
	ck_assert_int_eq(hm.model.moe_layer_period, 1);
	ck_assert_int_eq(hm.model.dense_ffn, 256);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 64);
	load(&hm2, "{" ERNIE "\"moe_layer_start_index\": 2, \"moe_layer_end_index\": -1, "
	     "\"moe_num_shared_experts\": 2}");
	assert_same_model(&hm2.model, &hm.model, "ernie end -1");
	load(&hm2, "{" ERNIE "\"moe_layer_start_index\": 2, \"moe_layer_end_index\": null, "
	     "\"moe_layer_interval\": 1, \"moe_num_shared_experts\": 2}");
	assert_same_model(&hm2.model, &hm.model, "ernie end null");
	/* an interval: MoE where i + 1 is a multiple of it, from the start index */
	load(&hm, "{" ERNIE "\"moe_layer_start_index\": 0, \"moe_layer_interval\": 2}");
	ck_assert_int_eq(hm.model.first_dense_layers, 0);
	ck_assert_int_eq(hm.model.moe_layers, 3);
	ck_assert_int_eq(hm.model.moe_layer_period, 2);
	ck_assert_int_eq(hm.model.moe_layer_offset, 1);
	ck_assert_int_eq(hm.model.shared_experts, 0);
}
END_TEST

/*
 * transformers' mlp_layer_types, on GLM-5.1's shape (GlmMoeDsaConfig, 5.x):
 * 3 dense layers, then 75 MoE, whatever first_k_dense_replace says.
 */
START_TEST(test_mlp_layer_types)
{
	static const char *const extra[] = { "", "\"first_k_dense_replace\": 1, " };
	struct rlb_hf_model hm;
	char text[2048];
	size_t k;
	int i, n;

	for (k = 0; k < 2; k++) {
		/* the list decides over first_k_dense_replace, as in transformers */
		n = snprintf(text, sizeof(text), "{\"model_type\": \"glm_moe_dsa\", "
			     "\"hidden_size\": 6144, \"intermediate_size\": 12288, "
			     "\"moe_intermediate_size\": 2048, \"n_routed_experts\": 256, "
			     "\"num_experts_per_tok\": 8, \"num_attention_heads\": 64, "
			     "\"num_key_value_heads\": 64, \"num_hidden_layers\": 78, %s"
			     "\"mlp_layer_types\": [", extra[k]);
		for (i = 0; i < 78; i++)
			n += snprintf(text + n, sizeof(text) - (size_t)n, "%s\"%s\"",
				      i ? ", " : "", i < 3 ? "dense" : "sparse");
		snprintf(text + n, sizeof(text) - (size_t)n, "]}");
		load(&hm, text);
		ck_assert_int_eq(hm.model.first_dense_layers, 3);
		ck_assert_int_eq(hm.model.moe_layers, 75);
		ck_assert_int_eq(hm.model.moe_layer_period, 1);
		ck_assert_int_eq(hm.model.dense_ffn, 12288);
		ck_assert_str_eq(hm.from[RLB_HF_MOE_LAYERS],
				 "num_hidden_layers 78, mlp_layer_types");
	}
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, "
		"\"mlp_layer_types\": [\"dense\", \"sparse\"]}", RLB_ECONFIG,
		"'mlp_layer_types' has 2 entries for 3 layers");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 2, "
		"\"mlp_layer_types\": [\"dense\", \"moe\"]}", RLB_ECONFIG,
		"'mlp_layer_types'[1] is not 'dense' or 'sparse'");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 2, "
		"\"mlp_layer_types\": \"sparse\"}", RLB_ECONFIG,
		"'mlp_layer_types' is not an array");

	/* moe_layer_freq as a list: Megatron-LM's pattern, 1 MoE, 0 dense */
	load(&hm, "{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 8, "
	     "\"moe_intermediate_size\": 32, \"moe_layer_freq\": [0, 1, 0, 1, 0, 1, 0, 1]}");
	ck_assert_str_eq(hm.from[RLB_HF_MOE_LAYERS], "num_hidden_layers 8, moe_layer_freq");
	ck_assert_int_eq(hm.model.first_dense_layers, 0);
	ck_assert_int_eq(hm.model.moe_layers, 4);
	ck_assert_int_eq(hm.model.moe_layer_period, 2);
	ck_assert_int_eq(hm.model.moe_layer_offset, 1);
	load(&hm, "{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 4, "
	     "\"moe_intermediate_size\": 32, \"first_k_dense_replace\": 3, "
	     "\"moe_layer_freq\": [0, 1, 1, 1]}");
	ck_assert_int_eq(hm.model.first_dense_layers, 1);
	ck_assert_int_eq(hm.model.moe_layers, 3);
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, "
		"\"moe_layer_freq\": [1, 1]}", RLB_ECONFIG,
		"'moe_layer_freq' has 2 entries for 3 layers");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 2, "
		"\"moe_layer_freq\": [1, 2]}", RLB_ECONFIG,
		"'moe_layer_freq'[1] is not 0 (dense) or 1 (MoE)");
}
END_TEST

/* Sliding windows: layer_types, every layer, a pattern, switched off. */
START_TEST(test_window_rules)
{
	struct rlb_hf_model hm;

#define E "\"num_local_experts\": 4, "
	load(&hm, "{" BASE E "\"num_hidden_layers\": 4, \"sliding_window\": 128, \"layer_types\": "
	     "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]}");
	ck_assert_int_eq(hm.model.attention_window, 128);
	ck_assert_int_eq(hm.model.full_attention_period, 2);
	load(&hm, "{" BASE E "\"num_hidden_layers\": 4, \"sliding_window\": 4096}");
	ck_assert_int_eq(hm.model.attention_window, 4096);
	ck_assert_int_eq(hm.model.full_attention_period, 0);
	load(&hm, "{" BASE E "\"num_hidden_layers\": 12, \"sliding_window\": 512, "
	     "\"sliding_window_pattern\": 6}");
	ck_assert_int_eq(hm.model.full_attention_period, 6);
	/* Qwen: a window that is off */
	load(&hm, "{" BASE E "\"num_hidden_layers\": 4, \"sliding_window\": 4096, "
	     "\"use_sliding_window\": false}");
	ck_assert_int_eq(hm.model.attention_window, 0);
	/* Qwen MoE: use_sliding_window absent is false */
	load(&hm, "{\"model_type\": \"qwen3_moe\", " BASE E "\"num_hidden_layers\": 4, "
	     "\"sliding_window\": 4096}");
	ck_assert_int_eq(hm.model.attention_window, 0);
	/* dots.llm1: the window from max_window_layers on; none when that is every layer */
	load(&hm, "{\"model_type\": \"dots1\", " BASE E "\"num_hidden_layers\": 4, "
	     "\"sliding_window\": 4096, \"max_window_layers\": 4}");
	ck_assert_int_eq(hm.model.attention_window, 0);
	ck_assert_int_eq(hm.model.full_attention_period, 0);
	load(&hm, "{\"model_type\": \"dots1\", " BASE E "\"num_hidden_layers\": 4, "
	     "\"sliding_window\": 4096, \"max_window_layers\": 0}");
	ck_assert_int_eq(hm.model.attention_window, 4096);
	ck_assert_int_eq(hm.model.full_attention_period, 0);
	/* max_window_layers below the layers under another family's rule: refused */
	refused("{\"model_type\": \"qwen2_moe\", " BASE E "\"num_hidden_layers\": 4, "
		"\"sliding_window\": 4096, \"use_sliding_window\": true, \"max_window_layers\": 2}",
		RLB_ECONFIG, "'max_window_layers' 2 of 4 layers without 'layer_types': which "
		"layers attend within the window is the family's (and transformers version's) "
		"own rule; give 'layer_types'");
	refused("{\"model_type\": \"dots1\", " BASE E "\"num_hidden_layers\": 4, "
		"\"sliding_window\": 64, \"max_window_layers\": 2}", RLB_ECONFIG,
		"the sliding_attention layers (max_window_layers) do not leave "
		"every P-th layer full for any P, which relibra.yaml(5) cannot describe");
	/* every layer full */
	load(&hm, "{" BASE E "\"num_hidden_layers\": 2, \"sliding_window\": null, \"layer_types\": "
	     "[\"full_attention\", \"full_attention\"]}");
	ck_assert_int_eq(hm.model.attention_window, 0);
	/* Qwen3-Next: linear attention but every full_attention_interval-th, gated */
	load(&hm, "{\"model_type\": \"qwen3_next\", " BASE E "\"num_hidden_layers\": 8, "
	     "\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, "
	     "\"linear_key_head_dim\": 16, \"linear_value_head_dim\": 8}");
	ck_assert_int_eq(hm.model.full_attention_period, 4);
	ck_assert_int_eq(hm.model.linear_key_heads, 2);
	ck_assert_int_eq(hm.model.linear_value_heads, 4);
	ck_assert_int_eq(hm.model.linear_key_head_dim, 16);
	ck_assert_int_eq(hm.model.linear_value_head_dim, 8);
	ck_assert_int_eq(hm.model.attention_output_gate, 1);
	ck_assert_int_eq(hm.model.attention_window, 0);
	/* Qwen3.5: layer_types, and the gate it names */
	load(&hm, "{\"model_type\": \"qwen3_5_moe_text\", " BASE E "\"num_hidden_layers\": 4, "
	     "\"attn_output_gate\": true, \"layer_types\": [\"linear_attention\", "
	     "\"full_attention\", \"linear_attention\", \"full_attention\"], "
	     "\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, "
	     "\"linear_key_head_dim\": 16, \"linear_value_head_dim\": 8}");
	ck_assert_int_eq(hm.model.full_attention_period, 2);
	ck_assert_int_eq(hm.model.attention_output_gate, 1);
	/* Llama 4: chunked attention on the RoPE layers, by interval or by list */
	load(&hm, "{\"model_type\": \"llama4_text\", " BASE E "\"num_hidden_layers\": 8, "
	     "\"attention_chunk_size\": 8192}");
	ck_assert_int_eq(hm.model.attention_chunk, 8192);
	ck_assert_int_eq(hm.model.full_attention_period, 4);
	load(&hm, "{\"model_type\": \"llama4_text\", " BASE E "\"num_hidden_layers\": 4, "
	     "\"attention_chunk_size\": 128, \"no_rope_layers\": [1, 0, 1, 0]}");
	ck_assert_int_eq(hm.model.attention_chunk, 128);
	ck_assert_int_eq(hm.model.full_attention_period, 2);
	/* the last of 3 layers full: period 3 */
	load(&hm, "{" BASE E "\"num_hidden_layers\": 3, \"sliding_window\": 64, \"layer_types\": "
	     "[\"sliding_attention\", \"sliding_attention\", \"full_attention\"]}");
	ck_assert_int_eq(hm.model.full_attention_period, 3);
#undef E
}
END_TEST

#define NH "\"model_type\": \"nemotron_h\", \"hidden_size\": 64, \"n_routed_experts\": 8, " \
	   "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"num_attention_heads\": 4, " \
	   "\"num_key_value_heads\": 2, \"head_dim\": 16, \"mamba_num_heads\": 8, " \
	   "\"mamba_head_dim\": 16, \"ssm_state_size\": 32, \"n_groups\": 2, "

/* Nemotron-H: the layers one by one, by a pattern or a list of block types. */
START_TEST(test_nemotron_h)
{
	struct rlb_hf_model hm, hm2;

	load(&hm, "{" NH "\"hybrid_override_pattern\": \"ME*E-E\", \"num_hidden_layers\": 6, "
	     "\"intermediate_size\": 128, \"n_shared_experts\": 1, "
	     "\"moe_shared_expert_intermediate_size\": 48, \"mlp_hidden_act\": \"relu2\", "
	     "\"n_group\": 1, \"topk_group\": 1}");
	ck_assert_str_eq(hm.model.layer_pattern, "ME*E-E");
	ck_assert_int_eq(hm.model.moe_layers, 3);
	ck_assert_int_eq(rlb_model_hidden_layers(&hm.model), 6);
	ck_assert_int_eq(rlb_model_moe_layer_index(&hm.model, 1), 3);
	ck_assert_int_eq(hm.model.dense_ffn, 128);
	ck_assert_int_eq(hm.model.expert_ffn, 32);
	ck_assert_int_eq(hm.model.shared_experts, 1);
	ck_assert_int_eq(hm.model.shared_expert_ffn, 48);
	ck_assert_int_eq(hm.model.gated_ffn, 0);
	ck_assert_int_eq(hm.model.expert_groups, 0);
	ck_assert_int_eq(hm.model.q_heads, 4);
	ck_assert_int_eq(hm.model.kv_heads, 2);
	ck_assert_int_eq(hm.model.head_dim, 16);
	ck_assert_int_eq(hm.model.mamba_heads, 8);
	ck_assert_int_eq(hm.model.mamba_head_dim, 16);
	ck_assert_int_eq(hm.model.mamba_state, 32);
	ck_assert_int_eq(hm.model.mamba_groups, 2);
	ck_assert_int_eq(hm.model.moe_layer_period, 1);
	ck_assert_str_eq(hm.from[RLB_HF_PATTERN], "hybrid_override_pattern");
	ck_assert_str_eq(hm.from[RLB_HF_SHARED_FFN],
			 "moe_shared_expert_intermediate_size * n_shared_experts 1");
	ck_assert_str_eq(hm.from[RLB_HF_GATED], "nemotron_h: up and down projections "
			 "(mlp_hidden_act relu2)");
	ck_assert_str_eq(hm.from[RLB_HF_FIRST_DENSE], "");	/* not written */
	ck_assert_str_eq(hm.from[RLB_HF_WINDOW], "");
	ck_assert_int_eq(hm.model.moe_latent, 0);
	ck_assert_str_eq(hm.from[RLB_HF_MOE_LATENT], "");	/* none: not written */
	/* latent MoE: the experts' width; null or 0 for none */
	load(&hm2, "{" NH "\"hybrid_override_pattern\": \"ME\", \"moe_latent_size\": 16}");
	ck_assert_int_eq(hm2.model.moe_latent, 16);
	ck_assert_int_eq(rlb_model_expert_width(&hm2.model), 16);
	ck_assert_str_eq(hm2.from[RLB_HF_MOE_LATENT], "moe_latent_size");
	load(&hm2, "{" NH "\"hybrid_override_pattern\": \"ME\", \"moe_latent_size\": null}");
	ck_assert_int_eq(hm2.model.moe_latent, 0);
	ck_assert_str_eq(hm2.from[RLB_HF_MOE_LATENT], "");
	load(&hm2, "{" NH "\"hybrid_override_pattern\": \"ME\", \"moe_latent_size\": 0}");
	ck_assert_int_eq(rlb_model_expert_width(&hm2.model), 64);
	/* transformers' list of block types, its names now and before, and the pattern beside it */
	load(&hm2, "{" NH "\"layers_block_type\": [\"linear_attention\", \"moe\", "
	     "\"full_attention\", \"moe\", \"mlp\", \"moe\"], \"intermediate_size\": 128, "
	     "\"moe_shared_expert_intermediate_size\": 48, \"mlp_hidden_act\": \"relu2\"}");
	assert_same_model(&hm2.model, &hm.model, "layers_block_type");
	ck_assert_str_eq(hm2.from[RLB_HF_PATTERN], "layers_block_type");
	ck_assert_str_eq(hm2.from[RLB_HF_SHARED_FFN], "moe_shared_expert_intermediate_size");
	load(&hm2, "{" NH "\"layer_types\": [\"mamba\", \"moe\", \"attention\", \"moe\", "
	     "\"mlp\", \"moe\"], \"hybrid_override_pattern\": \"ME*E-E\", "
	     "\"intermediate_size\": 128, \"moe_shared_expert_intermediate_size\": 48, "
	     "\"n_shared_experts\": 1}");
	assert_same_model(&hm2.model, &hm.model, "layer_types");
	ck_assert_str_eq(hm2.from[RLB_HF_PATTERN], "layer_types");
	/* no Mamba layers: no Mamba keys; no MLP layers: intermediate_size unused; no shared */
	load(&hm, "{" NH "\"hybrid_override_pattern\": \"*E*E\", \"intermediate_size\": 999, "
	     "\"n_shared_experts\": 0, \"moe_shared_expert_intermediate_size\": 48}");
	ck_assert_str_eq(hm.model.layer_pattern, "*E*E");
	ck_assert_int_eq(hm.model.mamba_heads, 0);
	ck_assert_str_eq(hm.from[RLB_HF_MAMBA_HEADS], "");
	ck_assert_int_eq(hm.model.dense_ffn, 0);
	ck_assert_int_eq(hm.model.shared_experts, 0);
	ck_assert_str_eq(hm.from[RLB_HF_GATED], "nemotron_h: up and down projections");
	/* the pattern alone says Nemotron-H; n_groups by its older name */
	load(&hm, "{\"hidden_size\": 64, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
	     "\"moe_intermediate_size\": 32, \"mamba_num_heads\": 8, \"mamba_head_dim\": 16, "
	     "\"ssm_state_size\": 32, \"mamba_n_groups\": 4, \"hybrid_override_pattern\": \"MEME\"}");
	ck_assert_int_eq(hm.model.mamba_groups, 4);
	ck_assert_int_eq(hm.model.moe_layers, 2);
	ck_assert_int_eq(hm.model.gated_ffn, 0);

	refused("{" NH "\"hybrid_override_pattern\": \"MEX\"}", RLB_ECONFIG,
		"'hybrid_override_pattern' has 'X' at layer 2 (expected E, M, * or -)");
	refused("{" NH "\"hybrid_override_pattern\": \"ME\\n\"}", RLB_ECONFIG,
		"'hybrid_override_pattern' has byte 0x0a at layer 2 (expected E, M, * or -)");
	refused("{" NH "\"hybrid_override_pattern\": \"M*M-\", \"intermediate_size\": 64}",
		RLB_ECONFIG, "no MoE layer ('E') in 'hybrid_override_pattern': relibra places "
		"the experts of MoE models");
	refused("{" NH "\"hybrid_override_pattern\": \"\"}", RLB_ECONFIG,
		"'hybrid_override_pattern' is empty");
	refused("{" NH "\"hybrid_override_pattern\": 5}", RLB_ECONFIG,
		"'hybrid_override_pattern' is not a string");
	refused("{" NH "\"hybrid_override_pattern\": \"ME\", \"num_hidden_layers\": 3}",
		RLB_ECONFIG, "'hybrid_override_pattern' has 2 layers, 'num_hidden_layers' 3");
	refused("{" NH "\"layers_block_type\": [\"moe\", \"ssm\"]}", RLB_ECONFIG,
		"'layers_block_type'[1] is not 'mamba', 'attention', 'mlp' or 'moe' "
		"(or 'linear_attention', 'full_attention')");
	refused("{" NH "\"layers_block_type\": [\"moe\", \"mamba\"], "
		"\"hybrid_override_pattern\": \"EE\"}", RLB_ECONFIG,
		"'layers_block_type' and 'hybrid_override_pattern' give different layers");
	refused("{" NH "\"num_hidden_layers\": 2}", RLB_ECONFIG,
		"a Nemotron-H model without 'hybrid_override_pattern' or 'layers_block_type'");
	refused("{" NH "\"hybrid_override_pattern\": \"-E\"}", RLB_ECONFIG,
		"no 'intermediate_size'");
	refused("{\"model_type\": \"nemotron_h\", \"hidden_size\": 64, \"n_routed_experts\": 8, "
		"\"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
		"\"hybrid_override_pattern\": \"E\"}", RLB_ECONFIG,
		"no 'moe_intermediate_size' (a Nemotron-H model's 'intermediate_size' is its MLP "
		"layers')");
	refused("{\"model_type\": \"nemotron_h\", \"hidden_size\": 64, \"n_routed_experts\": 8, "
		"\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"mamba_num_heads\": 8, "
		"\"mamba_head_dim\": 16, \"hybrid_override_pattern\": \"ME\"}", RLB_ECONFIG,
		"no 'ssm_state_size'");
	refused("{" NH "\"hybrid_override_pattern\": \"ME\", \"block_configs\": [{}]}",
		RLB_ECONFIG, "layers of their own shapes ('block_configs', a Nemotron-H Puzzle "
		"model): relibra's MoE layers share one shape");
	refused("{" NH "\"hybrid_override_pattern\": \"ME\", \"moe_latent_size\": 64}",
		RLB_ECONFIG, "the model section made from it: 'model.moe_latent' 64 is not below "
		"'model.hidden' 64");
	refused("{" NH "\"hybrid_override_pattern\": \"*E\", \"sliding_window\": 128}",
		RLB_ECONFIG, "'sliding_window' 128 with a layer pattern, whose attention layers "
		"relibra models in full");
	/* the model section's own checks: mamba_groups divides mamba_heads */
	refused("{\"hidden_size\": 64, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
		"\"moe_intermediate_size\": 32, \"mamba_num_heads\": 8, \"mamba_head_dim\": 16, "
		"\"ssm_state_size\": 32, \"n_groups\": 3, \"hybrid_override_pattern\": \"ME\"}",
		RLB_ECONFIG, "the model section made from it: 'model.mamba_groups' 3 does not "
		"divide 'model.mamba_heads' 8");
}
END_TEST

START_TEST(test_errors)
{
	struct rlb_hf_model hm;
	struct rlb_err err = { 0, "" };

	refused("{\n  \"hidden_size\": 64,\n  \"num_experts\" 8\n}", RLB_EPARSE,
		":3:17: invalid JSON (byte 40): ':' expected near '8'");
	refused("[1]", RLB_ECONFIG, "expected a JSON object (a config.json)");
	refused("{\"model_type\": \"jetmoe\", \"hidden_size\": 64, \"num_local_experts\": 8, "
		"\"num_experts_per_tok\": 2, \"intermediate_size\": 32, \"num_hidden_layers\": 2, "
		"\"num_key_value_heads\": 4}", RLB_ECONFIG,
		"JetMoE's mixture of attention needs 'num_key_value_heads' and 'kv_channels'");
	refused("{\"hidden_size\": 64}", RLB_ECONFIG,
		"no 'n_routed_experts' or 'num_local_experts' or 'num_experts' or 'moe_num_experts'");
	/* ERNIE 4.5: a dense layer after the last MoE one; VL's lists per modality */
	refused("{" ERNIE "\"moe_layer_start_index\": 1, \"moe_layer_end_index\": 4}", RLB_ECONFIG,
		"the MoE layers (moe_layer_start_index, moe_layer_end_index, moe_layer_interval: "
		"1, 2, 3, 4 of 6) do not repeat with one period after the first dense layers, "
		"which relibra.yaml(5) cannot describe");
	refused("{" ERNIE "\"moe_layer_start_index\": 1, \"moe_layer_end_index\": -2}", RLB_ECONFIG,
		"'moe_layer_end_index' is not a non-negative integer");
	refused("{" ERNIE "\"moe_layer_start_index\": 1, \"moe_layer_interval\": 0}", RLB_ECONFIG,
		"'moe_layer_interval' is 0");
	refused("{\"moe_num_experts\": [64, 64], \"moe_k\": 6}", RLB_ECONFIG,
		"'moe_num_experts' is a list, one per modality (ERNIE 4.5 VL): relibra models "
		"one set of experts per layer");
	refused("{\"num_experts\": 8, \"num_experts_per_tok\": -2}", RLB_ECONFIG,
		"'num_experts_per_tok' is not a non-negative integer");
	refused("{\"num_experts\": 8, \"num_experts_per_tok\": \"2\"}", RLB_ECONFIG,
		"'num_experts_per_tok' is not a non-negative integer");
	refused("{\"num_experts\": 8, \"num_experts\": 8}", RLB_EPARSE,
		":1:32: invalid JSON (byte 32): duplicate object key near '\"num_experts\"'");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 5, "
		"\"mlp_only_layers\": [0, 3]}", RLB_ECONFIG,
		"the MoE layers (all layers, mlp_only_layers: 1, 2, 4 of 5) do not repeat "
		"with one period after the first dense layers, which relibra.yaml(5) cannot "
		"describe");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, \"mlp_only_layers\": [7]}",
		RLB_ECONFIG, "'mlp_only_layers'[0] is not a layer index in [0, 3)");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 4, \"layer_types\": "
		"[\"linear_attention\", \"linear_attention\", \"linear_attention\", "
		"\"full_attention\"]}", RLB_ECONFIG,
		"linear_attention layers but 'linear_num_key_heads' is not a positive integer");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 2, \"layer_types\": "
		"[\"full_attention\", \"mamba\"]}", RLB_ECONFIG,
		"'layer_types'[1] is 'mamba'; relibra models full_attention, sliding_attention, "
		"chunked_attention and linear_attention layers only");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, \"sliding_window\": 8, "
		"\"layer_types\": [\"sliding_attention\", \"linear_attention\", \"full_attention\"]}",
		RLB_ECONFIG, "'layer_types' mixes sliding_attention and linear_attention layers; "
		"relibra models one kind besides full attention");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, \"layer_types\": "
		"[\"full_attention\"]}", RLB_ECONFIG, "'layer_types' has 1 entries for 3 layers");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 3, \"sliding_window\": 64, "
		"\"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\"]}",
		RLB_ECONFIG, "the sliding_attention layers (layer_types) do not leave "
		"every P-th layer full for any P, which relibra.yaml(5) cannot describe");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 2, \"layer_types\": "
		"[\"sliding_attention\", \"full_attention\"]}", RLB_ECONFIG,
		"sliding_attention layers but 'sliding_window' is not a positive integer");
	refused("{" BASE "\"num_experts\": 8, \"num_hidden_layers\": 8, \"attn_layer_period\": 8, "
		"\"expert_layer_period\": 2}", RLB_ECONFIG,
		"Jamba's Mamba layers ('attn_layer_period'): they are Mamba-1 mixers, and "
		"relibra models Mamba-2 ones");
	refused("{\"model_type\": \"jamba\", " BASE "\"num_experts\": 8, "
		"\"num_hidden_layers\": 8}", RLB_ECONFIG,
		"Jamba's Mamba layers ('model_type'): they are Mamba-1 mixers, and relibra "
		"models Mamba-2 ones");
	/* Qwen3-Next's default layer_types (linear but every 4th) need the linear shape */
	refused("{\"model_type\": \"qwen3_next\", " BASE "\"num_experts\": 8, "
		"\"num_hidden_layers\": 8, \"full_attention_interval\": 4}", RLB_ECONFIG,
		"linear_attention layers but 'linear_num_key_heads' is not a positive integer");
	refused("{\"model_type\": \"qwen3_next\", " BASE "\"num_experts\": 8, "
		"\"num_hidden_layers\": 8, \"linear_num_key_heads\": 2}", RLB_ECONFIG,
		"linear_attention layers but 'linear_num_value_heads' is not a positive integer");
	/* MiniMax's lightning attention has no cost term */
	refused("{\"model_type\": \"minimax\", " BASE "\"num_local_experts\": 8, "
		"\"num_hidden_layers\": 2, \"attn_type_list\": [0, 1]}", RLB_ECONFIG,
		"MiniMax's lightning attention ('attn_type_list'): relibra's cost model has no "
		"term for it");
	refused("{\"model_type\": \"minimax\", " BASE "\"num_local_experts\": 8, "
		"\"num_hidden_layers\": 2}", RLB_ECONFIG,
		"MiniMax's lightning attention ('model_type'): relibra's cost model has no term "
		"for it");
	/*
	 * DeepSeek sparse attention (GLM-5.1's attention fields): MLA priced
	 * in full, which the q_heads comment says
	 */
	load(&hm, "{\"model_type\": \"glm_moe_dsa\", " BASE "\"n_routed_experts\": 8, "
	     "\"num_hidden_layers\": 4, \"first_k_dense_replace\": 1, "
	     "\"moe_intermediate_size\": 32, \"kv_lora_rank\": 512, \"q_lora_rank\": 2048, "
	     "\"qk_nope_head_dim\": 192, \"qk_rope_head_dim\": 64, \"v_head_dim\": 256, "
	     "\"index_head_dim\": 128, \"index_n_heads\": 32, \"index_topk\": 2048}");
	ck_assert_int_eq(hm.model.q_heads, 4);
	ck_assert_int_eq(hm.model.kv_lora_rank, 512);
	ck_assert_str_eq(hm.from[RLB_HF_Q_HEADS],
			 "num_attention_heads; sparse (index_topk 2048) priced as full");
	/* attn_type_list of softmax attention only (MiniMax-M2) is every layer full */
	load(&hm, "{\"model_type\": \"minimax_m2\", " BASE "\"num_local_experts\": 8, "
	     "\"num_hidden_layers\": 2, \"attn_type_list\": [1, 1]}");
	ck_assert_int_eq(hm.model.attention_window, 0);
	/* a fused shared expert wider than an int (it wrapped to a valid width) */
	refused("{\"hidden_size\": 64, \"num_experts\": 8, \"num_experts_per_tok\": 2, "
		"\"num_hidden_layers\": 2, \"moe_intermediate_size\": 1048576, "
		"\"n_shared_experts\": 4097}", RLB_ECONFIG, "the shared expert's width, "
		"'n_shared_experts' 4097 times 1048576, is out of range");
	/* MLA's head dimensions without its compressed width */
	refused("{" BASE "\"num_local_experts\": 8, \"num_hidden_layers\": 2, "
		"\"qk_nope_head_dim\": 24, \"qk_rope_head_dim\": 8}", RLB_ECONFIG,
		"MLA head dimensions ('qk_nope_head_dim', 'qk_rope_head_dim') without "
		"'kv_lora_rank'");
	/* dense layers with no width of theirs */
	refused("{" BASE "\"num_local_experts\": 8, \"num_hidden_layers\": 4, "
		"\"first_k_dense_replace\": 1}", RLB_ECONFIG,
		"dense layers, but no FFN width of theirs ('intermediate_size_mlp', or "
		"'intermediate_size' beside 'moe_intermediate_size')");
	/* the model section's own checks */
	refused("{\"hidden_size\": 64, \"intermediate_size\": 256, \"num_experts\": 8, "
		"\"num_hidden_layers\": 2, \"num_experts_per_tok\": 9}",
		RLB_ECONFIG, "the model section made from it: 'model.topk' 9 exceeds 'model.experts' 8");
	ck_assert_int_eq(rlb_hf_model_load(&hm, scratch("ok.json", "{}"), "../x", &err), RLB_EINVAL);
	ck_assert_int_eq(rlb_hf_model_load(&hm, "/nonexistent/config.json", NULL, &err), RLB_EIO);
}
END_TEST

/* FIXTURE's preset written, loaded back as preset NAME, is the same model. */
static void round_trip(const char *fixture, const char *name)
{
	struct rlb_hf_model hm;
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	char path[2 * RLB_PATH_MAX], dir[RLB_PATH_MAX], conf[RLB_PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/fixtures/hf/%s.json", rlb_test_srcdir(), fixture);
	ck_assert_int_eq(rlb_hf_model_load(&hm, path, NULL, &err), 0);
	ck_assert_str_eq(hm.model.name, name);	/* no _name_or_path: model_type */
	snprintf(dir, sizeof(dir), "%s/hfm", rlb_test_tmpdir());
	ck_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
	snprintf(dir, sizeof(dir), "%s/hfm/models", rlb_test_tmpdir());
	ck_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
	snprintf(path, sizeof(path), "%s/%s.yaml", dir, name);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_hf_model_write_yaml(&hm, fp, &err), 0);
	ck_assert_int_eq(fclose(fp), 0);
	snprintf(conf, sizeof(conf), "%s/hfm/c.yaml", rlb_test_tmpdir());
	fp = fopen(conf, "w");
	ck_assert_ptr_nonnull(fp);
	fprintf(fp, "model: {preset: %s}\n", name);
	ck_assert_int_eq(fclose(fp), 0);
	ck_assert_msg(rlb_config_load(&cfg, conf, NULL, 0, &err) == 0, "%s", err.msg);
	assert_same_model(&cfg.model, &hm.model, "written preset");
}

START_TEST(test_write_round_trip)
{
	round_trip("deepseek-v3", "deepseek_v3");
	/* a layer pattern, gated_ffn and the Mamba-2 keys */
	round_trip("nemotron-3-nano-30b-a3b", "nemotron_h");
	/* and the latent of a latent MoE */
	round_trip("nemotron-3-super-120b-a12b", "nemotron_h");
}
END_TEST

/* What the comment quotes of the input is printable: a YAML comment takes nothing else. */
START_TEST(test_write_control_chars)
{
	struct rlb_hf_model hm;
	struct rlb_err err = { 0, "" };
	char *text = NULL;
	size_t len = 0;
	FILE *fp;

	load(&hm, "{" BASE "\"num_hidden_layers\": 2, \"num_local_experts\": 4, "
	     "\"model_type\": \"a\\u0001b\\u00e9\"}");
	fp = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_hf_model_write_yaml(&hm, fp, &err), 0);
	ck_assert_int_eq(fclose(fp), 0);
	ck_assert_msg(strstr(text, "(model_type a?b?" "?).\n"), "%s", text);
	free(text);
	/* a source that quotes the input: Nemotron-H's mlp_hidden_act */
	load(&hm, "{" NH "\"hybrid_override_pattern\": \"ME\", \"mlp_hidden_act\": \"r\\u0001\"}");
	fp = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(rlb_hf_model_write_yaml(&hm, fp, &err), 0);
	ck_assert_int_eq(fclose(fp), 0);
	ck_assert_msg(strstr(text, "# nemotron_h: up and down projections (mlp_hidden_act r?)\n"),
		      "%s", text);
	free(text);
}
END_TEST

Suite *rlb_suite_config_hf(void)
{
	Suite *s = suite_create("config_hf");
	TCase *tc = tcase_create("config_hf");
	int n = 0;

	while (rlb_config_preset_names("models")[n])
		n++;
	tcase_add_loop_test(tc, test_shipped_presets, 0, n);
	tcase_add_test(tc, test_family_rules);
	tcase_add_test(tc, test_mlp_layer_types);
	tcase_add_test(tc, test_window_rules);
	tcase_add_test(tc, test_nemotron_h);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_write_round_trip);
	tcase_add_test(tc, test_write_control_chars);
	suite_add_tcase(s, tc);
	return s;
}
