/* The checks behind issue 13: overflow-safe element counts in the
 * compiler (shape_numel_checked) and the runtime's scan for NaN and
 * infinities in loaded data, for every float dtype and any alignment. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/ir.h"
#include "runtime/rt_internal.h"

Test(guard, numel_checked)
{
	Shape s = {2, {1000, 1000}};
	cr_expect_eq(shape_numel_checked(&s), 1000000);
	Shape scalar = {0, {0}};
	cr_expect_eq(shape_numel_checked(&scalar), 1);
	/* 2^62+1 x 4 wraps to 4 in 64 bits */
	Shape wrap = {2, {(INT64_C(1) << 62) + 1, 4}};
	cr_expect_eq(shape_numel_checked(&wrap), -1);
	Shape limit = {2, {INT64_C(1) << 24, INT64_C(1) << 24}};
	cr_expect_eq(shape_numel_checked(&limit), NUMEL_MAX);
	limit.d[1]++;
	cr_expect_eq(shape_numel_checked(&limit), -1);
	Shape zero = {2, {3, 0}};
	cr_expect_eq(shape_numel_checked(&zero), -1);
}

Test(guard, first_nonfinite_f32_f64)
{
	const char *what = NULL;
	float f[6] = {0, 1, -2, 3e38f, 5, 6};
	cr_expect_eq(nrt_first_nonfinite(NRT_F32, f, 6, &what), -1);
	f[4] = NAN;
	cr_expect_eq(nrt_first_nonfinite(NRT_F32, f, 6, &what), 4);
	cr_expect_str_eq(what, "NaN");
	f[2] = -INFINITY;
	cr_expect_eq(nrt_first_nonfinite(NRT_F32, f, 6, &what), 2);
	cr_expect_str_eq(what, "-Inf");
	/* unaligned: the same values one byte into a buffer */
	unsigned char buf[8 * 4 + 1];
	double d[4] = {1, 2, INFINITY, 4};
	memcpy(buf + 1, d, sizeof d);
	cr_expect_eq(nrt_first_nonfinite(NRT_F64, buf + 1, 4, &what), 2);
	cr_expect_str_eq(what, "+Inf");
	/* integers are always finite, whatever their bits */
	int32_t i[2] = {0x7fc00000, -1};
	cr_expect_eq(nrt_first_nonfinite(NRT_I32, i, 2, &what), -1);
}

Test(guard, first_nonfinite_half)
{
	const char *what = NULL;
	/* f16: 0x7c00 +Inf, 0xfc00 -Inf, 0x7e00 NaN, 0x7bff the largest finite */
	uint16_t h[4] = {0x3c00, 0x7bff, 0xfc00, 0x7e00};
	cr_expect_eq(nrt_first_nonfinite(NRT_F16, h, 2, &what), -1);
	cr_expect_eq(nrt_first_nonfinite(NRT_F16, h, 4, &what), 2);
	cr_expect_str_eq(what, "-Inf");
	cr_expect_eq(nrt_first_nonfinite(NRT_F16, h + 3, 1, &what), 0);
	cr_expect_str_eq(what, "NaN");
	/* bf16: 0x7f80 +Inf, 0x7fc0 NaN, 0x7f7f the largest finite */
	uint16_t b[3] = {0x7f7f, 0x7fc0, 0x7f80};
	cr_expect_eq(nrt_first_nonfinite(NRT_BF16, b, 1, &what), -1);
	cr_expect_eq(nrt_first_nonfinite(NRT_BF16, b, 3, &what), 1);
	cr_expect_str_eq(what, "NaN");
	cr_expect_eq(nrt_first_nonfinite(NRT_BF16, b + 2, 1, &what), 0);
	cr_expect_str_eq(what, "+Inf");
}

Test(guard, index_str)
{
	char buf[64];
	int64_t dims[3] = {2, 3, 4};
	cr_expect_str_eq(nrt_index_str(3, dims, 0, buf, sizeof buf), "[0, 0, 0]");
	cr_expect_str_eq(nrt_index_str(3, dims, 23, buf, sizeof buf), "[1, 2, 3]");
	cr_expect_str_eq(nrt_index_str(3, dims, 13, buf, sizeof buf), "[1, 0, 1]");
}

/* nrt_fatal (runtime/base.c) removes the checkpoint temporary in
 * progress through the hook nrt_tmp_register sets (base.c never calls
 * guard.c): without it the half-written file would stay behind. */
Test(guard, fatal_removes_tmp)
{
	char path[] = "/tmp/netc-guard-tmp-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	close(fd);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		nrt_tmp_register(path);
		nrt_fatal("stopped while writing a checkpoint");
	}
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	cr_expect_neq(access(path, F_OK), 0, "%s was left behind", path);
	unlink(path);
}
