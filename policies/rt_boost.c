/* RT-priority timeslice boost (gpu_ext's example): tenants marked real-time in the map
 * `rt` (by tenant number, from the control plane) get a long slice each turn, so that
 * their requests finish inside one turn; the others keep gmux's slice. */
#include "gmux_bpf.h"

GMUX_MAP(rt, GMUX_MAP_ARRAY, u32, u64, 1024);

SEC("gmux/timeslice") u64 boost(struct gmux_slice_ctx *c)
{
	u32 key = c->tenant;
	u64 *boost_ns = map_lookup_elem(&rt, &key);
	if (boost_ns && *boost_ns > c->slice)
		return *boost_ns;
	return c->slice;
}
