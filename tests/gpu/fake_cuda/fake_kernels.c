/* The kernels a .target(cpu) embedding splits between host and device
 * (lookup, its gradient, scale and axpy, the optimizer updates), checked
 * where the stand-in CUDA runs (tests/e2e/test_cuda_fake.sh): the device
 * kernels (the CPU kernels, renamed fake_dev_* in the fake library) must
 * get device pointers only, the host kernels (runtime/host_kernels.c,
 * renamed fake_host_*) never one. A wrong pointer stops the program with
 * a message naming the kernel and the argument (fake_cuda_expect). */
#include <stdbool.h>
#include <stdint.h>

#include "cuda_runtime_api.h"

#define X(p, want, kernel, arg) fake_cuda_expect(p, want, #kernel "'s argument " #arg)

/* D = 1: the device kernel nrt_NAME_S, calling fake_dev_NAME_S;
 * D = 0: the host kernel nrt_host_NAME_S, calling fake_host_NAME_S */
#define CHECKED(D, P, F, T, S)                                                                                      \
	void F##embedding_##S(int64_t, int64_t, int64_t, int64_t, const void *, bool, const T *, T *);                 \
	void P##embedding_##S(int64_t nids, int64_t rows, int64_t dim, int64_t off, const void *ids, bool ids64,       \
	                      const T *table, T *y)                                                                     \
	{                                                                                                               \
		X(ids, D, P##embedding_##S, ids), X(table, D, P##embedding_##S, table), X(y, D, P##embedding_##S, y);      \
		F##embedding_##S(nids, rows, dim, off, ids, ids64, table, y);                                              \
	}                                                                                                               \
	void F##embedding_grad_##S(int64_t, int64_t, int64_t, int64_t, const void *, bool, const T *, T *);            \
	void P##embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim, int64_t off, const void *ids, bool ids64,  \
	                           const T *dy, T *dt)                                                                  \
	{                                                                                                               \
		X(ids, D, P##embedding_grad_##S, ids), X(dy, D, P##embedding_grad_##S, dy);                                \
		X(dt, D, P##embedding_grad_##S, dtable);                                                                    \
		F##embedding_grad_##S(nids, rows, dim, off, ids, ids64, dy, dt);                                           \
	}                                                                                                               \
	void F##scale_##S(int64_t, T, const T *, T *);                                                                 \
	void P##scale_##S(int64_t n, T a, const T *x, T *y)                                                            \
	{                                                                                                               \
		X(x, D, P##scale_##S, x), X(y, D, P##scale_##S, y);                                                        \
		F##scale_##S(n, a, x, y);                                                                                  \
	}                                                                                                               \
	void F##axpy_##S(int64_t, T, const T *, T *);                                                                  \
	void P##axpy_##S(int64_t n, T a, const T *x, T *y)                                                             \
	{                                                                                                               \
		X(x, D, P##axpy_##S, x), X(y, D, P##axpy_##S, y);                                                          \
		F##axpy_##S(n, a, x, y);                                                                                   \
	}                                                                                                               \
	void F##sgd_##S(int64_t, double, double, const T *, T *);                                                      \
	void P##sgd_##S(int64_t n, double lr, double wd, const T *g, T *p)                                             \
	{                                                                                                               \
		X(g, D, P##sgd_##S, g), X(p, D, P##sgd_##S, p);                                                            \
		F##sgd_##S(n, lr, wd, g, p);                                                                               \
	}                                                                                                               \
	void F##momentum_##S(int64_t, double, double, bool, double, const T *, T *, T *);                              \
	void P##momentum_##S(int64_t n, double lr, double mom, bool nest, double wd, const T *g, T *m, T *p)           \
	{                                                                                                               \
		X(g, D, P##momentum_##S, g), X(m, D, P##momentum_##S, m), X(p, D, P##momentum_##S, p);                     \
		F##momentum_##S(n, lr, mom, nest, wd, g, m, p);                                                            \
	}                                                                                                               \
	void F##adam_##S(int64_t, double, double, double, double, double, bool, int64_t, const T *, T *, T *, T *);    \
	void P##adam_##S(int64_t n, double lr, double b1, double b2, double eps, double wd, bool dec, int64_t step,    \
	                 const T *g, T *m, T *v, T *p)                                                                  \
	{                                                                                                               \
		X(g, D, P##adam_##S, g), X(m, D, P##adam_##S, m), X(v, D, P##adam_##S, v), X(p, D, P##adam_##S, p);        \
		F##adam_##S(n, lr, b1, b2, eps, wd, dec, step, g, m, v, p);                                                \
	}                                                                                                               \
	void F##lamb_phase1_##S(int64_t, double, double, double, double, int64_t, const T *, T *, T *, const T *, T *, \
	                        double *);                                                                              \
	void P##lamb_phase1_##S(int64_t n, double b1, double b2, double eps, double wd, int64_t step, const T *g,      \
	                        T *m, T *v, const T *p, T *upd, double sq[2])                                           \
	{                                                                                                               \
		X(g, D, P##lamb_phase1_##S, g), X(m, D, P##lamb_phase1_##S, m), X(v, D, P##lamb_phase1_##S, v);            \
		X(p, D, P##lamb_phase1_##S, p), X(upd, D, P##lamb_phase1_##S, upd), X(sq, D, P##lamb_phase1_##S, sq);      \
		F##lamb_phase1_##S(n, b1, b2, eps, wd, step, g, m, v, p, upd, sq);                                         \
	}                                                                                                               \
	void F##lamb_phase2_##S(int64_t, double, const double *, const T *, T *);                                      \
	void P##lamb_phase2_##S(int64_t n, double lr, const double sq[2], const T *upd, T *p)                          \
	{                                                                                                               \
		X(sq, D, P##lamb_phase2_##S, sq), X(upd, D, P##lamb_phase2_##S, upd), X(p, D, P##lamb_phase2_##S, p);      \
		F##lamb_phase2_##S(n, lr, sq, upd, p);                                                                     \
	}

CHECKED(1, nrt_, fake_dev_, float, f32)
CHECKED(1, nrt_, fake_dev_, double, f64)
CHECKED(0, nrt_host_, fake_host_, float, f32)
CHECKED(0, nrt_host_, fake_host_, double, f64)
