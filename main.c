/* netc: the command line. Each command runs the pipeline as far as it
 * needs (passes/pipeline.c) and then prints, draws or builds. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/calibrate.h"
#include "codegen/target.h"
#include "ir/dot.h"
#include "passes/cost.h"
#include "passes/explain.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "passes/search_fit.h"

#define NETC_VERSION "0.1.0"

enum { EXIT_USER = 1, EXIT_INTERNAL = 2, MAX_DEFINES = 256 };

typedef struct Args {
	const char *command;
	const char *file;
	const char *output;     /* -o */
	const char *format;     /* -T */
	const char *defines[MAX_DEFINES];
	int ndefines;
	BuildOptions build;
	const char *dump_after;
	bool verbose;
	bool infer;              /* --infer: forward only */
	const char *fault;       /* --inject-fault=NAME (tests) */
	TestSwitches test;       /* --test-switch NAME,... (tests; passes/test_switches.h) */
	const char *why;         /* explain --why OP */
	bool schedule;           /* explain --schedule [-o sched.svg] */
	bool fold;               /* dot --fold: repeated blocks drawn once */
	bool jobs;               /* -j N given (search_fit_set_jobs) */
	bool full;               /* dot --full: the backward and update too, not the forward overview */
	Machine machine;         /* --machine FILE, --cost k=v,..., --memory-limit */
	bool machine_set;
	const char *machine_file; /* --machine FILE, the last (NULL: none) */
	bool memory_limit_given; /* --memory-limit: every build keeps it (not only the search's) */
	double user_limit;       /* >= 0: the limit --memory-limit or --cost memory_limit= gave (-1: none),
	                          * which a later --machine file's memory does not replace */
	int np;                  /* calibrate --np N */
	bool quick;              /* calibrate --quick */
	char **files;            /* calibrate: the models (any number) */
	int nfiles;
} Args;

/* The passes of passes/pipeline.c's table, in order, for --help: read
 * from the table so a new pass is never missing here. Continues the
 * line "--dump-after=PASS print the IR after PASS (" and wraps at 80
 * columns under the help's text column. */
static void print_pass_names(FILE *out)
{
	int col = 47; /* after "...after PASS (" */
	for (int i = 0; pass_name(i); i++) {
		const char *name = pass_name(i);
		if (i > 0 && col + (int)strlen(name) + 2 > 80) {
			fputs("\n                        ", out);
			col = 24;
		} else if (i > 0) {
			fputc(' ', out);
			col++;
		}
		col += fprintf(out, "%s,", name);
	}
	fputs(" or all)\n", out);
}

