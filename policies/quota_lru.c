/* Per-tenant quota LRU (gpu_ext's example): a tenant may be given a quota of GPU memory,
 * in 2 MiB chunks, in the map `quota` (by tenant number, from the control plane: gmux
 * policy map ID quota update TENANT CHUNKS). Where a plan needs room, the chunks of the
 * tenants over their quota leave first, then the others, each group least recently used
 * first. A tenant without a quota (0) is never over it. It decides among several
 * tenants' chunks where one planner holds them (gmux sim, a shared planner); in a
 * tenant's own process it is LRU. */
#include "gmux_bpf.h"

GMUX_MAP(quota, GMUX_MAP_ARRAY, u32, u64, 1024);

#define WITHIN (1ULL << 62)

SEC("gmux/evict_prepare") u64 quota_lru(struct gmux_evict_ctx *c)
{
	u32 key = c->tenant;
	u64 *q = map_lookup_elem(&quota, &key);
	u64 recency = c->last_use & (WITHIN - 1);
	if (q && *q && c->resident > *q)
		return recency;
	return WITHIN + recency;
}
