/*
 * test_util.c - unit tests of lib/err and lib/util.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "relibra.h"
#include "suites.h"

START_TEST(test_err_set_and_prefix)
{
	struct rlb_err err = {0};

	ck_assert_int_eq(rlb_err_set(&err, RLB_EPARSE, "bad '%s'", "x"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "bad 'x'");
	rlb_err_prefix(&err, "file %d", 3);
	ck_assert_str_eq(err.msg, "file 3: bad 'x'");
	ck_assert_int_eq(err.code, RLB_EPARSE);
	ck_assert_int_eq(rlb_err_set(NULL, RLB_EIO, "ignored"), RLB_EIO);
	rlb_err_clear(&err);
	ck_assert_int_eq(err.code, 0);
	ck_assert_str_eq(err.msg, "");
	ck_assert_str_eq(rlb_strerror(RLB_ECORRUPT), "corrupt data");
}
END_TEST

START_TEST(test_parse_numbers)
{
	struct rlb_err err = {0};
	int64_t i;
	uint64_t u;
	double d;

	ck_assert_int_eq(rlb_parse_i64("-12", -100, 100, &i, "n", &err), 0);
	ck_assert_int_eq(i, -12);
	ck_assert_int_eq(rlb_parse_i64("12x", -100, 100, &i, "n", &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "n: expected an integer, got '12x'");
	ck_assert_int_eq(rlb_parse_i64("101", -100, 100, &i, "n", &err), RLB_ERANGE);
	ck_assert_int_eq(rlb_parse_u64("-1", 0, 10, &u, "u", &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "u: expected an integer in [0, 10], got '-1'");
	ck_assert_int_eq(rlb_parse_u64("-0", 0, 10, &u, "u", &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "u: expected an integer in [0, 10], got '-0'");
	ck_assert_int_eq(rlb_parse_u64("", 0, 10, &u, "u", &err), RLB_EPARSE);
	/* an option where a number was expected: not a number, not "out of range" */
	ck_assert_int_eq(rlb_parse_u64("--plan", 0, 10, &u, "u", &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "u: expected a non-negative integer, got '--plan'");
	ck_assert_int_eq(rlb_parse_u64("0x10", 0, 100, &u, "u", &err), 0);
	ck_assert_uint_eq(u, 16);
	/* leading zeros are decimal, not octal; no leading space */
	ck_assert_int_eq(rlb_parse_u64("010", 0, 100, &u, "u", &err), 0);
	ck_assert_uint_eq(u, 10);
	ck_assert_int_eq(rlb_parse_i64("-010", -100, 100, &i, "n", &err), 0);
	ck_assert_int_eq(i, -10);
	ck_assert_int_eq(rlb_parse_u64(" 1", 0, 100, &u, "u", &err), RLB_EPARSE);
	ck_assert_int_eq(rlb_parse_i64(" 1", 0, 100, &i, "n", &err), RLB_EPARSE);
	ck_assert_int_eq(rlb_parse_u64("\v5", 0, 100, &u, "u", &err), RLB_EPARSE);
	ck_assert_int_eq(rlb_parse_u64("\r5", 0, 100, &u, "u", &err), RLB_EPARSE);
	ck_assert_int_eq(rlb_parse_double("0.5", 0, 1, &d, "f", &err), 0);
	ck_assert_double_eq(d, 0.5);
	ck_assert_int_eq(rlb_parse_double("nan", 0, 1, &d, "f", &err), RLB_EPARSE);
	ck_assert_int_eq(rlb_parse_double("2", 0, 1, &d, "f", &err), RLB_ERANGE);
}
END_TEST

START_TEST(test_le_helpers)
{
	uint8_t b[8];

	rlb_put_u32(b, 0x11223344u);
	ck_assert_uint_eq(b[0], 0x44);
	ck_assert_uint_eq(b[3], 0x11);
	ck_assert_uint_eq(rlb_get_u32(b), 0x11223344u);
	rlb_put_u64(b, 0x0102030405060708ull);
	ck_assert_uint_eq(b[0], 0x08);
	ck_assert(rlb_get_u64(b) == 0x0102030405060708ull);
	rlb_put_u16(b, 0xabcd);
	ck_assert_uint_eq(rlb_get_u16(b), 0xabcd);
	rlb_put_f32(b, 1.5f);
	ck_assert(rlb_get_f32(b) == 1.5f);
}
END_TEST

