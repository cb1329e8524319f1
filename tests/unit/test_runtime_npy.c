/* .npy reading and writing, and the message of every malformed case. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "test_runtime_util.h"

static char *dir;
static void setup(void) { dir = tr_mkdtemp(); }
static void teardown(void) { tr_rmdir(dir); }

TestSuite(npy, .init = setup, .fini = teardown);

Test(npy, round_trip_every_dtype)
{
	const NrtDType types[] = {NRT_F32, NRT_F64, NRT_I32, NRT_I64};
	const size_t sizes[] = {4, 8, 4, 8};
	char data[2 * 3 * 4 * 8];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (char)(i * 7 + 1);
	for (int k = 0; k < 4; k++) {
		char *p = tr_path(dir, "a.npy"), err[256];
		int64_t shape[3] = {2, 3, 4};
		cr_assert(nrt_npy_write(p, types[k], 3, shape, data));
		NrtNpy n;
		cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
		cr_expect_eq(n.dtype, types[k]);
		cr_expect_eq(n.rank, 3);
		cr_expect(n.shape[0] == 2 && n.shape[1] == 3 && n.shape[2] == 4);
		cr_expect(!memcmp(n.data, data, 24 * sizes[k]));
		free(n.data);
		free(p);
	}
}

Test(npy, header_is_numpy_v1_aligned)
{
	char *p = tr_path(dir, "v.npy");
	float x[5] = {1, 2, 3, 4, 5};
	cr_assert(nrt_npy_write(p, NRT_F32, 1, (int64_t[]){5}, x));
	size_t len;
	char *b = tr_read_file(p, &len);
	/* 10 + 57 + '\n' > 64, so numpy pads the header to 128 bytes */
	cr_assert_eq(len, 128 + sizeof x, "file of %zu bytes", len);
	cr_expect(!memcmp(b, "\x93NUMPY\x01\x00", 8));
	cr_expect_eq((unsigned char)b[8] | (unsigned char)b[9] << 8, 128 - 10);
	cr_expect(!strncmp(b + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 57));
	cr_expect_eq(b[127], '\n');
	cr_expect_eq(b[126], ' ');
	free(b);
	free(p);
}

Test(npy, scalar_and_empty)
{
	char *p = tr_path(dir, "s.npy"), err[256];
	double v = 2.5;
	cr_assert(nrt_npy_write(p, NRT_F64, 0, NULL, &v));
	NrtNpy n;
	cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
	cr_expect(n.rank == 0 && *(double *)n.data == 2.5);
	free(n.data);
	cr_assert(nrt_npy_write(p, NRT_I32, 2, (int64_t[]){0, 3}, NULL));
	cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
	cr_expect(n.rank == 2 && n.shape[0] == 0 && n.shape[1] == 3);
	free(n.data);
	free(p);
}

/* A file with a hand-made header (padded as given) followed by `data`. */
static char *handmade(int major, const char *dict, const void *data, size_t dlen)
{
	size_t hl = strlen(dict), n = 0;
	char *p = tr_path(dir, "h.npy"), *buf = malloc(12 + hl + dlen);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (char)major, buf[7] = 0;
	n = 8;
	buf[n++] = (char)hl, buf[n++] = (char)(hl >> 8);
	if (major > 1)
		buf[n++] = 0, buf[n++] = 0;
	memcpy(buf + n, dict, hl);
	n += hl;
	memcpy(buf + n, data, dlen);
	cr_assert_eq(tr_write_file(p, buf, n + dlen), 0);
	free(buf);
	return p;
}

Test(npy, version2_reordered_keys_double_quotes)
{
	int64_t v[3] = {7, -1, 1LL << 40};
	char *p = handmade(2, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i8\"}\n", v,
	                   sizeof v);
	NrtNpy n;
	char err[256];
	cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
	cr_expect(n.dtype == NRT_I64 && n.rank == 1 && n.shape[0] == 3);
	cr_expect(!memcmp(n.data, v, sizeof v));
	free(n.data);
	free(p);
}

static void expect_error(const char *p, const char *want)
{
	NrtNpy n;
	char err[512];
	cr_assert_not(nrt_npy_read(p, &n, err, sizeof err), "read %s succeeded", p);
	cr_expect_str_eq(err, want);
	cr_expect_null(n.data);
}

Test(npy, missing_file)
{
	char *p = tr_path(dir, "none.npy"), want[512];
	snprintf(want, sizeof want, "%s: No such file or directory", p);
	expect_error(p, want);
	free(p);
}

Test(npy, bad_magic)
{
	char *p = tr_path(dir, "m.npy"), want[512];
	static const char zip[] = "PK\003\004 a zip file";
	cr_assert_eq(tr_write_file(p, zip, sizeof zip - 1), 0);
	snprintf(want, sizeof want, "%s: not a .npy file (bad magic)", p);
	expect_error(p, want);
	free(p);
}

