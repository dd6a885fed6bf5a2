# relibra - one non-recursive GNU Makefile.
#
#   make                 build relibra, librelibra.a and librelibra.so
#   make check           install missing packages, build, run every test
#   make demo            install missing packages, build, run the quickstart
#   make bench           run the benchmarks
#   make install PREFIX=/usr/local
#   make check-valgrind  the unit tests under valgrind
#   make VARIANT=san     build with AddressSanitizer + UndefinedBehaviorSanitizer
#   make VARIANT=tsan    build with ThreadSanitizer (the traffic threads)
#   make fuzz            fuzz every input reader (clang, libFuzzer; FUZZ_SECONDS
#                        each, FUZZ=NAME for one target)
#
# Required packages are found with pkg-config; CUDA and NCCL are probed under
# CUDA_HOME and never required.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PCDIR ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share/relibra
DESTDIR ?=
CUDA_HOME ?= /usr/local/cuda
VARIANT ?=
BUILD ?= build$(if $(VARIANT),-$(VARIANT))

CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
STD := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE

PKGS := libzstd yaml-0.1 jansson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# MPI for train-step across processes (Open MPI, else MPICH): found with
# pkg-config, never required; only lib/comm_mpi.c sees its headers.
MPI_PKG := $(firstword $(foreach p,ompi-c mpich,$(shell pkg-config --exists $(p) 2>/dev/null && echo $(p))))
MPI_CFLAGS := $(if $(MPI_PKG),$(shell pkg-config --cflags $(MPI_PKG)) -DRLB_HAVE_MPI=1)
MPI_LIBS := $(if $(MPI_PKG),$(shell pkg-config --libs $(MPI_PKG)))
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

# RLB_SELF_CHECK: the sanitizer and fuzz builds also check the planners'
# incremental state against state rebuilt from scratch (slow; never in a
# build for use).
ifeq ($(VARIANT),san)
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
	-DRLB_SELF_CHECK=1
endif
ifeq ($(VARIANT),tsan)
SAN := -fsanitize=thread -fno-omit-frame-pointer
endif
# libFuzzer needs clang.  FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION lets the
# readers accept inputs whose checksums are wrong, so that the fuzzer gets
# past them to the decoders (never in a build for use).
ifeq ($(VARIANT),fuzz)
CC := clang
SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION \
	-DRLB_SELF_CHECK=1
FUZZ_LINK := -fsanitize=fuzzer
endif

