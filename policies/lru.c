/* LRU eviction: the chunk used least recently leaves GPU memory first. gmux's built-in
 * `lru`, as a program: with it attached, a plan moves the same chunks as the built-in. */
#include "gmux_bpf.h"

SEC("gmux/evict_prepare") u64 lru(struct gmux_evict_ctx *c)
{
	return c->last_use;
}
