/* gmux policy programs: what a program compiled with `clang -O2 -target bpf -c` needs.
 *
 * A program is a function in a section named for its hook, SEC("gmux/HOOK"), taking a
 * pointer to the hook's context and returning a number. Maps are declared with GMUX_MAP
 * and passed to the map helpers by address. Loops must be unrolled (#pragma unroll), and
 * functions the program calls inlined (static __always_inline): the verifier refuses
 * jumps backwards and calls into the program.
 */
#ifndef GMUX_BPF_H
#define GMUX_BPF_H

typedef __UINT8_TYPE__ u8;
typedef __UINT16_TYPE__ u16;
typedef __UINT32_TYPE__ u32;
typedef __UINT64_TYPE__ u64;
typedef __INT32_TYPE__ s32;
typedef __INT64_TYPE__ s64;

#define SEC(name) __attribute__((section(name), used))

/* A function of the program, inlined where it is called (the verifier refuses calls). */
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* A map's kinds: an array of `entries` values indexed by a u32 key, all present and
 * zeroed; a hash of up to `entries` values under keys of any size; a ring buffer of up
 * to `entries` records of at most sizeof(value_type) bytes, written with ringbuf_output
 * and taken by `gmux policy map dump` (declare its key as u32; it is unused); or a
 * per-tenant array: an array for each tenant (up to 64), a program reaching the copy of
 * the tenant its hook's context names. */
#define GMUX_MAP_ARRAY 1
#define GMUX_MAP_HASH 2
#define GMUX_MAP_RINGBUF 3
#define GMUX_MAP_TENANT_ARRAY 4

struct gmux_map_def {
	u32 kind;
	u32 key_size;
	u32 value_size;
	u32 entries;
};

/* GMUX_MAP(counts, GMUX_MAP_ARRAY, u32, u64, 64); declares map `counts`. */
#define GMUX_MAP(name, kind, key_type, value_type, entries) \
	struct gmux_map_def name SEC("maps") = { kind, sizeof(key_type), sizeof(value_type), entries }

/* Helpers, by Linux's numbers. Errors are Linux's error numbers, negated. */
static void *(*map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*map_delete_elem)(void *map, const void *key) = (void *)3;
/* The time of the decision the hook is part of, in nanoseconds. */
static u64 (*now_ns)(void) = (void *)5;
/* A line in the daemon's log (policy ID (NAME): TEXT ARG): the text up to its first
 * NUL, then `arg`; at most 10 a second per program. `fmt` must be on the stack: char fmt[] = "...". */
static long (*trace)(const char *fmt, u32 fmt_size, u64 arg) = (void *)6;
/* Appends `size` bytes (a constant from 1 to 256, on the stack) as a record of ring buffer
 * `map`: -7 (E2BIG) when longer than a record, -28 (ENOSPC) when full (the record is
 * dropped, and counted). `flags` is ignored. */
static long (*ringbuf_output)(void *map, const void *data, u64 size, u64 flags) = (void *)130;

/* Memory hooks: SEC("gmux/activate"), SEC("gmux/access"), SEC("gmux/evict_prepare") and
 * SEC("gmux/prefetch"). Their contexts are read-only, except prefetch's answer. */

/* activate (a chunk became resident) and access (a command used it). */
struct gmux_chunk_ctx {
	u64 chunk;	/* the chunk's number */
	u64 stamp;	/* the access stamp, the planner's clock (0 for activate) */
	u32 tenant;	/* its tenant */
	u32 pad;
};

/* evict_prepare: called once per eviction candidate; returns its rank. Lower ranks
 * leave GPU memory first; equal ranks leave in the built-in policy's order. */
struct gmux_evict_ctx {
	u64 chunk;	/* the chunk's number */
	u64 last_use;	/* the access stamp of its last use */
	u64 next_use;	/* its next use in the timeline's forecast, or ~0 if none */
	u32 tenant;	/* its tenant */
	u32 requester;	/* the tenant the plan makes room for */
	u64 resident;	/* chunks its tenant holds in GPU memory */
};

/* prefetch: called when a command's memory is being brought in. The program may name a
 * run of chunks worth bringing in after the command's own: `count` chunks from `start`
 * (at most GMUX_PREFETCH_MAX). gmux brings in those of the tenant's live chunks that are
 * not resident, and only where that evicts nothing needed sooner. */
#define GMUX_PREFETCH_MAX 64
struct gmux_prefetch_ctx {
	u64 start;	/* the first chunk to bring in (writable; 0) */
	u32 count;	/* how many (writable; 0: none) */
	u32 tenant;	/* the tenant whose command it is */
};

