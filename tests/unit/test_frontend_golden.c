/* Golden diagnostics: every tests/golden/diag/NAME.net must fail to parse
 * with exactly the text in NAME.err (what netc prints on stderr), and
 * every tests/golden/check/NAME.net must fail `netc check` (shapes and
 * strategy validation) with exactly its NAME.err. On a mismatch the actual
 * text is written to build/golden/DIR/NAME.err and the failure shows
 * `diff -u`; to accept a new case, copy it over. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "passes/passes.h"

static char *slurp(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	char *buf = NULL;
	size_t n = 0;
	FILE *out = open_memstream(&buf, &n);
	int c;
	while ((c = fgetc(fp)) != EOF)
		fputc(c, out);
	fclose(out);
	fclose(fp);
	return buf;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .net files of tests/golden/DIR, sorted. */
static int list_cases(const char *sub, char ***out)
{
	char path[256];
	snprintf(path, sizeof path, "tests/golden/%s", sub);
	DIR *dir = opendir(path);
	cr_assert(dir, "cannot open %s (run from the repository root)", path);
	char **v = NULL;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir))) {
		size_t len = strlen(e->d_name);
		if (len > 4 && strcmp(e->d_name + len - 4, ".net") == 0) {
			v = realloc(v, sizeof *v * (size_t)(n + 1));
			v[n++] = strndup(e->d_name, len - 4);
		}
	}
	closedir(dir);
	qsort(v, (size_t)n, sizeof *v, cmp);
	*out = v;
	return n;
}

/* Runs one case; returns the diagnostics text (malloc'd). Parse only, or
 * (full) everything `netc check` runs. */
static char *diagnose(const char *path, bool full, bool *accepted)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);
	if (full) {
		Compilation c;
		compilation_init(&c);
		diag_init(&c.diag, fp);
		*accepted = compile_front(&c, path, NULL, 0) && compile_passes(&c, UPTO_CHECK);
		compilation_free(&c);
		fclose(fp);
		return buf;
	}
	SourceFile *src = source_read(path);
	cr_assert(src, "cannot read %s", path);
	Arena a = {0};
	Diag d;
	diag_init(&d, fp);
	*accepted = netc_parse(&a, &d, src) != NULL;
	fclose(fp);
	arena_free(&a);
	source_free(src);
	return buf;
}

static char *shell_diff(const char *expected, const char *actual)
{
	char cmd[2 * PATH_MAX + 64]; /* two paths and the command */
	snprintf(cmd, sizeof cmd, "diff -u '%s' '%s' 2>&1", expected, actual);
	FILE *p = popen(cmd, "r");
	if (!p)
		return strdup("(diff unavailable)");
	char *buf = NULL;
	size_t n = 0;
	FILE *out = open_memstream(&buf, &n);
	int c;
	while ((c = fgetc(p)) != EOF)
		fputc(c, out);
	fclose(out);
	pclose(p);
	return buf;
}

static void check_case(const char *sub, const char *name)
{
	char path[512], errpath[512], outdir[256], outpath[512];
	snprintf(path, sizeof path, "tests/golden/%s/%s.net", sub, name);
	snprintf(errpath, sizeof errpath, "tests/golden/%s/%s.err", sub, name);
	snprintf(outdir, sizeof outdir, "build/golden/%s", sub);
	snprintf(outpath, sizeof outpath, "%s/%s.err", outdir, name);
	bool accepted;
	char *actual = diagnose(path, strcmp(sub, "check") == 0, &accepted);
	char *expected = slurp(errpath);
	cr_expect_not(accepted, "%s: accepted, but golden cases must fail", path);
	if (!expected || strcmp(expected, actual) != 0) {
		mkdir("build", 0777);
		mkdir("build/golden", 0777);
		mkdir(outdir, 0777);
		FILE *fp = fopen(outpath, "w");
		if (fp) {
			fputs(actual, fp);
			fclose(fp);
		}
		char *diff = expected ? shell_diff(errpath, outpath) : strdup("(no .err file)");
		cr_expect_fail("%s: diagnostics differ (actual in %s):\n%s", path, outpath, diff);
		free(diff);
	}
	free(actual);
	free(expected);
}

static void check_dir(const char *sub, int least)
{
	char **names;
	int n = list_cases(sub, &names);
	cr_expect_geq(n, least, "expected at least %d golden cases in tests/golden/%s, found %d", least, sub, n);
	for (int i = 0; i < n; i++) {
		check_case(sub, names[i]);
		free(names[i]);
	}
	free(names);
}

Test(frontend_golden, diagnostics) { check_dir("diag", 15); }

/* errors of the passes `netc check` runs after parsing (strategies) */
Test(frontend_golden, check_diagnostics) { check_dir("check", 2); }
