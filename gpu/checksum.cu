// checksum: data-integrity and migration checks for gmux on a real GPU.
//
//   nvcc -O2 -arch=sm_90 -o checksum gpu/checksum.cu
//
//   checksum hello
//   checksum integrity --total-gb T --ops K --seed S [--streams M]
//   checksum mover --gb G
//   checksum bw --gb G        (native: pinned copies in 32 MiB pieces, each direction
//                              alone and both at once; the link's ceiling for `mover`)
//
// Every buffer's expected contents are kept in closed form (see State), so the
// host never mirrors device data. Every CUDA call and launch is checked; any
// error exits 1 with file:line.

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

// ---------------------------------------------------------------- errors

static void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, what,
            cudaGetErrorName(e), cudaGetErrorString(e));
    exit(1);
  }
}
#define CK(call) check((call), #call, __FILE__, __LINE__)

static void die(const char* msg) {
  fprintf(stderr, "checksum: %s\n", msg);
  exit(1);
}

// ---------------------------------------------------------------- hashing

__host__ __device__ inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// For a fixed gen this is a bijection of the low 32 bits of i, so misplaced
// chunks never read back as the right value.
__host__ __device__ inline uint32_t hash32(uint32_t gen, uint64_t i) {
  uint32_t hi = static_cast<uint32_t>(i >> 32);
  return fmix32(static_cast<uint32_t>(i) ^ fmix32(gen ^ (hi * 0x9e3779b9u)));
}

// Closed form of a buffer's contents: value(i) = base(i) + add, where base is
// hash32(gen, i) after a fill / host upload, or a repeated byte after a memset.
struct State {
  uint32_t is_memset;  // 0: base = hash32(gen, i); 1: base = byte * 0x01010101
  uint32_t gen;
  uint32_t byte;
  uint32_t add;
};

__host__ __device__ inline uint32_t expected(const State& s, uint64_t i) {
  uint32_t base = s.is_memset ? s.byte * 0x01010101u : hash32(s.gen, i);
  return base + s.add;
}

static State hash_state(uint32_t gen) { return State{0, gen, 0, 0}; }
static State memset_state(uint32_t byte) { return State{1, 0, byte, 0}; }

// ---------------------------------------------------------------- kernels

constexpr int kThreads = 256;

static unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(b, 1), 4096));
}

#define GRID_STRIDE(i, n)                                                  \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)

__global__ void fill_hash(uint32_t* p, size_t n, uint32_t gen) {
  GRID_STRIDE(i, n) p[i] = hash32(gen, i);
}

__global__ void add_const(uint32_t* p, size_t n, uint32_t c) {
  GRID_STRIDE(i, n) p[i] += c;
}

__global__ void copy_u32(uint32_t* __restrict__ dst, const uint32_t* __restrict__ src,
                         size_t n) {
  GRID_STRIDE(i, n) dst[i] = src[i];
}

// Counts elements that differ from the closed form; keeps the lowest bad index.
__global__ void verify_kernel(const uint32_t* p, size_t n, State s,
                              unsigned long long* count, unsigned long long* first_bad) {
  unsigned long long bad = 0, first = ~0ull;
  GRID_STRIDE(i, n) {
    if (p[i] != expected(s, i)) {
      if (bad == 0) first = i;
      bad++;
    }
  }
  if (bad) {
    atomicAdd(count, bad);
    atomicMin(first_bad, first);
  }
}