static void usage(FILE *out)
{
	fputs("usage: netc COMMAND FILE.net [options]\n"
	      "       netc calibrate [-o machine.txt] [--target cuda] [--np N] [--quick] [MODEL.net ...]\n"
	      "\n"
	      "commands:\n"
	      "  check FILE            parse, validate and infer shapes; report every error,\n"
	      "                        or one line saying what was checked\n"
	      "  dump FILE             print the IR (after --dump-after=PASS, default: shapes)\n"
	      "  dot FILE -o OUT       draw the graph with GraphViz (-T dot|svg|png, default dot)\n"
	      "  build FILE -o PROG    compile to a standalone training program\n"
	      "  explain FILE          the chosen strategies, layouts, communication and predicted\n"
	      "                        costs per operator (docs/auto_parallel.md)\n"
	      "  calibrate [MODEL...]  measure this host (matrix products at the models' sizes,\n"
	      "                        memory, collectives over mpirun) and write a --machine file\n"
	      "                        (docs/calibration.md)\n"
	      "\n"
	      "options:\n"
	      "  -D KEY=VALUE          override a parallel setting (as set_auto_parallel_context);\n"
	      "                        train.KEY=VALUE overrides the train block, NAME=VALUE\n"
	      "                        a top-level const of the model (-D MP=2)\n"
	      "  -o FILE               output file\n"
	      "  -T FORMAT             dot output format: dot, svg, png\n"
	      "      --fold            dot: draw each repeated block (layers.0, layers.1, ...) once\n"
	      "      --full            dot: draw the whole training graph (backward and update too);\n"
	      "                        without it dot draws the forward pass\n"
	      "      --target NAME     build target: cpu (default), cuda\n"
	      "      --emit-c DIR      keep the generated source in DIR\n"
	      "      --precision P     f32 (default) or f64 for every float tensor\n"
	      "      --gradcheck       build a program that checks gradients by finite differences\n"
	      "      --infer           build a forward-only program\n"
	      "      --no-share-routines  build: write every node's kernel calls in line instead of\n"
	      "                        sharing one routine among repeated layers (docs/codegen.md)\n"
	      "      --no-fuse[=KINDS] build: no fused kernels, or not those KINDS (comma-separated):\n"
	      "                        bias_act (bias_add + relu in one pass), updates (the optimizer\n"
	      "                        update in one call per run of parameters; both bit-identical),\n"
	      "                        residual (add(x, matmul) as a product accumulated onto x;\n"
	      "                        rounding may differ), narrow (f16/bf16 products, element-wise,\n"
	      "                        softmax, layer norm, transpose on their narrow operands;\n"
	      "                        bit-identical on the CPU), attention (the written-out attention\n"
	      "                        as one fused operator; rounding differs), gemm_epilogue (bias,\n"
	      "                        bias + gelu and bias gradients in the matrix product's call;\n"
	      "                        bit-identical on the CPU), classifier\n"
	      "                        (softmax_cross_entropy and its gradient in one pass, the\n"
	      "                        gradient over the logits; bit-identical on the CPU),\n"
	      "                        add_norm (residual add + layer norm, and their gradients,\n"
	      "                        in one pass; bit-identical on the CPU)\n"
	      "                        (docs/codegen.md)\n"
	      "      --dump-after=PASS print the IR after PASS (",
	      out);
	print_pass_names(out);
	fputs("      --why OP          explain: OP's candidate strategies, their costs and why one\n"
	      "                        was chosen (OP: a name explain prints, or an output)\n"
	      "      --schedule        explain: the pipeline split, schedule and bubble\n"
	      "                        (-o F.svg draws it; SVG only)\n"
	      "      --machine FILE    cost-model constants, key = value lines (netc calibrate writes them)\n"
	      "      --np N            calibrate: also measure N ranks at once (2 always)\n"
	      "      --quick           calibrate: tiny sizes and short timings\n"
	      "      --cost K=V,...    cost-model constants: flops, bandwidth, latency, memory_limit\n"
	      "      --memory-limit B  bytes per device (the compiled plan's total): auto_parallel searches within it,\n"
	      "                        any other build stops over it; it wins over a --machine file's\n"
	      "  -j, --jobs N          pipeline_stages or micro_size = auto: screen up to N candidates\n"
	      "                        at once in forked processes (default: $NETC_JOBS, else the\n"
	      "                        online CPUs; 1: one process); the plan is the same for any N\n"
	      "  -v, --verbose         show the memory plan and the C compiler command\n"
	      "  -h, --help            this help\n"
	      "      --version         print the version\n"
	      "\n"
	      "exit status: 0 success, 1 errors in the input, 2 internal error\n",
	      out);
}

enum { OPT_WHY = 310, OPT_MACHINE, OPT_COST, OPT_MEMORY_LIMIT, OPT_SCHEDULE, OPT_FOLD, OPT_NP, OPT_QUICK, OPT_FULL, OPT_TEST_SWITCH };
enum { OPT_FAULT = 300, OPT_TARGET = 256, OPT_EMIT_C, OPT_PRECISION, OPT_GRADCHECK, OPT_INFER, OPT_DUMP_AFTER, OPT_VERSION, OPT_NO_SHARE, OPT_NO_FUSE };

static bool is_pass_name(const char *s)
{
	if (strcmp(s, "all") == 0)
		return true;
	for (int i = 0; pass_name(i); i++)
		if (strcmp(pass_name(i), s) == 0)
			return true;
	return false;
}

/* --no-fuse (every kind) or --no-fuse=KIND,...: the fusions left out;
 * quiet: no message for an unknown kind. */
