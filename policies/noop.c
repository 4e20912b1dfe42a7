/* A program on every memory hook that does nothing: what the hooks themselves cost
 * (`gmux bench launch --policy`, and GMUX_POLICY beside any workload). Its eviction ranks
 * are all equal, so gmux's own order stands, and it asks for no prefetch. */
#include "gmux_bpf.h"

SEC("gmux/activate") u64 on_activate(struct gmux_chunk_ctx *c)
{
	return 0;
}

SEC("gmux/access") u64 on_access(struct gmux_chunk_ctx *c)
{
	return 0;
}

SEC("gmux/evict_prepare") u64 on_evict_prepare(struct gmux_evict_ctx *c)
{
	return 0;
}

SEC("gmux/prefetch") u64 on_prefetch(struct gmux_prefetch_ctx *c)
{
	return 0;
}
