# api.sh - the library as its users get it: `make install PREFIX=DIR`; an
# archive (and a shared library) whose every global symbol is
# rlb_-prefixed; headers that compile on their own, and so does
# relibra(3)'s example; examples/plan_online.c built with pkg-config against
# the installed files, linked with librelibra.so and with librelibra.a, its
# trace and plans checked against the command line's (the same plan file,
# byte for byte, and train-step applies it); a C++ program reading the
# plan; a plugin that links the archive; Python's ctypes loading the shared
# library, and examples/plan_online.py planning the same steps with the
# installed one and with the build tree's librelibra.so link; a failing
# run that leaves no file behind; numbers read and written the same under
# a host's comma-decimal locale; and `make uninstall`.
. "$RLB_TOP/tests/cli/lib.sh"

command -v pkg-config >/dev/null 2>&1 || skip "pkg-config not installed"
command -v make >/dev/null 2>&1 || skip "make not installed"
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || skip "no C compiler ($CC)"

# Install the build under test: the variant of $RLB_BUILD (build,
# build-san, build-tsan), with the make flags of the make that runs the
# tests, so that nothing is rebuilt.  A sanitizer build's archive needs
# its runtime.
variant=$(basename "$RLB_BUILD")
variant=${variant#build}
variant=${variant#-}
case $variant in
"") san= ;;
san) san="-fsanitize=address,undefined" ;;
tsan) san="-fsanitize=thread" ;;
*) skip "no install test for the '$variant' build" ;;
esac
prefix="$TEST_TMP/prefix"
make -C "$RLB_TOP" VARIANT="$variant" PREFIX="$prefix" install > install.log 2>&1 ||
	{ cat install.log; fail "make install PREFIX=$prefix failed"; }
for f in bin/relibra lib/librelibra.a lib/pkgconfig/relibra.pc \
	include/relibra/relibra.h share/man/man1/relibra.1 share/man/man3/relibra.3 \
	share/man/man5/relibra-trace.5 share/relibra/configs/tiny-2x2.yaml; do
	[ -f "$prefix/$f" ] || fail "make install did not install $f"
done
"$prefix/bin/relibra" --version > /dev/null || fail "the installed relibra does not run"

# A static archive shares the program's one namespace: every symbol it
# defines for the linker is rlb_-prefixed (CUDA kernels are static).
if command -v nm > /dev/null 2>&1; then
	# (AddressSanitizer adds __odr_asan.NAME for each global NAME.)
	nm -g --defined-only "$prefix/lib/librelibra.a" | awk 'NF == 3 { print $3 }' |
		sed 's/^__odr_asan\.//' | grep -v '^rlb_' > foreign.syms
	[ ! -s foreign.syms ] || { head -n 20 foreign.syms; fail "librelibra.a defines symbols without the rlb_ prefix"; }
fi

# Every installed header compiles on its own, in C11.
for h in "$prefix"/include/relibra/*.h; do
	printf '#include <relibra/%s>\n' "${h##*/}" > header.c
	"$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" header.c 2> cc.log ||
		{ cat cc.log; fail "${h##*/} does not compile on its own"; }
done
[ -f "$prefix/include/relibra/trace_impl.h" ] && fail "make install installed an internal header"
# ... and relibra.h includes every one of them (relibra(3))
printf '#include <relibra/relibra.h>\n' > all.c
"$CC" -std=c11 -MM -I"$prefix/include" all.c | tr -d '\\\n' | tr ' ' '\n' |
	sed -n 's|.*/include/relibra/||p' | sort > included
(cd "$prefix/include/relibra" && ls) | sort > installed
cmp -s included installed || { diff included installed; fail "installed headers that relibra.h does not include"; }
[ -f "$prefix/include/relibra/exec.h" ] && fail "make install installed the executor's header"
# ... and define no macro outside RLB_ but those of the C headers they include
printf '#include <float.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n' > sys.c
"$CC" -std=c11 -dM -E sys.c | sort > sys.macros
"$CC" -std=c11 -dM -E -I"$prefix/include" all.c | sort | comm -13 sys.macros - |
	grep -v '^#define RLB_' > foreign.macros
[ ! -s foreign.macros ] || { cat foreign.macros; fail "the headers define macros without the RLB_ prefix"; }

# The example of relibra(3) compiles as printed: its code block, in a
# function that takes what it names.
awk '/^\.Sh EXAMPLES/ { ex = 1 } ex && /^\.Ed/ { exit } ex && code { print } ex && /^\.Bd -literal/ { code = 1 }' \
	"$RLB_TOP/man/relibra.3" | sed 's/\\e/\\/g' > man-example.body
