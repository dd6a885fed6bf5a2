/*
 * relibra.h - the public interface of librelibra: load balancing for
 * Mixture-of-Experts training in reinforcement learning.
 */
#ifndef RLB_RELIBRA_H
#define RLB_RELIBRA_H

#define RLB_VERSION "0.11.1"

#include "err.h"
#include "util.h"
#include "config.h"
#include "config_hf.h"
#include "trace.h"
#include "schedule.h"
#include "datacontrol.h"
#include "cooc.h"
#include "stats.h"
#include "capture.h"
#include "eplb.h"
#include "replicate.h"
#include "plan.h"
#include "balance.h"
#include "plan_io.h"
#include "sim.h"
#include "pool.h"
#include "planner.h"
#include "report.h"

/*
 * The release of the library in use, "MAJOR.MINOR.PATCH": RLB_VERSION as
 * the library was built, which a program compares with the RLB_VERSION
 * of the headers it was built with.
 */
#ifdef __cplusplus
extern "C" {
#endif

const char *rlb_version(void);

#ifdef __cplusplus
}
#endif

#endif
