/* synth.c - placeholder; replaced by the synthetic workload generator. */
#include "capture.h"

int rlb_synth_generate(const struct rlb_config *cfg, uint64_t seed, int uniform, struct rlb_trace_writer *w, rlb_progress_fn p, void *ctx, struct rlb_err *err)
{ (void)cfg; (void)seed; (void)uniform; (void)w; (void)p; (void)ctx; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_workload_defaults(struct rlb_workload_config *w) { (void)w; }
