/* RT-priority timeslice boost (gpu_ext's example): differentiated timeslices under round
 * robin. A tenant whose first process asks for a priority above 0 (gmux run --priority 1)
 * is latency-critical and gets a long slice; the others, best-effort, get a short one, so
 * that a latency-critical request never waits long for the GPU. The map `rt` (by tenant
 * number, from the control plane) sets a tenant's slice at each turn, overriding both. */
#include "gmux_bpf.h"

#define LC_SLICE_NS 1000000000ULL	/* 1 s */
#define BE_SLICE_NS 2000000ULL		/* 2 ms */

GMUX_MAP(rt, GMUX_MAP_ARRAY, u32, u64, 1024);

SEC("gmux/task_init") u64 classify(struct gmux_task_ctx *c)
{
	if (c->new_tenant)
		c->timeslice = c->priority > 0 ? LC_SLICE_NS : BE_SLICE_NS;
	return 0;
}

SEC("gmux/timeslice") u64 boost(struct gmux_slice_ctx *c)
{
	u32 key = c->tenant;
	u64 *boost_ns = map_lookup_elem(&rt, &key);
	if (boost_ns && *boost_ns)
		return *boost_ns;
	return c->slice;
}