_Static_assert(sizeof(struct gmux_prefetch_ctx) == 16 && __builtin_offsetof(struct gmux_prefetch_ctx, tenant) == 12, "gmux_prefetch_ctx layout");
_Static_assert(sizeof(struct gmux_chunk_ctx) == 24 && __builtin_offsetof(struct gmux_chunk_ctx, tenant) == 16, "gmux_chunk_ctx layout");
_Static_assert(sizeof(struct gmux_evict_ctx) == 40 && __builtin_offsetof(struct gmux_evict_ctx, next_use) == 16 &&
	       __builtin_offsetof(struct gmux_evict_ctx, resident) == 32, "gmux_evict_ctx layout");

/* Scheduling hooks, in gmuxd: SEC("gmux/task_init"), SEC("gmux/task_destroy"),
 * SEC("gmux/timeslice") and SEC("gmux/admission"). */

/* A tenant's name, its first 16 bytes, zero-padded: a map key (GMUX_MAP_HASH) that
 * `gmux policy map ID MAP update str:NAME VALUE` writes. */
struct __attribute__((aligned(8))) gmux_name {
	char bytes[16];
};

/* task_init: a process is joining a tenant. Return 0 to let it join, anything else to
 * refuse it. `priority` and `timeslice` are writable: what the program leaves there
 * becomes the tenant's (a new tenant's slice only), kept within gmux's bounds. */
struct gmux_task_ctx {
	u32 tenant;	/* the tenant's number */
	u32 uid;	/* the user the process runs as */
	s32 priority;	/* the priority it asked for (writable) */
	u32 new_tenant;	/* 1 if the tenant had no process before */
	u64 timeslice;	/* the tenant's compute.timeslice, ns (writable) */
	u32 processes;	/* processes of all tenants before this one */
	u32 name_len;	/* the tenant's name's whole length: over 16, name holds its start */
	u64 held;	/* GPU memory all processes hold */
	u64 budget;	/* the budget, ~0 if none */
	struct gmux_name name;	/* the tenant's name, its first 16 bytes, zero-padded */
};

/* task_destroy: a tenant's last process left. */
struct gmux_tenant_ctx {
	u32 tenant;
	u32 pad;
};

/* timeslice: the slice of a tenant's next turn. Return the slice in ns; gmux keeps it
 * between 1 us and the longer of `slice` and the daemon's --max-timeslice. */
struct gmux_slice_ctx {
	u32 tenant;
	u32 pad;
	u64 slice;		/* the slice gmux made, stretched by the switch cost where known */
	u64 switch_cost;	/* what a switch costs, ns (0 until measured) */
};

/* admission: a job an application marked (gmux.job) waits to run. Return 0 to let it run
 * now, anything else to keep it waiting: its process releases no new command while all
 * its running jobs wait. It is asked again at the dispatcher's next decision (every
 * millisecond while one waits); gmux lets it run after a second at most, and never holds
 * every running job for admission. Read-only. */
struct gmux_job_ctx {
	u32 tenant;	/* the tenant of the process that marked it */
	u32 pid;	/* the process */
	u64 job;	/* the job's number in that process */
	struct gmux_name kind;	/* its kind's name (gmux.job's first argument) */
	u64 estimate;	/* its kind's estimated length, ns (0: none yet) */
	u64 waited;	/* how long it has waited since it began, ns */
	u32 running;	/* jobs running in every process that marks jobs */
	u32 admitted;	/* of those, jobs admitted */
	u64 shortest;	/* the shortest estimate among admitted running jobs, ns; ~0 if none */
};

_Static_assert(sizeof(struct gmux_task_ctx) == 64 && __builtin_offsetof(struct gmux_task_ctx, name) == 48 && __builtin_offsetof(struct gmux_task_ctx, timeslice) == 16 &&
	       __builtin_offsetof(struct gmux_task_ctx, budget) == 40, "gmux_task_ctx layout");
_Static_assert(sizeof(struct gmux_tenant_ctx) == 8 && sizeof(struct gmux_slice_ctx) == 24, "gmux_slice_ctx layout");
_Static_assert(sizeof(struct gmux_job_ctx) == 64 && __builtin_offsetof(struct gmux_job_ctx, kind) == 16 &&
	       __builtin_offsetof(struct gmux_job_ctx, running) == 48, "gmux_job_ctx layout");

#endif
