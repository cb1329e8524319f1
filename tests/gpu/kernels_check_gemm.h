/* kernels_check's GEMM epilogue cases (included by kernels_check.c after
 * its helpers): nrt_gemm_ep_* (runtime/cuda/gemm_lt.c: cuBLASLt's BIAS and
 * BGRADA epilogues, netc's gelu after BIAS; the composed kernels where
 * cuBLASLt has no algorithm) against the CPU's (runtime/gemm_ep_impl.h:
 * the unfused kernels' calls), every epilogue, transposes, f32, f64, f16
 * and bf16, on the GEMM shapes of the plain product plus two that
 * cuBLASLt's tensor-core kernels take (multiples of 8, aligned).
 *
 * Tolerances, per element, |gpu - cpu| <= tol (|cpu| + s) + bound
 * (compare_bound; s the mean |cpu|):
 *  - the product and the bias in f32 / f64: tol as for the gemm (1e-5,
 *    1e-12). The GPU adds the bias to the accumulator before its one
 *    rounding, the CPU rounds the product and then the sum: one rounding
 *    more, u |y| (u = 2^-24), far inside 1e-5. The pre-activation (aux)
 *    likewise; gelu after it is netc's erf kernel on both sides (erff
 *    against A&S 7.1.26: 1.5e-7).
 *  - the bias gradient, sum_k B[k,n]: the CPU sums in double and rounds
 *    once, cuBLASLt in its own order in the compute type; any order of
 *    K - 1 additions errs by at most gamma_{K-1} sum_k |B[k,n]|,
 *    gamma_m = m u / (1 - m u) (Higham, Accuracy and Stability, 4.2),
 *    the bound added per element (u = 2^-24 for f32 and the narrow
 *    types' f32 accumulation, 2^-53 for f64).
 *  - f16 / bf16 (unit roundoff u_n: 2^-11, 2^-8): tol 2 u_n + 1e-5 as the
 *    other narrow kernels (kernels_check.c's top). The BIAS epilogue
 *    rounds p + b once on the GPU; the CPU rounds p = A.B to the narrow
 *    type first, which moves the sum by up to u_n |p| more: bound
 *    u_n |p_i| (p_i from the CPU's f32 product of the same narrow
 *    operands). After gelu (|gelu'| <= 1.13) the pre-activation's
 *    difference becomes at most 1.13 (u_n |p_i| + tol (|aux_i| + s_aux)).
 * The cases run only on a GPU (the host shim runs the harness). */

void cpu_nrt_gemm_ep_f32(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                         const float *B, float *bias, float *aux, float *C);
void cpu_nrt_gemm_ep_f64(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A,
                         const double *B, double *bias, double *aux, double *C);
void cpu_nrt_gemm_ep_f16(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                         const uint16_t *B, uint16_t *bias, uint16_t *aux, uint16_t *C);
void cpu_nrt_gemm_ep_bf16(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                          const uint16_t *B, uint16_t *bias, uint16_t *aux, uint16_t *C);

static const int64_t ep_sizes[][3] = {{1, 1, 1},  {7, 33, 257},   {33, 7, 1000},
                                      {64, 48, 1}, {128, 768, 64}, {256, 96, 512}};
static const char *const ep_names[] = {"bias", "bias+gelu", "bgrad"};

static double ep_gamma(int64_t m, double u) { return m > 0 ? m * u / (1 - m * u) : 0; }

/* per column n: gamma_{K-1} sum_k |B[k,n]| (B [K,N] dense) */
static double *ep_sum_bound(const double *B, int64_t K, int64_t N, double u)
{
	double *b = halloc(sizeof(double) * (size_t)N);
	for (int64_t k = 0; k < K; k++)
		for (int64_t j = 0; j < N; j++)
			b[j] += fabs(B[k * N + j]);
	for (int64_t j = 0; j < N; j++)
		b[j] *= ep_gamma(K - 1, u);
	return b;
}

#define KC_GEMM_EP_WIDE(T, S, TOLV, U)                                                                            \
	static void gemm_ep_##S(void)                                                                               \
	{                                                                                                           \
		for (size_t z = 0; z < sizeof ep_sizes / sizeof *ep_sizes; z++)                                     \
			for (int ep = NRT_EP_BIAS; ep <= NRT_EP_BGRAD; ep++)                                        \
				for (int t = 0; t < 4; t++) {                                                       \
					bool ta = t & 1, tb = t >> 1;                                               \
					if (ep == NRT_EP_BGRAD && tb)                                               \
						continue;                                                           \
					int64_t M = ep_sizes[z][0], N = ep_sizes[z][1], K = ep_sizes[z][2];         \
					T *A = hrand_##S(M * K, -1, 1), *B = hrand_##S(K * N, -1, 1);               \
					T *bias = hrand_##S(N, -1, 1), *dbias = dev_##S(bias, N);                   \
					T *aux = hrand_##S(M * N, 0, 1), *daux = dev_##S(NULL, M * N);              \
					T *C = hrand_##S(M * N, 0, 1), *dC = dev_##S(NULL, M * N);                  \
					nrt_gemm_ep_##S((NrtGemmEp)ep, ta, tb, M, N, K, dev_##S(A, M * K),          \
					                dev_##S(B, K * N), dbias, daux, dC);                        \
					cpu_nrt_gemm_ep_##S((NrtGemmEp)ep, ta, tb, M, N, K, A, B, bias, aux, C);    \
					char name[96];                                                              \
					snprintf(name, sizeof name, "gemm_ep %s ta=%d tb=%d %lldx%lldx%lld",        \
					         ep_names[ep], ta, tb, (long long)M, (long long)N, (long long)K);   \
					cmp_##S(name, dC, C, M * N, TOLV);                                          \
					if (ep == NRT_EP_BIAS_GELU) {                                               \
						strcat(name, " pre-activation");                                    \
						cmp_##S(name, daux, aux, M * N, TOLV);                              \
					}                                                                           \
					if (ep == NRT_EP_BGRAD) {                                                   \
						double *Bd = halloc(sizeof(double) * (size_t)(K * N + 1));          \
						for (int64_t i = 0; i < K * N; i++)                                 \
							Bd[i] = B[i];                                               \
						strcat(name, " bias gradient");                                     \
						cmp_bound_##S(name, dbias, bias, N, TOLV, ep_sum_bound(Bd, K, N, U)); \
					}                                                                           \
					free_all();                                                                 \
				}                                                                                   \
	}
