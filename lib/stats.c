/* stats.c - placeholder; replaced by the statistics module. */
#include <string.h>
#include "stats.h"

int rlb_trace_stats_compute(struct rlb_trace_reader *r, const struct rlb_config *cfg, enum rlb_pack pack, struct rlb_trace_stats *st, struct rlb_err *err)
{ (void)r; (void)cfg; (void)pack; memset(st, 0, sizeof(*st)); return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_trace_stats_release(struct rlb_trace_stats *st) { (void)st; }
void rlb_dist_compute(struct rlb_dist *d, double *v, size_t n) { (void)v; memset(d, 0, sizeof(*d)); d->n = n; }
