// build: -lcurand
// curand: cuRAND's host API generators and its device API.
//
//  - host API: Philox (normal, 64 M floats), MTGP32 (uniform, 32 M), XORWOW (log-normal,
//    16 M), MRG32k3a (32-bit integers, 16 M), Sobol32 quasi-random (4 dimensions, 16 M),
//    the first on a stream of the program;
//  - device API: 1 M Philox states initialised by curand_init in a kernel, each drawing 64
//    normals (curand_normal4), and 256 K XORWOW states drawing uniforms.
// Results: every output.
#define PROGRAM "curand"
#include <curand.h>
#include <curand_kernel.h>

#include "common.h"

__global__ void philox_init(curandStatePhilox4_32_10_t* st, int n, unsigned long long seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) curand_init(seed, i, 0, &st[i]);
}

__global__ void philox_draw(curandStatePhilox4_32_10_t* st, float4* out, int n, int per) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t s = st[i];
  for (int k = 0; k < per; ++k) out[(size_t)k * n + i] = curand_normal4(&s);
  st[i] = s;
}

__global__ void xorwow_init_draw(curandState* st, float* out, int n, int per, unsigned long long seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  curand_init(seed, i, 0, &st[i]);
  curandState s = st[i];
  for (int k = 0; k < per; ++k) out[(size_t)k * n + i] = curand_uniform(&s);
  st[i] = s;
}

static void host_gen(Result& r, const char* name, curandRngType_t type, size_t n, int kind, cudaStream_t s) {
  curandGenerator_t g;
  CKLIB(curandCreateGenerator(&g, type));
  if (type == CURAND_RNG_QUASI_SOBOL32) {
    CKLIB(curandSetQuasiRandomGeneratorDimensions(g, 4));
  } else {
    CKLIB(curandSetPseudoRandomGeneratorSeed(g, 1234ull));
  }
  if (s) CKLIB(curandSetStream(g, s));
  void* d;
  CK(cudaMalloc(&d, n * 4));
  switch (kind) {
    case 0: CKLIB(curandGenerateNormal(g, (float*)d, n, 0.0f, 1.0f)); break;
    case 1: CKLIB(curandGenerateUniform(g, (float*)d, n)); break;
    case 2: CKLIB(curandGenerateLogNormal(g, (float*)d, n, 0.0f, 0.5f)); break;
    default: CKLIB(curandGenerate(g, (unsigned int*)d, n)); break;
  }
  if (s) CK(cudaStreamSynchronize(s));
  CK(cudaDeviceSynchronize());
  r.add_device(name, (uint32_t*)d, n);
  CK(cudaFree(d));
  CKLIB(curandDestroyGenerator(g));
}

int main() {
  CK(cudaSetDevice(0));
  Result r;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  host_gen(r, "philox_normal", CURAND_RNG_PSEUDO_PHILOX4_32_10, 64u << 20, 0, s);
  host_gen(r, "mtgp32_uniform", CURAND_RNG_PSEUDO_MTGP32, 32u << 20, 1, nullptr);
  host_gen(r, "xorwow_lognormal", CURAND_RNG_PSEUDO_XORWOW, 16u << 20, 2, nullptr);
  host_gen(r, "mrg32k3a_bits", CURAND_RNG_PSEUDO_MRG32K3A, 16u << 20, 3, nullptr);
  host_gen(r, "sobol32_uniform", CURAND_RNG_QUASI_SOBOL32, 16u << 20, 1, nullptr);

  const int n = 1 << 20, per = 64;
  curandStatePhilox4_32_10_t* st;
  float4* out;
  CK(cudaMalloc(&st, (size_t)n * sizeof(*st)));
  CK(cudaMalloc(&out, (size_t)n * per * sizeof(float4) / 4));  // per/4 float4 per state
  philox_init<<<n / 256, 256>>>(st, n, 42);
  CKLAUNCH();
  philox_draw<<<n / 256, 256>>>(st, out, n, per / 4);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());
  r.add_device("device_philox", (float*)out, (size_t)n * per);

  const int nx = 1 << 18, perx = 32;
  curandState* xs;
  float* xo;
  CK(cudaMalloc(&xs, (size_t)nx * sizeof(*xs)));
  CK(cudaMalloc(&xo, (size_t)nx * perx * 4));
  xorwow_init_draw<<<nx / 256, 256>>>(xs, xo, nx, perx, 7);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());
  r.add_device("device_xorwow", xo, (size_t)nx * perx);
  CK(cudaFree(st));
  CK(cudaFree(out));
  CK(cudaFree(xs));
  CK(cudaFree(xo));
  CK(cudaStreamDestroy(s));
  finish(r);
  return 0;
}
