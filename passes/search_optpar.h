/* Optimizer parallel (enable_parallel_optimizer) in the searches' prices
 * (search_optpar.c): what the program does with a parameter the
 * parallel optimizer shards, priced for a candidate's layout of it.
 * Below search_graph.h, which holds an OptparCtx in each Search. */
#ifndef NETC_SEARCH_OPTPAR_H
#define NETC_SEARCH_OPTPAR_H
#include "../ir/ir.h"
#include "cost.h"
#include "passes.h"

/* The search's figures the prices read (search_new fills them). */
typedef struct OptparCtx {
	const Graph *g;
	Arena *a;
	RedistCache *rc;
	const Machine *m;
	GradCall grad_call;   /* GRAD_IN_BUCKET where pass_fusion packs (Search.grad_call) */
	int real_size;        /* bytes of an f32 element (Search.real_size) */
	int opt_states;       /* optimizer state tensors per parameter */
	int64_t device_num;   /* devices a strategy splits (one stage's) */
	bool training;
	/* by value id: what the prices need to know of a parameter (search_
	 * optpar.c's flags: trained, read forward / backward / on several
	 * stages); NULL: optimizer parallel off */
	unsigned char *flags;
	/* by value id: the type a parameter's shard is gathered in -- amp's
	 * narrow type where every reader but its update is amp's cast of it
	 * to one (optimizer.c gather_type: the shard is cast and the narrow
	 * shard gathered), else its own; with flags */
	DType *gather_dt;
} OptparCtx;

typedef struct OptparPrice {
	double micro;        /* seconds per micro-batch: the gathers, the reduce-scatter under gradient_accumulation_shard */
	double step;         /* seconds once a step: the reduce-scatter in the update, a gather back of a weight kept whole */
	double head[2];      /* what the reduce-scatter [0] and the gather [1] add as their buckets' first members
	                      * (grad_call GRAD_IN_BUCKET), 0 where not packed */
	const Layout *from[2]; /* the packed collective's layout and grid axes, which name its bucket */
	unsigned axes[2];
	DType dt[2];         /* and its type (a bucket holds one) */
} OptparPrice;

/* Fills o->flags from the graph's readers and updates (training with
 * enable_parallel_optimizer; else NULL). */
void search_optpar_init(OptparCtx *o);
/* The parameter x is, or whose stored shard x is gathered from
 * (optimizer.c store_sharded: a laid-out graph's readers read the
 * gathered copy, or under amp the gathered copy of the shard's narrow
 * cast); else x. */
Value *search_param_read(Value *x);
/* Whether n is amp's cast of a stored shard (optimizer.c shard_cast) in a
 * laid-out graph: not a vertex of the searches, which see its gather's
 * readers read the parameter, as in the graph they searched, where they
 * read amp's cast of the whole weight. */
bool search_optpar_shard_cast(const Node *n);
/* The shard the parallel optimizer makes of parameter p laid out as l
 * (sharding_optimizer.h), NULL where it stays whole or is not sharded. */
const Layout *search_optpar_shard(const OptparCtx *o, const Value *p, const Layout *l);
/* Input i of n, a parameter the parallel optimizer shards in candidate
 * r: its gradient's reduce-scatter and the gathers of its shard, as the
 * program runs them, into *out, and true; false (out zero) where its
 * gradient is all-reduced as cost_param_grad prices it. */
bool search_optpar_price(const OptparCtx *o, const Node *n, const ShardResult *r, int i, OptparPrice *out);
/* Bytes a device holds of parameter p laid out as l, its gradient and
 * optimizer state, plus `extra` whole buffers (cost_param_memory's, with
 * the sharded parts as the program stores them). */
double search_optpar_memory(const OptparCtx *o, const Value *p, const Layout *l, int extra);
#endif
