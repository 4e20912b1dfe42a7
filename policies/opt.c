/* Belady's OPT over the timeline's forecast (MSched): the chunk whose next use is
 * furthest ahead leaves first. Chunks the forecast never uses leave before all others,
 * in gmux's own order: the most recently used first where gmux has a forecast (GPU work
 * is iterative: what a loop used last it needs last again), the least recently used
 * where it has none. gmux's built-in `opt`, as a program.
 *
 * In the daemon's simulator and in a planner of several tenants, the forecast is the
 * timeline's: every tenant's accesses in the order their slices will run, so this is
 * OPT across tenants, which a driver that sees one fault at a time cannot express. */
#include "gmux_bpf.h"

#define NEVER (~0ULL)

SEC("gmux/evict_prepare") u64 opt(struct gmux_evict_ctx *c)
{
	if (c->next_use == NEVER)
		return 0;
	return NEVER - c->next_use;
}
