// texture: texture objects over linear, pitched 2D and array memory.
//
//  - cudaResourceTypeLinear over a 32 M-float cudaMalloc buffer, read with tex1Dfetch;
//  - cudaResourceTypePitch2D over a 4096 x 4096 cudaMallocPitch image, read with tex2D
//    under bilinear filtering (clamped addresses, unnormalized coordinates);
//  - cudaResourceTypeArray over a 2048 x 2048 cudaArray (cudaMemcpy2DToArray), read with
//    tex2D with normalized coordinates and wrap addressing.
// Results: the three kernels' outputs.
#define PROGRAM "texture"
#include "common.h"

__global__ void fetch_linear(cudaTextureObject_t t, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = 2.0f * tex1Dfetch<float>(t, i) + tex1Dfetch<float>(t, (int)(((long long)i * 7) % n));
}

__global__ void sample_pitch(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[(size_t)y * w + x] = tex2D<float>(t, x + 0.75f, y + 0.25f) - tex2D<float>(t, x * 0.5f, y * 0.5f);
}

__global__ void sample_array(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[(size_t)y * w + x] = tex2D<float>(t, (x + 0.5f) / w * 1.5f, (y + 0.5f) / h * 1.25f);
}

static cudaTextureDesc tex_desc(cudaTextureFilterMode filter, cudaTextureAddressMode addr, int normalized) {
  cudaTextureDesc d;
  memset(&d, 0, sizeof(d));
  d.addressMode[0] = addr;
  d.addressMode[1] = addr;
  d.filterMode = filter;
  d.readMode = cudaReadModeElementType;
  d.normalizedCoords = normalized;
  return d;
}

int main() {
  CK(cudaSetDevice(0));
  Result r;

  // Linear.
  const int n = 32 << 20;
  std::vector<float> host(n);
  Lcg rng(5);
  for (int i = 0; i < n; ++i) host[i] = rng.symmetric();
  float *lin, *lin_out;
  CK(cudaMalloc(&lin, (size_t)n * 4));
  CK(cudaMalloc(&lin_out, (size_t)n * 4));
  CK(cudaMemcpy(lin, host.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
  cudaResourceDesc res;
  memset(&res, 0, sizeof(res));
  res.resType = cudaResourceTypeLinear;
  res.res.linear.devPtr = lin;
  res.res.linear.desc = cudaCreateChannelDesc<float>();
  res.res.linear.sizeInBytes = (size_t)n * 4;
  cudaTextureDesc td = tex_desc(cudaFilterModePoint, cudaAddressModeClamp, 0);
  cudaTextureObject_t t_lin;
  CK(cudaCreateTextureObject(&t_lin, &res, &td, nullptr));
  fetch_linear<<<4096, 256>>>(t_lin, lin_out, n);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());
  r.add_device("linear", lin_out, n);

  // Pitched 2D with bilinear filtering.
  const int W = 4096, H = 4096;
  float* img;
  size_t pitch;
  CK(cudaMallocPitch(&img, &pitch, W * sizeof(float), H));
  CK(cudaMemcpy2D(img, pitch, host.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  memset(&res, 0, sizeof(res));
  res.resType = cudaResourceTypePitch2D;
  res.res.pitch2D.devPtr = img;
  res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  res.res.pitch2D.width = W;
  res.res.pitch2D.height = H;
  res.res.pitch2D.pitchInBytes = pitch;
  td = tex_desc(cudaFilterModeLinear, cudaAddressModeClamp, 0);
  cudaTextureObject_t t_pitch;
  CK(cudaCreateTextureObject(&t_pitch, &res, &td, nullptr));
  float* img_out;
  CK(cudaMalloc(&img_out, (size_t)W * H * 4));
  sample_pitch<<<dim3(W / 32, H / 8), dim3(32, 8)>>>(t_pitch, img_out, W, H);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());
  r.add_device("pitch2d", img_out, (size_t)W * H);

  // cudaArray with normalized coordinates and wrap addressing.
  const int AW = 2048, AH = 2048;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CK(cudaMallocArray(&arr, &fd, AW, AH));
  CK(cudaMemcpy2DToArray(arr, 0, 0, host.data() + 12345, AW * sizeof(float), AW * sizeof(float), AH, cudaMemcpyHostToDevice));
  memset(&res, 0, sizeof(res));
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  td = tex_desc(cudaFilterModeLinear, cudaAddressModeWrap, 1);
  cudaTextureObject_t t_arr;
  CK(cudaCreateTextureObject(&t_arr, &res, &td, nullptr));
  float* arr_out;
  CK(cudaMalloc(&arr_out, (size_t)AW * AH * 4));
  sample_array<<<dim3(AW / 32, AH / 8), dim3(32, 8)>>>(t_arr, arr_out, AW, AH);
  CKLAUNCH();
  CK(cudaDeviceSynchronize());
  r.add_device("array", arr_out, (size_t)AW * AH);

  CK(cudaDestroyTextureObject(t_lin));
  CK(cudaDestroyTextureObject(t_pitch));
  CK(cudaDestroyTextureObject(t_arr));
  CK(cudaFreeArray(arr));
  for (float* p : {lin, lin_out, img, img_out, arr_out}) CK(cudaFree(p));
  finish(r);
  return 0;
}