START_TEST(test_atomic_file)
{
	char path[512];
	char tmp[600];
	struct rlb_atomic_file af;
	struct rlb_err err = {0};
	struct stat st;

	snprintf(path, sizeof(path), "%s/atomic.txt", rlb_test_tmpdir());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(path);

	/* Aborted: nothing left behind. */
	ck_assert_int_eq(rlb_atomic_open(&af, path, &err), 0);
	fputs("partial", af.fp);
	ck_assert_int_eq(stat(tmp, &st), 0);
	rlb_atomic_abort(&af);
	ck_assert_int_ne(stat(tmp, &st), 0);
	ck_assert_int_ne(stat(path, &st), 0);
	/* an abort, as every other, takes NULL */
	rlb_atomic_abort(NULL);

	/* Committed: the file appears whole, the temporary is gone. */
	ck_assert_int_eq(rlb_atomic_open(&af, path, &err), 0);
	fputs("hello", af.fp);
	ck_assert_int_ne(stat(path, &st), 0);
	ck_assert_int_eq(rlb_atomic_commit(&af, &err), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 5);
	ck_assert_int_ne(stat(tmp, &st), 0);

	/* Synced, then aborted: the complete temporary goes, PATH stays. */
	ck_assert_int_eq(rlb_atomic_open(&af, path, &err), 0);
	fputs("second", af.fp);
	ck_assert_int_eq(rlb_atomic_sync(&af, &err), 0);
	ck_assert_ptr_null(af.fp);
	ck_assert_int_eq(stat(tmp, &st), 0);
	ck_assert_int_eq(st.st_size, 6);
	rlb_atomic_abort(&af);
	ck_assert_int_ne(stat(tmp, &st), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 5);

	/* Synced, then committed: renamed into place. */
	ck_assert_int_eq(rlb_atomic_open(&af, path, &err), 0);
	fputs("second", af.fp);
	ck_assert_int_eq(rlb_atomic_sync(&af, &err), 0);
	ck_assert_int_eq(rlb_atomic_sync(&af, &err), 0);	/* once is enough */
	ck_assert_int_eq(rlb_atomic_commit(&af, &err), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 6);
	ck_assert_int_ne(stat(tmp, &st), 0);

	/* Unwritable directory: a clear error. */
	ck_assert_int_eq(rlb_atomic_open(&af, "/nonexistent-dir/x", &err), RLB_EIO);
	ck_assert_msg(strstr(err.msg, "cannot create '/nonexistent-dir/x.tmp'"), "%s", err.msg);
	unlink(path);
}
END_TEST

/*
 * A PATH.tmp left behind, as a symbolic or a hard link to another file, is
 * replaced, not written through: the other file keeps its bytes and PATH
 * becomes a regular file of its own.  A directory there is an error.
 */
START_TEST(test_atomic_stale_tmp)
{
	char path[512], tmp[600], other[600];
	struct rlb_atomic_file af;
	struct rlb_err err = {0};
	struct stat st;
	FILE *fp;
	int hard;

	snprintf(path, sizeof(path), "%s/stale.txt", rlb_test_tmpdir());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	snprintf(other, sizeof(other), "%s/stale-other.txt", rlb_test_tmpdir());
	for (hard = 0; hard < 2; hard++) {
		unlink(path);
		unlink(tmp);
		fp = fopen(other, "wb");
		ck_assert_ptr_nonnull(fp);
		fputs("other", fp);
		ck_assert_int_eq(fclose(fp), 0);
		ck_assert_int_eq(hard ? link(other, tmp) : symlink(other, tmp), 0);

		ck_assert_int_eq(rlb_atomic_open(&af, path, &err), 0);
		fputs("new!!!", af.fp);
		ck_assert_int_eq(rlb_atomic_commit(&af, &err), 0);
		ck_assert_int_eq(lstat(path, &st), 0);
		ck_assert(S_ISREG(st.st_mode));
		ck_assert_int_eq(st.st_size, 6);
		ck_assert_int_eq(stat(other, &st), 0);
		ck_assert_int_eq(st.st_size, 5);
		ck_assert_int_ne(lstat(tmp, &st), 0);
	}

	ck_assert_int_eq(mkdir(tmp, 0777), 0);
	ck_assert_int_eq(rlb_atomic_open(&af, path, &err), RLB_EIO);
	ck_assert_msg(strstr(err.msg, "cannot create '") && strstr(err.msg, ".tmp': Is a directory"),
		      "%s", err.msg);
	ck_assert_int_eq(stat(tmp, &st), 0);
	rmdir(tmp);
	unlink(path);
	unlink(other);
}
END_TEST