[ -s man-example.body ] || fail "no code block under EXAMPLES in relibra.3"
{
	printf '#include <err.h>\n#include <stdio.h>\n#include <relibra/relibra.h>\n'
	printf 'void example(uint32_t step, const uint32_t *lens, size_t n, const struct rlb_seq *seqs);\n'
	printf 'void example(uint32_t step, const uint32_t *lens, size_t n, const struct rlb_seq *seqs)\n{\n'
	cat man-example.body
	printf '}\n'
} > man-example.c
"$CC" -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" \
	man-example.c 2> cc.log || { cat cc.log; fail "the example of relibra(3) does not compile"; }

# Build the example with nothing but the installed files.  The default
# build installs librelibra.so, which pkg-config links (the program runs
# with the prefix's lib/ on LD_LIBRARY_PATH); the archive links too.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
shared=0
[ -f "$prefix/lib/librelibra.so" ] && shared=1
[ -n "$variant" ] || [ $shared = 1 ] || fail "make install did not install librelibra.so"
flags=$(pkg-config --cflags --libs relibra) || fail "pkg-config does not find relibra"
build_example() {
	# shellcheck disable=SC2086
	"$CC" -std=c11 -Wall -Wextra -Werror $san -o "$1" \
		"$RLB_TOP/examples/plan_online.c" $2 2> cc.log ||
		{ cat cc.log; fail "examples/plan_online.c does not build against the installed library ($2)"; }
}
build_example plan_online "$flags"
if [ $shared = 1 ]; then
	if command -v readelf > /dev/null 2>&1; then
		readelf -d plan_online | grep -q 'NEEDED.*librelibra\.so\.' ||
			fail "pkg-config --libs relibra did not link librelibra.so"
		# The shared library exports the rlb_ names alone.
		nm -D --defined-only "$prefix/lib/librelibra.so" | awk 'NF == 3 { print $3 }' |
			grep -v '^rlb_' > foreign.syms
		[ ! -s foreign.syms ] || { head -n 20 foreign.syms; fail "librelibra.so exports symbols without the rlb_ prefix"; }
	fi
	build_example plan_online_static \
		"$(pkg-config --static --cflags --libs relibra | sed "s|-lrelibra|$prefix/lib/librelibra.a|")"
fi

# The library in use says its release, the one the headers name.
cat > version.c <<'EOF'
#include <stdio.h>
#include <string.h>
#include <relibra/relibra.h>

int main(void)
{
	printf("%s\n", rlb_version());
	return strcmp(rlb_version(), RLB_VERSION) != 0;
}
EOF
# shellcheck disable=SC2086
"$CC" -std=c11 -Wall -Wextra -Werror $san -o version version.c $flags 2> cc.log ||
	{ cat cc.log; fail "a program calling rlb_version does not build"; }
./version > out || fail "rlb_version differs from the headers' RLB_VERSION"
grep -qx "$(sed -n 's/^#define RLB_VERSION "\(.*\)"/\1/p' "$RLB_TOP/lib/relibra.h")" out ||
	{ cat out; fail "rlb_version is not lib/relibra.h's RLB_VERSION"; }

cfg="$prefix/share/relibra/configs/tiny-2x2.yaml"
./plan_online "$cfg" api.rrt api.rlp > out 2> err || { cat out err; fail "plan_online failed"; }
cp out plan_online.out
expect_empty err
if [ $shared = 1 ]; then
	./plan_online_static "$cfg" static.rrt static.rlp > out 2> err ||
		{ cat out err; fail "plan_online linked with librelibra.a failed"; }
	cmp static.rrt api.rrt && cmp static.rlp api.rlp ||
		fail "the programs linked with librelibra.so and librelibra.a wrote different files"
	cp plan_online.out out
fi
expect_out "wrote api.rrt and api.rlp"
[ "$(grep -c '^step ' out)" -eq 3 ] || { cat out; fail "plan_online did not plan 3 steps"; }
# The stand-in routing is skewed enough for relibra to replicate, and
# rank 0's rows are routed (rlb_step_plan_route checks them against the loads).
expect_out "rank 0 sends"
expect_out "rows of mb 0, layer 0 to GPUs 0:"

# The trace is an ordinary trace, from source "api".
RELIBRA="$prefix/bin/relibra"
run inspect api.rrt
expect_status 0
grep -q '^source: *api$' out || { cat out; fail "the trace's source is not 'api'"; }
grep -q '^steps: *3 (0..2)$' out || { cat out; fail "the trace does not hold steps 0..2"; }

