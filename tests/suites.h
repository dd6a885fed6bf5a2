/*
 * suites.h - the Check suites of the unit-test runner, one per lib module.
 */
#ifndef RLB_TEST_SUITES_H
#define RLB_TEST_SUITES_H

#include <check.h>

Suite *rlb_suite_util(void);
Suite *rlb_suite_config(void);
Suite *rlb_suite_config_hf(void);
Suite *rlb_suite_trace(void);
Suite *rlb_suite_schedule(void);
Suite *rlb_suite_synth(void);
Suite *rlb_suite_import(void);
Suite *rlb_suite_eplb(void);
Suite *rlb_suite_replicate(void);
Suite *rlb_suite_plan(void);
Suite *rlb_suite_balance(void);
Suite *rlb_suite_sim(void);
Suite *rlb_suite_report(void);
Suite *rlb_suite_expert(void);
Suite *rlb_suite_exec(void);
Suite *rlb_suite_calibrate(void);
Suite *rlb_suite_cuda(void);

/* Directory of the source tree's tests/ (fixtures), from RLB_TEST_SRCDIR or ".". */
const char *rlb_test_srcdir(void);
/* A fresh scratch directory for this test process (removed by run.sh). */
const char *rlb_test_tmpdir(void);

#endif
