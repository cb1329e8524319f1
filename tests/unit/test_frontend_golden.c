/* Golden diagnostics: every tests/golden/diag/NAME.net must fail to parse
 * with exactly the text in NAME.err (what netc prints on stderr). On a
 * mismatch the actual text is written to build/golden/diag/NAME.err and
 * the failure shows `diff -u`; to accept a new case, copy it over. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"

#define DIR_IN "tests/golden/diag"
#define DIR_OUT "build/golden/diag"

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

/* The .net files of the directory, sorted. */
static int list_cases(char ***out)
{
	DIR *dir = opendir(DIR_IN);
	cr_assert(dir, "cannot open " DIR_IN " (run from the repository root)");
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

/* Runs one case; returns the diagnostics text (malloc'd). */
static char *diagnose(const char *path, bool *accepted)
{
	SourceFile *src = source_read(path);
	cr_assert(src, "cannot read %s", path);
	Arena a = {0};
	char *buf = NULL;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);
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

static void check_case(const char *name)
{
	char path[512], errpath[512], outpath[512];
	snprintf(path, sizeof path, DIR_IN "/%s.net", name);
	snprintf(errpath, sizeof errpath, DIR_IN "/%s.err", name);
	snprintf(outpath, sizeof outpath, DIR_OUT "/%s.err", name);
	bool accepted;
	char *actual = diagnose(path, &accepted);
	char *expected = slurp(errpath);
	cr_expect_not(accepted, "%s: accepted, but golden cases must fail", path);
	if (!expected || strcmp(expected, actual) != 0) {
		mkdir("build", 0777);
		mkdir("build/golden", 0777);
		mkdir(DIR_OUT, 0777);
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

Test(frontend_golden, diagnostics)
{
	char **names;
	int n = list_cases(&names);
	cr_expect_geq(n, 15, "expected at least 15 golden cases, found %d", n);
	for (int i = 0; i < n; i++) {
		check_case(names[i]);
		free(names[i]);
	}
	free(names);
}