/*
 * A PATH.tmp that another writer holds is not replaced: the second open
 * says so and leaves it, from the first open through its sync until its
 * commit or abort, after which PATH can be written again.
 */
START_TEST(test_atomic_locked)
{
	char path[512], tmp[600], buf[16];
	struct rlb_atomic_file a, b;
	struct rlb_err err = {0};
	struct stat st;
	FILE *fp;
	int sync;

	snprintf(path, sizeof(path), "%s/locked.txt", rlb_test_tmpdir());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	for (sync = 0; sync < 2; sync++) {
		unlink(path);
		ck_assert_int_eq(rlb_atomic_open(&a, path, &err), 0);
		fputs("first", a.fp);
		if (sync)
			ck_assert_int_eq(rlb_atomic_sync(&a, &err), 0);
		ck_assert_int_eq(rlb_atomic_open(&b, path, &err), RLB_EIO);
		ck_assert_msg(strstr(err.msg, "another run is writing '") &&
			      strstr(err.msg, "locked.txt.tmp' is locked)"), "%s", err.msg);
		ck_assert_ptr_null(b.tmp_path);
		ck_assert_int_eq(stat(tmp, &st), 0);
		ck_assert_int_eq(rlb_atomic_commit(&a, &err), 0);
		fp = fopen(path, "rb");
		ck_assert_ptr_nonnull(fp);
		ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), fp));
		fclose(fp);
		ck_assert_str_eq(buf, "first");
	}
	ck_assert_int_eq(rlb_atomic_open(&a, path, &err), 0);
	ck_assert_int_eq(rlb_atomic_open(&b, path, &err), RLB_EIO);
	rlb_atomic_abort(&a);
	ck_assert_int_ne(stat(tmp, &st), 0);
	ck_assert_int_eq(rlb_atomic_open(&b, path, &err), 0);
	fputs("second", b.fp);
	ck_assert_int_eq(rlb_atomic_commit(&b, &err), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 6);
	unlink(path);
}
END_TEST

/*
 * What a signal handler removes (rlb_atomic_remove_all): the open
 * temporaries, not a committed file, not an aborted one's slot.
 */
START_TEST(test_atomic_remove_all)
{
	struct rlb_atomic_file a, b, c;
	struct rlb_err err = {0};
	char pa[512], pb[512], pc[512], ta[600], tb[600];
	struct stat st;

	snprintf(pa, sizeof(pa), "%s/ra.txt", rlb_test_tmpdir());
	snprintf(pb, sizeof(pb), "%s/rb.txt", rlb_test_tmpdir());
	snprintf(pc, sizeof(pc), "%s/rc.txt", rlb_test_tmpdir());
	snprintf(ta, sizeof(ta), "%s.tmp", pa);
	snprintf(tb, sizeof(tb), "%s.tmp", pb);
	ck_assert_int_eq(rlb_atomic_open(&a, pa, &err), 0);
	ck_assert_int_eq(rlb_atomic_open(&b, pb, &err), 0);
	ck_assert_int_eq(rlb_atomic_open(&c, pc, &err), 0);
	ck_assert_int_eq(rlb_atomic_commit(&c, &err), 0);
	rlb_atomic_remove_all();
	ck_assert_int_ne(stat(ta, &st), 0);
	ck_assert_int_ne(stat(tb, &st), 0);
	ck_assert_int_eq(stat(pc, &st), 0);
	rlb_atomic_abort(&a);
	rlb_atomic_abort(&b);
	/* the slots are free again: a new file is listed and removed */
	ck_assert_int_eq(rlb_atomic_open(&a, pa, &err), 0);
	ck_assert_int_eq(stat(ta, &st), 0);
	rlb_atomic_remove_all();
	ck_assert_int_ne(stat(ta, &st), 0);
	rlb_atomic_abort(&a);
	unlink(pc);
}
END_TEST

