/* safetensors checkpoints in one process (MPI not initialised), and the
 * JSON reader behind them. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/json_internal.h"
#include "test_runtime_util.h"

static char *dir;
static void setup(void) { dir = tr_mkdtemp(); }
static void teardown(void) { tr_rmdir(dir); }
TestSuite(ckpt, .init = setup, .fini = teardown);

/* w [3, 4] f32, b [4] f64, n i64 scalar-ish [1] */
typedef struct Model {
	float w[12];
	double b[4];
	int64_t n[1];
	NrtTensor t[3];
} Model;

static void model(Model *m, float base)
{
	for (int i = 0; i < 12; i++)
		m->w[i] = base + (float)i * 0.25f;
	for (int i = 0; i < 4; i++)
		m->b[i] = -base - i;
	m->n[0] = (int64_t)base * 1000000007LL;
	m->t[0] = (NrtTensor){.name = "fc1.w", .dtype = NRT_F32, .rank = 2, .full = {3, 4},
	                      .slice = {3, 4}, .data = m->w};
	m->t[1] = (NrtTensor){.name = "fc1.b", .dtype = NRT_F64, .rank = 1, .full = {4},
	                      .slice = {4}, .data = m->b};
	m->t[2] = (NrtTensor){.name = "steps \"quoted\"", .dtype = NRT_I64, .rank = 1, .full = {1},
	                      .slice = {1}, .data = m->n};
}

Test(ckpt, round_trip_bitwise)
{
	char *p = tr_path(dir, "m.safetensors");
	Model a, b;
	model(&a, 3);
	nrt_ckpt_save(p, a.t, 3, 123);
	model(&b, 0);
	memset(b.w, 0, sizeof b.w);
	cr_expect_eq(nrt_ckpt_load(p, b.t, 3), 123);
	cr_expect(!memcmp(a.w, b.w, sizeof a.w) && !memcmp(a.b, b.b, sizeof a.b) &&
	          a.n[0] == b.n[0]);
	free(p);
}

Test(ckpt, layout_is_safetensors)
{
	char *p = tr_path(dir, "m.safetensors");
	Model a;
	model(&a, 1);
	nrt_ckpt_save(p, a.t, 3, 7);
	size_t len;
	unsigned char *f = tr_read_file(p, &len);
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)f[k] << (8 * k);
	cr_assert_eq(hlen % 8, 0);
	cr_assert_eq(len, 8 + hlen + 12 * 4 + 4 * 8 + 8);
	const char *want = "{\"__metadata__\":{\"format\":\"netc\",\"step\":\"7\"},"
	                   "\"fc1.w\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]},"
	                   "\"fc1.b\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[48,80]},"
	                   "\"steps \\\"quoted\\\"\":{\"dtype\":\"I64\",\"shape\":[1],"
	                   "\"data_offsets\":[80,88]}}";
	cr_expect(!strncmp((char *)f + 8, want, strlen(want)), "header: %.*s", (int)hlen, f + 8);
	for (size_t i = 8 + strlen(want); i < 8 + hlen; i++)
		cr_expect_eq(f[i], ' ');
	cr_expect(!memcmp(f + 8 + hlen, a.w, 48) && !memcmp(f + 8 + hlen + 48, a.b, 32));
	free(f);
	free(p);
}

Test(ckpt, load_slices)
{
	char *p = tr_path(dir, "m.safetensors");
	Model a;
	model(&a, 2);
	nrt_ckpt_save(p, a.t, 3, 0);
	float part[3 * 2];
	NrtTensor s = {.name = "fc1.w", .dtype = NRT_F32, .rank = 2, .full = {3, 4},
	               .slice = {3, 2}, .offset = {0, 2}, .data = part};
	cr_expect_eq(nrt_ckpt_load(p, &s, 1), 0);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++)
			cr_expect_eq(part[i * 2 + j], a.w[i * 4 + 2 + j]);
	free(p);
}

typedef struct SaveArgs {
	const char *path;
	Model *m;
	int n;
} SaveArgs;

static void save_child(void *p)
{
	SaveArgs *a = p;
	nrt_ckpt_save(a->path, a->m->t, a->n, 1);
}

