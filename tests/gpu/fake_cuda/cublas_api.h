/* Stand-in (see cuda_runtime_api.h here): the types the headers name. */
#ifndef FAKE_CUBLAS_API_H
#define FAKE_CUBLAS_API_H
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef struct FakeCublas *cublasHandle_t;
static inline const char *cublasGetStatusString(cublasStatus_t s) { return s ? "fake cuBLAS error" : "ok"; }
#endif
