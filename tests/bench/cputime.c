#define _DEFAULT_SOURCE
/* cputime CMD ARGS...: runs CMD (its output discarded) and prints the CPU
 * seconds it used, user + system, all its threads and children: what
 * tests/bench/run.sh compares, since on a shared machine a process's wall
 * time counts the other jobs too. Exit status 1 if CMD failed. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cputime CMD [ARGS...]\n");
		return 2;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 1);
		execvp(argv[1], argv + 1);
		perror(argv[1]);
		_exit(127);
	}
	int st;
	if (waitpid(pid, &st, 0) < 0) {
		perror("waitpid");
		return 1;
	}
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	printf("%.6f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	                     ru.ru_stime.tv_usec * 1e-6);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
