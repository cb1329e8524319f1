/* Shared by the emitters of the C target. */
#ifndef NETC_EMIT_H
#define NETC_EMIT_H
#include "target.h"

typedef struct Emit {
	Compilation *c;
	Graph *g;
	const BuildOptions *o;
	FILE *out;
	const char **cname;    /* by value id: the C identifier of its buffer */
} Emit;

const Shape *lshape(const Value *v);   /* the shape this device holds */
int64_t lnumel(const Value *v);
int64_t ldims(const Value *v, int from, int to);
const char *ctype(DType t);
const char *B(Emit *e, const Value *v);
void emit_dims(FILE *out, const int64_t *d, int n);
void emit_shape(FILE *out, const Shape *s);
const char *emit_c_ident(Arena *a, const Value *v);
bool emit_c_program(Compilation *c, const BuildOptions *o, FILE *out);
/* One node: a comment with its IR line, then its kernel calls. */
void emit_c_node(Emit *e, const Node *n);
#endif
