/* plan.c - placeholder; replaced by the plan module. */
#include <stdlib.h>
#include <string.h>
#include "plan.h"

static const char *const policy_names[RLB_POLICY_COUNT] = {
	"static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal",
};

const char *rlb_policy_name(enum rlb_policy p) { return (unsigned)p < RLB_POLICY_COUNT ? policy_names[p] : "?"; }
int rlb_policy_from_name(const char *name, enum rlb_policy *p, struct rlb_err *err)
{ for (int i = 0; i < RLB_POLICY_COUNT; i++) if (!strcmp(name, policy_names[i])) { *p = (enum rlb_policy)i; return 0; } return rlb_err_set(err, RLB_EINVAL, "unknown policy '%s'", name); }
int rlb_step_plan_init(struct rlb_step_plan *p, uint32_t step, uint32_t mbs, uint32_t layers, uint32_t experts, uint32_t ranks, uint32_t gpn, uint32_t r, enum rlb_split split, struct rlb_err *err)
{ (void)step; (void)mbs; (void)layers; (void)experts; (void)ranks; (void)gpn; (void)r; (void)split; memset(p, 0, sizeof(*p)); return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_step_plan_release(struct rlb_step_plan *p) { free(p->home); free(p->inst_first); free(p->inst); memset(p, 0, sizeof(*p)); }
void rlb_step_plan_clear_instances(struct rlb_step_plan *p) { (void)p; }
int rlb_step_plan_add(struct rlb_step_plan *p, uint32_t mb, uint32_t layer, uint32_t e, uint32_t gpu, uint32_t q, struct rlb_err *err)
{ (void)p; (void)mb; (void)layer; (void)e; (void)gpu; (void)q; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_step_plan_check(const struct rlb_step_plan *p, const struct rlb_loads *l, struct rlb_err *err) { (void)p; (void)l; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_step_plan_split(const struct rlb_step_plan *p, const struct rlb_loads *l, uint32_t mb, uint32_t layer, uint32_t e, uint32_t *rows) { (void)p; (void)l; (void)mb; (void)layer; (void)e; (void)rows; }