# CUDA + NCCL: detected, never required.  BUILD_CUDA=0 forces a CPU-only
# build; CUDA_ARCH replaces the target GPUs (e.g. CUDA_ARCH=-arch=sm_90).
# NCCL is looked for under CUDA_HOME, else under /usr (the Debian and
# NVIDIA apt packages: /usr/include, /usr/lib/<triplet>); NCCL_HOME
# names another prefix.
comma := ,
HAVE_NVCC := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo yes || echo no)
NCCL_HOME ?= $(if $(wildcard $(CUDA_HOME)/include/nccl.h),$(CUDA_HOME),/usr)
NCCL_LIB := $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so* \
	$(NCCL_HOME)/lib/*/libnccl.so* $(NCCL_HOME)/lib/libnccl.so*))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(NCCL_LIB)))
HAVE_NCCL := $(if $(and $(wildcard $(NCCL_HOME)/include/nccl.h),$(NCCL_LIB)),yes,no)
CUDA_SRCS := $(sort $(wildcard lib/*.cu))
BUILD_CUDA := $(if $(and $(filter yes,$(HAVE_NVCC)),$(filter yes,$(HAVE_NCCL)),$(CUDA_SRCS)),1,0)
NVCC ?= $(CUDA_HOME)/bin/nvcc
# The fuzz build is CPU-only: nvcc objects do not link with libFuzzer.
ifeq ($(VARIANT),fuzz)
BUILD_CUDA := 0
endif
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCCFLAGS ?= -O2 -g
# cuBLAS is loaded at run time (dlopen) by the first CUDA backend.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	$(if $(filter-out $(CUDA_HOME)/lib64,$(NCCL_LIBDIR)),-L$(NCCL_LIBDIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) \
	-lnccl -lcudart -lstdc++ -ldl

ALL_CFLAGS := $(STD) $(WARN) $(CFLAGS) $(SAN) -Ilib -I$(BUILD) $(PKG_CFLAGS) \
	-DRLB_BUILD_CUDA=$(BUILD_CUDA)
ALL_LDFLAGS := $(LDFLAGS) $(SAN)
LIBS := $(PKG_LIBS) $(MPI_LIBS) $(if $(filter 1,$(BUILD_CUDA)),$(CUDA_LIBS)) -lm -lpthread
ALL_NVCCFLAGS := -std=c++17 $(CUDA_ARCH) $(NVCCFLAGS) -Ilib -I$(BUILD) -DRLB_BUILD_CUDA=1 \
	$(if $(filter-out $(CUDA_HOME) /usr,$(NCCL_HOME)),-I$(NCCL_HOME)/include) \
	-Xcompiler -Wall,-Wextra,-Wshadow,-fno-exceptions $(if $(SAN),-Xcompiler -fno-omit-frame-pointer)

LIB_SRCS := $(sort $(wildcard lib/*.c))
CMD_SRCS := $(sort $(wildcard cmd/*.c))
TEST_SRCS := $(sort $(wildcard tests/*.c))
BENCH_SRCS := $(sort $(wildcard bench/*.c))
# Fuzz targets: fuzz/NAME.c, each with fuzz/util.c; linked with libFuzzer in
# the fuzz build, else with fuzz/driver.c, which replays files (make check
# replays each target's corpus, fuzz/seeds).
FUZZ_NAMES := $(filter-out driver util,$(basename $(notdir $(wildcard fuzz/*.c))))
PRESETS := $(sort $(wildcard configs/models/*.yaml configs/clusters/*.yaml configs/*.yaml))

CUDA_OBJS := $(if $(filter 1,$(BUILD_CUDA)),$(CUDA_SRCS:%.cu=$(BUILD)/%.o))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS) $(BUILD)/presets.o
CMD_OBJS := $(CMD_SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)
FUZZ_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard fuzz/*.c))
DEPS := $(LIB_OBJS:.o=.d) $(CMD_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(BENCH_BINS:=.d) \
	$(FUZZ_OBJS:.o=.d)

BIN := $(if $(VARIANT),$(BUILD)/relibra,relibra)
LIB := $(if $(VARIANT),$(BUILD)/librelibra.a,librelibra.a)
# The shared library, for programs and plugins that load relibra at run
# time (Python's ctypes, a trainer's extension module): the default build
# only; the sanitizer and fuzz builds make the archive alone.  Its soname
# carries major.minor: before 1.0 a minor release may change the ABI.
VERSION := $(shell sed -n 's/^\#define RLB_VERSION "\(.*\)"/\1/p' lib/relibra.h)
SONAME := librelibra.so.$(word 1,$(subst ., ,$(VERSION))).$(word 2,$(subst ., ,$(VERSION)))
SHLIB := $(if $(VARIANT),,librelibra.so.$(VERSION))
# Its links in the tree, as make install makes them, so that programs and
# ctypes find librelibra.so before installing.
SHLINKS := $(if $(SHLIB),$(SONAME) librelibra.so)
TEST_BIN := $(BUILD)/tests/check_relibra
BENCH_BINS := $(BENCH_SRCS:%.c=$(BUILD)/%)
FUZZ_BINS := $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)
FUZZ_SECONDS ?= 60

.PHONY: all deps deps-check deps-demo check check-run check-valgrind demo \
	demo-run bench bench-run install uninstall clean lint-man config-info \
	fuzz fuzz-run

all: config-info $(BIN) $(LIB) $(SHLIB) $(SHLINKS)

config-info:
	@if ! pkg-config --exists $(PKGS); then \
		echo "relibra: missing libraries ($(PKGS)); run 'make deps' or 'make check'" >&2; \
		exit 1; fi
	@echo "relibra: zstd $$(pkg-config --modversion libzstd), libyaml $$(pkg-config --modversion yaml-0.1), jansson $$(pkg-config --modversion jansson); MPI $$(pkg-config --modversion ompi-c 2>/dev/null || echo no); CUDA nvcc $(HAVE_NVCC), NCCL $(HAVE_NCCL) (CUDA_HOME=$(CUDA_HOME), NCCL_HOME=$(NCCL_HOME)); backends: cpu$(if $(filter 1,$(BUILD_CUDA)), cuda)"

deps:
	@sh scripts/deps.sh build
deps-check:
	@sh scripts/deps.sh check
deps-demo:
	@sh scripts/deps.sh demo

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/lib/comm_mpi.o: ALL_CFLAGS += $(MPI_CFLAGS)

# The library's objects are position-independent, so that librelibra.so is
# made of them and librelibra.a links into shared objects too.
LIB_PIC := -fPIC -fno-semantic-interposition
$(BUILD)/lib/%.o $(BUILD)/presets.o: ALL_CFLAGS += $(LIB_PIC)
$(BUILD)/lib/%.o: ALL_NVCCFLAGS += -Xcompiler -fPIC

# Objects depend on the compiler flags (RLB_BUILD_CUDA among them): a stamp
# per set rebuilds them when the flags change.
FLAGS_SUM := $(BUILD_CUDA)-$(firstword $(shell printf '%s\n' '$(ALL_CFLAGS) $(LIB_PIC) $(ALL_NVCCFLAGS) $(MPI_CFLAGS)' | cksum))
FLAGS_STAMP := $(BUILD)/.build-flags-$(FLAGS_SUM)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.build-cuda-* $(BUILD)/.build-flags-*
	@touch $@
$(LIB_OBJS) $(CMD_OBJS) $(TEST_OBJS): $(FLAGS_STAMP)

# CUDA sources (lib/*.cu): only in a BUILD_CUDA=1 build.
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(ALL_NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/presets.c: scripts/embed-presets.sh $(PRESETS)
	@mkdir -p $(BUILD)
	sh scripts/embed-presets.sh $(PRESETS) > $@.tmp && mv $@.tmp $@

$(BUILD)/presets.o: $(BUILD)/presets.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CMD_OBJS) $(LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $(CMD_OBJS) $(LIB) $(LIBS)

$(SHLIB): $(LIB_OBJS)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined \
		-o $@ $(LIB_OBJS) $(LIBS)

$(SONAME): $(SHLIB)
	ln -sf $(SHLIB) $@

librelibra.so: $(SONAME)
	ln -sf $(SONAME) $@

$(TEST_BIN): $(TEST_OBJS) $(LIB)
	$(CC) $(ALL_LDFLAGS) -o $@ $(TEST_OBJS) $(LIB) $(CHECK_LIBS) $(LIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP $(ALL_LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(BUILD)/fuzz/%: $(BUILD)/fuzz/%.o $(BUILD)/fuzz/util.o \
		$(if $(FUZZ_LINK),,$(BUILD)/fuzz/driver.o) $(LIB)
	$(CC) $(ALL_LDFLAGS) $(FUZZ_LINK) -o $@ $^ $(LIBS)
.SECONDARY: $(FUZZ_OBJS)

# check and demo first install what is missing, then build in a fresh make
# so that pkg-config sees the new packages.
check: deps-check
	@$(MAKE) --no-print-directory check-run

check-run: all $(TEST_BIN) $(FUZZ_BINS) $(BENCH_BINS)
	@sh tests/run.sh $(TEST_BIN) ./$(BIN)

check-valgrind: all $(TEST_BIN) $(FUZZ_BINS) $(BENCH_BINS)
	@RLB_VALGRIND=1 sh tests/run.sh $(TEST_BIN) ./$(BIN)

demo: deps-demo
	@$(MAKE) --no-print-directory demo-run

demo-run: all
	@sh examples/quickstart.sh ./$(BIN)

bench: deps
	@$(MAKE) --no-print-directory bench-run

bench-run: all $(BENCH_BINS)
	@sh bench/run.sh ./$(BIN) $(BUILD)/bench

# The fuzz build goes to build-fuzz whatever VARIANT says.
fuzz:
	@sh scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory VARIANT=fuzz fuzz-run

fuzz-run: $(FUZZ_BINS)
	@sh fuzz/run.sh $(BUILD)/fuzz $(FUZZ_SECONDS) $(or $(FUZZ),$(FUZZ_NAMES))

lint-man:
	mandoc -Tlint -W warning man/relibra.1 man/relibra.3 man/relibra.yaml.5 man/relibra-trace.5

# What the library links against besides the Requires packages: for
# static links only when the shared library is installed too.
PC_LIBS := $(strip $(MPI_LIBS) $(if $(filter 1,$(BUILD_CUDA)),$(CUDA_LIBS)) -lm -lpthread)

# The public headers: relibra.h and what it includes (relibra(3)); the
# executor's, the backends' and the internal ones stay in the tree.
PUBLIC_HEADERS = $(sort $(filter lib/%.h,$(shell $(CC) -x c -MM -Ilib lib/relibra.h)))

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR)/relibra \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(PCDIR) \
		$(DESTDIR)$(DATADIR)/configs/models $(DESTDIR)$(DATADIR)/configs/clusters
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/
	$(if $(SHLIB),install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/)
	$(if $(SHLIB),ln -sf $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME))
	$(if $(SHLIB),ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/librelibra.so)
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCDIR)/relibra/
	install -m 644 man/relibra.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 man/relibra.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 644 man/relibra.yaml.5 man/relibra-trace.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 configs/*.yaml $(DESTDIR)$(DATADIR)/configs/
	install -m 644 configs/models/*.yaml $(DESTDIR)$(DATADIR)/configs/models/
	install -m 644 configs/clusters/*.yaml $(DESTDIR)$(DATADIR)/configs/clusters/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCDIR@|$(INCDIR)|' \
		-e 's|@REQUIRES@|$(if $(SHLIB),Requires.private,Requires)|' \
		-e 's|@LIBS@|$(if $(SHLIB),,$(PC_LIBS))|' \
		-e 's|@LIBS_PRIVATE@|$(if $(SHLIB),$(PC_LIBS))|' \
		-e 's|@VERSION@|$(VERSION)|' \
		relibra.pc.in > $(DESTDIR)$(PCDIR)/relibra.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/relibra $(DESTDIR)$(LIBDIR)/librelibra.a $(DESTDIR)$(PCDIR)/relibra.pc \
		$(DESTDIR)$(LIBDIR)/librelibra.so $(DESTDIR)$(LIBDIR)/librelibra.so.* \
		$(DESTDIR)$(MANDIR)/man1/relibra.1 $(DESTDIR)$(MANDIR)/man3/relibra.3 \
		$(DESTDIR)$(MANDIR)/man5/relibra.yaml.5 \
		$(DESTDIR)$(MANDIR)/man5/relibra-trace.5
	rm -rf $(DESTDIR)$(INCDIR)/relibra $(DESTDIR)$(DATADIR)

clean:
	rm -rf build build-* relibra librelibra.a librelibra.so librelibra.so.*

-include $(DEPS)
