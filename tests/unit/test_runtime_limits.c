/* Memory a hostile checkpoint header may make the reader hold (issue 26):
 * at most twice the header plus the model's entries. The heap's peak is
 * measured with the sanitizer's malloc and free hooks (the unit tests run
 * under ASan), counting only while `counting` is set. Before json.c kept
 * only the members the model names, a 4 MB header of one long array held
 * ~200 MB of tree nodes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"
#include "runtime/json_internal.h"
#include "test_runtime_util.h"

/* libasan's (sanitizer/allocator_interface.h, which gcc does not ship) */
int __sanitizer_install_malloc_and_free_hooks(void (*m)(const volatile void *, size_t),
                                              void (*f)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

static size_t live, peak;
static bool counting;

static void on_malloc(const volatile void *p, size_t n)
{
	(void)p;
	if (counting && (live += n) > peak)
		peak = live;
}

static void on_free(const volatile void *p)
{
	if (counting && p)
		live -= __sanitizer_get_allocated_size((const void *)p);
}

static void count_start(void)
{
	static bool installed;
	if (!installed)
		__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
	installed = true;
	live = peak = 0;
	counting = true;
}

static char *dir;
static void setup(void) { dir = tr_mkdtemp(); }
static void teardown(void) { tr_rmdir(dir); }
TestSuite(limits, .init = setup, .fini = teardown);

static float w[12], b[4];
static void model(NrtTensor t[2])
{
	t[0] = (NrtTensor){.name = "fc.w", .dtype = NRT_F32, .rank = 2, .full = {3, 4},
	                   .slice = {3, 4}, .data = w};
	t[1] = (NrtTensor){.name = "fc.b", .dtype = NRT_F32, .rank = 1, .full = {4},
	                   .slice = {4}, .data = b};
}

/* A checkpoint of the model whose header gains `extra` (",\"k\": value")
 * before its closing brace; the data and its offsets stay as saved. */
static char *checkpoint_with(const char *name, const char *extra, size_t *hlen_out)
{
	char *p = tr_path(dir, name);
	NrtTensor t[2];
	model(t);
	for (int i = 0; i < 12; i++)
		w[i] = (float)i * 0.5f;
	for (int i = 0; i < 4; i++)
		b[i] = -1.0f - (float)i;
	nrt_ckpt_save(p, t, 2, 5);
	size_t len;
	unsigned char *f = tr_read_file(p, &len);
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)f[k] << (8 * k);
	size_t keep = (size_t)hlen;
	while (keep && f[8 + keep - 1] != '}')
		keep--;
	size_t nx = strlen(extra), nh = (keep - 1 + nx + 1 + 7) / 8 * 8;
	unsigned char *out = malloc(8 + nh + (len - 8 - hlen));
	memcpy(out + 8, f + 8, keep - 1);
	memcpy(out + 8 + keep - 1, extra, nx);
	memset(out + 8 + keep - 1 + nx, ' ', nh - (keep - 1 + nx));
	out[8 + keep - 1 + nx] = '}';
	for (int k = 0; k < 8; k++)
		out[k] = (unsigned char)((uint64_t)nh >> (8 * k));
	memcpy(out + 8 + nh, f + 8 + hlen, len - 8 - hlen);
	cr_assert_eq(tr_write_file(p, out, 8 + nh + (len - 8 - hlen)), 0);
	free(out);
	free(f);
	*hlen_out = nh;
	return p;
}

/* ",\"<key>\": [0,0,...]" of about `bytes` bytes */
static char *long_array(const char *key, size_t bytes)
{
	char *s = malloc(bytes + 64);
	size_t n = (size_t)sprintf(s, ",\"%s\": [0", key);
	while (n < bytes)
		memcpy(s + n, ",0", 2), n += 2;
	strcpy(s + n, "]");
	return s;
}

/* the bound of issue 26: twice the header, plus the model's (2 entries
 * and the metadata; generously 64 KiB, which is < 2% of the header) */
static size_t bound(size_t hlen) { return 2 * hlen + 64 * 1024; }

