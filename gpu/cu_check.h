// CK(call): a CUDA driver API call that, on failure, prints file:line, the call and the
// error's name, and exits 1. Shared by the driver-API probes of gpu/.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                         \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char* s_ = nullptr;                                       \
      cuGetErrorName(r_, &s_);                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)
