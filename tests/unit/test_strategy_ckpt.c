/* Strategy checkpoints: save after an auto_parallel compile, load into a
 * second compile and save again -- byte for byte the same, protobuf and
 * JSON; files that do not fit the model are errors naming the node. */
#include <criterion/criterion.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "passes/search.h"
#include "passes/strategy_ckpt.h"
#include "passes/strategy_json.h"
#include "passes/strategy_layout.h"
#include "ir/strategy.pb-c.h"

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)len + 1);
	*n = fread(buf, 1, (size_t)len, f);
	buf[*n] = 0;
	fclose(f);
	return buf;
}

/* Compiles `model` with the -D settings; returns the diagnostics. */
static char *compile(const char *model, const char *const *defs, int ndefs, bool *ok)
{
	char *dbuf = NULL;
	size_t dlen = 0;
	FILE *dout = open_memstream(&dbuf, &dlen);
	Compilation c;
	compilation_init(&c);
	diag_init(&c.diag, dout);
	*ok = compile_front(&c, model, defs, ndefs) && compile_passes(&c, UPTO_TRAIN);
	compilation_free(&c);
	fclose(dout);
	return dbuf;
}

/* Compiles as compile does; the diagnostics logged where it fails. */
static bool compiles(const char *model, const char *const *defs, int ndefs)
{
	bool ok;
	char *d = compile(model, defs, ndefs, &ok);
	if (!ok)
		cr_log_error("%s", d);
	free(d);
	return ok;
}

static void round_trip(const char *model, const char *mode, const char *ext)
{
	char a[128], b[128], save_a[200], save_b[400], load[8], sm[64];
	snprintf(a, sizeof a, "build/test_ckpt_a%s", ext);
	snprintf(b, sizeof b, "build/test_ckpt_b%s", ext);
	snprintf(save_a, sizeof save_a, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(save_b, sizeof save_b, "strategy_ckpt_config={save_file = \"%s\", load_file = \"%s\"}", b, a);
	snprintf(sm, sizeof sm, "search_mode=%s", mode);
	(void)load;
	bool ok;
	const char *d1[] = {"parallel_mode=auto_parallel", sm, save_a};
	char *diag = compile(model, d1, 3, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	const char *d2[] = {"parallel_mode=auto_parallel", sm, save_b};
	diag = compile(model, d2, 3, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	size_t na, nb;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb);
	cr_assert(fa && fb);
	cr_expect_gt(na, 20);
	cr_expect(na == nb && memcmp(fa, fb, na) == 0, "%s and %s differ", a, b);
	free(fa);
	free(fb);
}

Test(strategy_ckpt, round_trip_protobuf_mlp) { round_trip("samples/mlp.net", "dynamic_programming", ".ckpt"); }
Test(strategy_ckpt, round_trip_json_mlp) { round_trip("samples/mlp.net", "recursive_programming", ".json"); }
Test(strategy_ckpt, round_trip_protobuf_transformer)
{
	round_trip("tests/models/transformer_plain.net", "recursive_programming", ".pb");
}
Test(strategy_ckpt, round_trip_json_transformer)
{
	round_trip("tests/models/transformer_plain.net", "dynamic_programming", ".json");
}

Test(strategy_ckpt, json_looks_like_mindspore)
{
	bool ok;
	const char *d[] = {"parallel_mode=auto_parallel", "strategy_ckpt_save_file=\"build/test_ckpt_ms.json\""};
	free(compile("samples/mlp.net", d, 2, &ok));
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_ckpt_ms.json", &n);
	cr_assert(t);
	cr_expect(strstr(t, "\"current_stage\": 0"), "%s", t);
	cr_expect(strstr(t, "\"matmul-0\": {\"stage\": 0, \"parallel_strategy\": [["), "%s", t);
	cr_expect(strstr(t, "\"w1\": {\"dev_matrix\": ["), "%s", t);
	cr_expect(strstr(t, "\"opt_weight_shard_size\": 0"), "%s", t);
	free(t);
}

static char *load_bad(const char *json)
{
	/* one file per test process: Criterion runs the tests that call this
	 * side by side (--jobs), and a shared name let one read another's */
	char path[64], load[96];
	snprintf(path, sizeof path, "build/test_ckpt_bad_%ld.json", (long)getpid());
	snprintf(load, sizeof load, "strategy_ckpt_load_file=\"%s\"", path);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(json, f);
	fclose(f);
	bool ok;
	const char *d[] = {"parallel_mode=semi_auto_parallel", load};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	remove(path);
	return diag;
}

Test(strategy_ckpt, unknown_node)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-7\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[1, 1], [1, 1]]}}, \"parallel_layout_item\": {}}");
	cr_expect(strstr(d, "strategy for 'matmul-7', which is no operator of this model"), "%s", d);
	free(d);
}

Test(strategy_ckpt, wrong_inputs_and_dims)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-0\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[1, 1]]}, \"relu-0\": {\"stage\": 0, \"parallel_strategy\": "
	                   "[[1, 1, 1]]}}, \"parallel_layout_item\": {}}");
	cr_expect(strstr(d, "the strategy of 'matmul-0' has 1 inputs but matmul has 2"), "%s", d);
	cr_expect(strstr(d, "the strategy of 'relu-0' gives input 0 3 dimensions"), "%s", d);
	free(d);
}