static bool parse_fuse_kinds(const char *arg, unsigned *mask, bool quiet)
{
	static const struct {
		const char *name;
		unsigned kind;
	} kinds[] = {{"bias_act", FUSE_BIAS_ACT}, {"updates", FUSE_UPDATES}, {"residual", FUSE_RESIDUAL},
	                {"narrow", FUSE_NARROW}, {"attention", FUSE_ATTENTION},
	                {"gemm_epilogue", FUSE_GEMM_EPILOGUE}, {"classifier", FUSE_CLASSIFIER}, {"add_norm", FUSE_ADD_NORM}};
	if (!arg) {
		*mask = FUSE_ALL;
		return true;
	}
	for (const char *p = arg;;) {
		size_t len = strcspn(p, ",");
		unsigned k = 0;
		for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
			if (strlen(kinds[i].name) == len && strncmp(p, kinds[i].name, len) == 0)
				k = kinds[i].kind;
		if (!k) {
			if (!quiet)
				fprintf(stderr, "netc: --no-fuse: unknown kind '%.*s' (bias_act, updates, residual, narrow, attention, gemm_epilogue, classifier, add_norm)\n", (int)len,
				        p);
			return false;
		}
		*mask |= k;
		if (!p[len])
			return true;
		p += len + 1;
	}
}


/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, Args *a)
{
	static const struct option opts[] = {
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, OPT_VERSION},
		{"verbose", no_argument, 0, 'v'},
		{"target", required_argument, 0, OPT_TARGET},
		{"emit-c", required_argument, 0, OPT_EMIT_C},
		{"precision", required_argument, 0, OPT_PRECISION},
		{"gradcheck", no_argument, 0, OPT_GRADCHECK},
		{"infer", no_argument, 0, OPT_INFER},
		{"no-share-routines", no_argument, 0, OPT_NO_SHARE},
		{"no-fuse", optional_argument, 0, OPT_NO_FUSE},
		{"dump-after", required_argument, 0, OPT_DUMP_AFTER},
		{"inject-fault", required_argument, 0, OPT_FAULT}, /* testing only, undocumented */
		{"test-switch", required_argument, 0, OPT_TEST_SWITCH}, /* testing only: docs/auto_parallel.md */
		{"why", required_argument, 0, OPT_WHY},
		{"schedule", no_argument, 0, OPT_SCHEDULE},
		{"fold", no_argument, 0, OPT_FOLD},
		{"full", no_argument, 0, OPT_FULL},
		{"machine", required_argument, 0, OPT_MACHINE},
		{"cost", required_argument, 0, OPT_COST},
		{"memory-limit", required_argument, 0, OPT_MEMORY_LIMIT},
		{"np", required_argument, 0, OPT_NP},
		{"quick", no_argument, 0, OPT_QUICK},
		{"jobs", required_argument, 0, 'j'},
		{0, 0, 0, 0},
	};
	int c;
	char err[3072]; /* a machine file's error: its unknown-key message (1 KB), the line and a caret */
	machine_defaults(&a->machine);
	while ((c = getopt_long(argc, argv, "hvD:o:T:j:", opts, NULL)) != -1) {
		switch (c) {
		case 'h': usage(stdout); return 0;
		case OPT_VERSION: puts("netc " NETC_VERSION); return 0;
		case 'v': a->verbose = a->build.verbose = true; break;
		case 'D':
			if (a->ndefines == MAX_DEFINES) {
				fprintf(stderr, "netc: too many -D options\n");
				return EXIT_USER;
			}
			a->defines[a->ndefines++] = optarg;
			break;
		case 'o': a->output = optarg; break;
		case 'T': a->format = optarg; break;
		case OPT_TARGET: a->build.target = optarg; break;
		case OPT_EMIT_C: a->build.emit_dir = optarg; break;
		case OPT_PRECISION:
			if (strcmp(optarg, "f32") && strcmp(optarg, "f64")) {
				fprintf(stderr, "netc: --precision must be f32 or f64, not '%s'\n", optarg);
				return EXIT_USER;
			}
			a->build.f64 = strcmp(optarg, "f64") == 0;
			break;
		case OPT_GRADCHECK: a->build.gradcheck = true; break;
		case OPT_FAULT: a->fault = optarg; break;
		case OPT_TEST_SWITCH:
			if (!test_switches_parse(&a->test, optarg, err, sizeof err)) {
				fprintf(stderr, "netc: --test-switch: %s\n", err);
				return EXIT_USER;
			}
			break;
		case OPT_INFER: a->infer = true; break;
		case OPT_NO_SHARE: a->build.no_share_routines = true; break;
		case OPT_NO_FUSE:
			if (!parse_fuse_kinds(optarg, &a->build.no_fuse, false))
				return EXIT_USER;
			break;
		case OPT_WHY: a->why = optarg; break;
		case OPT_SCHEDULE: a->schedule = true; break;
		case OPT_FOLD: a->fold = true; break;
		case OPT_FULL: a->full = true; break;
		case OPT_NP: {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 1 || v > 4096) {
				fprintf(stderr, "netc: --np needs a rank count from 1 to 4096, not '%s'\n", optarg);
				return EXIT_USER;
			}
			a->np = (int)v;
			break;
		}
		case OPT_QUICK: a->quick = true; break;
		case 'j': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 1 || v > SEARCH_FIT_MAX_JOBS) {
				fprintf(stderr, "netc: -j needs a job count from 1 to %d, not '%s'\n", SEARCH_FIT_MAX_JOBS, optarg);
				return EXIT_USER;
			}
			search_fit_set_jobs((int)v);
			a->jobs = true;
			break;
		}
		case OPT_MACHINE:
		case OPT_COST:
		case OPT_MEMORY_LIMIT: {
			double before = a->machine.memory_limit;
			if (c == OPT_COST) /* NAN left standing: the list set no memory_limit */
				a->machine.memory_limit = NAN;
			if (!(c == OPT_MACHINE           ? machine_load(&a->machine, optarg, err, sizeof err)
			      : c == OPT_COST            ? machine_parse_list(&a->machine, optarg, err, sizeof err)
			                                 : machine_set(&a->machine, "memory_limit", optarg, err, sizeof err))) {
				/* a file's errors come as file:line:col: error: ... */
				fprintf(stderr, c == OPT_MACHINE && strncmp(err, "cannot", 6) != 0 ? "%s\n" : "netc: %s\n", err);
				return EXIT_USER;
			}
			if (isnan(a->machine.memory_limit))
				a->machine.memory_limit = before;
			else if (c != OPT_MACHINE)
				a->user_limit = a->machine.memory_limit;
			else if (a->user_limit >= 0) /* the file is the hardware, the flag the user's limit */
				a->machine.memory_limit = a->user_limit;
			a->machine_set = true;
			a->memory_limit_given |= c == OPT_MEMORY_LIMIT;
			if (c == OPT_MACHINE)
				a->machine_file = optarg;
			break;
		}
		case OPT_DUMP_AFTER:
			if (!is_pass_name(optarg)) {
				fprintf(stderr, "netc: --dump-after: unknown pass '%s'; passes are:", optarg);
				for (int i = 0; pass_name(i); i++)
					fprintf(stderr, " %s", pass_name(i));
				fputs(", all\n", stderr);
				return EXIT_USER;
			}
			a->dump_after = optarg;
			break;
		default: usage(stderr); return EXIT_USER;
		}
	}
	if (optind < argc && strcmp(argv[optind], "calibrate") == 0) {
		a->command = argv[optind];
		a->files = argv + optind + 1;
		a->nfiles = argc - optind - 1;
		return -1;
	}
	if (argc - optind > 2) {
		/* an optional argument goes after '=': `--no-fuse bias_act` leaves
		 * "bias_act" standing alone */
		const char *x = argv[optind + 2];
		unsigned ignored = 0;
		bool kinds = strcspn(x, "-.") == strlen(x) && parse_fuse_kinds(x, &ignored, true);
		fprintf(stderr, "netc: unexpected argument '%s'%s\n", x,
		        kinds ? " (--no-fuse takes its kinds after '=': --no-fuse=KIND,...)" : "");
		return EXIT_USER;
	}
	if (argc - optind != 2) {
		usage(stderr);
		return EXIT_USER;
	}
	a->command = argv[optind];
	a->file = argv[optind + 1];
	return -1;
}

