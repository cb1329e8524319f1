/* rusage: runs a command and reports what it cost, for tests that check
 * how cost grows with the input (a ratio between two sizes) rather than a
 * wall-clock threshold.
 *
 *   rusage OUT -- command [args...]
 *
 * Appends one line "MAXRSS_KB CPU_MS" (peak resident set of the child,
 * user+system CPU time) to the file OUT; the command's output passes
 * through. Exit status: the command's (128+signal if it was killed),
 * 2 on usage errors. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 4 || strcmp(argv[2], "--") != 0) {
		fprintf(stderr, "usage: rusage OUT -- command [args...]\n");
		return 2;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("rusage: fork");
		return 2;
	}
	if (pid == 0) {
		execvp(argv[3], argv + 3);
		perror(argv[3]);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) < 0) {
		perror("rusage: wait4");
		return 2;
	}
	FILE *fp = fopen(argv[1], "a");
	if (!fp) {
		perror(argv[1]);
		return 2;
	}
	long ms = ru.ru_utime.tv_sec * 1000L + ru.ru_utime.tv_usec / 1000 + ru.ru_stime.tv_sec * 1000L +
	          ru.ru_stime.tv_usec / 1000;
	fprintf(fp, "%ld %ld\n", ru.ru_maxrss, ms);
	fclose(fp);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
