// peer_probe: what the driver does with copies and kernels between VMM memory (the kind
// gmux maps) of two GPUs, each mapping granted access for its own device alone.
//
//   nvcc -O2 -o peer_probe gpu/peer_probe.cu -lcuda
//   peer_probe
//
// Prints one line per case: ok (the bytes arrived), WRONG (they did not) or the error.
// A kernel on device 1 reading device 0's memory without access faults, which ends
// the context: that case runs alone, as `peer_probe fault`.

#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cu_check.h"

static const size_t BYTES = 8u << 20;
static CUcontext ctx[2];

// A mapping of BYTES on `dev`, with access for the devices in `access`.
static CUdeviceptr vmm(int dev, std::vector<int> access) {
  CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  CUmemGenericAllocationHandle h;
  CK(cuMemCreate(&h, BYTES, &p, 0));
  CUdeviceptr d;
  CK(cuMemAddressReserve(&d, BYTES, 2u << 20, 0, 0));
  CK(cuMemMap(d, BYTES, 0, h, 0));
  std::vector<CUmemAccessDesc> a;
  for (int x : access) {
    CUmemAccessDesc e = {};
    e.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    e.location.id = x;
    e.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    a.push_back(e);
  }
  CK(cuMemSetAccess(d, BYTES, a.data(), a.size()));
  CK(cuMemRelease(h));
  return d;
}

// Writes `v` over the source (on device 0), from device 0's context.
static void fill(CUdeviceptr d, unsigned char v) {
  std::vector<unsigned char> h(BYTES, v);
  CK(cuCtxPushCurrent(ctx[0]));
  CK(cuMemcpyHtoD(d, h.data(), BYTES));
  CK(cuCtxPopCurrent(nullptr));
}

// Whether `d` (on device `dev`) holds `v` after a copy that returned `r`.
static const char* check(CUresult r, CUdeviceptr d, unsigned char v, int dev = 1) {
  static char buf[64];
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorName(r, &s);
    snprintf(buf, sizeof buf, "error %s", s);
    return buf;
  }
  std::vector<unsigned char> h(BYTES);
  CK(cuCtxPushCurrent(ctx[dev]));
  CUresult q = cuMemcpyDtoH(h.data(), d, BYTES);
  CK(cuCtxPopCurrent(nullptr));
  if (q != CUDA_SUCCESS) {
    snprintf(buf, sizeof buf, "readback error %d", q);
    return buf;
  }
  for (size_t i = 0; i < BYTES; i++)
    if (h[i] != v) return "WRONG";
  return "ok";
}

__global__ void copy_kernel(unsigned char* dst, const unsigned char* src, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

// One pair: source on device 0, destination on device 1; `peer`: source access for both.
static void copies(const char* label, bool peer) {
  CK(cuCtxSetCurrent(ctx[0]));
  CUdeviceptr a = peer ? vmm(0, {0, 1}) : vmm(0, {0});
  CK(cuCtxSetCurrent(ctx[1]));
  CUdeviceptr b = peer ? vmm(1, {0, 1}) : vmm(1, {1});
  CUstream s1;
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  unsigned char v = 1;
  std::vector<unsigned char> up(BYTES, 7);
  printf("%-8s cuMemcpyHtoD to 0 (ctx 1 current) %s\n", label, check(cuMemcpyHtoD(a, up.data(), BYTES), a, 7, 0));
  fill(a, v);
  printf("%-8s cuMemcpyDtoD (ctx 1 current)      %s\n", label, check(cuMemcpyDtoD(b, a, BYTES), b, v));
  fill(a, ++v);
  CUresult r = cuMemcpyDtoDAsync(b, a, BYTES, s1);
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s1);
  printf("%-8s cuMemcpyDtoDAsync (stream of 1)   %s\n", label, check(r, b, v));
  fill(a, ++v);
  printf("%-8s cuMemcpy (ctx 1 current)          %s\n", label, check(cuMemcpy(b, a, BYTES), b, v));
  fill(a, ++v);
  printf("%-8s cuMemcpyPeer                      %s\n", label, check(cuMemcpyPeer(b, ctx[1], a, ctx[0], BYTES), b, v));
  fill(a, ++v);
  r = cuMemcpyPeerAsync(b, ctx[1], a, ctx[0], BYTES, s1);
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s1);
  printf("%-8s cuMemcpyPeerAsync (stream of 1)   %s\n", label, check(r, b, v));
  CK(cuCtxSetCurrent(ctx[0]));
  fill(a, ++v);
  printf("%-8s cuMemcpyDtoD (ctx 0 current)      %s\n", label, check(cuMemcpyDtoD(b, a, BYTES), b, v));
  if (peer) {
    CK(cuCtxSetCurrent(ctx[1]));
    fill(a, ++v);
    copy_kernel<<<64, 256>>>((unsigned char*)b, (const unsigned char*)a, BYTES);
    printf("%-8s kernel on 1 reads 0's memory      %s\n", label, check(cuCtxSynchronize(), b, v));
  }
}

