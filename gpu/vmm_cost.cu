// vmm_cost: what the CUDA VMM calls the gmux mover depends on cost, per 2 MiB chunk.
//
//   nvcc -O2 -o vmm_cost gpu/vmm_cost.cu -lcuda
//   vmm_cost [total_mib]        (default 2048)
//
// Maps `total` bytes three ways and times cuMemMap, cuMemSetAccess and cuMemUnmap:
//   chunks   one 2 MiB handle per chunk, one map per chunk, access set once for the range
//   handles  handles of 32 MiB, one map per handle
//   slices   handles of 32 MiB mapped in 2 MiB slices (offset mapping), one map per slice
// and prints microseconds per 2 MiB for each call (or that the driver refuses a way). Whether access costs per mapping or
// per page decides whether mapping runs of chunks as one would make migration cheaper.

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cu_check.h"

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static const size_t CHUNK = 2u << 20;

// Maps [base, base+total) with handles of `handle_bytes`, each mapped in pieces of
// `map_bytes`; prints microseconds per 2 MiB for map, access, unmap.
static void trial(const char* name, CUdeviceptr base, size_t total, size_t handle_bytes, size_t map_bytes,
                  int dev) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  std::vector<CUmemGenericAllocationHandle> handles(total / handle_bytes);
  for (auto& h : handles) CK(cuMemCreate(&h, handle_bytes, &prop, 0));
  double t0 = now_s();
  size_t mapped = 0;  // bytes mapped from base so far
  for (size_t i = 0; i < handles.size(); i++)
    for (size_t off = 0; off < handle_bytes; off += map_bytes) {
      CUresult r = cuMemMap(base + mapped, map_bytes, off, handles[i], 0);
      if (r != CUDA_SUCCESS) {
        const char* s = nullptr;
        cuGetErrorName(r, &s);
        printf("vmm: %-8s refused by the driver: %s\n", name, s);
        for (size_t u = 0; u < mapped; u += map_bytes) CK(cuMemUnmap(base + u, map_bytes));
        for (auto h : handles) CK(cuMemRelease(h));
        return;
      }
      mapped += map_bytes;
    }
  double t1 = now_s();
  CUmemAccessDesc desc = {};
  desc.location = prop.location;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(base, total, &desc, 1));
  double t2 = now_s();
  CK(cuMemsetD8(base, 7, total));
  CK(cuCtxSynchronize());
  double t3 = now_s();
  for (size_t off = 0; off < total; off += map_bytes) CK(cuMemUnmap(base + off, map_bytes));
  double t4 = now_s();
  for (auto h : handles) CK(cuMemRelease(h));
  double per = 1e6 / (double)(total / CHUNK);
  printf("vmm: %-8s map_us=%.2f access_us=%.2f unmap_us=%.2f (per 2 MiB; %zu maps)\n", name,
         (t1 - t0) * per, (t2 - t1) * per, (t4 - t3) * per, total / map_bytes);
}

int main(int argc, char** argv) {
  size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 2048) << 20;
  total = total / (32u << 20) * (32u << 20);
  CK(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUdeviceptr base;
  CK(cuMemAddressReserve(&base, total, 32u << 20, 0, 0));
  trial("warmup", base, total, CHUNK, CHUNK, dev);
  for (int r = 0; r < 2; r++) {
    trial("chunks", base, total, CHUNK, CHUNK, dev);
    trial("handles", base, total, 32u << 20, 32u << 20, dev);
    trial("slices", base, total, 32u << 20, CHUNK, dev);
  }
  CK(cuMemAddressFree(base, total));
  return 0;
}
