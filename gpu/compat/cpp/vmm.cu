// build: -lcuda
// vmm: an application that manages device memory itself through the CUDA VMM driver API.
//
// Reserves a 1 GiB address range (cuMemAddressReserve), creates 16 physical handles of
// 32 MiB (cuMemCreate), maps them into the first half (cuMemMap) and grants access
// (cuMemSetAccess); kernels write and read through those addresses. Eight ordinary
// cudaMalloc buffers of 64 MiB exchange data with the mapped range (copies and kernels
// that read one and write the other). Then the same handles are mapped a second time, in
// reverse order, into the second half; a kernel checks that each piece shows the data of
// the handle now behind it; the first mapping is removed and the handles released (the
// memory lives on through the second mapping), which is written once more. Results: the
// mapped range and the plain buffers, the mismatch count.
#define PROGRAM "vmm"
#include "common.h"

__device__ __forceinline__ uint32_t mixbits(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

__global__ void fill(uint32_t* p, size_t n, uint64_t first, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = mixbits((first + i) ^ ((uint64_t)seed << 40));
}

__global__ void combine(uint32_t* dst, const uint32_t* a, const uint32_t* b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = a[i] * 3u + (b[i] >> 1);
}

// Piece c of the remapped range holds handle nchunks-1-c, written by `fill` at its first mapping.
__global__ void verify_reversed(const uint32_t* p, size_t chunk_elems, int nchunks, uint32_t seed,
                                unsigned long long* bad) {
  size_t n = chunk_elems * nchunks;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t c = i / chunk_elems, off = i % chunk_elems;
    size_t orig = (size_t)(nchunks - 1 - c) * chunk_elems + off;
    if (p[i] != mixbits((uint64_t)orig ^ ((uint64_t)seed << 40))) atomicAdd(bad, 1ull);
  }
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));  // the runtime's primary context becomes current for the driver calls
  CUdevice dev;
  CKDRV(cuCtxGetDevice(&dev));
  int vmm = 0;
  CKDRV(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  REQUIRE(vmm == 1, "the device does not support virtual memory management");

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CKDRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  const size_t want = 32ull << 20;
  const size_t chunk = (want + gran - 1) / gran * gran;
  const int nchunks = 16;
  const size_t total = chunk * nchunks;
  const size_t chunk_elems = chunk / 4, n = total / 4;
  printf("granularity=%zu chunk=%zu total=%zu\n", gran, chunk, total);

  CUdeviceptr base = 0;
  CKDRV(cuMemAddressReserve(&base, 2 * total, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> h(nchunks);
  for (int i = 0; i < nchunks; ++i) {
    CKDRV(cuMemCreate(&h[i], chunk, &prop, 0));
    CKDRV(cuMemMap(base + i * chunk, chunk, 0, h[i], 0));
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CKDRV(cuMemSetAccess(base, total, &access, 1));
  uint32_t* mapped = reinterpret_cast<uint32_t*>(base);

  const uint32_t seed = 7;
  fill<<<1024, 256>>>(mapped, n, 0, seed);
  CKLAUNCH();

  // Ordinary allocations (virtualized by gmux) exchanging data with the mapped range.
  const int nplain = 8;
  const size_t plain_elems = n / nplain;
  std::vector<uint32_t*> plain(nplain);
  for (int i = 0; i < nplain; ++i) {
    CK(cudaMalloc(&plain[i], plain_elems * 4));
    CK(cudaMemcpy(plain[i], mapped + i * plain_elems, plain_elems * 4, cudaMemcpyDeviceToDevice));
    fill<<<256, 256>>>(plain[i], plain_elems / 2, 1ull << 36, seed + 1 + i);  // overwrite the first half
    CKLAUNCH();
  }
  unsigned long long* bad = nullptr;
  CK(cudaMalloc(&bad, sizeof(*bad)));
  CK(cudaMemset(bad, 0, sizeof(*bad)));

  // The same handles mapped again, in reverse order, into the second half.
  CUdeviceptr base2 = base + total;
  for (int i = 0; i < nchunks; ++i) CKDRV(cuMemMap(base2 + i * chunk, chunk, 0, h[nchunks - 1 - i], 0));
  CKDRV(cuMemSetAccess(base2, total, &access, 1));
  uint32_t* mapped2 = reinterpret_cast<uint32_t*>(base2);
  verify_reversed<<<1024, 256>>>(mapped2, chunk_elems, nchunks, seed, bad);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());

  // Drop the first mapping and the handles: the memory lives on through the second.
  CKDRV(cuMemUnmap(base, total));
  for (int i = 0; i < nchunks; ++i) CKDRV(cuMemRelease(h[i]));
  for (int i = 0; i < nplain; ++i) {
    combine<<<256, 256>>>(mapped2 + i * plain_elems, mapped2 + i * plain_elems, plain[i], plain_elems);
    CKLAUNCH();
    combine<<<256, 256>>>(plain[i], plain[i], mapped2 + ((i + 3) % nplain) * plain_elems, plain_elems);
    CKLAUNCH();
  }
  // Host <-> mapped range copies, pinned and async.
  uint32_t* pinned = nullptr;
  CK(cudaMallocHost(&pinned, plain_elems * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpyAsync(pinned, mapped2, plain_elems * 4, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < plain_elems; ++i) pinned[i] ^= 0x5a5a5a5au;
  CK(cudaMemcpyAsync(mapped2 + (nplain - 1) * plain_elems, pinned, plain_elems * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemsetAsync(mapped2 + plain_elems, 0x11, 4096 * 4, s));
  CK(cudaStreamSynchronize(s));

  unsigned long long mismatches = 0;
  CK(cudaMemcpy(&mismatches, bad, sizeof(mismatches), cudaMemcpyDeviceToHost));
  printf("remap_mismatches=%llu\n", mismatches);
  // A mismatch is reported through the result (compared with the native run), not as a failure.

  Result r;
  r.add_value("mismatches", mismatches);
  r.add_device("mapped", mapped2, n);
  for (int i = 0; i < nplain; ++i) r.add_device("plain", plain[i], plain_elems);

  CKDRV(cuMemUnmap(base2, total));
  CKDRV(cuMemAddressFree(base, 2 * total));
  for (int i = 0; i < nplain; ++i) CK(cudaFree(plain[i]));
  CK(cudaFree(bad));
  CK(cudaFreeHost(pinned));
  CK(cudaStreamDestroy(s));
  finish(r);
  return 0;
}