Test(strategy_ckpt, wrong_device_count)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-0\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[8, 1], [1, 1]]}}, \"parallel_layout_item\": {\"w1\": "
	                   "{\"dev_matrix\": [8], \"tensor_map\": [-1, -1]}}}");
	cr_expect(strstr(d, "strategy ((8, 1), (1, 1)) of 'matmul-0' is invalid"), "%s", d);
	cr_expect(strstr(d, "the layout of 'w1' is for 8 devices, but device_num = 4"), "%s", d);
	free(d);
}

/* a dev_matrix whose product wraps: signed overflow before (UBSan), and
 * 2^62 * 4 wraps to 0, no device count (found reading what
 * fuzz-strategy-json reaches; tests/fuzz/regressions/strategy-json/) */
Test(strategy_ckpt, device_count_overflow)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {}, \"parallel_layout_item\": {\"w1\": "
	                   "{\"dev_matrix\": [4611686018427387904, 4], \"tensor_map\": [-1, -1]}}}");
	cr_expect(strstr(d, "the layout of 'w1' has a dev_matrix whose product overflows 64 bits, but device_num = 4"),
	          "%s", d);
	free(d);
}

Test(strategy_ckpt, not_a_checkpoint)
{
	FILE *f = fopen("build/test_ckpt_garbage.ckpt", "w");
	fputs("\xff\xff\xff garbage", f);
	fclose(f);
	bool ok;
	const char *d[] = {"parallel_mode=auto_parallel", "strategy_ckpt_load_file=\"build/test_ckpt_garbage.ckpt\""};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	cr_expect(strstr(diag, "not a ParallelStrategyMap"), "%s", diag);
	free(diag);
}

/* The recommended spelling points at the file name like the deprecated one. */
Test(strategy_ckpt, missing_file_located_in_config_dict)
{
	bool ok;
	const char *d[] = {"parallel_mode=semi_auto_parallel",
	                   "strategy_ckpt_config={load_file=\"build/test_ckpt_missing.ckpt\"}"};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	cr_expect(strstr(diag, "<-D>:1:33: error: cannot read strategy checkpoint 'build/test_ckpt_missing.ckpt'"),
	          "%s", diag);
	free(diag);
}

/* A protobuf varint at *p (< end); advances *p. */
static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	cr_assert(false, "truncated varint");
	return v;
}

/* The group file, decoded by hand against MindSpore's definition
 *   message ParallelGroupRanks { repeated uint32 dim = 1; }
 *   message ParallelGroupItem  { required string group_name = 1;
 *                                required ParallelGroupRanks parallel_group_ranks = 2; }
 *   message ParallelGroupMap   { repeated ParallelGroupItem parallel_group_item = 1; }
 * (field numbers and wire types, not netc's generated code): the rank
 * lists, one per item, as "0 1 2 3\n" lines. */
static char *decode_groups(const uint8_t *b, size_t n, int *nitems)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	*nitems = 0;
	for (const uint8_t *p = b, *end = b + n; p < end;) {
		cr_assert_eq(varint(&p, end), (1u << 3) | 2, "ParallelGroupMap: field 1, length-delimited");
		uint64_t ilen = varint(&p, end); /* (p + varint(&p, ...) reads p unsequenced) */
		const uint8_t *iend = p + ilen;
		cr_assert_leq(iend, end);
		bool named = false, ranked = false;
		while (p < iend) {
			uint64_t key = varint(&p, iend);
			uint64_t flen = varint(&p, iend);
			const uint8_t *fend = p + flen;
			cr_assert(key == ((1u << 3) | 2) || key == ((2u << 3) | 2), "ParallelGroupItem key %lu", (unsigned long)key);
			if (key >> 3 == 1) {
				named = fend > p;
			} else {
				ranked = true;
				const char *sep = "";
				while (p < fend) {
					uint64_t k2 = varint(&p, fend);
					cr_assert_eq(k2, (1u << 3) | 0, "ParallelGroupRanks: dim = 1, varint");
					fprintf(f, "%s%lu", sep, (unsigned long)varint(&p, fend));
					sep = " ";
				}
				fputc('\n', f);
			}
			p = fend;
		}
		cr_expect(named && ranked, "item %d lacks a required field", *nitems);
		(*nitems)++;
	}
	fclose(f);
	return out;
}

/* group_ckpt_save_file: MindSpore's ParallelGroupMap, each rank set once. */
static void group_file(const char *model, const char *const *want, int nwant)
{
	bool ok;
	const char *d[] = {"group_ckpt_save_file=\"build/test_groups.pb\""};
	free(compile(model, d, 1, &ok));
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_groups.pb", &n);
	cr_assert(t && n > 0);
	int items;
	char *sets = decode_groups((const uint8_t *)t, n, &items);
	cr_expect_gt(items, 0);
	for (int i = 0; i < nwant; i++)
		cr_expect(strstr(sets, want[i]), "no group '%s' in\n%s", want[i], sets);
	/* no rank set twice: compare every pair of lines */
	int nl = 0;
	char *lines[4096];
	for (char *save = NULL, *l = strtok_r(sets, "\n", &save); l && nl < 4096; l = strtok_r(NULL, "\n", &save))
		lines[nl++] = l;
	cr_expect_eq(nl, items);
	for (int i = 0; i < nl; i++)
		for (int j = i + 1; j < nl; j++)
			cr_expect_str_neq(lines[i], lines[j], "rank set '%s' written twice (items %d and %d)", lines[i], i, j);
	free(sets);
	free(t);
}

