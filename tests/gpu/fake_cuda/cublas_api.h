/* Stand-in (see cuda_runtime_api.h here): the types the headers name. */
#ifndef FAKE_CUBLAS_API_H
#define FAKE_CUBLAS_API_H
typedef enum {
	CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef struct FakeCublas *cublasHandle_t;
static inline const char *cublasGetStatusString(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
	       : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
	       : s ? "fake cuBLAS error" : "ok";
}
/* the library types cuBLASLt's calls name (library_types.h, cublas_api.h) */
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum {
	CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_64F = 70,
} cublasComputeType_t;
#endif
