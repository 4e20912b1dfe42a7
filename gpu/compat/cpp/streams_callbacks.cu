// streams_callbacks: four non-blocking streams with events between them and host
// functions in their queues.
//
// Each stream owns 8 chunks of 8 MiB (one cudaMalloc each) and pinned host memory. For
// each chunk, on its stream: an async host-to-device copy, a kernel, an event; the next
// stream waits for that event (cudaStreamWaitEvent) and folds the chunk into its own
// accumulator; cudaLaunchHostFunc appends the chunk number to the stream's log; an async
// device-to-host copy brings the chunk back. Results: every chunk as copied back, the
// accumulators and the host functions' logs (per stream, in order).
#define PROGRAM "streams_callbacks"
#include <atomic>

#include "common.h"

struct Log {
  int stream;
  std::vector<int> order;  // chunk numbers in the order the host functions ran
  std::atomic<int>* calls;
};

struct Entry {
  Log* log;
  int chunk;
};

static void CUDART_CB host_fn(void* p) {
  Entry* e = static_cast<Entry*>(p);
  e->log->order.push_back(e->chunk);  // one stream's host functions run in order, one at a time
  e->log->calls->fetch_add(1);
}

__global__ void transform(float* x, size_t n, float k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = x[i] * k + 0.5f * sinf(x[i]);
}

__global__ void fold(float* acc, const float* x, size_t n, float w) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    acc[i] = acc[i] * 0.75f + w * x[i];
}

int main() {
  CK(cudaSetDevice(0));
  const int S = 4, C = 8;
  const size_t elems = (8u << 20) / 4;
  cudaStream_t st[S];
  float* chunk[S][C];
  float* acc[S];
  float *hin[S], *hout[S];
  cudaEvent_t ev[S][C];
  std::atomic<int> calls{0};
  Log logs[S];
  std::vector<Entry> entries(S * C);
  for (int s = 0; s < S; ++s) {
    CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
    CK(cudaMalloc(&acc[s], elems * 4));
    CK(cudaMemset(acc[s], 0, elems * 4));
    CK(cudaMallocHost(&hin[s], C * elems * 4));
    CK(cudaMallocHost(&hout[s], C * elems * 4));
    Lcg rng(100 + s);
    for (size_t i = 0; i < C * elems; ++i) hin[s][i] = rng.symmetric();
    for (int c = 0; c < C; ++c) {
      CK(cudaMalloc(&chunk[s][c], elems * 4));
      CK(cudaEventCreateWithFlags(&ev[s][c], cudaEventDisableTiming));
    }
    logs[s].stream = s;
    logs[s].calls = &calls;
  }
  CK(cudaDeviceSynchronize());  // the memsets on the legacy stream before the non-blocking streams start
  for (int c = 0; c < C; ++c) {
    for (int s = 0; s < S; ++s) {
      CK(cudaMemcpyAsync(chunk[s][c], hin[s] + c * elems, elems * 4, cudaMemcpyHostToDevice, st[s]));
      transform<<<512, 256, 0, st[s]>>>(chunk[s][c], elems, 1.0f + 0.125f * s);
      CKLAUNCH();
      CK(cudaEventRecord(ev[s][c], st[s]));
    }
    for (int s = 0; s < S; ++s) {
      int from = (s + S - 1) % S;
      CK(cudaStreamWaitEvent(st[s], ev[from][c], 0));
      fold<<<512, 256, 0, st[s]>>>(acc[s], chunk[from][c], elems, 1.0f / (c + 1));
      CKLAUNCH();
      Entry* e = &entries[s * C + c];
      e->log = &logs[s];
      e->chunk = c;
      CK(cudaLaunchHostFunc(st[s], host_fn, e));
      CK(cudaMemcpyAsync(hout[s] + c * elems, chunk[s][c], elems * 4, cudaMemcpyDeviceToHost, st[s]));
    }
  }
  for (int s = 0; s < S; ++s) CK(cudaStreamSynchronize(st[s]));
  printf("host_functions=%d\n", calls.load());
  REQUIRE(calls.load() == S * C, "not every host function ran");

  Result r;
  for (int s = 0; s < S; ++s) {
    r.add("chunks", hout[s], C * elems, 4);
    r.add_device("acc", acc[s], elems);
    r.add("log", logs[s].order.data(), logs[s].order.size(), sizeof(int));
  }
  for (int s = 0; s < S; ++s) {
    for (int c = 0; c < C; ++c) {
      CK(cudaFree(chunk[s][c]));
      CK(cudaEventDestroy(ev[s][c]));
    }
    CK(cudaFree(acc[s]));
    CK(cudaFreeHost(hin[s]));
    CK(cudaFreeHost(hout[s]));
    CK(cudaStreamDestroy(st[s]));
  }
  finish(r);
  return 0;
}