// Microseconds per 2 MiB chunk to map and set access for `ndev` devices, on device 0.
static double access_cost(int ndev) {
  const int N = 256;
  const size_t C = 2u << 20;
  CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  std::vector<CUmemGenericAllocationHandle> h(N);
  for (auto& x : h) CK(cuMemCreate(&x, C, &p, 0));
  CUdeviceptr base;
  CK(cuMemAddressReserve(&base, N * C, C, 0, 0));
  CUmemAccessDesc a[2] = {};
  for (int i = 0; i < 2; i++) {
    a[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a[i].location.id = i;
    a[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; i++) {
    CK(cuMemMap(base + i * C, C, 0, h[i], 0));
    CK(cuMemSetAccess(base + i * C, C, a, ndev));
  }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
  CK(cuMemUnmap(base, N * C));
  for (auto x : h) CK(cuMemRelease(x));
  CK(cuMemAddressFree(base, N * C));
  return us;
}

// `peer_probe fault`: a kernel on 1 over 0's memory mapped for 0 alone.
static int fault() {
  for (int i = 0; i < 2; i++) CK(cuDevicePrimaryCtxRetain(&ctx[i], i));
  CK(cuCtxSetCurrent(ctx[0]));
  CUdeviceptr a = vmm(0, {0});
  fill(a, 9);
  CK(cuCtxSetCurrent(ctx[1]));
  CUdeviceptr b = vmm(1, {1});
  copy_kernel<<<64, 256>>>((unsigned char*)b, (const unsigned char*)a, BYTES);
  printf("own      kernel on 1 reads 0's memory      %s\n", check(cuCtxSynchronize(), b, 9));
  return 0;
}

int main(int argc, char** argv) {
  CK(cuInit(0));
  if (argc > 1 && !strcmp(argv[1], "fault")) return fault();
  int n = 0;
  CK(cuDeviceGetCount(&n));
  if (n < 2) {
    printf("peer_probe: needs 2 GPUs, found %d\n", n);
    return 2;
  }
  int can01 = 0, can10 = 0;
  CK(cuDeviceCanAccessPeer(&can01, 0, 1));
  CK(cuDeviceCanAccessPeer(&can10, 1, 0));
  printf("peer access possible: 0->1 %d, 1->0 %d\n", can01, can10);
  for (int i = 0; i < 2; i++) {
    CUdevice d;
    CK(cuDeviceGet(&d, i));
    CK(cuDevicePrimaryCtxRetain(&ctx[i], d));
  }
  CK(cuCtxSetCurrent(ctx[0]));
  access_cost(1);
  double one = access_cost(1), two = access_cost(2);
  printf("map+access per 2 MiB: %.1f us for device 0 alone, %.1f us for devices 0 and 1\n", one, two);
  copies("own", false);
  copies("both", true);
  CK(cuCtxSetCurrent(ctx[1]));
  CK(cuCtxEnablePeerAccess(ctx[0], 0));
  CK(cuCtxSetCurrent(ctx[0]));
  CK(cuCtxEnablePeerAccess(ctx[1], 0));
  copies("own+ctx", false);
  return 0;
}
