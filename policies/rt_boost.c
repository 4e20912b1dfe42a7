/* RT-priority boost (gpu_ext's example): latency-critical tenants go first. A tenant is
 * latency-critical when the control plane named it in the map `rt_names` (gmux policy
 * map ID rt_names update str:NAME 1; names of at most 16 bytes) or when its first
 * process asked for a priority above 0 (gmux run --priority 1). A tenant's name belongs
 * to whoever starts it first: where users are not trusted, check c->uid too. The program sets every tenant's priority class: 1 for
 * latency-critical tenants, 0 for the others, whatever they asked; and their slices: 1 s
 * for latency-critical tenants, 2 ms for the others.
 *
 * Under `gmux daemon --policy priority` the class decides: a latency-critical tenant's
 * commands go first and its memory is divided first. Under round robin (the default)
 * only the slices differ, which does not help under memory pressure, where a turn's
 * switch, not its length, delays a request. The map `rt` (by tenant number, a slice in
 * ns) sets a tenant's slice at each turn, overriding both. */
#include "gmux_bpf.h"

#define LC_SLICE_NS 1000000000ULL	/* 1 s */
#define BE_SLICE_NS 2000000ULL		/* 2 ms */

GMUX_MAP(rt_names, GMUX_MAP_HASH, struct gmux_name, u64, 64);
GMUX_MAP(rt, GMUX_MAP_ARRAY, u32, u64, 1024);

SEC("gmux/task_init") u64 classify(struct gmux_task_ctx *c)
{
	struct gmux_name key = c->name;
	/* A longer name that starts the same is another tenant's. */
	u64 *named = c->name_len <= sizeof(key) ? map_lookup_elem(&rt_names, &key) : 0;
	int lc = (named && *named) || c->priority > 0;

	c->priority = lc ? 1 : 0;
	if (c->new_tenant)
		c->timeslice = lc ? LC_SLICE_NS : BE_SLICE_NS;
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
