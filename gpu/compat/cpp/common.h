// Shared by the C++ programs of the compatibility corpus: status checks that exit with a
// message, and the result file.
//
// Every CUDA runtime, driver and library status is checked; a failure prints
// "<program>: <file>:<line>: <call>: <error>" on stderr and exits with status 1.
//
// The result (the path in GMUX_COMPAT_OUT) is raw bytes: for each output buffer, in
// order, its 64-bit FNV-1a hash over every byte, its length in bytes, then a sample of it
// (every `stride`-th element, at most 1 MiB), all little-endian. The runner compares the
// files byte for byte. It is written to a temporary name and renamed at the end, so a
// program that dies leaves no result.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef PROGRAM
#define PROGRAM "compat"
#endif

[[noreturn]] inline void compat_fail(const char* file, int line, const char* call, const char* what) {
  fprintf(stderr, "%s: %s:%d: %s: %s\n", PROGRAM, file, line, call, what);
  fflush(stderr);
  exit(1);
}

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    if (e_ != cudaSuccess) {                                                \
      std::string w_ = std::string(cudaGetErrorName(e_)) + " (" + cudaGetErrorString(e_) + ")"; \
      compat_fail(__FILE__, __LINE__, #x, w_.c_str());                      \
    }                                                                       \
  } while (0)

#define CKDRV(x)                                                            \
  do {                                                                      \
    CUresult r_ = (x);                                                      \
    if (r_ != CUDA_SUCCESS) {                                               \
      const char* n_ = nullptr;                                             \
      if (cuGetErrorName(r_, &n_) != CUDA_SUCCESS || n_ == nullptr) n_ = "unknown CUresult"; \
      std::string w_ = std::string(n_) + " (" + std::to_string((int)r_) + ")"; \
      compat_fail(__FILE__, __LINE__, #x, w_.c_str());                      \
    }                                                                       \
  } while (0)

// Library statuses: 0 is success for cuBLAS, cuFFT, cuRAND and cuSPARSE.
#define CKLIB(x)                                                            \
  do {                                                                      \
    long s_ = (long)(x);                                                    \
    if (s_ != 0) {                                                          \
      std::string w_ = "status " + std::to_string(s_);                      \
      compat_fail(__FILE__, __LINE__, #x, w_.c_str());                      \
    }                                                                       \
  } while (0)

// Checks a kernel launch (configuration errors now, execution errors at the sync).
#define CKLAUNCH() CK(cudaGetLastError())

#define REQUIRE(cond, msg)                                                  \
  do {                                                                      \
    if (!(cond)) compat_fail(__FILE__, __LINE__, #cond, msg);               \
  } while (0)

inline uint64_t fnv1a(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

class Result {
 public:
  // Adds a host buffer of `count` elements of `elem` bytes.
  void add(const char* name, const void* host, size_t count, size_t elem) {
    size_t bytes = count * elem;
    uint64_t h = fnv1a(host, bytes);
    size_t stride = 1;
    while (count / stride * elem > (1u << 20)) stride *= 2;
    put(&h, 8);
    uint64_t b = bytes;
    put(&b, 8);
    const unsigned char* p = static_cast<const unsigned char*>(host);
    for (size_t i = 0; i < count; i += stride) put(p + i * elem, elem);
    printf("result %s bytes=%zu fnv=%016llx\n", name, bytes, (unsigned long long)h);
  }

  // Copies `count` elements from device memory and adds them.
  template <typename T>
  void add_device(const char* name, const T* dev, size_t count) {
    std::vector<T> h(count);
    CK(cudaMemcpy(h.data(), dev, count * sizeof(T), cudaMemcpyDeviceToHost));
    add(name, h.data(), count, sizeof(T));
  }

  template <typename T>
  void add_value(const char* name, T v) { add(name, &v, 1, sizeof(T)); }

  // Writes the file named by GMUX_COMPAT_OUT (nothing when it is unset).
  void write() {
    const char* path = getenv("GMUX_COMPAT_OUT");
    if (path == nullptr || *path == 0) {
      printf("saved=nothing (GMUX_COMPAT_OUT unset)\n");
      return;
    }
    std::string tmp = std::string(path) + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    REQUIRE(f != nullptr, "cannot open the result file");
    REQUIRE(fwrite(buf_.data(), 1, buf_.size(), f) == buf_.size(), "short write of the result file");
    REQUIRE(fclose(f) == 0, "cannot close the result file");
    REQUIRE(rename(tmp.c_str(), path) == 0, "cannot rename the result file");
    printf("saved=%s bytes=%zu\n", path, buf_.size());
  }

 private:
  void put(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  std::vector<unsigned char> buf_;
};

// Deterministic host data: a 64-bit LCG.
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(s >> 33);
  }
  float uniform() { return (next() & 0xFFFFFF) / 16777216.0f; }  // [0, 1)
  float symmetric() { return uniform() * 2.0f - 1.0f; }          // [-1, 1)
};

// Ends the program: synchronizes, checks for errors, prints status=ok.
inline void finish(Result& r) {
  CK(cudaDeviceSynchronize());
  r.write();
  printf("status=ok\n");
}
