// build: -lcufft
// cufft: cuFFT plans and transforms.
//
//  - a 256^3 complex-to-complex 3D plan, forward then inverse, in place;
//  - a 4096 x 4096 real-to-complex 2D plan and its complex-to-real inverse, out of place;
//  - cufftPlanMany: 4096 batched 1D transforms of 4096 points, on a stream of the program;
//  - the same 1D batch through a plan made with cufftSetAutoAllocation(0) and a work area
//    the program allocates (cufftSetWorkArea).
// Results: the spectra and the round trips.
#define PROGRAM "cufft"
#include <cufft.h>

#include "common.h"

static void fill_host(std::vector<float>& v, uint64_t seed) {
  Lcg rng(seed);
  for (auto& x : v) x = rng.symmetric();
}

int main() {
  CK(cudaSetDevice(0));
  Result r;

  // 3D C2C in place.
  const int N3 = 256;
  const size_t n3 = (size_t)N3 * N3 * N3;
  std::vector<float> h(2 * n3);
  fill_host(h, 1);
  cufftComplex* vol;
  CK(cudaMalloc(&vol, n3 * sizeof(cufftComplex)));
  CK(cudaMemcpy(vol, h.data(), n3 * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  cufftHandle p3;
  CKLIB(cufftPlan3d(&p3, N3, N3, N3, CUFFT_C2C));
  CKLIB(cufftExecC2C(p3, vol, vol, CUFFT_FORWARD));
  CK(cudaDeviceSynchronize());
  r.add_device("c2c3d_forward", (float*)vol, 2 * n3);
  CKLIB(cufftExecC2C(p3, vol, vol, CUFFT_INVERSE));
  CK(cudaDeviceSynchronize());
  r.add_device("c2c3d_roundtrip", (float*)vol, 2 * n3);
  CKLIB(cufftDestroy(p3));
  CK(cudaFree(vol));

  // 2D R2C / C2R out of place.
  const int W = 4096, H = 4096;
  std::vector<float> img((size_t)W * H);
  fill_host(img, 2);
  float *real_in, *real_back;
  cufftComplex* spec;
  CK(cudaMalloc(&real_in, img.size() * 4));
  CK(cudaMalloc(&real_back, img.size() * 4));
  CK(cudaMalloc(&spec, (size_t)H * (W / 2 + 1) * sizeof(cufftComplex)));
  CK(cudaMemcpy(real_in, img.data(), img.size() * 4, cudaMemcpyHostToDevice));
  cufftHandle pr, pc;
  CKLIB(cufftPlan2d(&pr, H, W, CUFFT_R2C));
  CKLIB(cufftPlan2d(&pc, H, W, CUFFT_C2R));
  CKLIB(cufftExecR2C(pr, real_in, spec));
  CKLIB(cufftExecC2R(pc, spec, real_back));
  CK(cudaDeviceSynchronize());
  r.add_device("r2c2d", (float*)spec, (size_t)H * (W / 2 + 1) * 2);
  r.add_device("c2r2d", real_back, img.size());
  CKLIB(cufftDestroy(pr));
  CKLIB(cufftDestroy(pc));
  CK(cudaFree(real_in));
  CK(cudaFree(real_back));
  CK(cudaFree(spec));

  // Batched 1D on a stream, with the library's work area and with the program's own.
  const int L = 4096, B = 4096;
  std::vector<float> sig((size_t)2 * L * B);
  fill_host(sig, 3);
  cufftComplex *in, *out1, *out2;
  CK(cudaMalloc(&in, (size_t)L * B * sizeof(cufftComplex)));
  CK(cudaMalloc(&out1, (size_t)L * B * sizeof(cufftComplex)));
  CK(cudaMalloc(&out2, (size_t)L * B * sizeof(cufftComplex)));
  CK(cudaMemcpy(in, sig.data(), (size_t)L * B * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dims[1] = {L};
  cufftHandle pm;
  CKLIB(cufftPlanMany(&pm, 1, dims, nullptr, 1, L, nullptr, 1, L, CUFFT_C2C, B));
  CKLIB(cufftSetStream(pm, s));
  CKLIB(cufftExecC2C(pm, in, out1, CUFFT_FORWARD));
  cufftHandle pw;
  CKLIB(cufftCreate(&pw));
  CKLIB(cufftSetAutoAllocation(pw, 0));
  size_t work_size = 0;
  CKLIB(cufftMakePlanMany(pw, 1, dims, nullptr, 1, L, nullptr, 1, L, CUFFT_C2C, B, &work_size));
  void* work = nullptr;
  if (work_size > 0) CK(cudaMalloc(&work, work_size));
  CKLIB(cufftSetWorkArea(pw, work));
  CKLIB(cufftSetStream(pw, s));
  CKLIB(cufftExecC2C(pw, in, out2, CUFFT_INVERSE));
  CK(cudaStreamSynchronize(s));
  printf("work_area_bytes=%zu\n", work_size);
  r.add_device("batched_forward", (float*)out1, (size_t)2 * L * B);
  r.add_device("batched_inverse_own_work_area", (float*)out2, (size_t)2 * L * B);
  CKLIB(cufftDestroy(pm));
  CKLIB(cufftDestroy(pw));
  if (work) CK(cudaFree(work));
  CK(cudaFree(in));
  CK(cudaFree(out1));
  CK(cudaFree(out2));
  CK(cudaStreamDestroy(s));
  finish(r);
  return 0;
}
