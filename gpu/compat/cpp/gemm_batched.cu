// build: -lcublas
// gemm_batched: cuBLAS batched matrix products whose operands are named by arrays of
// device pointers that live in device memory.
//
//  - cublasSgemmBatched: 64 products of 512 x 512 float matrices, each operand its own
//    cudaMalloc; the three pointer arrays are uploaded with cudaMemcpy.
//  - cublasGemmBatchedEx: the same shapes in fp16 with fp32 accumulation (pointer arrays).
//  - cublasSgemmStridedBatched: 32 products of 1024 x 1024 in one allocation per operand.
// Results: every product.
#define PROGRAM "gemm_batched"
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "common.h"

__global__ void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed * 97u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = ((x & 0xFFFF) / 65536.0f - 0.5f);
  }
}

__global__ void to_half(__half* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __float2half(src[i]);
}

int main() {
  CK(cudaSetDevice(0));
  cublasHandle_t handle;
  CKLIB(cublasCreate(&handle));
  CKLIB(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  Result r;

  // 1. Sgemm batched through pointer arrays.
  const int batch = 64, m = 512;
  const size_t elems = (size_t)m * m;
  std::vector<float*> A(batch), B(batch), C(batch);
  for (int i = 0; i < batch; ++i) {
    CK(cudaMalloc(&A[i], elems * 4));
    CK(cudaMalloc(&B[i], elems * 4));
    CK(cudaMalloc(&C[i], elems * 4));
    fill<<<256, 256>>>(A[i], elems, 3 * i + 1);
    CKLAUNCH();
    fill<<<256, 256>>>(B[i], elems, 3 * i + 2);
    CKLAUNCH();
    CK(cudaMemset(C[i], 0, elems * 4));
  }
  float **dA, **dB, **dC;
  CK(cudaMalloc(&dA, batch * sizeof(float*)));
  CK(cudaMalloc(&dB, batch * sizeof(float*)));
  CK(cudaMalloc(&dC, batch * sizeof(float*)));
  CK(cudaMemcpy(dA, A.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dC, C.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
  const float one = 1.0f, zero = 0.0f, half_ = 0.5f;
  CKLIB(cublasSgemmBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, dA, m, dB, m, &zero, dC, m, batch));
  // A second pass that accumulates: C = 0.5 * A^T B + C.
  CKLIB(cublasSgemmBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &half_, dA, m, dB, m, &one, dC, m, batch));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < batch; ++i) r.add_device("sgemm_batched", C[i], elems);

  // 2. GemmBatchedEx in fp16 with fp32 accumulation.
  std::vector<__half*> Ah(batch), Bh(batch), Ch(batch);
  for (int i = 0; i < batch; ++i) {
    CK(cudaMalloc(&Ah[i], elems * 2));
    CK(cudaMalloc(&Bh[i], elems * 2));
    CK(cudaMalloc(&Ch[i], elems * 2));
    to_half<<<256, 256>>>(Ah[i], A[i], elems);
    CKLAUNCH();
    to_half<<<256, 256>>>(Bh[i], B[i], elems);
    CKLAUNCH();
  }
  void **dAh, **dBh, **dCh;
  CK(cudaMalloc(&dAh, batch * sizeof(void*)));
  CK(cudaMalloc(&dBh, batch * sizeof(void*)));
  CK(cudaMalloc(&dCh, batch * sizeof(void*)));
  CK(cudaMemcpy(dAh, Ah.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dBh, Bh.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dCh, Ch.data(), batch * sizeof(void*), cudaMemcpyHostToDevice));
  CKLIB(cublasGemmBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, (const void* const*)dAh, CUDA_R_16F, m,
                            (const void* const*)dBh, CUDA_R_16F, m, &zero, (void* const*)dCh, CUDA_R_16F, m, batch,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < batch; ++i) r.add_device("gemm_batched_ex_fp16", Ch[i], elems);

  // 3. Strided batched in single allocations.
  const int sb = 32, n = 1024;
  const size_t selems = (size_t)n * n;
  float *SA, *SB, *SC;
  CK(cudaMalloc(&SA, sb * selems * 4));
  CK(cudaMalloc(&SB, sb * selems * 4));
  CK(cudaMalloc(&SC, sb * selems * 4));
  fill<<<1024, 256>>>(SA, sb * selems, 11);
  CKLAUNCH();
  fill<<<1024, 256>>>(SB, sb * selems, 12);
  CKLAUNCH();
  CKLIB(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &one, SA, n, selems, SB, n, selems, &zero,
                                  SC, n, selems, sb));
  CK(cudaDeviceSynchronize());
  r.add_device("sgemm_strided_batched", SC, sb * selems);

  for (int i = 0; i < batch; ++i) {
    CK(cudaFree(A[i]));
    CK(cudaFree(B[i]));
    CK(cudaFree(C[i]));
    CK(cudaFree(Ah[i]));
    CK(cudaFree(Bh[i]));
    CK(cudaFree(Ch[i]));
  }
  for (void* p : {(void*)dA, (void*)dB, (void*)dC, (void*)dAh, (void*)dBh, (void*)dCh, (void*)SA, (void*)SB, (void*)SC})
    CK(cudaFree(p));
  CKLIB(cublasDestroy(handle));
  finish(r);
  return 0;
}