/* 335114 -> "335,114" */
static const char *grouped(int64_t x, char *buf, size_t n)
{
	char digits[32];
	int len = snprintf(digits, sizeof digits, "%" PRId64, x), k = 0;
	for (int i = 0; i < len && (size_t)k + 2 < n; i++) {
		if (i > 0 && (len - i) % 3 == 0 && digits[i - 1] != '-')
			buf[k++] = ',';
		buf[k++] = digits[i];
	}
	buf[k] = 0;
	return buf;
}

/* netc check's line on success: what was checked, so that silence is
 * not taken for nothing done. */
static void check_summary(const Compilation *c, const char *file, FILE *out)
{
	const Graph *g = c->g;
	int ops = 0;
	int64_t values = 0;
	for (int i = 0; i < g->nnodes; i++)
		ops += g->nodes[i]->phase == PH_FORWARD && (op_info[g->nodes[i]->op].flags & OPF_USER);
	for (int i = 0; i < g->nparams; i++)
		values += shape_numel(&g->params[i]->shape);
	char buf[40];
	fprintf(out, "%s: ok: %d operator%s, %d input%s, %d parameter%s (%s values), %s", file, ops,
	        ops == 1 ? "" : "s", g->ninputs, g->ninputs == 1 ? "" : "s", g->nparams, g->nparams == 1 ? "" : "s",
	        grouped(values, buf, sizeof buf), parallel_mode_name(g->par.parallel_mode));
	if (g->par.parallel_mode != PM_STAND_ALONE)
		fprintf(out, " on %" PRId64 " device%s", g->par.device_num, g->par.device_num == 1 ? "" : "s");
	if (g->par.pipeline_stages > 1)
		fprintf(out, ", %" PRId64 " pipeline stages", g->par.pipeline_stages);
	fputc('\n', out);
}

