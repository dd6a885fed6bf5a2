/*
 * expert.h - the MoE layer math of train-step on the CPU: one expert FFN
 * (SwiGLU, or the ungated squared-ReLU FFN of model.gated_ffn: false)
 * forward and backward over a batch of rows, the gate rule used when a
 * trace carries no gate weights, Adam, and the deterministic inputs
 * (expert weights, hidden states) every run and every plan starts from.
 * fp32 data, fixed summation order, so one input always gives the same
 * bits.
 */
#ifndef RLB_EXPERT_H
#define RLB_EXPERT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One expert's parameters, one contiguous block of rlb_expert_params()
 * floats, row-major.  The gated (SwiGLU) expert, three matrices:
 *   w_gate [hidden][ffn]   at offset 0
 *   w_up   [hidden][ffn]   at offset hidden * ffn
 *   w_down [ffn][hidden]   at offset 2 * hidden * ffn
 * Forward for a row x (1 x hidden):
 *   g = x w_gate, u = x w_up, h = silu(g) * u, y = h w_down
 * with silu(g) = g / (1 + exp(-g)); the saved activations of a row are
 * g then u (2 * ffn floats).
 *
 * The ungated expert (model.gated_ffn: false, Nemotron-H's relu2), two
 * matrices:
 *   w_up   [hidden][ffn]   at offset 0
 *   w_down [ffn][hidden]   at offset hidden * ffn
 * Forward: u = x w_up, h = relu(u)^2, y = h w_down; the saved
 * activations of a row are u (ffn floats).
 *
 * The flag is `ungated` rather than `gated` so that a shape written
 * { hidden, ffn } stays the SwiGLU expert it always was.
 */
struct rlb_expert_shape {
	uint32_t hidden;
	uint32_t ffn;
	uint32_t ungated;	/* 0: SwiGLU (gate, up, down); 1: squared ReLU (up, down) */
};

/* Matrices of the expert: 3 gated, 2 ungated. */
uint32_t rlb_expert_matrices(const struct rlb_expert_shape *s);

/* Floats in one expert's parameter block: matrices * hidden * ffn. */
size_t rlb_expert_params(const struct rlb_expert_shape *s);

/* Floats of saved activations per row: 2 * ffn gated (g, u), ffn ungated (u). */
size_t rlb_expert_act_per_row(const struct rlb_expert_shape *s);

/*
 * Forward over n rows: x [n][hidden] in, y [n][hidden] out (overwritten),
 * act [n][rlb_expert_act_per_row()] out: each row's g then u (ungated:
 * u), kept for the backward pass (h is recomputed from them).  x and y
 * must not overlap.
 */
void rlb_expert_forward(const struct rlb_expert_shape *s, const float *w,
			size_t n, const float *x, float *y, float *act);

/*
 * Backward over the same n rows: dy [n][hidden] in; dx [n][hidden] out
 * (overwritten); the parameter gradient is ADDED into dw (same layout as w),
 * so replicas and micro-batches accumulate into one buffer.  Row order is
 * the summation order of dw: callers that need plan-independent bits feed
 * rows in a plan-independent order.
 */
void rlb_expert_backward(const struct rlb_expert_shape *s, const float *w,
			 size_t n, const float *x, const float *act,
			 const float *dy, float *dx, float *dw);

/*
 * Combine: y_out[i] += gate[i] * y[i] for n rows of width hidden (the
 * weighted sum of a token's expert outputs into its residual stream).
 */
void rlb_combine_rows(size_t n, uint32_t hidden, const float *gate,
		      const float *y, float *y_out);

/*
 * Gate weights when the trace has none: for token (seq, pos) at layer
 * `layer`, the k-th routed expert gets softmax over k of logits
 * l_k = -0.5 * k + 0.25 * u_k, with u_k uniform in [0, 1) from a hash of
 * (seed, seq, pos, layer, k): decreasing in k like a top-k softmax, never
 * equal, summing to 1.  gates[0..topk) out.
 */
void rlb_default_gates(uint64_t seed, uint32_t seq, uint32_t pos,
		       uint32_t layer, uint32_t topk, float *gates);

/*
 * Deterministic initial weights of (layer, expert): uniform in
 * [-a, a] with a = 1 / sqrt(fan_in), from a counter-based hash of
 * (seed, layer, expert, index), so any rank builds any expert without
 * communication.  The index is the element's place in the gated layout,
 * so an ungated expert's w_up and w_down are the bits of the gated
 * expert's of the same (seed, layer, expert).  w [rlb_expert_params()]
 * out.
 */
void rlb_expert_init(const struct rlb_expert_shape *s, uint64_t seed,
		     uint32_t layer, uint32_t expert, float *w);

/*
 * The first layer's input for token pos of sequence seq in step `step`:
 * hidden values in [-1, 1) from a hash of (seed, step, seq, pos, index).
 * x [hidden] out.
 */
void rlb_hidden_init(uint64_t seed, uint32_t step, uint32_t seq,
		     uint32_t pos, uint32_t hidden, float *x);

/* Adam hyper-parameters; t is the 1-based step count of the update. */
struct rlb_adam {
	float lr;
	float beta1;
	float beta2;
	float eps;
	uint32_t t;
};

/*
 * One Adam step with bias correction over n parameters: m and v are the
 * first and second moments (updated in place), g the gradient, w the
 * weights (updated in place).
 */
void rlb_adam_update(const struct rlb_adam *a, size_t n, float *w,
		     const float *g, float *m, float *v);

#ifdef __cplusplus
}
#endif

#endif
