/* Helpers for the runtime's unit tests: temporary directories and running
 * a call that must end in nrt_fatal (exit 1) in a forked child, capturing
 * its stderr. */
#ifndef TEST_RUNTIME_UTIL_H
#define TEST_RUNTIME_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/netrt.h"

/* A fresh directory under /tmp; tr_rmdir removes it and its files. */
static inline char *tr_mkdtemp(void)
{
	char *d = strdup("/tmp/netrt-test-XXXXXX");
	if (!d || !mkdtemp(d))
		abort();
	return d;
}

static inline void tr_rmdir(char *d)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", d);
	free(d);
}

static inline char *tr_path(const char *dir, const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		abort();
	return p;
}

/* Runs fn(arg) in a child with stderr sent to a file; returns the child's
 * exit status (-1 if it died of a signal) and its stderr in err. */
static inline int tr_run_child(void (*fn)(void *), void *arg, char *err, size_t errlen)
{
	FILE *cap = tmpfile();
	if (!cap)
		abort();
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		abort();
	if (pid == 0) {
		dup2(fileno(cap), 2);
		fn(arg);
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	rewind(cap);
	size_t n = fread(err, 1, errlen - 1, cap);
	err[n] = 0;
	fclose(cap);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Writes `text` to path; the caller checks the result. */
static inline int tr_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, len, f);
	return fclose(f) == 0 && w == len ? 0 : -1;
}

static inline void *tr_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		abort();
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}
#endif