static int cmd_dot(Compilation *c, const Args *a)
{
	const char *fmt = a->format ? a->format : "dot";
	DotOptions opt = {.fold = a->fold, .forward_only = !a->full, .legend = true};
	if (strcmp(fmt, "dot") && strcmp(fmt, "svg") && strcmp(fmt, "png")) {
		fprintf(stderr, "netc: -T must be dot, svg or png, not '%s'\n", fmt);
		return EXIT_USER;
	}
	if (!a->output) {
		if (strcmp(fmt, "dot") != 0) {
			fprintf(stderr, "netc: dot -T %s needs -o FILE\n", fmt);
			return EXIT_USER;
		}
		return ir_dot_write(c->g, &opt, stdout, &c->diag) ? 0 : EXIT_INTERNAL;
	}
	return ir_dot_render(c->g, &opt, fmt, a->output, &c->diag) ? 0 : EXIT_USER;
}

static void setup(Compilation *c, const Args *a)
{
	c->dump_after = a->dump_after;
	c->verbose = a->verbose;
	c->infer = a->infer;
	c->fault = a->fault;
	c->test = a->test;
	c->f64 = a->build.f64;
	c->no_fuse = a->build.no_fuse;
	c->machine = &a->machine;
}

/* The hooks of passes/search_fit.c: what only the driver and the code
 * generator know. */
static void fit_setup(Compilation *c, void *ctx) { setup(c, ctx); }

static int64_t fit_planned(Compilation *c, void *ctx, int64_t **stage, int *nstages)
{
	int n = netc_planned_stages(c, &((const Args *)ctx)->build, stage);
	int64_t most = n > 0 ? 0 : -1;
	for (int st = 0; st < n; st++)
		most = (*stage)[st] > most ? (*stage)[st] : most;
	*nstages = n > 0 ? n : 0;
	return most;
}

/* Without the auto_parallel search, --memory-limit is a budget the compiled plan must
 * keep as it is: over it, the build stops and says by how much (a model
 * that does not fit one device must be split further, e.g. a long
 * sequence by its attention's query sequence, docs/parallel.md). explain
 * only warns: its figures are how a user finds what to split. */
static bool keep_memory_limit(Compilation *c, const Args *a, bool explain)
{
	double limit = a->machine.memory_limit;
	/* without --memory-limit, explain still says where the plan is over
	 * the machine's memory (a --machine file's or the built-in 80 GB):
	 * the hand plan of GPT-3 at 8 x 96 needs 101 GB where an A100 has 80 */
	if (limit <= 0 || (!a->memory_limit_given && !explain))
		return true;
	int64_t planned = netc_planned_bytes(c, &a->build);
	if (planned < 0 || planned <= limit)
		return true;
	if (!a->memory_limit_given) {
		diag_warning(&c->diag, loc_none(),
		             "the plan needs %" PRId64 " bytes per device (netc build -v's total), over the memory of "
		             "the machine it is priced for (memory_limit = %.6g, %s): split the model over more devices "
		             "or recompute",
		             planned, limit,
		             a->user_limit >= 0 ? "--cost memory_limit" : a->machine_file ? a->machine_file : "built in");
		return true;
	}
	(explain ? diag_warning : diag_error)(&c->diag, loc_none(),
	                                      "the plan needs %" PRId64 " bytes per device (netc build -v's total), "
	                                      "over --memory-limit %.6g; split the model over more devices",
	                                      planned, limit);
	return explain;
}

static void fit_report(Compilation *c, void *ctx, FILE *out) { netc_memory_plan(c, &((const Args *)ctx)->build, out); }

