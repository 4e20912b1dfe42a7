/* Stride prefetch (gpu_ext's example): where each command of a tenant starts a constant
 * number of chunks after the previous one (a stream over buffers allocated one after
 * another, say), bring in the next commands' chunks while the current one runs.
 * `access` follows the first and last chunk of each command (its chunks come in
 * ascending order, with one stamp per command; commands over the same buffer as the one
 * before count once); `prefetch`, called while the next
 * command's memory is brought in, names the chunks of the DEPTH commands after it; and
 * `evict_prepare` keeps the chunks brought in ahead until their commands come (they
 * leave last; the others in gmux's own order). Sequential access is the stride of one
 * command's size. */
#include "gmux_bpf.h"

#define DEPTH 2

struct stream {
	u64 stamp;	/* the stamp of the newest command seen */
	u64 first;	/* its first chunk */
	u64 last;	/* its last chunk */
	u64 stride;	/* chunks between the first chunks of the last two commands (0: none) */
	u64 steady;	/* 1 when the last two strides were equal */
};

GMUX_MAP(streams, GMUX_MAP_HASH, u32, struct stream, 1024);

SEC("gmux/access") u64 follow(struct gmux_chunk_ctx *c)
{
	u32 key = c->tenant;
	struct stream *s = map_lookup_elem(&streams, &key);
	if (!s) {
		struct stream fresh = { c->stamp, c->chunk, c->chunk, 0, 0 };
		map_update_elem(&streams, &key, &fresh, 0);
		return 0;
	}
	if (c->stamp == s->stamp) {
		if (c->chunk > s->last)
			s->last = c->chunk;
		return 0;
	}
	s->stamp = c->stamp;
	/* Another command over the same buffer: the stream has not moved. */
	if (c->chunk == s->first)
		return 0;
	/* A new command: the stride from the previous one's first chunk. */
	u64 stride = c->chunk > s->first ? c->chunk - s->first : 0;
	s->steady = stride != 0 && stride == s->stride;
	s->stride = stride;
	s->first = c->chunk;
	s->last = c->chunk;
	return 0;
}

/* For a steady stream of `tenant`, the chunks ahead: from `*next`, the first of the
 * command being prepared (one stride after the newest seen), through `*after`, the first
 * of the command after it, to `*end`, one past the last of the DEPTH commands after it,
 * each as long as the newest. Returns 0 where the stream is not steady. */
static __always_inline int window(u32 tenant, u64 *next, u64 *after, u64 *end)
{
	struct stream *s = map_lookup_elem(&streams, &tenant);
	if (!s || !s->steady)
		return 0;
	*next = s->first + s->stride;
	*after = *next + s->stride;
	*end = *next + DEPTH * s->stride + (s->last - s->first + 1);
	return 1;
}

SEC("gmux/prefetch") u64 ahead(struct gmux_prefetch_ctx *c)
{
	u64 next, after, end;
	if (!window(c->tenant, &next, &after, &end))
		return 0;
	c->start = after;
	c->count = end - after > GMUX_PREFETCH_MAX ? GMUX_PREFETCH_MAX : end - after;
	return 0;
}

SEC("gmux/evict_prepare") u64 keep_ahead(struct gmux_evict_ctx *c)
{
	u64 next, after, end;
	if (!window(c->tenant, &next, &after, &end))
		return 0;
	return c->chunk >= next && c->chunk < end;
}