Test(strategy_ckpt, group_file_mlp)
{
	const char *want[] = {"0 1 2 3\n"};
	group_file("samples/mlp.net", want, 1);
}

Test(strategy_ckpt, group_file_transformer)
{
	/* 2-way data x 4-way model parallel: model groups 0-3 and 4-7, data
	 * groups 0 4 ... 3 7, and the loss reduction over all 8 */
	const char *want[] = {"0 1 2 3\n", "\n4 5 6 7\n", "\n0 4\n", "\n3 7\n", "0 1 2 3 4 5 6 7\n"};
	group_file("samples/transformer.net", want, 5);
}

/* The group file written up to `upto`, decoded: one rank set a line. */
static char *groups_upto(const char *model, Stage upto, int *items)
{
	Compilation c;
	compilation_init(&c);
	const char *d[] = {"group_ckpt_save_file=\"build/test_groups_upto.pb\""};
	FILE *dout = fopen("/dev/null", "w");
	diag_init(&c.diag, dout);
	bool ok = compile_front(&c, model, d, 1) && compile_passes(&c, upto);
	compilation_free(&c);
	fclose(dout);
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_groups_upto.pb", &n);
	cr_assert(t && n > 0);
	char *sets = decode_groups((const uint8_t *)t, n, items);
	free(t);
	unlink("build/test_groups_upto.pb");
	return sets;
}

/* Issue 30.5: `netc check` (UPTO_CHECK) wrote the forward's groups only
 * (11 of the transformer's 27); the docs promise forward, backward and
 * update, as `build` (UPTO_CODEGEN) writes them. */
Test(strategy_ckpt, group_file_check_equals_build)
{
	int nc, nb;
	char *check = groups_upto("samples/transformer.net", UPTO_CHECK, &nc);
	char *build = groups_upto("samples/transformer.net", UPTO_CODEGEN, &nb);
	cr_expect_eq(nc, nb, "check writes %d groups, build %d", nc, nb);
	cr_expect_str_eq(check, build);
	free(check);
	free(build);
}

/* A strategy file of a MindSpore version whose ParallelLayouts has fields
 * 1-5 only (no opt_weight_shard_step/size): made by re-packing a saved
 * file with the two fields absent; it loads, as "not sharded". */
Test(strategy_ckpt, mindspore_file_without_optimizer_shard_fields)
{
	bool ok;
	const char *d1[] = {"parallel_mode=auto_parallel", "strategy_ckpt_save_file=\"build/test_ckpt_v1.ckpt\""};
	free(compile("samples/mlp.net", d1, 2, &ok));
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_ckpt_v1.ckpt", &n);
	cr_assert(t);
	Mindspore__Straspb__ParallelStrategyMap *m =
		mindspore__straspb__parallel_strategy_map__unpack(NULL, n, (const uint8_t *)t);
	cr_assert(m);
	cr_assert_gt(m->n_parallel_layout_item, 0);
	for (size_t i = 0; i < m->n_parallel_layout_item; i++) {
		Mindspore__Straspb__ParallelLayouts *l = m->parallel_layout_item[i]->parallel_layouts;
		cr_expect(l->has_opt_weight_shard_step && l->has_opt_weight_shard_size, "netc writes fields 6 and 7");
		l->has_opt_weight_shard_step = l->has_opt_weight_shard_size = 0;
	}
	size_t n2 = mindspore__straspb__parallel_strategy_map__get_packed_size(m);
	uint8_t *old = malloc(n2);
	mindspore__straspb__parallel_strategy_map__pack(m, old);
	cr_expect_lt(n2, n, "fields 6 and 7 are gone");
	FILE *f = fopen("build/test_ckpt_v0.ckpt", "wb");
	cr_assert(f);
	fwrite(old, 1, n2, f);
	fclose(f);
	mindspore__straspb__parallel_strategy_map__free_unpacked(m, NULL);
	free(old);
	free(t);
	const char *d2[] = {"parallel_mode=auto_parallel", "strategy_ckpt_load_file=\"build/test_ckpt_v0.ckpt\""};
	char *diag = compile("samples/mlp.net", d2, 2, &ok);
	cr_expect(ok, "%s", diag);
	free(diag);
}

/* current_stage is the stage of global_rank: ranks 0-1 are stage 0 and
 * 2-3 stage 1 of a 4-device, 2-stage pipeline. */