KC_GEMM_EP_WIDE(float, f32, 1e-5, 0x1p-24)
KC_GEMM_EP_WIDE(double, f64, 1e-12, 0x1p-53)

/* narrow values as doubles, from the device or the host */
static double *ep_wide_of(const Narrow *t, const uint16_t *h, int64_t n)
{
	double *d = halloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		d[i] = wide(t, h[i]);
	return d;
}

static void gemm_ep_narrow(const Narrow *t)
{
	double un = t->bf ? 0x1p-8 : 0x1p-11;
	for (size_t z = 0; z < sizeof ep_sizes / sizeof *ep_sizes; z++)
		for (int ep = NRT_EP_BIAS; ep <= NRT_EP_BGRAD; ep++)
			for (int k = 0; k < 4; k++) {
				bool ta = k & 1, tb = k >> 1;
				if (ep == NRT_EP_BGRAD && tb)
					continue;
				int64_t M = ep_sizes[z][0], N = ep_sizes[z][1], K = ep_sizes[z][2], n = M * N;
				uint16_t *A = nrand(t, M * K, -1, 1), *B = nrand(t, K * N, -1, 1), *bias = nrand(t, N, -1, 1);
				uint16_t *aux = nrand(t, n, 0, 1), *C = nrand(t, n, 0, 1);
				uint16_t *dbias = nup(bias, N), *daux = nzero(n), *dC = nzero(n);
				NK(t, gemm_ep)((NrtGemmEp)ep, ta, tb, M, N, K, nup(A, M * K), nup(B, K * N), dbias, daux, dC);
				CK_(t, gemm_ep)((NrtGemmEp)ep, ta, tb, M, N, K, A, B, bias, aux, C);
				/* p = A.B in f32 from the same narrow operands: the CPU's rounding of it */
				float *Af = halloc(sizeof(float) * (size_t)(M * K + 1)), *Bf = halloc(sizeof(float) * (size_t)(K * N + 1));
				float *p = halloc(sizeof(float) * (size_t)(n + 1));
				for (int64_t i = 0; i < M * K; i++)
					Af[i] = wide(t, A[i]);
				for (int64_t i = 0; i < K * N; i++)
					Bf[i] = wide(t, B[i]);
				cpu_nrt_gemm_f32(ta, tb, M, N, K, Af, Bf, 0, p);
				double *g = ep_wide_of(t, down(dC, sizeof(uint16_t) * (size_t)n), n), *c = ep_wide_of(t, C, n);
				double *ga = ep_wide_of(t, down(daux, sizeof(uint16_t) * (size_t)n), n), *ca = ep_wide_of(t, aux, n);
				double *bound = halloc(sizeof(double) * (size_t)(n + 1)), sa = 0;
				for (int64_t i = 0; i < n; i++)
					sa += fabs(ca[i]) / (double)n;
				for (int64_t i = 0; i < n && ep != NRT_EP_BGRAD; i++) {
					double pre = un * fabs(p[i]); /* the CPU's rounding of the product */
					bound[i] = ep == NRT_EP_BIAS ? pre : 1.13 * (pre + t->tol * (fabs(ca[i]) + sa));
				}
				char name[112];
				snprintf(name, sizeof name, "gemm_ep %s ta=%d tb=%d %lldx%lldx%lld", ep_names[ep], ta, tb,
				         (long long)M, (long long)N, (long long)K);
				compare_bound(name, t->name, g, c, n, t->tol, bound);
				if (ep == NRT_EP_BIAS_GELU) {
					for (int64_t i = 0; i < n; i++)
						bound[i] = un * fabs(p[i]);
					strcat(name, " pre-activation");
					compare_bound(name, t->name, ga, ca, n, t->tol, bound);
				}
				if (ep == NRT_EP_BGRAD) {
					strcat(name, " bias gradient");
					compare_bound(name, t->name, ep_wide_of(t, down(dbias, sizeof(uint16_t) * (size_t)N), N),
					              ep_wide_of(t, bias, N), N, t->tol,
					              ep_sum_bound(ep_wide_of(t, B, K * N), K, N, 0x1p-24));
				}
				free_all();
			}
}

static void test_gemm_ep(void)
{
	gemm_ep_f32();
	gemm_ep_f64();
	for (size_t i = 0; i < sizeof narrows / sizeof *narrows; i++)
		gemm_ep_narrow(&narrows[i]);
}
