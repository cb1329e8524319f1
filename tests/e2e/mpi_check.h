/* The counting harness shared by the MPI test programs: every rank counts
 * its own checks and prints its failures; mpi_check_report() has rank 0
 * print "NAME: N passed, N failed" over all ranks (the line the e2e
 * scripts parse) and gives every rank the same exit status. */
#ifndef NETC_TESTS_MPI_CHECK_H
#define NETC_TESTS_MPI_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int passed, failed, me, np; /* this rank's counts; its rank and the world size */

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
	if (ok) {
		passed++;
		return;
	}
	failed++;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FAIL rank %d: ", me);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Collective: the exit status, 1 on every rank when any rank failed. */
static int mpi_check_report(const char *name)
{
	int counts[2] = {passed, failed}, total[2] = {0, 0};
	MPI_Allreduce(counts, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (me == 0)
		printf("%s: %d passed, %d failed\n", name, total[0], total[1]);
	return total[1] != 0;
}

#endif
