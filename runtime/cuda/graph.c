/* The training step as a CUDA graph (issue 22): whether this run captures
 * it, and the call the generated program makes (nrt_step_graph, netrt.h).
 * The capture itself is graph.cu's (the stand-in CUDA has its own,
 * tests/gpu/fake_cuda). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* why the step runs uncaptured in this run, or NULL: it is captured */
static const char *off = "nrt_init has not run";

void nrt_cuda_graph_setup(const NrtOptions *opt)
{
	const char *env = getenv("NETC_CUDA_GRAPH");
	off = env && strcmp(env, "0") == 0         ? "NETC_CUDA_GRAPH=0"
	      : opt->trace                         ? "--trace"
	      : opt->comm_stats                    ? "--comm-stats"
	      : nrt_cuda_comm == NRT_CUDA_COMM_HOST ? "NETC_COMM=host"
	      : nrt_rt.size > 1                    ? "more than one rank"
	                                           : NULL;
	if (env && *env && strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
		nrt_fatal("NETC_CUDA_GRAPH=%s: use 1 (capture a static step as a CUDA graph, the default) or 0 (do not)",
		          env);
}

bool nrt_step_graph(void (*body)(void))
{
	static int calls;
	/* after the warm-up (the first call, which ran body): a step with
	 * NCCL in use is not captured (nrt_cuda_graph_setup) */
	if (!off && calls++ == 1 && nrt_cuda_nccl_used())
		off = "NCCL in use";
	if (off)
		return false;
	nrt_cuda_graph_step(body);
	return true;
}
