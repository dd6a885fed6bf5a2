/* config.c - placeholder; replaced by the YAML config module. */
#include <string.h>
#include "config.h"

void rlb_config_defaults(struct rlb_config *cfg) { memset(cfg, 0, sizeof(*cfg)); }
int rlb_config_load(struct rlb_config *cfg, const char *path, const char *const *sets, size_t nsets, struct rlb_err *err)
{ (void)path; (void)sets; (void)nsets; rlb_config_defaults(cfg); return rlb_err_set(err, RLB_EUNSUPPORTED, "config: not implemented"); }
int rlb_config_set(struct rlb_config *cfg, const char *a, struct rlb_err *err) { (void)cfg; (void)a; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_config_validate(const struct rlb_config *cfg, struct rlb_err *err) { (void)cfg; (void)err; return 0; }
int rlb_config_gpus(const struct rlb_config *cfg) { return cfg->cluster.nodes * cfg->cluster.gpus_per_node; }
int rlb_config_experts_per_gpu(const struct rlb_config *cfg) { return cfg->model.experts / cfg->parallel.ep_size; }
int rlb_config_ep_nodes(const struct rlb_config *cfg) { return cfg->parallel.ep_size / cfg->cluster.gpus_per_node; }
const char *rlb_pack_name(enum rlb_pack pack) { return pack == RLB_PACK_FFD ? "ffd" : "in-order"; }
int rlb_pack_from_name(const char *name, enum rlb_pack *pack, struct rlb_err *err)
{ if (!strcmp(name, "in-order")) *pack = RLB_PACK_IN_ORDER; else if (!strcmp(name, "ffd")) *pack = RLB_PACK_FFD; else return rlb_err_set(err, RLB_EINVAL, "unknown packing rule '%s'", name); return 0; }
int rlb_config_write_yaml(const struct rlb_config *cfg, FILE *fp, struct rlb_err *err) { (void)cfg; (void)fp; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
const char *const *rlb_config_preset_names(const char *kind) { static const char *const none[] = { NULL }; (void)kind; return none; }
