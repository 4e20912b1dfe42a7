// memcpy3d: pitched 3D and 2D copies.
//
// Three 512 x 256 x 256 float volumes from cudaMalloc3D (pitched): cudaMemcpy3D from a
// pinned host volume, a kernel through the pitched pointer, cudaMemcpy3DAsync of a
// sub-box between volumes at offsets, cudaMemset3D of a region, cudaMemcpy2D between
// slices, cudaMemcpy3D back to pageable host memory; and a 3D cudaArray filled from a
// volume and copied back to another (cudaMemcpy3D with an array on one side). Results:
// the volumes as copied back.
#define PROGRAM "memcpy3d"
#include "common.h"

__global__ void scale(cudaPitchedPtr p, int w, int h, int d, float k) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y;
  int z = blockIdx.z;
  if (x >= w || y >= h || z >= d) return;
  char* slice = (char*)p.ptr + (size_t)z * p.pitch * h;
  float* row = (float*)(slice + (size_t)y * p.pitch);
  row[x] = row[x] * k + (float)(z - y) * 0.001f;
}

static cudaMemcpy3DParms parms() {
  cudaMemcpy3DParms p;
  memset(&p, 0, sizeof(p));
  return p;
}

int main() {
  CK(cudaSetDevice(0));
  const int W = 512, H = 256, D = 256;
  const size_t row = W * sizeof(float), vol = (size_t)W * H * D;
  cudaExtent ext = make_cudaExtent(row, H, D);
  cudaPitchedPtr a, b, c;
  CK(cudaMalloc3D(&a, ext));
  CK(cudaMalloc3D(&b, ext));
  CK(cudaMalloc3D(&c, ext));
  printf("pitch=%zu\n", a.pitch);
  float* pinned;
  CK(cudaMallocHost(&pinned, vol * 4));
  Lcg rng(3);
  for (size_t i = 0; i < vol; ++i) pinned[i] = rng.symmetric();
  std::vector<float> host(vol, 0.0f);

  // Host -> device (3D).
  cudaMemcpy3DParms up = parms();
  up.srcPtr = make_cudaPitchedPtr(pinned, row, W, H);
  up.dstPtr = a;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&up));
  scale<<<dim3((W + 127) / 128, H, D), 128>>>(a, W, H, D, 1.5f);
  CKLAUNCH();

  // Device -> device sub-box with offsets, async.
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMemset3D(b, 0, ext));
  CK(cudaDeviceSynchronize());
  cudaMemcpy3DParms box = parms();
  box.srcPtr = a;
  box.srcPos = make_cudaPos(64 * sizeof(float), 16, 8);
  box.dstPtr = b;
  box.dstPos = make_cudaPos(32 * sizeof(float), 40, 100);
  box.extent = make_cudaExtent(300 * sizeof(float), 200, 150);
  box.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3DAsync(&box, s));
  CK(cudaStreamSynchronize(s));

  // Memset of a region of c, then a whole-volume device copy a -> c over it, then 2D copies between slices.
  CK(cudaMemset3D(c, 0x3f, ext));
  cudaMemcpy3DParms whole = parms();
  whole.srcPtr = a;
  whole.dstPtr = c;
  whole.extent = make_cudaExtent(row, H, D / 2);
  whole.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3D(&whole));
  for (int z = 0; z < 16; ++z) {
    char* src = (char*)b.ptr + (size_t)(100 + z) * b.pitch * H;
    char* dst = (char*)c.ptr + (size_t)(200 + z) * c.pitch * H;
    CK(cudaMemcpy2D(dst, c.pitch, src, b.pitch, row, H, cudaMemcpyDeviceToDevice));
  }
  CK(cudaMemset3D(make_cudaPitchedPtr((char*)c.ptr + c.pitch * H * 150, c.pitch, W, H), 0, make_cudaExtent(row / 2, H / 2, 10)));

  // A 3D array: filled from volume a, copied back out into volume b's upper half.
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CK(cudaMalloc3DArray(&arr, &fd, make_cudaExtent(W, H, 64)));
  cudaMemcpy3DParms to_arr = parms();
  to_arr.srcPtr = a;
  to_arr.dstArray = arr;
  to_arr.extent = make_cudaExtent(W, H, 64);
  to_arr.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3D(&to_arr));
  cudaMemcpy3DParms from_arr = parms();
  from_arr.srcArray = arr;
  from_arr.dstPtr = b;
  from_arr.dstPos = make_cudaPos(0, 0, 180);
  from_arr.extent = make_cudaExtent(W, H, 64);
  from_arr.kind = cudaMemcpyDeviceToDevice;
  CK(cudaMemcpy3D(&from_arr));

  Result r;
  for (cudaPitchedPtr v : {a, b, c}) {
    cudaMemcpy3DParms down = parms();
    down.srcPtr = v;
    down.dstPtr = make_cudaPitchedPtr(host.data(), row, W, H);
    down.extent = ext;
    down.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3D(&down));
    r.add("volume", host.data(), vol, 4);
  }
  // 2D copy of one slice of c to host.
  std::vector<float> slice((size_t)W * H);
  CK(cudaMemcpy2D(slice.data(), row, (char*)c.ptr + (size_t)205 * c.pitch * H, c.pitch, row, H, cudaMemcpyDeviceToHost));
  r.add("slice", slice.data(), slice.size(), 4);

  CK(cudaFreeArray(arr));
  CK(cudaFree(a.ptr));
  CK(cudaFree(b.ptr));
  CK(cudaFree(c.ptr));
  CK(cudaFreeHost(pinned));
  CK(cudaStreamDestroy(s));
  finish(r);
  return 0;
}