// Launches a kernel over n elements on a stream and checks the launch.
#define LAUNCH(kernel, n, stream, ...)                                        \
  do {                                                                        \
    kernel<<<blocks_for(n), kThreads, 0, (stream)>>>(__VA_ARGS__);            \
    check(cudaGetLastError(), "launch " #kernel, __FILE__, __LINE__);         \
  } while (0)

// ---------------------------------------------------------------- host helpers

static double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Runs f(begin, end) over [0, n) on a few threads.
template <class F>
static void parallel_ranges(size_t n, F f) {
  unsigned t = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  size_t per = (n + t - 1) / t;
  std::vector<std::thread> threads;
  for (unsigned k = 0; k < t; k++) {
    size_t b = std::min(n, k * per), e = std::min(n, b + per);
    threads.emplace_back([=] { f(b, e); });
  }
  for (auto& th : threads) th.join();
}

static void host_fill_hash(uint32_t* p, size_t n, uint32_t gen) {
  parallel_ranges(n, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; i++) p[i] = hash32(gen, i);
  });
}

static uint64_t host_count_bad(const uint32_t* p, size_t n, const State& s) {
  std::atomic<uint64_t> total{0};
  parallel_ranges(n, [&](size_t b, size_t e) {
    uint64_t bad = 0;
    for (size_t i = b; i < e; i++) bad += p[i] != expected(s, i);
    total += bad;
  });
  return total.load();
}

