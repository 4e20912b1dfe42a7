/* Job admission by length: a job waits while a job more than four times shorter runs,
 * so that a long request does not start beside a short one and slow it (the decision
 * Paella's dispatcher makes per kernel, made here per job, by a program). Jobs of the
 * kinds named in the map `first` (gmux policy map ID first update str:KIND 1) are let
 * run at once. gmux lets a job run after a second at most, and never holds every running
 * job for admission. Needs applications that mark jobs (gmux.job). */
#include "gmux_bpf.h"

#define RATIO 4

GMUX_MAP(first, GMUX_MAP_HASH, struct gmux_name, u64, 64);

SEC("gmux/admission") u64 shorter_first(struct gmux_job_ctx *c)
{
	struct gmux_name key = c->kind;
	u64 *named = map_lookup_elem(&first, &key);

	if (named && *named)
		return 0;
	/* A job of no estimate yet counts as long: it waits while another job runs. */
	if (c->shortest == ~0ULL || (c->estimate && c->estimate <= RATIO * c->shortest))
		return 0;
	return 1;
}
