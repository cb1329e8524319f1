/* Code generation targets (QBE's `Target`): each emits a whole standalone
 * program for the compiled graph and knows how to compile it. */
#ifndef NETC_TARGET_H
#define NETC_TARGET_H
#include <stdio.h>

#include "../passes/passes.h"

typedef struct BuildOptions {
	const char *output;    /* -o PROG */
	const char *emit_dir;  /* --emit-c DIR: keep the generated source there */
	const char *target;    /* --target NAME, default "cpu" */
	bool f64;              /* --precision f64: every float tensor in double */
	bool gradcheck;        /* the program checks its gradients instead of training */
	bool verbose;          /* -v: show the compiler command and memory plan */
	bool no_share_routines; /* --no-share-routines: every node straight-line in its phase function */
	unsigned no_fuse;      /* --no-fuse[=KINDS]: the FUSE_* kinds left unfused (passes/fuse.h) */
} BuildOptions;

typedef struct Target {
	const char *name;      /* "cpu", "cuda" */
	const char *ext;       /* source file extension */
	/* NULL when usable here, else the reason it is not (shown to users) */
	const char *(*unavailable)(void);
	bool (*emit)(Compilation *c, const BuildOptions *o, FILE *out);
	bool (*compile)(Compilation *c, const BuildOptions *o, const char *src, const char *exe);
} Target;

extern const Target target_cpu;
extern const Target target_cuda;
const Target *target_find(const char *name);

/* netc build: emit, write the source (to --emit-c DIR or a temporary
 * directory), compile it to o->output. */
bool netc_build(Compilation *c, const BuildOptions *o);
/* The memory the C program would allocate, per device (pipeline stage)
 * and kind: netc build -v's lines, for netc explain. */
bool netc_memory_plan(Compilation *c, const BuildOptions *o, FILE *out);
/* The same, leaving each stage's total (netc_planned_stages) in *stage,
 * from c's arena, and their count in *nstages: netc explain's figures
 * from the one program it generates. */
bool netc_memory_plan_stages(Compilation *c, const BuildOptions *o, FILE *out, int64_t **stage, int *nstages);
/* The largest per-device total of that plan (build -v's "total"; the
 * largest stage's in a pipeline), emitting nothing and reporting nothing;
 * -1 when the program cannot be generated. */
int64_t netc_planned_bytes(Compilation *c, const BuildOptions *o);
/* The same total for each pipeline stage (one without stages), in
 * *stage from c's arena; returns how many, or -1 when the program cannot
 * be generated. netc explain prints these as its memory figures. */
int netc_planned_stages(Compilation *c, const BuildOptions *o, int64_t **stage);

/* Where the runtime's headers and library are: next to the netc binary
 * (build tree: build/include, build/lib) or in PREFIX/include, PREFIX/lib,
 * or $NETC_RUNTIME_DIR. */
bool runtime_dirs(char *inc, char *lib, size_t n);
/* The folder of the running netc (build/ or PREFIX/bin). */
bool netc_exe_dir(char *dir, size_t n);
#endif
