/* The fixture of unit tests that build graphs by hand: an arena, a graph,
 * and a Diag whose output the test can read. Included by each such test
 * file (everything is static: one copy per file). */
#ifndef NETC_TEST_GRAPH_FIXTURE_H
#define NETC_TEST_GRAPH_FIXTURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static Arena arena;
static Graph *g;
static Diag dg;
static char *dbuf;
static size_t dlen;
static FILE *dout;

static void graph_fixture_setup(void)
{
	memset(&arena, 0, sizeof arena);
	g = graph_new(&arena);
	dout = open_memstream(&dbuf, &dlen);
	diag_init(&dg, dout);
}

static void teardown(void)
{
	fclose(dout);
	free(dbuf);
	arena_free(&arena);
}

/* What the diagnostics said so far. */
static const char *diag_text(void)
{
	fflush(dout);
	return dbuf ? dbuf : "";
}

/* Shapes written as S(2, 64, 784). */
#define S(...) ((Shape){.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}})
#define SCALAR ((Shape){0})
#endif