Test(strategy_ckpt, current_stage_is_the_ranks_stage)
{
	for (int rank = 0; rank < 4; rank++) {
		char gr[64], want[64];
		snprintf(gr, sizeof gr, "global_rank=%d", rank);
		const char *d[] = {gr, "strategy_ckpt_save_file=\"build/test_ckpt_stage.json\""};
		bool ok;
		char *diag = compile("tests/e2e/pipeline/deep.net", d, 2, &ok);
		cr_assert(ok, "%s", diag);
		free(diag);
		size_t n;
		char *t = slurp("build/test_ckpt_stage.json", &n);
		cr_assert(t);
		snprintf(want, sizeof want, "\"current_stage\": %d,", rank / 2);
		cr_expect(strstr(t, want), "global_rank %d: want %s in\n%.200s", rank, want, t);
		free(t);
	}
}

/* ---- JSON strings (passes/strategy_json.c) ---- */

typedef struct Names {
	char item[8][64], layout[8][64];
	int nitem, nlayout;
} Names;

static void keep_item(void *ctx, const CkItem *it)
{
	Names *n = ctx;
	snprintf(n->item[n->nitem++ & 7], 64, "%s", it->name);
}

static void keep_layout(void *ctx, const CkLayout *l)
{
	Names *n = ctx;
	snprintf(n->layout[n->nlayout++ & 7], 64, "%s", l->name);
}

static bool read_names(char *text, Names *n, char *err, size_t errlen)
{
	memset(n, 0, sizeof *n);
	CkSink sink = {.item = keep_item, .layout = keep_layout, .ctx = n};
	return ckpt_read_json(text, strlen(text), &sink, err, errlen);
}

/* A name with UTF-8, a quote, a backslash and control characters, saved
 * and loaded: the writer escapes what JSON must have escaped (the control
 * characters as \u00XX, DEL too) and the reader gives the same bytes. */
Test(strategy_ckpt, json_names_round_trip)
{
	const char *name = "caf\xc3\xa9/\xe2\x88\x91-\xf0\x9f\x98\x80 \"q\" \\ \n\t\x01\x7f", *lname = "w\xc3\xa9\x1f";
	Shape v[2] = {{.rank = 2, .d = {1, 4}}, {.rank = 1, .d = {4}}};
	CkItem it = {.name = name, .n = 2, .v = v};
	CkLayout l = {.name = lname, .ndev = 1, .dev = {4}, .rank = 1, .map = {0}};
	Ckpt k = {.items = &it, .nitems = 1, .layouts = &l, .nlayouts = 1};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert(ckpt_write_json(&k, f));
	fclose(f);
	cr_expect(strstr(text, "\"caf\xc3\xa9/\xe2\x88\x91-\xf0\x9f\x98\x80 \\\"q\\\" \\\\ \\u000a\\u0009\\u0001\\u007f\""),
	          "%s", text);
	cr_expect(strstr(text, "\"w\xc3\xa9\\u001f\""), "%s", text);
	for (size_t i = 0; i < len; i++)
		cr_expect((unsigned char)text[i] >= 0x20 || text[i] == '\n', "byte %zu is 0x%02x", i, text[i]);
	Names n;
	char err[256] = "";
	cr_assert(read_names(text, &n, err, sizeof err), "%s", err);
	cr_expect_eq(n.nitem, 1);
	cr_expect_eq(n.nlayout, 1);
	cr_expect_str_eq(n.item[0], name);
	cr_expect_str_eq(n.layout[0], lname);
	free(text);
}

/* \u escapes decode to UTF-8, a surrogate pair to one code point; the
 * short escapes to their characters (\n was an 'n' before) */
Test(strategy_ckpt, json_unicode_escapes)
{
	char text[] = "{\"parallel_strategy_item\": {\"a\\u00e9\\u2211\\ud83d\\ude00\\n\\/\\b\": {}}, "
	              "\"parallel_layout_item\": {\"\\u0077\\u00E9\": {}}}";
	Names n;
	char err[256] = "";
	cr_assert(read_names(text, &n, err, sizeof err), "%s", err);
	cr_expect_str_eq(n.item[0], "a\xc3\xa9\xe2\x88\x91\xf0\x9f\x98\x80\n/\b");
	cr_expect_str_eq(n.layout[0], "w\xc3\xa9");
}

/* A lone surrogate, a bad escape: errors with the byte offset of the
 * escape, and nothing reaches the sink (the file is read whole first). */
Test(strategy_ckpt, json_bad_escapes)
{
	static const struct {
		const char *text, *err;
	} cases[] = {
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x\\ud800y\": {}}}",
	     "JSON at byte offset 40: a lone UTF-16 surrogate \\ud800 (a high one with no low one after it)"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x\\ud83d\\u0041\": {}}}",
	     "JSON at byte offset 40: a lone UTF-16 surrogate \\ud83d (a high one with no low one after it)"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"\\udc00\": {}}}",
	     "JSON at byte offset 39: a lone UTF-16 surrogate \\udc00 (a low one with no high one before it)"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x\\u12\": {}}}",
	     "JSON at byte offset 40: \\u needs four hexadecimal digits"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x\\q\": {}}}", "JSON at byte offset 40: unknown escape \\q"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x\\u0000y\": {}}}",
	     "JSON at byte offset 40: \\u0000 (a NUL character) in a string, which would end the name there"},
	    {"{\"parallel_strategy_item\": {\"ok\": {}, \"x", "JSON at byte offset 38: unterminated string"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char text[128];
		snprintf(text, sizeof text, "%s", cases[i].text);
		Names n;
		char err[256] = "";
		cr_expect_not(read_names(text, &n, err, sizeof err), "%s", cases[i].text);
		cr_expect_str_eq(err, cases[i].err, "%s", cases[i].text);
		cr_expect_eq(n.nitem, 0, "%s: the sink had an item", cases[i].text);
	}
}

