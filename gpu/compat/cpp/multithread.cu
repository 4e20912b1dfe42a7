// multithread: launches from several host threads at once, two streams each.
//
// Four std::threads share the device. Each allocates its own four 32 MiB buffers and
// runs 40 iterations of: a kernel on its first stream, an event, its second stream
// waiting for it, a device-to-device copy and a second kernel there, an event back.
// Thread 3 also allocates and frees an 8 MiB scratch buffer every iteration while the
// others launch. Each thread copies its buffers back to pinned host memory at the end.
// Results: every thread's buffers, in thread order.
#define PROGRAM "multithread"
#include <thread>

#include "common.h"

__global__ void step_a(float* dst, const float* src, size_t n, float k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i] * k + 1.0f / (1.0f + fabsf(dst[i]));
}

__global__ void step_b(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = 0.5f * x[i] + 0.25f * y[i];
}

__global__ void init(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (float)(((uint32_t)i * 2654435761u + seed) & 0xFFFF) / 65536.0f;
}

static const size_t ELEMS = (32u << 20) / 4;
static const int ITERS = 40;

static void worker(int t, std::vector<std::vector<float>>* out) {
  CK(cudaSetDevice(0));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  float* b[4];
  for (int i = 0; i < 4; ++i) {
    CK(cudaMalloc(&b[i], ELEMS * 4));
    init<<<256, 256, 0, s0>>>(b[i], ELEMS, 97 * t + i);
    CKLAUNCH();
  }
  for (int it = 0; it < ITERS; ++it) {
    step_a<<<256, 256, 0, s0>>>(b[it % 4], b[(it + 1) % 4], ELEMS, 0.9f + 0.01f * t);
    CKLAUNCH();
    CK(cudaEventRecord(e0, s0));
    CK(cudaStreamWaitEvent(s1, e0, 0));
    CK(cudaMemcpyAsync(b[(it + 2) % 4], b[it % 4], ELEMS * 4, cudaMemcpyDeviceToDevice, s1));
    step_b<<<256, 256, 0, s1>>>(b[(it + 3) % 4], b[(it + 2) % 4], ELEMS);
    CKLAUNCH();
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s0, e1, 0));
    if (t == 3) {
      float* scratch;
      CK(cudaMalloc(&scratch, 8u << 20));
      init<<<64, 256, 0, s0>>>(scratch, (8u << 20) / 4, it);
      CKLAUNCH();
      step_b<<<64, 256, 0, s0>>>(b[0], scratch, (8u << 20) / 4);
      CKLAUNCH();
      CK(cudaStreamSynchronize(s0));
      CK(cudaFree(scratch));
    }
  }
  CK(cudaStreamSynchronize(s0));
  CK(cudaStreamSynchronize(s1));
  float* pinned;
  CK(cudaMallocHost(&pinned, ELEMS * 4));
  for (int i = 0; i < 4; ++i) {
    CK(cudaMemcpyAsync(pinned, b[i], ELEMS * 4, cudaMemcpyDeviceToHost, s1));
    CK(cudaStreamSynchronize(s1));
    (*out)[4 * t + i].assign(pinned, pinned + ELEMS);
    CK(cudaFree(b[i]));
  }
  CK(cudaFreeHost(pinned));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(s0));
  CK(cudaStreamDestroy(s1));
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  const int T = 4;
  std::vector<std::vector<float>> out(4 * T);
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) threads.emplace_back(worker, t, &out);
  for (auto& th : threads) th.join();
  Result r;
  for (auto& v : out) r.add("buffer", v.data(), v.size(), 4);
  finish(r);
  return 0;
}
