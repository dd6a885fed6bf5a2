/* balance.c - placeholder; replaced by the policies. */
#include "balance.h"

void rlb_balance_opts_from_config(struct rlb_balance_opts *o, const struct rlb_config *cfg) { (void)o; (void)cfg; }
int rlb_balancer_new(struct rlb_balancer **out, const struct rlb_config *cfg, const struct rlb_balance_opts *opts, struct rlb_err *err)
{ (void)out; (void)cfg; (void)opts; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_balancer_free(struct rlb_balancer *b) { (void)b; }
int rlb_balancer_plan_step(struct rlb_balancer *b, const struct rlb_schedule *s, const struct rlb_loads *l, struct rlb_step_plan *out, struct rlb_err *err)
{ (void)b; (void)s; (void)l; (void)out; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
