/* LFU eviction (gpu_ext's example): `access` counts each chunk's uses in a map, and
 * `evict_prepare` ranks candidates by their count, the least used leaving first. */
#include "gmux_bpf.h"

GMUX_MAP(uses, GMUX_MAP_HASH, u64, u64, 65536);

SEC("gmux/access") u64 count(struct gmux_chunk_ctx *c)
{
	u64 key = c->chunk, one = 1;
	u64 *n = map_lookup_elem(&uses, &key);
	if (n)
		*n += 1;
	else
		map_update_elem(&uses, &key, &one, 0);
	return 0;
}

SEC("gmux/evict_prepare") u64 least_used(struct gmux_evict_ctx *c)
{
	u64 key = c->chunk;
	u64 *n = map_lookup_elem(&uses, &key);
	return n ? *n : 0;
}
