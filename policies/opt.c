/* Belady's OPT over the timeline's forecast (MSched): the chunk whose next use is
 * furthest ahead leaves first. Chunks the forecast never uses leave before all others,
 * the most recently used first (GPU work is iterative: what a loop used last it needs
 * last again). gmux's built-in `opt`, as a program. */
#include "gmux_bpf.h"

#define NEVER (~0ULL)

SEC("gmux/evict_prepare") u64 opt(struct gmux_evict_ctx *c)
{
	if (c->next_use == NEVER)
		return (1ULL << 62) - c->last_use;
	return (1ULL << 63) - c->next_use;
}