/* Through netc: the error names the file and the offset. */
Test(strategy_ckpt, json_lone_surrogate_located)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-0\\udfff\": {}}}");
	char want[160];
	snprintf(want, sizeof want,
	         "build/test_ckpt_bad_%ld.json: JSON at byte offset 57: a lone UTF-16 surrogate \\udfff (a low one "
	         "with no high one before it)",
	         (long)getpid());
	cr_expect(strstr(d, want), "%s", d);
	cr_expect(strstr(d, "error: "), "%s", d);
	free(d);
}

/* ---- the Layout API's in_layout in JSON (passes/strategy_json.c) ---- */

static const ExplicitLayout *want_lay;

static void check_lay_item(void *ctx, const CkItem *it)
{
	int *n = ctx;
	(*n)++;
	cr_assert(it->lay, "in_layout was not read");
	cr_expect(strategy_layouts_same(it->lay, want_lay, it->n), "the layouts read differ from those written");
	for (int i = 0; i < it->n; i++)
		for (int k = 0; k < it->lay[i].ndev; k++)
			cr_expect_str_eq(it->lay[i].alias[k], want_lay[i].alias[k]);
}

/* MindSpore's test_layout_extend_base layouts, written and read back: the
 * maps in MindSpore's numbering (axes from the right, a list per
 * dimension), the alias names escaped as every other string (a quote, DEL
 * as \u007f: the writer of p-ms wrote DEL raw and left the reader's
 * UTF-8 to chance) and decoded to the same bytes. */
Test(strategy_ckpt, json_in_layout_round_trip)
{
	static const char *alias[3] = {"dp", "s\"p\x7f", "mp\xc3\xa9"};
	ExplicitLayout lay[2] = {
	    {.ndev = 3, .dev = {2, 2, 2}, .alias = alias, .rank = 2, .axes = {{0}, {1}}, .naxes = {1, 1}},
	    {.ndev = 3, .dev = {2, 2, 2}, .alias = alias, .rank = 2, .axes = {{1, 2}, {0}}, .naxes = {2, 0}},
	};
	Shape v[2] = {{.rank = 2, .d = {2, 2}}, {.rank = 2, .d = {4, 1}}};
	CkItem it = {.name = "matmul-0", .n = 2, .v = v, .lay = lay};
	Ckpt k = {.items = &it, .nitems = 1};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert(ckpt_write_json(&k, f));
	fclose(f);
	cr_expect(strstr(text, "\"parallel_strategy\": [[2, 2], [4, 1]], \"in_layout\": [{\"dev_matrix\": [2, 2, 2], "
	                       "\"alias_name\": [\"dp\", \"s\\\"p\\u007f\", \"mp\xc3\xa9\"], \"tensor_map\": [[2], [1]]}, "
	                       "{\"dev_matrix\": [2, 2, 2], \"alias_name\": [\"dp\", \"s\\\"p\\u007f\", \"mp\xc3\xa9\"], "
	                       "\"tensor_map\": [[1, 0], []]}]}"),
	          "%s", text);
	int n = 0;
	want_lay = lay;
	CkSink sink = {.item = check_lay_item, .ctx = &n};
	char err[256] = "";
	cr_assert(ckpt_read_json(text, len, &sink, err, sizeof err), "%s", err);
	cr_expect_eq(n, 1);
	free(text);
}

/* A malformed in_layout is the reader's error, at the layout's byte
 * offset (the item's for a count that does not match its strategies). */
Test(strategy_ckpt, json_bad_in_layout)
{
#define OK_ITEM "{\"parallel_strategy_item\": {\"ok\": {}, \"m\": {\"parallel_strategy\": [[1], [1]], \"in_layout\": ["
	static const struct {
		const char *text, *err;
	} cases[] = {
	    {OK_ITEM "{\"dev_matrix\": [2], \"alias_name\": [\"a\"], \"tensor_map\": [[1]]}, {}]}}}",
	     "JSON at byte offset 91: dimension 0 of a layout names device axis 1 (the matrix has 1)"},
	    {OK_ITEM "{\"dev_matrix\": [2, 2], \"alias_name\": [\"a\"], \"tensor_map\": []}]}}}",
	     "JSON at byte offset 91: a layout needs one alias name per device axis"},
	    {OK_ITEM "{\"dev_matrix\": [2], \"alias_name\": [\"a\"], \"tensor_map\": [[0]]}]}}}",
	     "JSON at byte offset 43: an operator's in_layout must give one layout per input strategy (1 for 2)"},
	    {OK_ITEM "{\"dev_matrix\": [0], \"alias_name\": [\"a\"], \"tensor_map\": []}]}}}",
	     "JSON at byte offset 91: a layout's device matrix needs positive sizes and a name per axis"},
	};
#undef OK_ITEM
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char text[256];
		snprintf(text, sizeof text, "%s", cases[i].text);
		Names n;
		char err[256] = "";
		cr_expect_not(read_names(text, &n, err, sizeof err), "%s", cases[i].text);
		cr_expect_str_eq(err, cases[i].err, "%s", cases[i].text);
	}
}

