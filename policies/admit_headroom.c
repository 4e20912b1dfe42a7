/* Admission by memory headroom (gpu_ext's example): a process that would start a new
 * tenant while the tenants already hold more than 90% of the budget is refused, so that
 * those running are not squeezed; processes joining an existing tenant always join. */
#include "gmux_bpf.h"

SEC("gmux/task_init") u64 admit(struct gmux_task_ctx *c)
{
	if (c->new_tenant && c->budget != ~0ULL && c->held > c->budget / 10 * 9)
		return 1;
	return 0;
}
