// build: -lcusparse
// cusparse: the generic cuSPARSE API on a 1 M x 1 M CSR matrix with 16 entries per row.
//
// SpMV (CUSPARSE_SPMV_CSR_ALG2, bit-reproducible), SpMM with an 8-column dense matrix
// (CUSPARSE_SPMM_CSR_ALG1), CSR-to-CSC conversion (cusparseCsr2cscEx2), each with the
// external buffer the library asks for, and a second SpMV with the CSC arrays as the
// transpose in CSR form. Results: every output.
#define PROGRAM "cusparse"
#include <cusparse.h>

#include <algorithm>

#include "common.h"

int main() {
  CK(cudaSetDevice(0));
  const int n = 1 << 20, per = 16, k = 8;
  const int64_t nnz = (int64_t)n * per;
  std::vector<int> rowptr(n + 1), cols(nnz);
  std::vector<float> vals(nnz), x(n), B((size_t)n * k);
  Lcg rng(11);
  const int bucket = n / per;
  for (int r = 0; r < n; ++r) {
    rowptr[r] = r * per;
    int* c = &cols[(size_t)r * per];
    for (int j = 0; j < per; ++j) c[j] = (int)(((int64_t)r + (int64_t)j * bucket + rng.next() % bucket) % n);
    std::sort(c, c + per);
    for (int j = 0; j < per; ++j) vals[(size_t)r * per + j] = rng.symmetric();
  }
  rowptr[n] = (int)nnz;
  for (auto& v : x) v = rng.symmetric();
  for (auto& v : B) v = rng.symmetric();

  int *d_rowptr, *d_cols;
  float *d_vals, *d_x, *d_y, *d_B, *d_C;
  CK(cudaMalloc(&d_rowptr, (n + 1) * sizeof(int)));
  CK(cudaMalloc(&d_cols, nnz * sizeof(int)));
  CK(cudaMalloc(&d_vals, nnz * sizeof(float)));
  CK(cudaMalloc(&d_x, n * sizeof(float)));
  CK(cudaMalloc(&d_y, n * sizeof(float)));
  CK(cudaMalloc(&d_B, (size_t)n * k * sizeof(float)));
  CK(cudaMalloc(&d_C, (size_t)n * k * sizeof(float)));
  CK(cudaMemcpy(d_rowptr, rowptr.data(), (n + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_cols, cols.data(), nnz * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_vals, vals.data(), nnz * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_B, B.data(), (size_t)n * k * sizeof(float), cudaMemcpyHostToDevice));

  cusparseHandle_t h;
  CKLIB(cusparseCreate(&h));
  cusparseSpMatDescr_t A;
  CKLIB(cusparseCreateCsr(&A, n, n, nnz, d_rowptr, d_cols, d_vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                          CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  cusparseDnVecDescr_t vx, vy;
  CKLIB(cusparseCreateDnVec(&vx, n, d_x, CUDA_R_32F));
  CKLIB(cusparseCreateDnVec(&vy, n, d_y, CUDA_R_32F));
  const float one = 1.0f, zero = 0.0f;
  Result r;

  // SpMV.
  size_t bytes = 0;
  CKLIB(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vy, CUDA_R_32F,
                                CUSPARSE_SPMV_CSR_ALG2, &bytes));
  void* buf = nullptr;
  CK(cudaMalloc(&buf, bytes > 0 ? bytes : 1));
  CKLIB(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vy, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG2, buf));
  CK(cudaDeviceSynchronize());
  r.add_device("spmv", d_y, n);

  // SpMM.
  cusparseDnMatDescr_t mB, mC;
  CKLIB(cusparseCreateDnMat(&mB, n, k, n, d_B, CUDA_R_32F, CUSPARSE_ORDER_COL));
  CKLIB(cusparseCreateDnMat(&mC, n, k, n, d_C, CUDA_R_32F, CUSPARSE_ORDER_COL));
  size_t mm_bytes = 0;
  CKLIB(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, mB, &zero,
                                mC, CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG1, &mm_bytes));
  void* mm_buf = nullptr;
  CK(cudaMalloc(&mm_buf, mm_bytes > 0 ? mm_bytes : 1));
  CKLIB(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, mB, &zero, mC,
                     CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG1, mm_buf));
  CK(cudaDeviceSynchronize());
  r.add_device("spmm", d_C, (size_t)n * k);

  // CSR -> CSC, then the transpose product from the CSC arrays.
  int *t_colptr, *t_rows;
  float* t_vals;
  CK(cudaMalloc(&t_colptr, (n + 1) * sizeof(int)));
  CK(cudaMalloc(&t_rows, nnz * sizeof(int)));
  CK(cudaMalloc(&t_vals, nnz * sizeof(float)));
  size_t t_bytes = 0;
  CKLIB(cusparseCsr2cscEx2_bufferSize(h, n, n, nnz, d_vals, d_rowptr, d_cols, t_vals, t_colptr, t_rows, CUDA_R_32F,
                                      CUSPARSE_ACTION_NUMERIC, CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, &t_bytes));
  void* t_buf = nullptr;
  CK(cudaMalloc(&t_buf, t_bytes > 0 ? t_bytes : 1));
  CKLIB(cusparseCsr2cscEx2(h, n, n, nnz, d_vals, d_rowptr, d_cols, t_vals, t_colptr, t_rows, CUDA_R_32F,
                           CUSPARSE_ACTION_NUMERIC, CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, t_buf));
  CK(cudaDeviceSynchronize());
  r.add_device("csc_colptr", t_colptr, n + 1);
  r.add_device("csc_rows", t_rows, nnz);
  r.add_device("csc_vals", t_vals, nnz);
  cusparseSpMatDescr_t At;
  CKLIB(cusparseCreateCsr(&At, n, n, nnz, t_colptr, t_rows, t_vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                          CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  size_t bytes2 = 0;
  CKLIB(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, At, vy, &zero, vx, CUDA_R_32F,
                                CUSPARSE_SPMV_CSR_ALG2, &bytes2));
  void* buf2 = nullptr;
  CK(cudaMalloc(&buf2, bytes2 > 0 ? bytes2 : 1));
  CKLIB(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, At, vy, &zero, vx, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG2, buf2));
  CK(cudaDeviceSynchronize());
  r.add_device("spmv_transpose", d_x, n);

  CKLIB(cusparseDestroySpMat(A));
  CKLIB(cusparseDestroySpMat(At));
  CKLIB(cusparseDestroyDnVec(vx));
  CKLIB(cusparseDestroyDnVec(vy));
  CKLIB(cusparseDestroyDnMat(mB));
  CKLIB(cusparseDestroyDnMat(mC));
  CKLIB(cusparseDestroy(h));
  for (void* p : {(void*)d_rowptr, (void*)d_cols, (void*)d_vals, (void*)d_x, (void*)d_y, (void*)d_B, (void*)d_C,
                  buf, mm_buf, (void*)t_colptr, (void*)t_rows, (void*)t_vals, t_buf, buf2})
    CK(cudaFree(p));
  finish(r);
  return 0;
}