/* Threads that open and commit atomic files at once each keep a slot. */
struct atomic_job {
	int id;
	int fails;
};

static void *atomic_worker(void *arg)
{
	struct atomic_job *j = arg;
	struct rlb_err err = {0};
	char path[512];
	int i;

	for (i = 0; i < 50; i++) {
		struct rlb_atomic_file af;

		snprintf(path, sizeof(path), "%s/thr%d-%d.txt", rlb_test_tmpdir(), j->id, i);
		if (rlb_atomic_open(&af, path, &err) != 0 || af.slot < 0 ||
		    fputs("x", af.fp) == EOF || rlb_atomic_commit(&af, &err) != 0)
			j->fails++;
		unlink(path);
	}
	return NULL;
}

START_TEST(test_atomic_threads)
{
	struct atomic_job jobs[4];
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++) {
		jobs[i] = (struct atomic_job){ i, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, atomic_worker, &jobs[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(jobs[i].fails, 0);
	}
}
END_TEST

START_TEST(test_utf8)
{
	static const char *const good[] = {
		"", "qwen3-235b-a22b", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
		"\xed\x9f\xbf", "\xee\x80\x80", "\xf4\x8f\xbf\xbf",
	};
	static const char *const bad[] = {
		"\xff", "a\x80", "\xc0\x80", "\xc1\xbf", "\xc3", "\xe0\x9f\xbf",
		"\xed\xa0\x80", "\xed\xbf\xbf", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80",
		"\xf5\x80\x80\x80", "\xe2\x82", "\xe2\x82x",
	};
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(rlb_utf8_ok(good[i]), "good %zu refused", i);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!rlb_utf8_ok(bad[i]), "bad %zu accepted", i);
}
END_TEST

START_TEST(test_json_text)
{
	json_t *j = rlb_json_text("a\xff/b\xc3\xa9\xe2\x82");

	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(j), "a\xef\xbf\xbd/b\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
	json_decref(j);
	j = rlb_json_text("plain.rrt");
	ck_assert_str_eq(json_string_value(j), "plain.rrt");
	json_decref(j);
	ck_assert_uint_eq(rlb_utf8_len("\xf0\x9f\x98\x80"), 4);
	ck_assert_uint_eq(rlb_utf8_len("\xe2\x82"), 0);
	ck_assert_uint_eq(rlb_utf8_len("x"), 1);
}
END_TEST

static int before_mod3(const void *ctx, uint32_t a, uint32_t b)
{
	(void)ctx;
	return a % 3 < b % 3;
}

START_TEST(test_sort_stable)
{
	uint32_t idx[100], tmp[100];
	size_t n, i;

	for (n = 0; n <= 100; n += 7) {
		for (i = 0; i < n; i++)
			idx[i] = (uint32_t)(n - 1 - i);
		rlb_sort_stable(idx, tmp, n, before_mod3, NULL);
		/* by key, and within a key in the input order (descending) */
		for (i = 1; i < n; i++)
			ck_assert(idx[i - 1] % 3 < idx[i] % 3 ||
				  (idx[i - 1] % 3 == idx[i] % 3 && idx[i - 1] > idx[i]));
	}
}
END_TEST

Suite *rlb_suite_util(void)
{
	Suite *s = suite_create("util");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_err_set_and_prefix);
	tcase_add_test(tc, test_parse_numbers);
	tcase_add_test(tc, test_le_helpers);
	tcase_add_test(tc, test_atomic_file);
	tcase_add_test(tc, test_atomic_stale_tmp);
	tcase_add_test(tc, test_atomic_locked);
	tcase_add_test(tc, test_atomic_remove_all);
	tcase_add_test(tc, test_atomic_threads);
	tcase_add_test(tc, test_utf8);
	tcase_add_test(tc, test_json_text);
	tcase_add_test(tc, test_sort_stable);
	suite_add_tcase(s, tc);
	return s;
}
