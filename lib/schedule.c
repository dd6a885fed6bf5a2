/* schedule.c - placeholder; replaced by the schedule module. */
#include <stdlib.h>
#include <string.h>
#include "schedule.h"

int rlb_schedule_build(struct rlb_schedule *s, uint32_t step, const uint32_t *t, size_t n, uint32_t ranks, uint32_t mbt, enum rlb_pack pack, struct rlb_err *err)
{ (void)step; (void)t; (void)n; (void)ranks; (void)mbt; (void)pack; memset(s, 0, sizeof(*s)); return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_schedule_release(struct rlb_schedule *s) { free(s->chunks); memset(s, 0, sizeof(*s)); }
int rlb_loads_init(struct rlb_loads *l, uint32_t mbs, uint32_t layers, uint32_t ranks, uint32_t experts, struct rlb_err *err)
{ (void)mbs; (void)layers; (void)ranks; (void)experts; memset(l, 0, sizeof(*l)); return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_loads_release(struct rlb_loads *l) { free(l->count); memset(l, 0, sizeof(*l)); }
void rlb_loads_add_seq(struct rlb_loads *l, const struct rlb_schedule *s, uint32_t i, const struct rlb_seq *seq, uint32_t topk) { (void)l; (void)s; (void)i; (void)seq; (void)topk; }
int rlb_step_loads(struct rlb_trace_reader *r, uint32_t step, const struct rlb_config *cfg, enum rlb_pack pack, struct rlb_schedule *s, struct rlb_loads *l, struct rlb_err *err)
{ (void)r; (void)step; (void)cfg; (void)pack; (void)s; (void)l; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