// splitmix64: small, deterministic across platforms.
struct Rng {
  uint64_t x;
  explicit Rng(uint64_t seed) : x(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t next() {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
};

// Device-side mismatch counters: count and first bad index per slot.
struct Counters {
  unsigned long long* d = nullptr;  // [2 * n]: counts, then first-bad indices
  size_t n = 0;
  explicit Counters(size_t slots) : n(slots) {
    CK(cudaMalloc(&d, 2 * n * sizeof(unsigned long long)));
    reset();
  }
  ~Counters() { cudaFree(d); }
  void reset() {
    CK(cudaMemset(d, 0, n * sizeof(unsigned long long)));
    CK(cudaMemset(d + n, 0xff, n * sizeof(unsigned long long)));
  }
  unsigned long long* count(size_t k) { return d + k; }
  unsigned long long* first(size_t k) { return d + n + k; }
  // Copies back counts and first indices (synchronizes the device first).
  void read(std::vector<unsigned long long>& counts, std::vector<unsigned long long>& firsts) {
    CK(cudaDeviceSynchronize());
    counts.resize(n);
    firsts.resize(n);
    CK(cudaMemcpy(counts.data(), d, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(firsts.data(), d + n, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  }
};

// ---------------------------------------------------------------- arguments

struct Args {
  std::vector<std::string> v;
  const char* get(const char* key) const {
    for (size_t i = 0; i + 1 < v.size(); i++)
      if (v[i] == key) return v[i + 1].c_str();
    return nullptr;
  }
  double num(const char* key, double dflt, bool required = false) const {
    const char* s = get(key);
    if (!s) {
      if (required) {
        fprintf(stderr, "checksum: missing %s\n", key);
        exit(2);
      }
      return dflt;
    }
    char* end = nullptr;
    double x = strtod(s, &end);
    if (end == s || *end) {
      fprintf(stderr, "checksum: bad value for %s: %s\n", key, s);
      exit(2);
    }
    return x;
  }
};

// ---------------------------------------------------------------- hello

static int cmd_hello() {
  const size_t bytes = 64ull << 20, n = bytes / 4;
  uint32_t* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  LAUNCH(fill_hash, n, 0, p, n, 42u);
  Counters c(1);
  LAUNCH(verify_kernel, n, 0, p, n, hash_state(42), c.count(0), c.first(0));
  std::vector<unsigned long long> counts, firsts;
  c.read(counts, firsts);
  std::vector<uint32_t> host(n);
  CK(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  uint64_t host_bad = host_count_bad(host.data(), n, hash_state(42));
  CK(cudaFree(p));
  if (counts[0] || host_bad) {
    printf("hello: FAILED device_mismatches=%llu host_mismatches=%llu\n", counts[0],
           (unsigned long long)host_bad);
    return 1;
  }
  printf("hello: ok\n");
  return 0;
}

// ---------------------------------------------------------------- integrity

static const uint32_t kClassMiB[] = {1, 3, 8, 33, 64, 130, 256, 512};

struct Buffer {
  uint32_t* ptr = nullptr;
  size_t bytes = 0;
  int cls = 0;  // index into kClassMiB
  State state{};
  cudaEvent_t last = nullptr;  // last op that read or wrote this buffer
  size_t n() const { return bytes / 4; }
};

struct Staging {  // pinned upload buffer of one stream
  uint32_t* host = nullptr;
  cudaEvent_t free_ev = nullptr;  // the last upload from it has finished
};

enum Op { ADD, COPY_KERNEL, COPY_MEMCPY, MEMSET, H2D_PINNED, H2D_PAGEABLE, REALLOC, NUM_OPS };
static const char* kOpName[] = {"add", "copy_kernel", "copy_memcpy", "memset",
                                "h2d_pinned", "h2d_pageable", "realloc"};
// Relative weights. Uploads are kept rarer: their data is hashed on the host.
static const uint32_t kOpWeight[] = {30, 17, 17, 17, 10, 5, 4};

struct Integrity {
  Rng rng;
  std::vector<Buffer> bufs;
  std::vector<cudaStream_t> streams;
  std::vector<Staging> staging;
  std::vector<uint32_t> pageable;  // host source for pageable uploads
  size_t max_bytes = 0;
  uint32_t next_gen;
  uint64_t op_count[NUM_OPS] = {};

  explicit Integrity(uint64_t seed) : rng(seed), next_gen(static_cast<uint32_t>(seed * 1000003u + 1)) {}

  uint32_t new_gen() { return next_gen++; }

  // Picks buffer sizes from the size classes until they sum to total_mib.
  // Classes above total/8 are left out so that a two-buffer op stays well
  // under any memory limit the suite sets (>= total/3).
  void plan_buffers(uint64_t total_mib) {
    std::vector<int> allowed;
    for (int c = 0; c < (int)(sizeof(kClassMiB) / sizeof(kClassMiB[0])); c++)
      if (c == 0 || kClassMiB[c] <= total_mib / 8) allowed.push_back(c);
    uint64_t left = total_mib;
    while (left >= kClassMiB[0]) {
      std::vector<int> fit;
      for (int c : allowed)
        if (kClassMiB[c] <= left) fit.push_back(c);
      int c = fit[rng.below(fit.size())];
      Buffer b;
      b.cls = c;
      b.bytes = (size_t)kClassMiB[c] << 20;
      bufs.push_back(b);
      left -= kClassMiB[c];
      max_bytes = std::max(max_bytes, b.bytes);
    }
  }

  void setup(int nstreams) {
    for (int s = 0; s < nstreams; s++) {
      cudaStream_t st;
      CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      streams.push_back(st);
      Staging sg;
      CK(cudaMallocHost(&sg.host, max_bytes));
      CK(cudaEventCreateWithFlags(&sg.free_ev, cudaEventDisableTiming));
      staging.push_back(sg);
    }
    pageable.resize(max_bytes / 4);
    for (size_t k = 0; k < bufs.size(); k++) {
      Buffer& b = bufs[k];
      CK(cudaEventCreateWithFlags(&b.last, cudaEventDisableTiming));
      CK(cudaMalloc(&b.ptr, b.bytes));
      fill(b, streams[k % streams.size()]);
    }
  }

  // Makes stream s wait for the last op on each buffer it is about to touch.
  void wait_for(cudaStream_t s, const Buffer& b) { CK(cudaStreamWaitEvent(s, b.last, 0)); }
  void done_on(cudaStream_t s, Buffer& b) { CK(cudaEventRecord(b.last, s)); }

  void fill(Buffer& b, cudaStream_t s) {
    uint32_t gen = new_gen();
    wait_for(s, b);
    LAUNCH(fill_hash, b.n(), s, b.ptr, b.n(), gen);
    done_on(s, b);
    b.state = hash_state(gen);
  }

  // Another buffer of the same size class, or -1.
  int partner(int k) {
    std::vector<int> same;
    for (int j = 0; j < (int)bufs.size(); j++)
      if (j != k && bufs[j].cls == bufs[k].cls) same.push_back(j);
    return same.empty() ? -1 : same[rng.below(same.size())];
  }

  Op pick_op() {
    uint32_t total = 0;
    for (int o = 0; o < NUM_OPS; o++) total += kOpWeight[o];
    uint32_t r = rng.below(total), acc = 0;
    for (int o = 0; o < NUM_OPS; o++) {
      acc += kOpWeight[o];
      if (r < acc) return static_cast<Op>(o);
    }
    return ADD;
  }

  void do_op(Op op, int k, int si) {
    cudaStream_t s = streams[si];
    Buffer& b = bufs[k];
    switch (op) {
      case ADD: {
        uint32_t c = rng.u32() | 1u;
        wait_for(s, b);
        LAUNCH(add_const, b.n(), s, b.ptr, b.n(), c);
        done_on(s, b);
        b.state.add += c;
        break;
      }
      case COPY_KERNEL:
      case COPY_MEMCPY: {
        int j = partner(k);
        if (j < 0) return do_op(ADD, k, si);
        Buffer& src = bufs[j];
        wait_for(s, b);
        wait_for(s, src);
        if (op == COPY_KERNEL)
          LAUNCH(copy_u32, b.n(), s, b.ptr, src.ptr, b.n());
        else
          CK(cudaMemcpyAsync(b.ptr, src.ptr, b.bytes, cudaMemcpyDeviceToDevice, s));
        done_on(s, b);
        done_on(s, src);
        b.state = src.state;
        break;
      }
      case MEMSET: {
        uint32_t byte = rng.below(256);
        wait_for(s, b);
        CK(cudaMemsetAsync(b.ptr, (int)byte, b.bytes, s));
        done_on(s, b);
        b.state = memset_state(byte);
        break;
      }
      case H2D_PINNED: {
        Staging& sg = staging[si];
        uint32_t gen = new_gen();
        CK(cudaEventSynchronize(sg.free_ev));  // its previous upload has finished
        host_fill_hash(sg.host, b.n(), gen);
        wait_for(s, b);
        CK(cudaMemcpyAsync(b.ptr, sg.host, b.bytes, cudaMemcpyHostToDevice, s));
        CK(cudaEventRecord(sg.free_ev, s));
        done_on(s, b);
        b.state = hash_state(gen);
        break;
      }
      case H2D_PAGEABLE: {
        // Synchronous cudaMemcpy on the legacy default stream; ordered against
        // our non-blocking streams by events only.
        uint32_t gen = new_gen();
        host_fill_hash(pageable.data(), b.n(), gen);
        CK(cudaEventSynchronize(b.last));
        CK(cudaMemcpy(b.ptr, pageable.data(), b.bytes, cudaMemcpyHostToDevice));
        CK(cudaEventRecord(b.last, 0));
        b.state = hash_state(gen);
        break;
      }
      case REALLOC: {
        CK(cudaEventSynchronize(b.last));
        CK(cudaFree(b.ptr));
        b.ptr = nullptr;
        CK(cudaMalloc(&b.ptr, b.bytes));
        fill(b, s);
        break;
      }
      default:
        die("unknown op");
    }
    op_count[op]++;
  }

  // Device check of every buffer; returns the total mismatch count.
  uint64_t verify_all_on_device() {
    CK(cudaDeviceSynchronize());
    Counters c(bufs.size());
    for (size_t k = 0; k < bufs.size(); k++) {
      const Buffer& b = bufs[k];
      LAUNCH(verify_kernel, b.n(), 0, b.ptr, b.n(), b.state, c.count(k), c.first(k));
    }
    std::vector<unsigned long long> counts, firsts;
    c.read(counts, firsts);
    uint64_t total = 0;
    int shown = 0;
    for (size_t k = 0; k < bufs.size(); k++) {
      total += counts[k];
      if (counts[k] && shown++ < 10) report_bad("device", k, counts[k], firsts[k]);
    }
    return total;
  }

  // Copies up to `count` random buffers to the host and checks them there.
  uint64_t verify_some_on_host(int count) {
    std::vector<int> order(bufs.size());
    for (size_t k = 0; k < order.size(); k++) order[k] = (int)k;
    for (size_t k = order.size(); k > 1; k--) std::swap(order[k - 1], order[rng.below(k)]);
    order.resize(std::min<size_t>(order.size(), count));
    std::vector<uint32_t> host(max_bytes / 4);
    uint64_t total = 0;
    for (int k : order) {
      const Buffer& b = bufs[k];
      CK(cudaMemcpy(host.data(), b.ptr, b.bytes, cudaMemcpyDeviceToHost));
      uint64_t bad = host_count_bad(host.data(), b.n(), b.state);
      if (bad) {
        uint64_t first = 0;
        while (host[first] == expected(b.state, first)) first++;
        report_bad("host", k, bad, first);
      }
      total += bad;
    }
    fprintf(stderr, "integrity: host-checked %zu buffers\n", order.size());
    return total;
  }

  void report_bad(const char* where, size_t k, uint64_t bad, uint64_t first) {
    const Buffer& b = bufs[k];
    fprintf(stderr,
            "integrity: %s mismatch: buffer %zu (%u MiB) bad=%llu first_bad_index=%llu "
            "state={memset=%u gen=%u byte=%u add=%u}\n",
            where, k, kClassMiB[b.cls], (unsigned long long)bad, (unsigned long long)first,
            b.state.is_memset, b.state.gen, b.state.byte, b.state.add);
  }

  void release() {
    CK(cudaDeviceSynchronize());
    for (Buffer& b : bufs) {
      CK(cudaFree(b.ptr));
      CK(cudaEventDestroy(b.last));
    }
    for (Staging& sg : staging) {
      CK(cudaFreeHost(sg.host));
      CK(cudaEventDestroy(sg.free_ev));
    }
    for (cudaStream_t s : streams) CK(cudaStreamDestroy(s));
  }
};

static int cmd_integrity(const Args& a) {
  double total_gb = a.num("--total-gb", 0, true);
  long ops = (long)a.num("--ops", 0, true);
  uint64_t seed = (uint64_t)a.num("--seed", 0, true);
  int nstreams = (int)a.num("--streams", 4);
  if (total_gb <= 0 || ops < 0 || nstreams < 1) die("bad arguments");

  double t0 = now_s();
  Integrity it(seed);
  it.plan_buffers((uint64_t)(total_gb * 1024));
  it.setup(nstreams);
  size_t total_bytes = 0;
  for (const Buffer& b : it.bufs) total_bytes += b.bytes;
  fprintf(stderr, "integrity: %zu buffers, %.2f GiB, largest %zu MiB, %d streams\n",
          it.bufs.size(), total_bytes / 1073741824.0, it.max_bytes >> 20, nstreams);

  long step = std::max(1L, ops / 10);
  for (long i = 0; i < ops; i++) {
    Op op = it.pick_op();
    int k = (int)it.rng.below(it.bufs.size());
    int s = (int)it.rng.below(nstreams);
    it.do_op(op, k, s);
    if ((i + 1) % step == 0 || i + 1 == ops) {
      CK(cudaDeviceSynchronize());
      fprintf(stderr, "integrity: %ld/%ld ops done (%.1fs)\n", i + 1, ops, now_s() - t0);
    }
  }
  for (int o = 0; o < NUM_OPS; o++) fprintf(stderr, "integrity: op %s x%llu\n", kOpName[o],
                                            (unsigned long long)it.op_count[o]);

  uint64_t dev_bad = it.verify_all_on_device();
  uint64_t host_bad = it.verify_some_on_host(16);
  it.release();
  uint64_t bad = dev_bad + host_bad;
  fprintf(stderr, "integrity: device_mismatches=%llu host_mismatches=%llu\n",
          (unsigned long long)dev_bad, (unsigned long long)host_bad);
  printf("integrity: buffers=%zu total=%.1fGiB ops=%ld mismatches=%llu time=%.1fs\n",
         it.bufs.size(), total_bytes / 1073741824.0, ops, (unsigned long long)bad, now_s() - t0);
  return bad ? 1 : 0;
}

// ---------------------------------------------------------------- mover

// Runs verify_kernel over A once and returns the wall time including the sync.
static double timed_verify(const uint32_t* p, size_t n, const State& s, Counters& c,
                           unsigned long long* bad) {
  c.reset();
  CK(cudaDeviceSynchronize());
  double t0 = now_s();
  LAUNCH(verify_kernel, n, 0, p, n, s, c.count(0), c.first(0));
  CK(cudaDeviceSynchronize());
  double t = now_s() - t0;
  std::vector<unsigned long long> counts, firsts;
  c.read(counts, firsts);
  *bad = counts[0];
  return t;
}

static int cmd_mover(const Args& a) {
  double gb = a.num("--gb", 0, true);
  if (gb <= 0) die("bad --gb");
  const size_t bytes = (size_t)(gb * 1073741824.0) & ~(size_t)((2u << 20) - 1);
  const size_t n = bytes / 4;
  uint32_t *A = nullptr, *B = nullptr;
  Counters c(1);
  CK(cudaMalloc(&A, bytes));
  CK(cudaMalloc(&B, bytes));
  LAUNCH(fill_hash, n, 0, A, n, 1u);
  CK(cudaDeviceSynchronize());
  LAUNCH(fill_hash, n, 0, B, n, 2u);  // under a limit of ~G this evicts A
  CK(cudaDeviceSynchronize());

  // One untimed round trip first, so every chunk of A and B has its pinned host slot
  // (gmux pins its staging pool once, in blocks, and reuses it).
  unsigned long long bad_switch = 0, bad = 0, b2 = 0;
  timed_verify(A, n, hash_state(1), c, &bad);
  timed_verify(B, n, hash_state(2), c, &b2);
  bad += b2;
  // Two timed switches (B out + A in, then A out + B in); the faster one is reported.
  double s1 = timed_verify(A, n, hash_state(1), c, &bad_switch);
  double s2 = timed_verify(B, n, hash_state(2), c, &b2);
  bad_switch += b2;
  double switch_s = std::min(s1, s2);
  printf("mover: gb=%g switch_s=%.4f switch1_s=%.4f switch2_s=%.4f verify_ok=%d\n", gb, switch_s, s1,
         s2, bad_switch == 0);
  fflush(stdout);
  timed_verify(A, n, hash_state(1), c, &b2);  // A resident again for the kernel-only timing
  bad += b2;

  // Best of three with everything resident: the kernel's own time.
  double kernel_s = 1e30;
  for (int r = 0; r < 3; r++) {
    unsigned long long b = 0;
    kernel_s = std::min(kernel_s, timed_verify(A, n, hash_state(1), c, &b));
    bad += b;
  }
  printf("mover: kernel_s=%.4f\n", kernel_s);
  double moved_gb = 2.0 * (double)bytes / 1e9;
  if (switch_s > kernel_s)
    printf("mover: combined_GBps=%.2f\n", moved_gb / (switch_s - kernel_s));
  else
    printf("mover: combined_GBps=nan\n");

  // B is still intact too (it was evicted by the switch under gmux).
  unsigned long long bad_b = 0;
  timed_verify(B, n, hash_state(2), c, &bad_b);
  CK(cudaFree(A));
  CK(cudaFree(B));
  if (bad_switch || bad || bad_b) {
    fprintf(stderr, "mover: mismatches A(switch)=%llu A(resident)=%llu B=%llu\n", bad_switch,
            bad, bad_b);
    return 1;
  }
  return 0;
}

// ---------------------------------------------------------------- bw

// Copies `bytes` between device memory and pinned host memory in 32 MiB pieces, as the
// gmux mover does, on one stream per direction; returns GB/s of all bytes moved.
static double copy_rate(char* dev_out, char* dev_in, char* host_out, char* host_in, size_t bytes,
                        bool d2h, bool h2d, cudaStream_t s_out, cudaStream_t s_in) {
  const size_t piece = 32u << 20;
  CK(cudaDeviceSynchronize());
  double t0 = now_s();
  for (size_t off = 0; off < bytes; off += piece) {
    size_t len = std::min(piece, bytes - off);
    if (d2h) CK(cudaMemcpyAsync(host_out + off, dev_out + off, len, cudaMemcpyDeviceToHost, s_out));
    if (h2d) CK(cudaMemcpyAsync(dev_in + off, host_in + off, len, cudaMemcpyHostToDevice, s_in));
  }
  CK(cudaDeviceSynchronize());
  double t = now_s() - t0;
  return (double)bytes * ((d2h ? 1 : 0) + (h2d ? 1 : 0)) / t / 1e9;
}

static int cmd_bw(const Args& a) {
  double gb = a.num("--gb", 0, true);
  if (gb <= 0) die("bad --gb");
  const size_t bytes = (size_t)(gb * 1073741824.0);
  char *dev_out, *dev_in, *host_out, *host_in;
  CK(cudaMalloc(&dev_out, bytes));
  CK(cudaMalloc(&dev_in, bytes));
  CK(cudaHostAlloc(&host_out, bytes, cudaHostAllocPortable));
  CK(cudaHostAlloc(&host_in, bytes, cudaHostAllocPortable));
  CK(cudaMemset(dev_out, 1, bytes));
  memset(host_in, 2, bytes);
  cudaStream_t s_out, s_in;
  CK(cudaStreamCreateWithFlags(&s_out, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s_in, cudaStreamNonBlocking));
  copy_rate(dev_out, dev_in, host_out, host_in, bytes, true, true, s_out, s_in);  // warm-up
  double d2h = 0, h2d = 0, both = 0;
  for (int r = 0; r < 3; r++) {  // best of three each
    d2h = std::max(d2h, copy_rate(dev_out, dev_in, host_out, host_in, bytes, true, false, s_out, s_in));
    h2d = std::max(h2d, copy_rate(dev_out, dev_in, host_out, host_in, bytes, false, true, s_out, s_in));
    both = std::max(both, copy_rate(dev_out, dev_in, host_out, host_in, bytes, true, true, s_out, s_in));
  }
  printf("bw: gb=%g d2h_GBps=%.2f h2d_GBps=%.2f both_GBps=%.2f\n", gb, d2h, h2d, both);
  CK(cudaFreeHost(host_out));
  CK(cudaFreeHost(host_in));
  CK(cudaFree(dev_out));
  CK(cudaFree(dev_in));
  return 0;
}

// ---------------------------------------------------------------- main

static void usage() {
  fprintf(stderr,
          "usage: checksum hello\n"
          "       checksum integrity --total-gb T --ops K --seed S [--streams M]\n"
          "       checksum mover --gb G\n"
          "       checksum bw --gb G\n");
  exit(2);
}

int main(int argc, char** argv) {
  if (argc < 2) usage();
  Args a;
  for (int i = 2; i < argc; i++) a.v.push_back(argv[i]);
  std::string cmd = argv[1];
  if (cmd == "hello") return cmd_hello();
  if (cmd == "integrity") return cmd_integrity(a);
  if (cmd == "mover") return cmd_mover(a);
  if (cmd == "bw") return cmd_bw(a);
  usage();
  return 2;
}