/* MindSpore's Layout writes "None" as -1 (MAP_NONE, shard.py's
 * Layout.__call__): alone for a whole dimension, inside a tuple where it
 * is skipped. Read from JSON and from protobuf as netc's own [] and as
 * the tuple without it; before, the readers refused -1 as a device axis. */
Test(strategy_ckpt, in_layout_map_none)
{
	static const char *alias[3] = {"dp", "sp", "mp"};
	ExplicitLayout lay[2] = {
	    {.ndev = 3, .dev = {2, 2, 2}, .alias = alias, .rank = 2, .axes = {{0}, {0}}, .naxes = {1, 0}},
	    {.ndev = 3, .dev = {2, 2, 2}, .alias = alias, .rank = 2, .axes = {{1, 2}, {0}}, .naxes = {2, 0}},
	};
	char text[] = "{\"parallel_strategy_item\": {\"matmul-0\": {\"parallel_strategy\": [[2, 1], [4, 1]], "
	                   "\"in_layout\": [{\"dev_matrix\": [2, 2, 2], \"alias_name\": [\"dp\", \"sp\", \"mp\"], "
	                   "\"tensor_map\": [[2], [-1]]}, {\"dev_matrix\": [2, 2, 2], \"alias_name\": [\"dp\", \"sp\", "
	                   "\"mp\"], \"tensor_map\": [[1, -1, 0], [-1]]}]}}}";
	int n = 0;
	want_lay = lay;
	CkSink sink = {.item = check_lay_item, .ctx = &n};
	char err[256] = "";
	cr_expect(ckpt_read_json(text, strlen(text), &sink, err, sizeof err), "%s", err);
	cr_expect_eq(n, 1);

	Mindspore__Straspb__InLayout **pb = strategy_layouts_pb(lay, 2);
	int64_t none[] = {-1};
	free(pb[0]->tensor_map[1]->dim);
	pb[0]->tensor_map[1]->dim = xcalloc(1, sizeof(int64_t));
	pb[0]->tensor_map[1]->dim[0] = none[0];
	pb[0]->tensor_map[1]->n_dim = 1;
	Arena a = {0};
	ExplicitLayout *back = NULL;
	cr_expect(strategy_layouts_from_pb(&a, pb, 2, loc_none(), &back, err, sizeof err), "%s", err);
	if (back)
		cr_expect(strategy_layouts_same(lay, back, 2));
	strategy_layouts_pb_free(pb, 2);
	arena_free(&a);
}

/* Layouts loaded from a checkpoint outlive the file's text (the reader's
 * names are in the buffer it frees): loaded and saved again, in JSON and
 * protobuf, the file is the same (under the unit tests' ASan a name
 * pointing into the freed text is an error, not a chance). */