# The library's plans are relibra plan's, byte for byte.
run plan -c "$cfg" --no-timing -o cli.rlp api.rrt
expect_status 0
cmp api.rlp cli.rlp || fail "the plans of the library and of relibra plan differ"

# train-step applies them (and checks they belong to the trace and config).
run train-step -c "$cfg" --trace api.rrt --plan api.rlp --steps 2:2 --virtual-ranks 4 --verify
expect_status 0

# C++ programs include the same headers (extern "C") and link the archive.
CXX=${CXX:-c++}
if command -v "$CXX" > /dev/null 2>&1; then
	cat > reader.cc <<'EOF'
#include <relibra/relibra.h>
#include <cstdio>

int main(int argc, char **argv)
{
	struct rlb_plan_reader *r;
	struct rlb_step_plan p = {};
	struct rlb_err err;
	const struct rlb_plan_step_info *info;

	if (argc != 2 || rlb_plan_reader_open(&r, argv[1], &err) != 0 ||
	    rlb_plan_reader_read_step(r, 2, &p, &err) != 0) {
		std::fprintf(stderr, "%s\n", argc == 2 ? err.msg : "usage");
		return 1;
	}
	std::printf("%s plan, %zu steps, step 2: %u micro-batches\n",
		    rlb_policy_name(rlb_plan_reader_header(r)->policy),
		    rlb_plan_reader_steps(r, &info), p.micro_batches);
	rlb_step_plan_release(&p);
	rlb_plan_reader_free(r);
	return 0;
}
EOF
	# shellcheck disable=SC2086
	"$CXX" -std=c++11 -Wall -Wextra -Werror $san -o reader reader.cc $flags 2> cc.log ||
		{ cat cc.log; fail "a C++ program does not build against the installed library"; }
	./reader api.rlp > out 2> err || { cat err; fail "the C++ plan reader failed"; }
	mb=$(sed -n 's/^step 2: \([0-9]*\) micro-batches.*/\1/p' plan_online.out)
	expect_out "relibra plan, 3 steps, step 2: $mb micro-batches"
fi

# A plugin (a shared object, such as a Python extension module) can link the
# archive, whose objects are position-independent; and Python loads the
# shared library with ctypes.  Not for sanitizer builds, whose runtime
# must come first in the program.
if [ -z "$san" ]; then
	cat > probe.c <<'EOF'
#include <relibra/relibra.h>

int probe_steps(const char *path);

int probe_steps(const char *path)
{
	struct rlb_plan_reader *r;
	const struct rlb_plan_step_info *info;
	int n;

	if (rlb_plan_reader_open(&r, path, NULL) != 0)
		return -1;
	n = (int)rlb_plan_reader_steps(r, &info);
	rlb_plan_reader_free(r);
	return n;
}
EOF
	cat > load.c <<'EOF'
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *h = dlopen("./probe.so", RTLD_NOW | RTLD_LOCAL);
	int (*steps)(const char *);

	if (argc != 2 || !h) {
		fprintf(stderr, "%s\n", h ? "usage: load PLAN" : dlerror());
		return 1;
	}
	*(void **)&steps = dlsym(h, "probe_steps");
	printf("%d\n", steps ? steps(argv[1]) : -2);
	return 0;
}
EOF
	# shellcheck disable=SC2046
	"$CC" -std=c11 -Wall -Wextra -Werror -fPIC -shared -o probe.so probe.c \
		"$prefix/lib/librelibra.a" $(pkg-config --static --cflags --libs relibra | sed 's/-lrelibra//') \
		2> cc.log || { cat cc.log; fail "a shared object does not link librelibra.a"; }
	"$CC" -std=c11 -Wall -o load load.c -ldl 2> cc.log || { cat cc.log; fail "cannot build the loader"; }
	[ "$(./load api.rlp)" = 3 ] || fail "the plugin linked with librelibra.a did not read the plan's 3 steps"
	if [ $shared = 1 ] && command -v python3 > /dev/null 2>&1; then
		python3 - "$prefix/lib/librelibra.so" api.rlp api.rrt > out 2> err <<'EOF' ||
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.rlb_strerror.restype = ctypes.c_char_p
assert lib.rlb_strerror(-6) == b"corrupt data", lib.rlb_strerror(-6)
assert lib.rlb_plan_probe(sys.argv[2].encode(), None) == 1
assert lib.rlb_plan_probe(sys.argv[3].encode(), None) == 0
print("ctypes: ok")
EOF
			{ cat err; fail "Python cannot use librelibra.so through ctypes"; }
		expect_out "ctypes: ok"
		# The Python trainer side of the example plans the same steps alike.
		python3 "$RLB_TOP/examples/plan_online.py" "$prefix/lib/librelibra.so" "$cfg" \
			> out 2> err || { cat err; fail "examples/plan_online.py failed"; }
		sed '$d' plan_online.out | diff - out ||
			fail "examples/plan_online.py and plan_online.c print different plans"
		# ... and so does the build tree's librelibra.so, before installing.
		[ -L "$RLB_TOP/librelibra.so" ] || fail "make did not link librelibra.so in the tree"
		python3 "$RLB_TOP/examples/plan_online.py" "$RLB_TOP/librelibra.so" "$cfg" \
			> out 2> err || { cat err; fail "examples/plan_online.py failed on the tree's librelibra.so"; }
		sed '$d' plan_online.out | diff - out ||
			fail "examples/plan_online.py prints other plans with the tree's librelibra.so"
	fi
