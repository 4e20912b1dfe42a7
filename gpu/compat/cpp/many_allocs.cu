// many_allocs: thousands of small device allocations, churned.
//
// 3000 cudaMalloc buffers of 4 KiB to 1 MiB (log-uniform sizes from a seeded generator),
// each filled by its own kernel; three rounds that free every 2nd / 3rd / 5th buffer and
// allocate it again at a new size, refill it, memset part of some and copy between
// neighbours; 500 stream-ordered allocations (cudaMallocAsync / cudaFreeAsync) on a
// stream; then one checksum kernel per buffer (integer sum and xor, order-independent).
// Results: the sizes and the checksums.
#define PROGRAM "many_allocs"
#include <cmath>

#include "common.h"

__global__ void fill(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint32_t)i * 2654435761u + seed * 40503u;
}

__global__ void checksum(const uint32_t* p, size_t n, unsigned int* out) {
  uint32_t s = 0, x = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    s += p[i] * (uint32_t)(i | 1);
    x ^= p[i] + (uint32_t)i;
  }
  atomicAdd(&out[0], s);
  atomicXor(&out[1], x);
}

int main() {
  CK(cudaSetDevice(0));
  const int N = 3000;
  Lcg rng(17);
  auto pick_size = [&]() {
    double lo = std::log(4096.0), hi = std::log(1048576.0);
    size_t b = (size_t)std::exp(lo + (hi - lo) * rng.uniform());
    return (b + 3) / 4 * 4;
  };
  std::vector<uint32_t*> buf(N);
  std::vector<size_t> size(N);
  size_t total = 0;
  for (int i = 0; i < N; ++i) {
    size[i] = pick_size();
    total += size[i];
    CK(cudaMalloc(&buf[i], size[i]));
    fill<<<32, 256>>>(buf[i], size[i] / 4, i);
    CKLAUNCH();
  }
  printf("buffers=%d bytes=%zu\n", N, total);

  const int strides[3] = {2, 3, 5};
  for (int round = 0; round < 3; ++round) {
    int k = strides[round];
    for (int i = round; i < N; i += k) {
      CK(cudaFree(buf[i]));
      size[i] = pick_size();
      CK(cudaMalloc(&buf[i], size[i]));
      fill<<<32, 256>>>(buf[i], size[i] / 4, 1000 * (round + 1) + i);
      CKLAUNCH();
    }
    for (int i = round; i < N; i += 7) CK(cudaMemsetAsync(buf[i], round + 1, size[i] / 2, 0));
    for (int i = 1 + round; i + 1 < N; i += 11) {
      size_t n = size[i] < size[i + 1] ? size[i] : size[i + 1];
      CK(cudaMemcpyAsync(buf[i + 1], buf[i], n / 2, cudaMemcpyDeviceToDevice, 0));
    }
  }

  // Stream-ordered allocations: each lives a few operations on its stream.
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());
  unsigned int* async_sums;
  CK(cudaMalloc(&async_sums, 500 * 2 * sizeof(unsigned int)));
  CK(cudaMemset(async_sums, 0, 500 * 2 * sizeof(unsigned int)));
  for (int i = 0; i < 500; ++i) {
    size_t b = pick_size();
    uint32_t* p;
    CK(cudaMallocAsync(&p, b, s));
    fill<<<16, 256, 0, s>>>(p, b / 4, 7000 + i);
    CKLAUNCH();
    checksum<<<16, 256, 0, s>>>(p, b / 4, async_sums + 2 * i);
    CKLAUNCH();
    CK(cudaFreeAsync(p, s));
  }
  CK(cudaStreamSynchronize(s));

  unsigned int* sums;
  CK(cudaMalloc(&sums, N * 2 * sizeof(unsigned int)));
  CK(cudaMemset(sums, 0, N * 2 * sizeof(unsigned int)));
  for (int i = 0; i < N; ++i) {
    checksum<<<32, 256>>>(buf[i], size[i] / 4, sums + 2 * i);
    CKLAUNCH();
  }
  CK(cudaDeviceSynchronize());
  Result r;
  r.add("sizes", size.data(), N, sizeof(size_t));
  r.add_device("checksums", sums, 2 * N);
  r.add_device("async_checksums", async_sums, 2 * 500);
  for (int i = 0; i < N; ++i) CK(cudaFree(buf[i]));
  CK(cudaFree(sums));
  CK(cudaFree(async_sums));
  CK(cudaStreamDestroy(s));
  finish(r);
  return 0;
}
