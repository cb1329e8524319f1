/* The captured step (cuda_rt.h, nrt_cuda_graph_step): one cudaGraphLaunch
 * a step instead of a launch per kernel. The host's cost of queueing a
 * step of GPT-2 small (thousands of kernels) is paid once. */
#include "cuda_check.h"
#include "cuda_rt.h"

static int runs;                 /* calls so far: the first is the warm-up */
static cudaGraphExec_t exec;     /* the instantiated step, from the second call */

extern "C" void nrt_cuda_graph_step(void (*body)(void))
{
	cudaStream_t s = nrt_cuda_stream();
	if (runs++ == 0) {
		body();
		return;
	}
	if (!exec) {
		cudaGraph_t g;
		/* thread-local: another thread's unrelated CUDA calls (none
		 * today) do not invalidate the capture */
		NRT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
		body();
		NRT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
		NRT_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
		NRT_CUDA_CHECK(cudaGraphDestroy(g));
	}
	NRT_CUDA_CHECK(cudaGraphLaunch(exec, s));
}