fi

# A failure leaves neither file, nor their .tmp files.
./plan_online "$cfg" gone.rrt no-such-dir/gone.rlp > out 2> err && fail "plan_online wrote into a missing directory"
grep -q "no-such-dir/gone.rlp" err || { cat err; fail "the error does not name the plan file"; }
for f in gone.rrt gone.rrt.tmp; do
	[ ! -e "$f" ] || fail "a failed run left $f"
done

# A host whose locale writes 0,5 (de_DE): the library still reads and
# writes 0.5, and the host's own printf keeps its comma.  Needs the
# locale's source (Debian's locales package) to make it here.
cat > locale.c <<'EOF'
#include <locale.h>
#include <stdio.h>
#include <relibra/relibra.h>

int main(int argc, char **argv)
{
	struct rlb_config cfg;
	struct rlb_err err;
	char buf[64];
	double d = 0;
	FILE *fp;

	(void)argc;
	if (!setlocale(LC_ALL, "de_DE.UTF-8"))
		return 77;
	if (rlb_parse_double("0.5", 0, 1, &d, "x", &err) != 0 || d != 0.5) {
		fprintf(stderr, "rlb_parse_double: %s\n", err.msg);
		return 1;
	}
	if (rlb_config_load(&cfg, argv[1], NULL, 0, &err) != 0 ||
	    rlb_config_set(&cfg, "cluster.gemm_eff_max=0.65", &err) != 0 ||
	    rlb_config_get(&cfg, "cluster.gemm_eff_max", buf, sizeof(buf), &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	printf("get %s, host %.2f, ", buf, 0.5);
	printf("fmt3 %s\n", rlb_report_fmt3(0.925, buf, sizeof(buf)));
	cfg.cluster.gemm_eff_max = 1.5;
	if (rlb_config_validate(&cfg, &err) != RLB_ECONFIG)
		return 1;
	printf("%s\n", err.msg);
	cfg.cluster.gemm_eff_max = 0.65;
	fp = fopen(argv[2], "w");
	if (!fp || rlb_config_write_yaml(&cfg, fp, &err) != 0 || fclose(fp) != 0)
		return 1;
	return 0;
}
EOF
mkdir -p loc
if command -v localedef > /dev/null 2>&1 &&
   localedef -i de_DE -f UTF-8 loc/de_DE.UTF-8 > localedef.log 2>&1; then
	# shellcheck disable=SC2086
	"$CC" -std=c11 -Wall -Wextra -Werror $san -o locale locale.c $flags 2> cc.log ||
		{ cat cc.log; fail "locale.c does not build against the installed library"; }
	LOCPATH=loc ./locale "$CONFIGS/tiny-2x2.yaml" locale.yaml > out 2> err
	status=$?
	expect_status 0
	expect_out "get 0.65, host 0,50, fmt3 0.925"
	expect_out "value 1.5 for 'cluster.gemm_eff_max' is out of range [1e-06, 1]"
	grep -q "^  gemm_eff_max: 0.65$" locale.yaml || { cat locale.yaml; fail "YAML written in a comma locale"; }
else
	echo "note: no de_DE locale could be made here (localedef: $(tail -n 1 localedef.log 2>/dev/null)); the locale check did not run"
fi

make -C "$RLB_TOP" VARIANT="$variant" PREFIX="$prefix" uninstall > uninstall.log 2>&1 ||
	{ cat uninstall.log; fail "make uninstall failed"; }
left=$(find "$prefix" ! -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
exit 0
