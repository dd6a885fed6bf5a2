/*
 * config_hf.h - a model section from a Hugging Face config.json: the MoE
 * shape, the layer layout (or a hybrid model's layer pattern), the
 * attention shape and window, read by the field names of the model
 * families relibra(1) lists under `config --from-hf`, and written as a
 * model preset (relibra.yaml(5)).
 */
#ifndef RLB_CONFIG_HF_H
#define RLB_CONFIG_HF_H

#include <stdio.h>

#include "config.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The model keys a config.json gives, in the order a preset writes them:
 * the latent of a latent MoE, the layer pattern, gated_ffn and the Mamba-2 keys for a hybrid model
 * (Nemotron-H), the periodic layout and the attention kinds for the others.
 */
enum {
	RLB_HF_EXPERTS, RLB_HF_TOPK, RLB_HF_HIDDEN, RLB_HF_EXPERT_FFN,
	RLB_HF_MOE_LATENT, RLB_HF_MOE_LAYERS, RLB_HF_FIRST_DENSE, RLB_HF_PERIOD, RLB_HF_OFFSET,
	RLB_HF_PATTERN, RLB_HF_DENSE_FFN, RLB_HF_SHARED, RLB_HF_SHARED_FFN,
	RLB_HF_GATED, RLB_HF_GROUPS, RLB_HF_TOPK_GROUPS, RLB_HF_Q_HEADS,
	RLB_HF_KV_HEADS, RLB_HF_HEAD_DIM, RLB_HF_KV_LORA, RLB_HF_Q_LORA,
	RLB_HF_ROPE_DIM, RLB_HF_V_DIM, RLB_HF_GATE, RLB_HF_WINDOW, RLB_HF_CHUNK,
	RLB_HF_FULL_PERIOD, RLB_HF_LIN_KEY_HEADS, RLB_HF_LIN_VALUE_HEADS,
	RLB_HF_LIN_KEY_DIM, RLB_HF_LIN_VALUE_DIM, RLB_HF_MAMBA_HEADS,
	RLB_HF_MAMBA_HEAD_DIM, RLB_HF_MAMBA_STATE, RLB_HF_MAMBA_GROUPS,
	RLB_HF_KEYS
};

struct rlb_hf_model {
	struct rlb_model_config model;	/* keys not given keep their defaults */
	char model_type[64];		/* config.json's model_type ("" when absent) */
	char path[1024];		/* the file read */
	char from[RLB_HF_KEYS][96];	/* per key: the fields it came from ("": not written) */
};

/*
 * Read PATH ("-": standard input), a config.json, into HM; NAME names the
 * model (NULL: config.json's _name_or_path after its last '/', else its
 * model_type).  The model section is checked as relibra.yaml(5) checks
 * one.  Errors: RLB_EIO (cannot read), RLB_EPARSE (not JSON: line,
 * column and byte), RLB_ECONFIG (a field missing or of the wrong type, a
 * layout or attention pattern relibra cannot describe, or a model
 * section the checks refuse), each naming the file and the field.
 */
int rlb_hf_model_load(struct rlb_hf_model *hm, const char *path, const char *name,
		      struct rlb_err *err);

/*
 * Write HM as a model preset (`model:` and every key of the model's
 * kind, each with the config.json fields it came from) to FP.  RLB_EIO
 * when a write stdio has made failed; FP is not flushed, so a failure of
 * what it still buffers shows at the caller's fflush or fclose, whose
 * errno says why.
 */
int rlb_hf_model_write_yaml(const struct rlb_hf_model *hm, FILE *fp, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
