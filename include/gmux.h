/* gmux for serving applications: mark each request as a job.
 *
 * A program run under `gmux run` finds these functions in libgmux.so, which gmux loads
 * into it; the marks reach gmuxd over a shared-memory channel that opens at the first
 * mark, and `gmux ps --json` shows each tenant's jobs. The functions are declared weak:
 * test them against NULL, so that the same binary runs without gmux:
 *
 *     #include "gmux.h"
 *     uint64_t job = 0;
 *     if (gmux_job_begin) gmux_job_begin("resnet50", 4.0, &job);
 *     ... launch the request's kernels ...
 *     if (gmux_job_end) gmux_job_end(job);
 *
 * A weak reference finds libgmux.so's functions at run time only in a position-
 * independent executable (the default of current gcc and clang) or a shared library;
 * elsewhere, look them up with dlsym(RTLD_DEFAULT, "gmux_job_begin").
 *
 * Every function returns GMUX_OK or one of the codes below, and none touches the GPU.
 * A mark costs a store into shared memory; the first mark after the process registered
 * with gmuxd opens the channel (one connection to the daemon, at most 2 s).
 */
#ifndef GMUX_H
#define GMUX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The mark was sent (an end may wait in the process for room, and go with the next). */
#define GMUX_OK 0
/* The process has no daemon to send it to (`gmux run --standalone`, or no CUDA call
 * yet): the mark is not sent. */
#define GMUX_UNTRACKED 1
/* A null or non-UTF-8 name, a negative or NaN estimate, or a null out-pointer. */
#define GMUX_EINVAL (-22)
/* The channel is full (the daemon is behind): the begin is dropped. */
#define GMUX_EAGAIN (-11)
/* The channel could not be opened (asked again a second later) or broke; gmux's log
 * says why. */
#define GMUX_ECHANNEL (-32)
/* A ping got no answer in time. */
#define GMUX_ETIMEDOUT (-110)
/* gmux failed inside (its log says where). */
#define GMUX_EINTERNAL (-14)

/* A job of kind `name` begins (at most 40 bytes of it are kept; jobs of one name are
 * alike). `expected_ms` is the application's estimate of its GPU time (0: none). Writes
 * the job's number to `*job` when the begin was sent, else 0; gmux_job_end ignores 0. */
__attribute__((weak)) int gmux_job_begin(const char *name, double expected_ms, uint64_t *job);

/* Job `job` (from gmux_job_begin) ended; 0 is ignored. */
__attribute__((weak)) int gmux_job_end(uint64_t job);

/* A round trip through gmuxd's dispatcher, waiting at most `timeout_us`; writes its time
 * in nanoseconds to `*rtt_ns` unless it is NULL. */
__attribute__((weak)) int gmux_ping(uint32_t timeout_us, uint64_t *rtt_ns);

#ifdef __cplusplus
}
#endif

#endif