Test(limits, members_the_model_does_not_name_cost_nothing)
{
	char *extra = long_array("unused", 4 << 20);
	size_t hlen;
	char *p = checkpoint_with("junk.safetensors", extra, &hlen);
	free(extra);
	NrtTensor t[2];
	model(t);
	memset(w, 0, sizeof w);
	count_start();
	int64_t step = nrt_ckpt_load(p, t, 2);
	counting = false;
	cr_expect_eq(step, 5);
	cr_expect(w[11] == 5.5f && b[3] == -4.0f, "the tensors loaded: w[11] %g b[3] %g", w[11], b[3]);
	cr_expect_leq(peak, bound(hlen), "a %zu-byte header held %zu bytes at its peak", hlen, peak);
	free(p);
}

static void load_child(void *p)
{
	NrtTensor t[2];
	model(t);
	count_start();
	nrt_ckpt_load(p, t, 2);
}

/* A member the model names that is a long array instead of an entry:
 * refused once it would hold more than the bound, and never more. */
Test(limits, a_named_member_past_the_budget_is_refused)
{
	char *extra = long_array("fc.w", 4 << 20), err[4096];
	size_t hlen;
	char *p = checkpoint_with("named.safetensors", extra, &hlen);
	free(extra);
	cr_expect_eq(tr_run_child(load_child, p, err, sizeof err), 1);
	cr_expect(strstr(err, "bytes of memory"), "stderr: %s", err);
	free(p);
}

/* json_parse_keys on its own: the budget holds for nodes and strings, and
 * what is refused was never held past it. */
Test(limits, json_budget)
{
	char err[256], *text = long_array("a", 1 << 20);
	text[0] = '{';
	strcat(text, "}");
	const char *keys[] = {"a"};
	size_t len = strlen(text), budget = 2 * len;
	count_start();
	Json *j = json_parse_keys(text, len, keys, 1, budget, err, sizeof err);
	counting = false;
	cr_expect_null(j);
	cr_expect(strstr(err, "holding it needs more than"), "%s", err);
	cr_expect_leq(peak, budget + 4096, "peak %zu", peak);
	/* not kept: only checked */
	const char *other[] = {"b"};
	count_start();
	j = json_parse_keys(text, len, other, 1, 256, err, sizeof err);
	counting = false;
	cr_assert_not_null(j, "%s", err);
	cr_expect_eq(j->n, 0);
	cr_expect_leq(peak, 256, "peak %zu", peak);
	json_free(j);
	/* a malformed member that is not kept is still refused */
	const char *bad = "{\"b\": [1, 2,], \"a\": 1}";
	cr_expect_null(json_parse_keys(bad, strlen(bad), keys, 1, 4096, err, sizeof err));
	free(text);
}

/* A .npy whose version-2 header length (4 bytes) claims 7 MB in a
 * 150-byte file: refused before the 7 MB are allocated (fuzz-npy's first
 * finding). */
Test(limits, npy_header_length_past_the_end)
{
	static const unsigned char f[] = "\x93NUMPY\x02\x00\x29\x00\x74\x00{\"shape\": (5,), \"descr\": '<i4', "
	                                 "\"fortran_order\": False, }\n";
	char *p = tr_path(dir, "long.npy"), err[512];
	cr_assert_eq(tr_write_file(p, f, sizeof f - 1), 0);
	NrtNpy a;
	count_start();
	bool ok = nrt_npy_read(p, &a, err, sizeof err);
	counting = false;
	cr_expect(!ok && strstr(err, "file ends inside the header"), "%s", err);
	cr_expect_leq(peak, bound(sizeof f), "a %zu-byte file held %zu bytes", sizeof f, peak);
	free(p);
}

/* netc reading a JSON strategy checkpoint (passes/strategy_ckpt.c,
 * strategy_json.c): each string once took the rest of the text, so 1,500
 * keys (80 KB) held ~60 MB; then every item was kept, its strategies as
 * Shapes of 72 bytes for ~50 bytes of text, 6.5x the file in all. Now the
 * reader decodes strings in place and hands each item on as it reads it,
 * keeping only what the model takes: the file's text and ~nothing more
 * (1.0x). The peak against the same model with a one-key file. */
