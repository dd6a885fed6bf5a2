/*
 * fuzz.h - what the fuzz targets share.  Each fuzz/<name>.c is one target:
 * LLVMFuzzerTestOneInput feeds one input to one reader of the library.
 * `make VARIANT=fuzz fuzz` links it with libFuzzer; the normal build links
 * it with driver.c, which replays the files named on its command line
 * (`make check` replays fuzz/corpus/<name>/ that way).
 */
#ifndef RLB_FUZZ_H
#define RLB_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "capture.h"
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A trace's or plan's header frame: skippable-frame head, 1.0 content. */
#define FUZZ_HEADER_FRAME_BYTES (8 + 156)

/* The first N bytes of the file at PATH into OUT (aborts when shorter). */
void fuzz_file_head(const char *path, uint8_t *out, size_t n);

/*
 * SRC as one zstd frame with its content size and checksum, as the
 * readers require, into DST (at least ZSTD_compressBound(N) bytes);
 * returns its size.
 */
size_t fuzz_zstd_frame(const uint8_t *src, size_t n, uint8_t *dst, size_t cap);

/*
 * DATA as the file NAME in a private directory (made on the first call,
 * removed at exit); the path stays valid until the next call.
 */
const char *fuzz_file(const uint8_t *data, size_t size, const char *name);

/*
 * A configuration that loaded must write as YAML (rlb_config_write_yaml)
 * that loads again and writes the same.
 */
void fuzz_config(const struct rlb_config *cfg);

/*
 * Read the trace file at PATH (if it opens): every sequence must fit the
 * header's shape; reading ahead on three threads must read the same
 * sequences and end (the same error, message and all) as one thread;
 * what was read, written again with the trace writer, must read back
 * the same.  Then walk the steps.
 */
void fuzz_trace(const char *path);

/*
 * Read every step of the plan file at PATH (if it opens): each must pass
 * rlb_step_plan_check, as the reader promises, and written again with
 * the plan writer it must read back to the same text dump.
 */
void fuzz_plan(const char *path);

/*
 * Import DATA as one file of format F into a sink that checks every
 * sequence against the tiny model (4 MoE layers, 16 experts, top-2, one
 * dense layer first when DENSE; for inputs of size 2 or 3 mod 4 every
 * second layer MoE, and for those of size 4 to 7 mod 8 the layer pattern
 * MEM*E-E*E instead).  jsonl and sglang inputs of odd size are imported
 * with gates (--gates), the others without.
 */
void fuzz_import(const uint8_t *data, size_t size, enum rlb_import_format f,
		 const char *name, int dense);

#endif