static void load_child(void *p)
{
	SaveArgs *a = p;
	nrt_ckpt_load(a->path, a->m->t, a->n);
}

Test(ckpt, unwritable_path_keeps_previous)
{
	char *good = tr_path(dir, "good.safetensors"), err[1024];
	Model a;
	model(&a, 5);
	nrt_ckpt_save(good, a.t, 3, 1);
	size_t len0 = 0, len1 = 1;
	char *before = tr_read_file(good, &len0);
	/* a missing directory, then a path that is an existing directory
	 * (chmod does not stop root, so it is not used) */
	char *bad[2] = {tr_path(dir, "missing/dir/x.safetensors"), tr_path(dir, "adir")};
	cr_assert_eq(mkdir(bad[1], 0700), 0);
	for (int k = 0; k < 2; k++) {
		SaveArgs s = {bad[k], &a, 3};
		cr_expect_eq(tr_run_child(save_child, &s, err, sizeof err), 1);
		cr_expect(strstr(err, "netrt: rank 0: checkpoint ") && strstr(err, bad[k]) &&
		          strstr(err, k ? "Is a directory" : "No such file or directory"),
		          "stderr: %s", err);
	}
	char *after = tr_read_file(good, &len1);
	cr_expect(len0 == len1 && !memcmp(before, after, len0));
	/* no temporary files are left behind */
	char cmd[512];
	snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
	cr_expect_neq(system(cmd), 0, "a temporary file was left in %s", dir);
	free(before), free(after), free(bad[0]), free(bad[1]), free(good);
}

/* a writer killed outright (SIGKILL) leaves path.tmp.HOST.PID: the next
 * save removes it if its process is gone from this host (or a zombie not
 * yet reaped), and nothing else
 * (tests/e2e/test_kill.sh kills whole jobs) */
Test(ckpt, stale_temporaries_removed)
{
	char host[256] = "localhost";
	gethostname(host, sizeof host - 1);
	pid_t dead = fork();
	cr_assert_geq(dead, 0);
	if (dead == 0)
		_exit(0);
	cr_assert_eq(waitpid(dead, NULL, 0), dead);
	pid_t zombie = fork();   /* dead but not reaped until after the save */
	cr_assert_geq(zombie, 0);
	if (zombie == 0)
		_exit(0);
	char *p = tr_path(dir, "m.st"), name[5][600];
	snprintf(name[0], sizeof name[0], "%s.tmp.%s.%ld", p, host, (long)dead);       /* removed */
	snprintf(name[1], sizeof name[1], "%s.tmp.%s.%ld", p, host, (long)getppid());  /* alive */
	snprintf(name[2], sizeof name[2], "%s.tmp.other-host.%ld", p, (long)dead);     /* not ours */
	snprintf(name[3], sizeof name[3], "%s.tmp.%s.%ldx", p, host, (long)dead);      /* not a pid */
	snprintf(name[4], sizeof name[4], "%s.tmp.%s.%ld", p, host, (long)zombie);     /* removed */
	for (int i = 0; i < 5; i++)
		fclose(fopen(name[i], "w"));
	usleep(100000);   /* the zombie's exit */
	Model a;
	model(&a, 2);
	nrt_ckpt_save(p, a.t, 3, 4);
	waitpid(zombie, NULL, 0);
	for (int i = 0; i < 5; i++)
		cr_expect_eq(access(name[i], F_OK) == 0, i != 0 && i != 4, "%s", name[i]);
	free(p);
}

Test(ckpt, load_errors)
{
	char *p = tr_path(dir, "m.safetensors"), err[1024], want[512];
	Model a;
	model(&a, 1);
	nrt_ckpt_save(p, a.t, 2, 1);
	SaveArgs s = {p, &a, 3};
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: no tensor 'steps \"quoted\"' (the model expects [1] I64)", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	a.t[0].full[1] = a.t[0].slice[1] = 8;
	s.n = 1;
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: tensor 'fc1.w' has shape [3, 4], the model expects [3, 8]", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	model(&a, 1);
	a.t[0].dtype = NRT_F64;
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: tensor 'fc1.w' has dtype F32, the model expects F64", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	cr_assert_eq(tr_write_file(p, "\x10\0\0\0\0\0\0\0{\"a\":", 13), 0);
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	cr_expect(strstr(err, "not a safetensors file (header length 16"), "stderr: %s", err);
	free(p);
}

