"""The compatibility corpus: every program the runner (run.py) knows, with what it covers.

Each entry:
  name     unique name (also the tenant name under gmuxd)
  kind     "py" (a script in progs/, run with the runner's python3) or "cpp" (a binary
           built from cpp/<binary>.cu by scripts/gpu-compat.sh into the build folder)
  cmd      the script and its arguments (py) or the binary's name and arguments (cpp)
  env      extra environment for every run of the program
  tol      None: results must be equal bit for bit; (rtol, atol): floating-point arrays
           may differ by |a - b| <= atol + rtol * |a| (integer arrays stay exact)
  est      estimated seconds of one native run on an H100, process start-up included
  covers   one line on what it exercises

Only the standard library here: the runner imports this file.
"""

EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
MALLOC_ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}


def py(name, cmd, covers, est, tol=None, env=None):
    return {"name": name, "kind": "py", "cmd": cmd, "env": env or {}, "tol": tol, "est": est, "covers": covers}


def cpp(name, binary, covers, est, args=()):
    return {"name": name, "kind": "cpp", "cmd": [binary, *args], "env": {}, "tol": None, "est": est, "covers": covers}


COMPILE_TOL = (1e-5, 1e-6)

PROGRAMS = [
    # torchvision, forward + backward + optimizer
    py("resnet18_fp32", ["tv_train.py", "--model", "resnet18", "--precision", "fp32", "--batch", "64", "--size", "160", "--steps", "4"],
       "torchvision resnet18 training, fp32, SGD", 12),
    py("resnet50_fp16_amp", ["tv_train.py", "--model", "resnet50", "--precision", "fp16", "--batch", "32", "--size", "160"],
       "torchvision resnet50 training under fp16 autocast with a GradScaler", 14),
    py("resnet50_bf16_amp", ["tv_train.py", "--model", "resnet50", "--precision", "bf16", "--batch", "32", "--size", "160"],
       "torchvision resnet50 training under bf16 autocast", 14),
    py("resnet50_channels_last", ["tv_train.py", "--model", "resnet50", "--precision", "fp32", "--channels-last", "--batch", "24", "--size", "160"],
       "torchvision resnet50 training, fp32, channels_last (NHWC) tensors", 14),
    py("efficientnet_b0_fp32", ["tv_train.py", "--model", "efficientnet_b0", "--precision", "fp32", "--batch", "32", "--size", "192", "--optimizer", "adamw"],
       "torchvision efficientnet_b0 training (depthwise convolutions, squeeze-excitation), AdamW", 14),
    py("vit_b16_bf16", ["tv_train.py", "--model", "vit_b_16", "--precision", "bf16", "--batch", "16", "--size", "224"],
       "torchvision ViT-B/16 training under bf16 autocast (math attention)", 15),
    py("torch_alloc_churn", ["torch_alloc_churn.py"],
       "PyTorch caching allocator churn: mixed sizes, pinned non_blocking copies, a side stream, empty_cache", 10),
    py("sdpa_attention", ["sdpa_attention.py"],
       "scaled_dot_product_attention forward on the flash, efficient, cuDNN and math backends, fp16/bf16", 10),
    # PyTorch allocator settings
    py("resnet50_expandable", ["tv_train.py", "--model", "resnet50", "--precision", "fp32", "--batch", "24", "--size", "160"],
       "resnet50 training with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch maps VMM memory itself)", 14, env=EXPANDABLE),
    py("resnet50_malloc_async", ["tv_train.py", "--model", "resnet50", "--precision", "fp32", "--batch", "24", "--size", "160"],
       "resnet50 training with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (stream-ordered allocator)", 14, env=MALLOC_ASYNC),
    py("gpt2_train_expandable", ["gpt2_train.py"],
       "GPT-2 training with expandable_segments:True", 14, env=EXPANDABLE),
    py("gpt2_train_malloc_async", ["gpt2_train.py"],
       "GPT-2 training with backend:cudaMallocAsync", 14, env=MALLOC_ASYNC),
    # transformers
    py("gpt2_train", ["gpt2_train.py"],
       "transformers GPT-2 (8 layers, random weights) training steps, AdamW, dropout", 14),
    py("gpt2_generate", ["gpt2_generate.py"],
       "transformers GPT-2 greedy generate, dynamic KV cache", 14),
    py("gpt2_generate_static", ["gpt2_generate.py", "--static"],
       "transformers GPT-2 generate with cache_implementation=static (StaticCache; forward auto-compiled, reduce-overhead CUDA graphs)",
       45, tol=COMPILE_TOL),
    py("gpt2_static_cudagraph", ["gpt2_static_cudagraph.py"],
       "GPT-2 decode loop over a static KV cache, one decode step captured with torch.cuda.graph and replayed", 12),
    # torch.compile and CUDA graphs
    py("compile_default", ["torch_compile.py", "--mode", "default"],
       "torch.compile (Inductor, Triton kernels) training and inference, default mode", 35, tol=COMPILE_TOL),
    py("compile_reduce_overhead", ["torch_compile.py", "--mode", "reduce-overhead"],
       "torch.compile mode=reduce-overhead (cudagraph trees) training and inference", 40, tol=COMPILE_TOL),
    py("cuda_graph_train", ["cuda_graph_train.py"],
       "torch.cuda.graph capture of a whole training step (Adam capturable) + replay; make_graphed_callables", 10),
    # JAX
    py("jax_mlp_grad", ["jax_mlp_grad.py"],
       "JAX jit + value_and_grad of an MLP, SGD (BFC allocator, no preallocation)", 12),
    py("jax_conv_scan", ["jax_conv_scan.py"],
       "JAX jit + grad through NHWC convolutions and a lax.scan RNN", 15),
    # CuPy
    py("cupy_fft", ["cupy_fft.py"], "CuPy FFTs (cuFFT): batched 2D, 3D with a plan, R2C/C2R, strided axis", 8),
    py("cupy_sparse", ["cupy_sparse.py"],
       "cupyx.scipy.sparse: COO->CSR, SpMV, SpMM, SpGEMM, transpose, conjugate gradient", 12, tol=(1e-4, 1e-5)),
    py("cupy_kernels", ["cupy_kernels.py"],
       "CuPy ElementwiseKernel, ReductionKernel, RawKernel (shared memory), RawModule templates, sort, cumsum, cuRAND", 8),
    py("cupy_linalg", ["cupy_linalg.py"],
       "CuPy cuSOLVER/cuBLAS: Cholesky, solve, inverse, QR, SVD, eigh", 8, tol=(1e-5, 1e-8)),
    # Triton
    py("triton_vecadd", ["triton_vecadd.py"], "Triton @triton.jit vector add and fused multiply-add over 384 MiB vectors", 10),
    py("triton_matmul", ["triton_matmul.py"], "Triton @triton.jit tiled fp16 matmul with tl.dot, fixed configuration", 10),
    # C++ (nvcc)
    cpp("cpp_vmm", "vmm",
        "CUDA VMM driver API used directly: cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess, remapping, beside cudaMalloc", 3),
    cpp("cpp_gemm_batched", "gemm_batched",
        "cublasSgemmBatched / cublasGemmBatchedEx with device pointer arrays; cublasSgemmStridedBatched", 3),
    cpp("cpp_streams_callbacks", "streams_callbacks",
        "4 non-blocking streams, events across streams, cudaLaunchHostFunc, pinned async copies", 4),
    cpp("cpp_memcpy3d", "memcpy3d",
        "cudaMalloc3D, cudaMemcpy3D/3DAsync (host, device, sub-boxes, 3D arrays), cudaMemset3D, cudaMemcpy2D", 3),
    cpp("cpp_texture", "texture",
        "cudaCreateTextureObject over linear, pitched 2D (bilinear) and array memory", 4),
    cpp("cpp_many_allocs", "many_allocs",
        "3000 cudaMallocs of 4 KiB-1 MiB churned, memsets and copies between them, cudaMallocAsync/cudaFreeAsync", 4),
    cpp("cpp_multithread", "multithread",
        "4 std::threads launching on 2 streams each with events, one allocating and freeing meanwhile", 3),
    cpp("cpp_cufft", "cufft",
        "cuFFT 3D C2C, 2D R2C/C2R, cufftPlanMany on a stream, a plan with its own work area", 4),
    cpp("cpp_curand", "curand",
        "cuRAND host generators (Philox, MTGP32, XORWOW, MRG32k3a, Sobol32) and the device API", 3),
    cpp("cpp_cusparse", "cusparse",
        "cuSPARSE generic API: SpMV (ALG2), SpMM, CSR->CSC, with external buffers", 5),
]

# Programs run together as tenants of one gmuxd by `run.py --tenants` (groups of 4).
TENANT_GROUPS = [
    ["resnet50_fp16_amp", "gpt2_train", "jax_mlp_grad", "cpp_gemm_batched"],
    ["efficientnet_b0_fp32", "cupy_fft", "triton_matmul", "cpp_many_allocs"],
]