static bool fit_memory_limit(Compilation *c, Args *a, bool explain)
{
	MemoryFit f = {.file = a->file, .defines = (const char *const *)a->defines, .ndefines = a->ndefines, .ctx = a,
	               .setup = fit_setup, .planned = fit_planned, .report = fit_report};
	if (c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return keep_memory_limit(c, a, explain);
	return search_fit_memory(c, &f);
}

static int run(Compilation *c, Args *a)
{
	static const struct {
		const char *name;
		Stage upto;
	} commands[] = {
		/* dot draws what the program runs: backward, update and the
		 * communication of all three, after fusion */
		{"check", UPTO_CHECK}, {"dump", UPTO_CHECK}, {"dot", UPTO_CODEGEN}, {"build", UPTO_CODEGEN},
		{"explain", UPTO_CODEGEN},
	};
	int cmd = -1;
	for (int i = 0; i < (int)(sizeof commands / sizeof commands[0]); i++)
		if (strcmp(a->command, commands[i].name) == 0)
			cmd = i;
	if (cmd < 0) {
		fprintf(stderr, "netc: unknown command '%s' (commands: check, dump, dot, build, explain, calibrate)\n", a->command);
		return EXIT_USER;
	}
	if (cmd == 3 && !a->output) {
		fprintf(stderr, "netc: build needs -o PROG\n");
		return EXIT_USER;
	}
	if (a->fold && cmd != 2)
		fprintf(stderr, "netc: warning: --fold applies to dot only; ignored by %s\n", a->command);
	if (a->full && cmd != 2)
		fprintf(stderr, "netc: warning: --full applies to dot only; ignored by %s\n", a->command);
	if (a->jobs && cmd < 2) /* check and dump compile auto as 1: no outer search */
		fprintf(stderr, "netc: warning: -j applies to dot, build and explain; ignored by %s\n", a->command);
	setup(c, a);
	if (cmd == 1 && !c->dump_after)
		c->dump_after = "shapes";
	if (!compile_front(c, a->file, a->defines, a->ndefines))
		return EXIT_USER;
	/* a dump after a training pass runs the pipeline that far */
	Stage upto = commands[cmd].upto;
	if (cmd == 1 && a->dump_after)
		upto = UPTO_CODEGEN;
	/* check too: its search keeps the least plan over memory_limit and
	 * warns, since build's fit may still make it fit by recompute (an
	 * error here refused models that build and explain accept) */
	c->fit_follows = cmd >= 2 || cmd == 0;
	/* pipeline_stages or micro_size = auto: the fit's outer search compiles
	 * every candidate itself (passes/search_fit.c); this one only checks */
	if (cmd >= 2 && c->g->par.parallel_mode == PM_AUTO_PARALLEL &&
	    (c->g->par.pipeline_stages_auto || c->g->train.micro_size_auto)) {
		upto = UPTO_CHECK;
		c->search_defer = true; /* its search, of placeholder counts, is the outer search's to make */
		/* this compilation's counts are placeholders and the candidates'
		 * compilations are quiet: a dump would show no chosen plan */
		if (c->dump_after) {
			diag_warning(&c->diag, loc_none(),
			             "--dump-after has no effect with pipeline_stages or micro_size = auto; give the counts "
			             "explain chooses (-D pipeline_stages=P -D train.micro_size=M) to dump that plan");
			c->dump_after = NULL;
		}
	}
	if (cmd == 1 && c->g->par.parallel_mode == PM_AUTO_PARALLEL &&
	    (c->g->par.pipeline_stages_auto || c->g->train.micro_size_auto))
		diag_warning(&c->diag, loc_none(),
		             "dump compiles pipeline_stages and micro_size = auto as 1 (explain, build and dot search the "
		             "counts); give the counts explain chooses (-D pipeline_stages=P -D train.micro_size=M) to dump "
		             "that plan");
	if (!compile_passes(c, upto) && (!c->search_deferred || c->diag.nerrors))
		return EXIT_USER;
	if (cmd >= 2 && !fit_memory_limit(c, a, cmd == 4))
		return EXIT_USER;
	if (cmd == 0 && c->search_over)
		diag_warning(&c->diag, loc_none(),
		             "no plan the search found fits memory_limit = %.6g bytes per device by its estimate (the least "
		             "needs %.6g); netc build and explain try again with the repeated layers recomputed",
		             c->machine ? c->machine->memory_limit : 0, c->search_mem);
	switch (cmd) {
	case 0:
		check_summary(c, a->file, stdout);
		return 0;
	case 1:
		return 0;
	case 2:
		return cmd_dot(c, a);
	case 4: {
		/* explain's memory figures are what the program allocates, from
		 * the program generated for the plan's lines (printed after the
		 * report); a plan that cannot be generated gets explain's
		 * estimate, said so, and the emitter's error */
		int64_t *bytes = NULL;
		PlannedMemory planned = {0};
		if (a->schedule) {
			/* quietly: --schedule prints no plan */
			int n = c->plan ? netc_planned_stages(c, &a->build, &bytes) : 0;
			planned.nstages = n > 0 ? n : 0;
			planned.bytes = bytes;
			if (!explain_schedule(c, a->output, &planned, stdout))
				return EXIT_USER;
			if (n < 0) { /* no program: its figures were the estimate; the emitter says why, as explain does */
				FILE *sink = fopen("/dev/null", "w");
				if (sink) {
					netc_memory_plan_stages(c, &a->build, sink, NULL, NULL);
					fclose(sink);
				}
				return EXIT_USER;
			}
			return 0;
		}
		char *lines = NULL;
		size_t len = 0;
		bool emitted = true;
		if (c->plan && !a->why) {
			FILE *f = open_memstream(&lines, &len);
			if (!f) {
				fprintf(stderr, "netc: out of memory\n");
				return EXIT_INTERNAL;
			}
			emitted = netc_memory_plan_stages(c, &a->build, f, &bytes, &planned.nstages);
			fclose(f);
			planned.nstages = emitted ? planned.nstages : 0;
			planned.bytes = bytes;
		}
		bool ok = explain_print(c, a->why, &planned, stdout);
		if (ok && c->plan && !a->why) {
			memplan_report(c->plan, stdout); /* the planned memory, per device */
			fputs(lines, stdout);
		}
		free(lines);
		return ok && emitted ? 0 : EXIT_USER;
	}
	default:
		a->build.output = a->output;
		return netc_build(c, &a->build) ? 0 : EXIT_USER;
	}
}

/* Planning compiles the model hundreds of times (each fit, each screen),
 * and each compilation frees its arenas and tables at its end. glibc gives
 * blocks above its mmap threshold back to the kernel when they are freed and
 * trims the heap's top, so the next compilation faults in and zeroes the
 * same pages again: GPT-3 sharding_propagation at 4096 devices took 747k page
 * faults, a quarter of its CPU in the kernel (docs/auto_parallel.md). Freed
 * memory kept in the heap is reused instead; the peak stays within a few
 * percent (fragmentation). */
static void keep_freed_memory(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

int main(int argc, char **argv)
{
	keep_freed_memory();
	Args a = {.user_limit = -1};
	int rc = parse_args(argc, argv, &a);
	if (rc >= 0)
		return rc;
	if (strcmp(a.command, "calibrate") == 0) {
		if (a.machine_set)
			fprintf(stderr, "netc: warning: --machine, --cost and --memory-limit have no effect on calibrate\n");
		if (a.jobs)
			fprintf(stderr, "netc: warning: -j applies to dot, build and explain; ignored by calibrate\n");
		const char *t = a.build.target;
		if (t && strcmp(t, "cpu") != 0 && strcmp(t, "cuda") != 0) {
			fprintf(stderr, "netc: calibrate: unknown target '%s' (cpu: this host's cores, cuda: its GPU)\n", t);
			return EXIT_USER;
		}
		CalibOptions o = {.output = a.output, .np = a.np, .quick = a.quick, .models = (const char *const *)a.files,
		                  .nmodels = a.nfiles, .defines = a.defines, .ndefines = a.ndefines,
		                  .cuda = t && strcmp(t, "cuda") == 0};
		return netc_calibrate(&o);
	}
	if (a.np || a.quick)
		fprintf(stderr, "netc: warning: --np and --quick apply to calibrate only; ignored by %s\n", a.command);
	Compilation c;
	compilation_init(&c);
	rc = run(&c, &a);
	if (rc == 0 && c.diag.nerrors)
		rc = EXIT_USER;
	if (c.diag.ninternal) {
		fprintf(stderr, "netc: %d internal error%s: a bug in netc, not in the input; please report it "
		        "with the input\n", c.diag.ninternal, c.diag.ninternal == 1 ? "" : "s");
		rc = EXIT_INTERNAL;
	}
	compilation_free(&c);
	return rc;
}
