/* trace.c - placeholder; replaced by the trace format module. */
#include <string.h>
#include "trace.h"

void rlb_trace_header_from_config(struct rlb_trace_header *h, const struct rlb_config *cfg) { memset(h, 0, sizeof(*h)); (void)cfg; }
unsigned rlb_trace_id_bytes(const struct rlb_trace_header *h) { return h->experts <= 256 ? 1 : 2; }
int rlb_trace_writer_open(struct rlb_trace_writer **out, const char *path, const struct rlb_trace_header *h, const struct rlb_trace_writer_opts *opts, struct rlb_err *err)
{ (void)out; (void)path; (void)h; (void)opts; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_writer_append(struct rlb_trace_writer *w, const struct rlb_seq *seq) { (void)w; (void)seq; return RLB_EUNSUPPORTED; }
int rlb_trace_writer_error(const struct rlb_trace_writer *w, struct rlb_err *err) { (void)w; (void)err; return RLB_EUNSUPPORTED; }
int rlb_trace_writer_close(struct rlb_trace_writer *w, struct rlb_err *err) { (void)w; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_trace_writer_abort(struct rlb_trace_writer *w) { (void)w; }
int rlb_trace_reader_open(struct rlb_trace_reader **out, const char *path, struct rlb_err *err) { (void)out; (void)path; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
void rlb_trace_reader_free(struct rlb_trace_reader *r) { (void)r; }
const struct rlb_trace_header *rlb_trace_reader_header(const struct rlb_trace_reader *r) { (void)r; return NULL; }
int rlb_trace_reader_truncated(const struct rlb_trace_reader *r) { (void)r; return 0; }
int rlb_trace_reader_steps(struct rlb_trace_reader *r, const uint32_t **steps, size_t *nsteps, struct rlb_err *err) { (void)r; (void)steps; (void)nsteps; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_reader_step_seqs(struct rlb_trace_reader *r, uint32_t step, struct rlb_seq_meta **metas, size_t *n, struct rlb_err *err) { (void)r; (void)step; (void)metas; (void)n; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_reader_seek_step(struct rlb_trace_reader *r, uint32_t step, struct rlb_err *err) { (void)r; (void)step; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_reader_rewind(struct rlb_trace_reader *r, struct rlb_err *err) { (void)r; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_reader_next(struct rlb_trace_reader *r, struct rlb_seq *seq, struct rlb_err *err) { (void)r; (void)seq; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
int rlb_trace_verify(const char *path, struct rlb_trace_info *info, struct rlb_err *err) { (void)path; (void)info; return rlb_err_set(err, RLB_EUNSUPPORTED, "not implemented"); }
