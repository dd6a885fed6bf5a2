/*
 * datacontrol.h - relibra's data-control lever: the plan chooses each
 * step's micro-batch composition and every sequence's source rank, so
 * that every (micro-batch, rank) carries the same tokens: the fewest
 * micro-batches, no half-empty last one, no rank waiting for another's
 * longer share.  The result is a schedule (pack RLB_PACK_DATA_CONTROL)
 * that the plan carries and train-step follows.  Rules: docs/schedule.md,
 * "Data control".
 */
#ifndef RLB_DATACONTROL_H
#define RLB_DATACONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The data-control schedule of one step from its sequence lengths.
 * Deterministic:
 *   1. sequences are cut into chunks of at most mb_tokens (as every rule);
 *   2. the step gets the fewest micro-batches M that can hold it,
 *      ceil(tokens / (ranks * mb_tokens)) (0 for a step without
 *      tokens, which gets no chunk);
 *   3. chunks by descending length (ties in (seq, start) order) go to the
 *      (micro-batch, rank) bin with the fewest tokens (ties: lower
 *      micro-batch, then lower rank); when that bin cannot take the chunk
 *      within mb_tokens, M grows by one and step 3 restarts.
 * Placing sequences on the node that hosts most of their experts was
 * measured and left out: the reordering that follows rebalances the
 * nodes, so it moved no RDMA bytes and only unbalanced the ranks
 * (docs/schedule.md).  s is initialised here (release it also after a
 * failure).  Errors: RLB_EINVAL (ranks or mb_tokens 0), RLB_ENOMEM.
 */
int rlb_dc_schedule(struct rlb_schedule *s, uint32_t step,
		    const uint32_t *seq_tokens, size_t nseqs, uint32_t ranks,
		    uint32_t mb_tokens, struct rlb_err *err);

#ifdef __cplusplus
}
#endif

#endif