Test(npy, bad_header)
{
	char want[512];
	char *p = handmade(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,) ", "", 0);
	snprintf(want, sizeof want, "%s: bad header: expected ',' or '}'", p);
	expect_error(p, want);
	free(p);
	p = handmade(1, "{'descr': '<f4', 'shape': (2,), }", "", 0);
	snprintf(want, sizeof want, "%s: bad header: missing 'fortran_order'", p);
	expect_error(p, want);
	free(p);
	p = handmade(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", "", 0);
	snprintf(want, sizeof want, "%s: bad header: 'shape' is not a tuple of at most 8 sizes", p);
	expect_error(p, want);
	free(p);
}

Test(npy, unsupported_dtype)
{
	char want[512];
	char *p = handmade(1, "{'descr': '>f2', 'fortran_order': False, 'shape': (4,), }", "", 0);
	snprintf(want, sizeof want, "%s: dtype '>f2' is not supported; use float32, float64, int32, "
	         "int64 or float16", p);
	expect_error(p, want);
	free(p);
	p = handmade(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", "", 0);
	snprintf(want, sizeof want, "%s: dtype '>f4' is not supported; use float32, float64, int32, "
	         "int64 or float16", p);
	expect_error(p, want);
	free(p);
	/* ml_dtypes saves bfloat16 as 2-byte voids */
	p = handmade(1, "{'descr': '<V2', 'fortran_order': False, 'shape': (4,), }", "", 0);
	snprintf(want, sizeof want, "%s: dtype '<V2' (bfloat16?) is not supported: .npy has no "
	         "bfloat16; save float32 (bfloat16 inputs read float32 files)", p);
	expect_error(p, want);
	free(p);
}

/* float16 is '<f2' both ways; the bytes are the IEEE binary16 patterns */
Test(npy, float16_round_trip)
{
	uint16_t h[2 * 3] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000};
	char *p = tr_path(dir, "h.npy"), err[256];
	cr_assert(nrt_npy_write(p, NRT_F16, 2, (int64_t[]){2, 3}, h));
	size_t len;
	char *b = tr_read_file(p, &len);
	cr_expect(!strncmp(b + 10, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3,), }", 60),
	          "%.60s", b + 10);
	cr_expect_eq(len, 128 + sizeof h);
	free(b);
	NrtNpy n;
	cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
	cr_expect_eq(n.dtype, NRT_F16);
	cr_expect(n.rank == 2 && n.shape[0] == 2 && n.shape[1] == 3);
	cr_expect(!memcmp(n.data, h, sizeof h));
	free(n.data);
	/* numpy's own bytes for np.array([1, -2, 0.1], '<f2'): 00 3c 00 c0 66 2e */
	free(p);
	p = handmade(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }",
	             "\x00\x3c\x00\xc0\x66\x2e", 6);
	cr_assert(nrt_npy_read(p, &n, err, sizeof err), "%s", err);
	const uint16_t *v = n.data;
	cr_expect(nrt_float_from_f16(v[0]) == 1.0f && nrt_float_from_f16(v[1]) == -2.0f &&
	          v[2] == nrt_f16_from_float(0.1f));
	free(n.data);
	free(p);
}

Test(npy, bfloat16_cannot_be_written)
{
	uint16_t h[2] = {0x3f80, 0x4049};
	char *p = tr_path(dir, "b.npy");
	errno = 0;
	cr_expect(!nrt_npy_write(p, NRT_BF16, 1, (int64_t[]){2}, h));
	cr_expect_eq(errno, ENOTSUP);
	cr_expect(access(p, F_OK) != 0, "no file is left behind");
	free(p);
}

Test(npy, fortran_order)
{
	char want[512];
	char *p = handmade(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", "", 0);
	snprintf(want, sizeof want, "%s: fortran_order arrays are not supported; save it in C "
	         "order (numpy.ascontiguousarray)", p);
	expect_error(p, want);
	free(p);
}

Test(npy, truncated)
{
	char want[512], *zeros = calloc(1000, 1);
	char *p = handmade(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 784), }\n",
	                   zeros, 1000);
	snprintf(want, sizeof want, "%s: truncated: header says 64x784 float32 (200704 bytes) but "
	         "only 1000 bytes follow", p);
	expect_error(p, want);
	free(p);
	free(zeros);
}

Test(npy, write_to_missing_directory_fails)
{
	char *p = tr_path(dir, "no/such/dir/x.npy");
	float x = 1;
	cr_expect_not(nrt_npy_write(p, NRT_F32, 0, NULL, &x));
	free(p);
}

/* Memory is bounded by what the file holds: a header that claims 2^60
 * elements (or 2^48 eight-byte ones, 2 PiB) is refused before anything
 * that size is allocated, with a message naming the claim; RLIMIT_AS
 * would turn such an allocation into a crash, not a message. */
Test(npy, huge_claims_refused_before_allocation)
{
	char want[512];
	char *p = handmade(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741824), }\n",
	                   "", 0);
	snprintf(want, sizeof want, "%s: bad header: shape with more than 2^48 elements", p);
	expect_error(p, want);
	free(p);
	p = handmade(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }\n", "", 0);
	expect_error(p, want);
	free(p);
	/* 2^48 elements pass the count but not the file's size */
	p = handmade(3, "{'descr': '<f8', 'fortran_order': False, 'shape': (16777216, 16777216), }\n", "12345678",
	             8);
	snprintf(want, sizeof want, "%s: truncated: header says 16777216x16777216 float64 (2251799813685248 "
	         "bytes) but only 8 bytes follow", p);
	expect_error(p, want);
	free(p);
	/* a header length of 2^32 - 1 is refused before it is read */
	p = tr_path(dir, "hlen.npy");
	cr_assert_eq(tr_write_file(p, "\x93NUMPY\x02\x00\xff\xff\xff\xff{", 13), 0);
	snprintf(want, sizeof want, "%s: bad header: length 4294967295 is implausible", p);
	expect_error(p, want);
	free(p);
}
