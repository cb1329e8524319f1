/* libFuzzer target for netc's front end and passes: one input is one .net
 * file, compiled as `netc check` does (FUZZ_UPTO=UPTO_CHECK) or through
 * every pass `netc build` runs before it emits C (UPTO_CODEGEN). Built
 * with clang -fsanitize=fuzzer,address,undefined by `make fuzz`; see
 * tests/fuzz/run.sh. Diagnostics go to /dev/null: the fuzzer looks for
 * crashes, sanitizer reports, leaks, timeouts and memory blow-ups, not
 * for messages.
 *
 * Files the input names are kept away from the machine: a strategy
 * checkpoint to save goes to a scratch file in the current directory
 * (run.sh runs in build/fuzz/work), and none is loaded. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"

#ifndef FUZZ_UPTO
#define FUZZ_UPTO UPTO_CHECK
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	Compilation c;
	compilation_init(&c);
	diag_init(&c.diag, devnull);
	/* the source as source_read makes it: NUL-terminated, NULs allowed */
	SourceFile *src = xmalloc(sizeof *src);
	char *text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = 0;
	src->name = xstrdup("fuzz.net");
	src->text = text;
	src->len = size;
	c.src = src;
	c.g = netc_parse(&c.arena, &c.diag, c.src);
	if (c.g && !c.diag.nerrors) {
		ParallelConfig *p = &c.g->par;
		if (p->strategy_ckpt_save_file && *p->strategy_ckpt_save_file)
			p->strategy_ckpt_save_file = "fuzz-strategy.out";
		if (p->group_ckpt_save_file && *p->group_ckpt_save_file)
			p->group_ckpt_save_file = "fuzz-group.out";
		p->strategy_ckpt_load_file = "";
		if (parallel_config_finish(p, &c.diag))
			compile_passes(&c, FUZZ_UPTO);
	}
	compilation_free(&c);
	return 0;
}