static void layout_round_trip(const char *ext, const char *model)
{
	char a[128], b[128], save_a[200], save_b[400];
	snprintf(a, sizeof a, "build/test_ckpt_lay_a_%ld%s", (long)getpid(), ext);
	snprintf(b, sizeof b, "build/test_ckpt_lay_b_%ld%s", (long)getpid(), ext);
	snprintf(save_a, sizeof save_a, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(save_b, sizeof save_b, "strategy_ckpt_config={save_file = \"%s\", load_file = \"%s\"}", b, a);
	bool ok;
	const char *d1[] = {save_a};
	char *diag = compile(model, d1, 1, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	const char *d2[] = {save_b};
	diag = compile(model, d2, 1, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	size_t na, nb;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb);
	cr_assert(fa && fb);
	if (strcmp(ext, ".json") == 0)
		cr_expect(strstr(fa, "\"in_layout\": [{\"dev_matrix\": ["), "%s", fa);
	if (strcmp(ext, ".json") == 0 && strstr(model, "_out"))
		cr_expect(strstr(fa, "\"out_layout\": [{\"dev_matrix\": [2, 2, 2], \"alias_name\": [\"dp\", \"sp\", \"mp\"], "
		                     "\"tensor_map\": [[2], [0, 1]]}]"), "%s", fa);
	cr_expect(na == nb && memcmp(fa, fb, na) == 0, "%s and %s differ", a, b);
	free(fa);
	free(fb);
	remove(a);
	remove(b);
}

#define LAYOUT_MATMUL "tests/e2e/models/ms_ops/layout_matmul.net"
Test(strategy_ckpt, in_layout_loaded_and_saved_json) { layout_round_trip(".json", LAYOUT_MATMUL); }
Test(strategy_ckpt, in_layout_loaded_and_saved_protobuf) { layout_round_trip(".ckpt", LAYOUT_MATMUL); }
/* out_strategy as a layout: saved as "out_layout" (out_strategy its
 * splits) and loaded back into the same model; before, only the splits
 * were saved and the model refused its own checkpoint ("this out_strategy
 * ((2, 4),) contradicts the out_strategy ((2, 4),)") */
#define LAYOUT_MATMUL_OUT "tests/e2e/models/ms_ops/layout_matmul_out.net"
Test(strategy_ckpt, out_layout_loaded_and_saved_json) { layout_round_trip(".json", LAYOUT_MATMUL_OUT); }
Test(strategy_ckpt, out_layout_loaded_and_saved_protobuf) { layout_round_trip(".ckpt", LAYOUT_MATMUL_OUT); }

/* A dimension split over every axis of an 8-axis matrix (MAX_RANK of
 * them) reads back from protobuf: the reader took 8 axes for 9 and said
 * "names 9 device axes (the matrix has 8)". */
Test(strategy_ckpt, protobuf_in_layout_all_axes_on_one_dimension)
{
	static const char *alias[MAX_RANK] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	ExplicitLayout x = {.ndev = MAX_RANK, .dev = {2, 1, 1, 1, 1, 1, 1, 2}, .alias = alias, .rank = 2,
	                    .axes = {{0, 1, 2, 3, 4, 5, 6, 7}}, .naxes = {MAX_RANK, 0}};
	Mindspore__Straspb__InLayout **pb = strategy_layouts_pb(&x, 1);
	Arena a = {0};
	ExplicitLayout *back = NULL;
	char err[256] = "";
	cr_expect(strategy_layouts_from_pb(&a, pb, 1, loc_none(), &back, err, sizeof err), "%s", err);
	if (back)
		cr_expect(strategy_layouts_same(&x, back, 1));
	strategy_layouts_pb_free(pb, 1);
	arena_free(&a);
}

/* micro_loss's scales (micro_size, grad_accumulation_step) are no
 * operators of the model: they take names of their own and stay out of
 * the checkpoint, so the model's scales keep theirs (scale-0 and scale-1
 * here; with micro-steps they were scale-1 and scale-2, after the
 * pass's scale-0) and a file saved with micro-steps or without loads
 * into the other, every operator matched, and saves the same bytes. */
Test(strategy_ckpt, names_independent_of_micro_steps)
{
	char net[64], a[64], b[64], save_a[96], save_b[96], load_a[200], load_b[200];
	long pid = (long)getpid();
	snprintf(net, sizeof net, "build/test_ckpt_micro_%ld.net", pid);
	snprintf(a, sizeof a, "build/test_ckpt_micro_a_%ld.json", pid);
	snprintf(b, sizeof b, "build/test_ckpt_micro_b_%ld.json", pid);
	FILE *f = fopen(net, "w");
	cr_assert(f);
	fputs("parallel { device_num = 2  parallel_mode = semi_auto_parallel }\n"
	      "input x: f32[16, 8]\n"
	      "param w: f32[8, 4] = xavier_uniform\n"
	      "p = matmul(x, w)\n"
	      "loss = reduce_mean(p * p) * 0.5 + reduce_sum(w * w) * 0.01\n"
	      "train { optimizer = sgd(lr = 0.1)  loss = loss }\n",
	      f);
	fclose(f);
	snprintf(save_a, sizeof save_a, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(save_b, sizeof save_b, "strategy_ckpt_save_file=\"%s\"", b);
	bool ok;
	const char *plain[] = {save_a}, *micro[] = {save_b, "train.micro_size=2"};
	free(compile(net, plain, 1, &ok));
	cr_assert(ok);
	free(compile(net, micro, 2, &ok));
	cr_assert(ok);
	size_t na, nb;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb);
	cr_assert(fa && fb);
	cr_expect(strstr(fa, "\"scale-1\""), "%s", fa);
	cr_expect(na == nb && memcmp(fa, fb, na) == 0, "without micro-steps:\n%s\nwith:\n%s", fa, fb);
	free(fa);
	free(fb);
	/* each loads into the other, and saves what it loaded */
	snprintf(load_a, sizeof load_a, "strategy_ckpt_config={load_file = \"%s\", save_file = \"%s\"}", a, b);
	snprintf(load_b, sizeof load_b, "strategy_ckpt_config={load_file = \"%s\", save_file = \"%s\"}", b, a);
	const char *micro_loads_plain[] = {load_a, "train.micro_size=2"}, *plain_loads_micro[] = {load_b};
	cr_expect(compiles(net, micro_loads_plain, 2));
	cr_expect(compiles(net, plain_loads_micro, 1));
	fa = slurp(a, &na);
	fb = slurp(b, &nb);
	cr_expect(fa && fb && na == nb && memcmp(fa, fb, na) == 0);
	free(fa);
	free(fb);
	remove(net);
	remove(a);
	remove(b);
}

/* amp's casts are no operators of the model either (passes/precision.c:
 * "amp/cast-k", out of the checkpoint): hetero.net saved at O2 bf16 loads
 * back at O2 and into f32, and both save what they loaded. Before, the
 * file named amp's casts by the model's numbering and its own load
 * failed ("the strategy of 'cast-2' gives input 0 1 dimensions but 't8'
 * has rank 3": the casts are placed after the load's numbering). */
Test(strategy_ckpt, amp_casts_stay_out)
{
	char a[64], b[64], c[64], save_a[96], load_b[200], load_c[200];
	long pid = (long)getpid();
	snprintf(a, sizeof a, "build/test_ckpt_amp_a_%ld.json", pid);
	snprintf(b, sizeof b, "build/test_ckpt_amp_b_%ld.json", pid);
	snprintf(c, sizeof c, "build/test_ckpt_amp_c_%ld.json", pid);
	snprintf(save_a, sizeof save_a, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(load_b, sizeof load_b, "strategy_ckpt_config={load_file = \"%s\", save_file = \"%s\"}", a, b);
	snprintf(load_c, sizeof load_c, "strategy_ckpt_config={load_file = \"%s\", save_file = \"%s\"}", a, c);
	const char *model = "tests/e2e/models/hetero.net";
	const char *o2[] = {save_a, "train.amp_level=O2", "train.amp_dtype=bf16"},
	           *o2_loads[] = {load_b, "train.amp_level=O2", "train.amp_dtype=bf16"}, *f32_loads[] = {load_c};
	cr_assert(compiles(model, o2, 3));
	cr_expect(compiles(model, o2_loads, 3));
	cr_expect(compiles(model, f32_loads, 1));
	size_t na, nb, nc;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb), *fc = slurp(c, &nc);
	cr_assert(fa && fb && fc);
	cr_expect(!strstr(fa, "cast"), "%s", fa);
	cr_expect(strstr(fa, "\"matmul-1\""), "%s", fa);
	cr_expect(na == nb && memcmp(fa, fb, na) == 0, "saved:\n%s\nloaded at O2 and saved:\n%s", fa, fb);
	cr_expect(na == nc && memcmp(fa, fc, na) == 0, "saved:\n%s\nloaded in f32 and saved:\n%s", fa, fc);
	free(fa);
	free(fb);
	free(fc);
	remove(a);
	remove(b);
	remove(c);
}

/* A pipelined program's layouts are over its stage's devices (the save
 * writes device_num / nstages), so the same program loads its own file:
 * before, the load compared them with the whole device_num ("the layout
 * of 'w1' is for 2 devices, but device_num = 4"). Load then save gives
 * the same bytes. */
Test(strategy_ckpt, pipelined_program_loads_its_own_file)
{
	char a[64], b[64], save[96], load[200];
	long pid = (long)getpid();
	snprintf(a, sizeof a, "build/test_ckpt_pipe_a_%ld.json", pid);
	snprintf(b, sizeof b, "build/test_ckpt_pipe_b_%ld.json", pid);
	snprintf(save, sizeof save, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(load, sizeof load, "strategy_ckpt_config={load_file = \"%s\", save_file = \"%s\"}", a, b);
	bool ok;
	const char *d1[] = {save}, *d2[] = {load};
	char *diag = compile("tests/e2e/pipeline/deep.net", d1, 1, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	diag = compile("tests/e2e/pipeline/deep.net", d2, 1, &ok);
	cr_expect(ok, "%s", diag);
	free(diag);
	size_t na, nb;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb);
	cr_expect(fa && fb && na == nb && memcmp(fa, fb, na) == 0);
	free(fa);
	free(fb);
	remove(a);
	remove(b);
}

/* A layout over one device is saved as dev_matrix [] (JSON and protobuf):
 * the load refused it ('the layout item of 'wa' ... contradicts the
 * strategies, which lay it out as dev [] ...'), so a program of one
 * device per stage -- tied3.net's 3 stages on 3 devices, any model on
 * device_num = 1 -- could not load its own file. */
Test(strategy_ckpt, one_device_a_stage_loads_its_own_file)
{
	static const char *const cases[][2] = {
	    {"tests/e2e/pipeline/tied3.net", "json"},
	    {"tests/e2e/pipeline/tied3.net", "ckpt"},
	    {"tests/models/relu_floor.net", "json"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		char a[96], save[128], load[128];
		snprintf(a, sizeof a, "build/test_ckpt_one_%ld_%zu.%s", (long)getpid(), k, cases[k][1]);
		snprintf(save, sizeof save, "strategy_ckpt_save_file=\"%s\"", a);
		snprintf(load, sizeof load, "strategy_ckpt_load_file=\"%s\"", a);
		bool ok;
		const char *d1[] = {save, "device_num=1", "parallel_mode=semi_auto_parallel"};
		const char *d2[] = {load, "device_num=1", "parallel_mode=semi_auto_parallel"};
		int nd = strstr(cases[k][0], "pipeline") ? 1 : 3; /* tied3.net: its own 3 devices */
		char *diag = compile(cases[k][0], d1, nd, &ok);
		cr_assert(ok, "%s", diag);
		free(diag);
		diag = compile(cases[k][0], d2, nd, &ok);
		cr_expect(ok, "%s (%s): %s", cases[k][0], cases[k][1], diag);
		free(diag);
		remove(a);
	}
}