static size_t strategy_peak(const char *json)
{
	char path[64], load[96];
	snprintf(path, sizeof path, "build/test_limits_%ld.json", (long)getpid());
	snprintf(load, sizeof load, "strategy_ckpt_load_file=\"%s\"", path);
	cr_assert_eq(tr_write_file(path, json, strlen(json)), 0);
	FILE *devnull = fopen("/dev/null", "w");
	const char *d[] = {"parallel_mode=semi_auto_parallel", load};
	Compilation c;
	count_start();
	compilation_init(&c);
	diag_init(&c.diag, devnull);
	if (compile_front(&c, "samples/mlp.net", d, 2))
		compile_passes(&c, UPTO_CHECK);
	compilation_free(&c);
	counting = false;
	fclose(devnull);
	remove(path);
	return peak;
}

Test(limits, strategy_json_strings_hold_their_own_length)
{
	size_t cap = 1500 * 64 + 256, n = 0;
	char *many = malloc(cap);
	n += (size_t)snprintf(many + n, cap - n, "{\"current_stage\": 0, \"parallel_strategy_item\": {");
	for (int i = 0; i < 1500; i++)
		n += (size_t)snprintf(many + n, cap - n, "%s\"op-%d\": {\"stage\": 0, \"parallel_strategy\": [[1, 1]]}",
		                      i ? ", " : "", i);
	snprintf(many + n, cap - n, "}}");
	size_t one = strategy_peak("{\"current_stage\": 0, \"parallel_strategy_item\": {\"op-0\": {\"stage\": 0, "
	                           "\"parallel_strategy\": [[1, 1]]}}}");
	size_t all = strategy_peak(many);
	cr_expect_leq(all, one + 2 * strlen(many) + 64 * 1024, "a %zu-byte file: peak %zu, with one key %zu (%.2fx)",
	              strlen(many), all, one, (double)(all - one) / (double)strlen(many));
	free(many);
}

/* One operator of the model named 3,000 times, each time with a strategy
 * it takes: kept once (the model's size), not once per item. */
Test(limits, strategy_json_repeated_item_is_kept_once)
{
	const char *item = "\"matmul-0\": {\"stage\": 0, \"parallel_strategy\": [[1, 1], [1, 4]]}";
	size_t cap = 3000 * (strlen(item) + 2) + 256, n = 0;
	char *many = malloc(cap);
	n += (size_t)snprintf(many + n, cap - n, "{\"current_stage\": 0, \"parallel_strategy_item\": {");
	for (int i = 0; i < 3000; i++)
		n += (size_t)snprintf(many + n, cap - n, "%s%s", i ? ", " : "", item);
	snprintf(many + n, cap - n, "}}");
	char one[256];
	snprintf(one, sizeof one, "{\"current_stage\": 0, \"parallel_strategy_item\": {%s}}", item);
	size_t p1 = strategy_peak(one), all = strategy_peak(many);
	cr_expect_leq(all, p1 + 2 * strlen(many) + 64 * 1024, "a %zu-byte file: peak %zu, with one item %zu (%.2fx)",
	              strlen(many), all, p1, (double)(all - p1) / (double)strlen(many));
	free(many);
}

/* The same with the Layout API's in_layout on the item (a relu's one
 * input over 4 devices): the layouts and their names are kept once per
 * operator, as the strategies are, not once per item (a copy per item
 * held 4.6x the file; kept once, 1.0x). */
Test(limits, strategy_json_repeated_layouts_are_kept_once)
{
	const char *item = "\"relu-0\": {\"stage\": 0, \"parallel_strategy\": [[1, 4]], \"in_layout\": [{\"dev_matrix\": "
	                   "[4], \"alias_name\": [\"mp\"], \"tensor_map\": [[], [0]]}]}";
	size_t cap = 3000 * (strlen(item) + 2) + 256, n = 0;
	char *many = malloc(cap);
	n += (size_t)snprintf(many + n, cap - n, "{\"current_stage\": 0, \"parallel_strategy_item\": {");
	for (int i = 0; i < 3000; i++)
		n += (size_t)snprintf(many + n, cap - n, "%s%s", i ? ", " : "", item);
	snprintf(many + n, cap - n, "}}");
	char one[512];
	snprintf(one, sizeof one, "{\"current_stage\": 0, \"parallel_strategy_item\": {%s}}", item);
	size_t p1 = strategy_peak(one), all = strategy_peak(many);
	cr_expect_leq(all, p1 + 2 * strlen(many) + 64 * 1024, "a %zu-byte file: peak %zu, with one item %zu (%.2fx)",
	              strlen(many), all, p1, (double)(all - p1) / (double)strlen(many));
	free(many);
}
