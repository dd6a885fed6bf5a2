/* import.c - placeholder; replaced by the importers. */
#include "capture.h"

int rlb_import_format_from_name(const char *name, enum rlb_import_format *f, struct rlb_err *err)
{ (void)f; return rlb_err_set(err, RLB_EINVAL, "unknown format '%s'", name); }
int rlb_import(const struct rlb_import_opts *o, const char *path, const struct rlb_config *cfg, struct rlb_trace_writer *w, rlb_progress_fn p, void *ctx, struct rlb_err *err)
{ (void)o; (void)path; (void)cfg; (void)w; (void)p; (void)ctx; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