/* A header that claims more than the file holds is refused before
 * anything that size is allocated: a header length of 2^60, a tensor
 * whose data_offsets span 2^60 bytes. */
Test(ckpt, huge_claims_refused)
{
	char *p = tr_path(dir, "h.safetensors"), err[1024], want[512];
	Model a;
	model(&a, 1);
	SaveArgs s = {p, &a, 1};
	cr_assert_eq(tr_write_file(p, "\0\0\0\0\0\0\0\x10{}      ", 16), 0);
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: header of 1152921504606846976 bytes (safetensors headers are at most 100 MB)", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	static const char hdr[] = "{\"fc1.w\":{\"dtype\":\"F32\",\"shape\":[3,4],"
	                          "\"data_offsets\":[0,1152921504606846976]}}   ";
	char buf[8 + sizeof hdr + 48] = {(char)(sizeof hdr - 1)};
	memcpy(buf + 8, hdr, sizeof hdr - 1);
	cr_assert_eq(tr_write_file(p, buf, 8 + sizeof hdr - 1 + 48), 0);
	cr_expect_eq(tr_run_child(load_child, &s, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: tensor 'fc1.w': data_offsets [0, 1152921504606846976] do not hold 48 "
	         "bytes inside the 48 bytes of data", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	free(p);
}

/* ---- f16 / bf16 ------------------------------------------------------------- */
/* h [2, 3] F16 and g [3] BF16 next to an F32 tensor */
typedef struct HalfModel {
	float w[4];
	uint16_t h[6], g[3];
	NrtTensor t[3];
} HalfModel;

static void half_model(HalfModel *m, float base)
{
	for (int i = 0; i < 4; i++)
		m->w[i] = base + (float)i;
	for (int i = 0; i < 6; i++)
		m->h[i] = nrt_f16_from_float(base * 0.1f + (float)i);
	for (int i = 0; i < 3; i++)
		m->g[i] = nrt_bf16_from_float(-base * 3.14159f - (float)i);
	m->t[0] = (NrtTensor){.name = "w", .dtype = NRT_F32, .rank = 1, .full = {4}, .slice = {4},
	                      .data = m->w};
	m->t[1] = (NrtTensor){.name = "h", .dtype = NRT_F16, .rank = 2, .full = {2, 3},
	                      .slice = {2, 3}, .data = m->h};
	m->t[2] = (NrtTensor){.name = "g", .dtype = NRT_BF16, .rank = 1, .full = {3}, .slice = {3},
	                      .data = m->g};
}

Test(ckpt, half_round_trip_and_layout)
{
	char *p = tr_path(dir, "h.safetensors");
	HalfModel a, b;
	half_model(&a, 2);
	nrt_ckpt_save(p, a.t, 3, 9);
	half_model(&b, 0);
	cr_expect_eq(nrt_ckpt_load(p, b.t, 3), 9);
	cr_expect(!memcmp(a.w, b.w, sizeof a.w) && !memcmp(a.h, b.h, sizeof a.h) &&
	          !memcmp(a.g, b.g, sizeof a.g));
	size_t len;
	unsigned char *f = tr_read_file(p, &len);
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)f[k] << (8 * k);
	const char *want = "{\"__metadata__\":{\"format\":\"netc\",\"step\":\"9\"},"
	                   "\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
	                   "\"h\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
	                   "\"g\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[28,34]}}";
	cr_expect(!strncmp((char *)f + 8, want, strlen(want)), "header: %.*s", (int)hlen, f + 8);
	cr_expect_eq(len, 8 + hlen + 34);
	cr_expect(!memcmp(f + 8 + hlen + 16, a.h, 12) && !memcmp(f + 8 + hlen + 28, a.g, 6));
	free(f);
	free(p);
}

Test(ckpt, half_load_slices)
{
	char *p = tr_path(dir, "h.safetensors");
	HalfModel a;
	half_model(&a, 5);
	nrt_ckpt_save(p, a.t, 3, 0);
	uint16_t part[2], gpart[2];
	NrtTensor s[2] = {
		{.name = "h", .dtype = NRT_F16, .rank = 2, .full = {2, 3}, .slice = {2, 1},
		 .offset = {0, 1}, .data = part},
		{.name = "g", .dtype = NRT_BF16, .rank = 1, .full = {3}, .slice = {2}, .offset = {1},
		 .data = gpart},
	};
	nrt_ckpt_load(p, s, 2);
	cr_expect(part[0] == a.h[1] && part[1] == a.h[4]);
	cr_expect(gpart[0] == a.g[1] && gpart[1] == a.g[2]);
	free(p);
}

/* p: the checkpoint's path */
static void half_load_child(void *p)
{
	HalfModel b;
	half_model(&b, 0);
	b.t[0].dtype = NRT_F16;     /* the file holds w as F32 */
	nrt_ckpt_load(p, b.t, 1);
}

Test(ckpt, half_dtype_must_match)
{
	char *p = tr_path(dir, "h.safetensors"), err[1024], want[512];
	HalfModel a;
	half_model(&a, 1);
	nrt_ckpt_save(p, a.t, 3, 0);
	cr_expect_eq(tr_run_child(half_load_child, p, err, sizeof err), 1);
	snprintf(want, sizeof want, "%s: tensor 'w' has dtype F32, the model expects F16", p);
	cr_expect(strstr(err, want), "stderr: %s", err);
	free(p);
}

/* ---- JSON reader -------------------------------------------------------- */
Test(json, objects_arrays_escapes)
{
	const char *t = " {\"a\\u00e9\\ud83d\\ude00\\n\": [1, -2, 9223372036854775807, 1.5e3],"
	                "\"o\": {\"s\": \"x\\\"y\\\\\"}, \"t\": true, \"f\": false, \"z\": null} ";
	char err[256];
	Json *j = json_parse(t, strlen(t), err, sizeof err);
	cr_assert_not_null(j, "%s", err);
	const Json *a = json_get(j, "a\xc3\xa9\xf0\x9f\x98\x80\n");
	cr_assert_not_null(a);
	cr_assert_eq(a->n, 4);
	cr_expect(a->kids[0].is_int && a->kids[0].i == 1 && a->kids[1].i == -2);
	cr_expect(a->kids[2].is_int && a->kids[2].i == INT64_MAX);
	cr_expect(!a->kids[3].is_int && a->kids[3].num == 1500);
	cr_expect_str_eq(json_get(json_get(j, "o"), "s")->str, "x\"y\\");
	cr_expect(json_get(j, "t")->boolean && !json_get(j, "f")->boolean);
	cr_expect_eq(json_get(j, "z")->kind, JSON_NULL);
	cr_expect_null(json_get(j, "missing"));
	json_free(j);
}

Test(json, malformed)
{
	const char *bad[] = {"", "{", "{\"a\" 1}", "[1,]", "{\"a\":1,}", "\"abc", "\"\\x\"",
	                     "[1] 2", "\"\\ud800\"", "tru", "{\"a\":-}", "\"a\nb\"",
	                     /* bad hex digits: a sentinel summed over several overflowed (UBSan;
	                      * found by fuzz-safetensors) */
	                     "\"\\u\xff\xff\xff\xff\"", "\"\\ud800\\uzzzz\""};
	char err[256];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		Json *j = json_parse(bad[i], strlen(bad[i]), err, sizeof err);
		cr_expect_null(j, "'%s' parsed", bad[i]);
		cr_expect(!strncmp(err, "JSON header, byte ", 18), "'%s': %s", bad[i], err);
		json_free(j);
	}
	char deep[200];
	memset(deep, '[', sizeof deep);
	cr_expect_null(json_parse(deep, sizeof deep, err, sizeof err));
	cr_expect(strstr(err, "nested more than"), "%s", err);
}
