/* Shared compute routines (issue 16): a phase function collected node by
 * node (emit_seq_*) and written with each maximal run of isomorphic node
 * sequences as calls of one routine. It renders nodes through
 * emit_c_node (emit_c.c); the program and pipeline emitters sit on it
 * (the order is drawn in emit.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"
#include "../passes/fusion.h"
#include "emit.h"

/* ---- shared compute routines ---------------------------------------------------- */

/* A phase is a sequence of items: nodes, rendered with tokens for their
 * buffers, and barriers (text written between nodes: bucket starts,
 * pipeline transfers), which are never shared. */
typedef struct SeqItem {
	const Node *n;         /* NULL: a barrier */
	char *text;            /* node: its code with tokens; barrier: the text */
	char *comment;         /* node: its IR line */
	char *canon;           /* node: the code with tokens as node-local numbers and types */
	uint64_t hash;         /* node: of canon */
	int *occ;              /* node: each token occurrence in order, as 2 * value id + swapped */
	int nocc;
} SeqItem;

/* A routine: one node sequence's code over parameters r_0, r_1, ... */
typedef struct Block {
	char *key;             /* parameter types and the code without comments: equal key, same routine */
	const char *name;
} Block;

/* Runs shorter than this many nodes stay straight-line: a call with its
 * buffer list is about as long as the code it replaces. */
enum { SEQ_MIN_NODES = 3, SEQ_MAX_TRIES = 64 };

/* The next token of s at or after *p: its key (2 * id + swapped) and
 * the text after it; -1 at the end. Text before it goes to `plain`. */
static int next_token(const char **p, FILE *plain)
{
	const char *s = *p, *t = strchr(s, '\x01');
	if (!t) {
		if (plain)
			fputs(s, plain);
		*p = s + strlen(s);
		return -1;
	}
	if (plain)
		fwrite(s, 1, (size_t)(t - s), plain);
	bool swapped = t[1] == 'S';
	char *end;
	long id = strtol(t + 2, &end, 10);
	*p = end + 1; /* past \x02 */
	return (int)(2 * id + swapped);
}

static const char *key_name(const Emit *e, int key)
{
	return key & 1 ? e->swap[key / 2] : e->cname[key / 2];
}

/* the C type a parameter for the buffer `key` points to: a swapped name
 * is an f32 accumulator, or a part of a fused bucket, in the bucket's
 * type (a narrow gradient sum's: uint16_t) */
static const char *key_type(const Emit *e, int key)
{
	const Value *v = e->g->values[key / 2];
	int64_t off;
	if (key & 1)
		return v->def && fusion_bucket_of(e->c->fusion, v->def, &off) ? ctype(v->dtype) : "real";
	return ctype(v->dtype);
}

static SeqItem *seq_push(Emit *e)
{
	SeqItem it = {0};
	VEC_PUSH(&e->c->arena, e->items, e->nitems, e->capitems, it);
	return &e->items[e->nitems - 1];
}

/* What was written since the last item becomes a barrier. */
static void seq_flush(Emit *e)
{
	fflush(e->out);
	if (e->seq_len == e->seq_from)
		return;
	SeqItem *it = seq_push(e);
	it->text = arena_alloc(&e->c->arena, e->seq_len - e->seq_from + 1);
	memcpy(it->text, e->seq_buf + e->seq_from, e->seq_len - e->seq_from);
	it->text[e->seq_len - e->seq_from] = 0;
	e->seq_from = e->seq_len;
}

/* Everything after the buffers -- routines, phase functions, start-up,
 * main -- only passes buffers to the runtime's kernels: optimising it
 * gains nothing at run time, and GCC's -O2 on thousands of calls was most
 * of the C compile time of a deep model. Other compilers ignore it. */
void emit_glue_pragma(Emit *e, FILE *out)
{
	if (e->share)
		fputs("/* kernel calls only, compiled without optimisation (docs/codegen.md) */\n"
		      "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize(\"O0\")\n#endif\n",
		      out);
}

void emit_routine_report(const Emit *e, FILE *out)
{
	if (e->share)
		fprintf(out, "shared routines: %d, called %d times for %d nodes of the step\n", e->nblocks, e->block_calls,
		        e->block_nodes);
	else
		fputs("shared routines: off (--no-share-routines)\n", out);
}

void emit_seq_begin(Emit *e)
{
	e->seq_out = e->out;
	e->seq_buf = NULL;
	e->seq_len = e->seq_from = 0;
	e->nitems = 0;
	e->out = open_memstream(&e->seq_buf, &e->seq_len);
	if (!e->out) {
		perror("netc: open_memstream");
		exit(1);
	}
}

static char *render(Emit *e, const Node *n, bool comment)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len), *saved = e->out;
	if (!f) {
		perror("netc: open_memstream");
		exit(1);
	}
	e->out = f;
	if (comment) {
		emit_node_comment(f, n);
	} else {
		e->tokens = true;
		emit_c_node_code(e, n);
		e->tokens = false;
	}
	fclose(f);
	e->out = saved;
	char *s = arena_strdup(&e->c->arena, buf);
	free(buf);
	return s;
}

/* The node-local canonical form: tokens numbered by first appearance
 * with their types, so isomorphic nodes have equal forms. */
static void canonicalise(Emit *e, SeqItem *it)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int cap = 8, capocc = 8, nfirst = 0;
	int *first = ARENA_NEWN(&e->c->arena, int, cap);
	it->occ = ARENA_NEWN(&e->c->arena, int, capocc);
	const char *p = it->text;
	for (int key; (key = next_token(&p, f)) >= 0;) {
		int k = 0;
		while (k < nfirst && first[k] != key)
			k++;
		if (k == nfirst) {
			if (nfirst == cap) {
				int *g = ARENA_NEWN(&e->c->arena, int, cap * 2);
				memcpy(g, first, sizeof *g * (size_t)cap);
				first = g;
				cap *= 2;
			}
			first[nfirst++] = key;
		}
		if (it->nocc == capocc) {
			int *g = ARENA_NEWN(&e->c->arena, int, capocc * 2);
			memcpy(g, it->occ, sizeof *g * (size_t)capocc);
			it->occ = g;
			capocc *= 2;
		}
		it->occ[it->nocc++] = key;
		fprintf(f, "\x01%d %s\x02", k, key_type(e, key));
	}
	fclose(f);
	it->canon = arena_strdup(&e->c->arena, buf);
	it->hash = hash_str(buf);
	free(buf);
}

void emit_seq_node_in(Emit *e, const Node *n, const char *before, const char *after)
{
	seq_flush(e);
	SeqItem *it = seq_push(e);
	it->n = n;
	it->comment = render(e, n, true);
	it->text = render(e, n, false);
	if (*before || *after)
		it->text = arena_printf(&e->c->arena, "%s%s%s", before, it->text, after);
	canonicalise(e, it);
}

void emit_seq_node(Emit *e, const Node *n) { emit_seq_node_in(e, n, "", ""); }

typedef struct SlotMap SlotMap;
static void write_detok(Emit *e, FILE *out, const char *text, SlotMap *m);

void emit_seq_extend(Emit *e)
{
	seq_flush(e);
	e->ext_saved = e->out;
	e->ext_buf = NULL;
	e->ext_len = 0;
	e->out = open_memstream(&e->ext_buf, &e->ext_len);
	if (!e->out) {
		perror("netc: open_memstream");
		exit(1);
	}
	e->tokens = true;
}

void emit_seq_extend_end(Emit *e)
{
	e->tokens = false;
	fclose(e->out);
	e->out = e->ext_saved;
	SeqItem *it = e->nitems ? &e->items[e->nitems - 1] : NULL;
	if (it && it->n) {
		it->text = arena_printf(&e->c->arena, "%s%s", it->text, e->ext_buf);
		it->nocc = 0;
		canonicalise(e, it);
	} else { /* after a barrier (the node's sends): a barrier too */
		write_detok(e, e->out, e->ext_buf, NULL);
	}
	free(e->ext_buf);
}

/* Block-level parameter numbers: slot[key] (valid where stamp[key] == gen). */
struct SlotMap {
	int *slot, *stamp;
	int gen, nslots;
	int *keys;             /* by slot: the buffer's key */
};

static void slots_reset(SlotMap *m)
{
	m->gen++;
	m->nslots = 0;
}

static int slot_of(SlotMap *m, int key)
{
	if (m->stamp[key] != m->gen) {
		m->stamp[key] = m->gen;
		m->keys[m->nslots] = key;
		m->slot[key] = m->nslots++;
	}
	return m->slot[key];
}

/* Whether items [a, a+p) and [b, b+p) are the same code up to buffer
 * names: node by node equal canonical forms, and the buffers related the
 * same way across nodes (a value written in one node and read in the
 * next is one parameter in both). */
static bool same_code(Emit *e, SlotMap *ma, SlotMap *mb, int a, int b, int p)
{
	const SeqItem *it = e->items;
	for (int t = 0; t < p; t++)
		if (!it[a + t].n || !it[b + t].n || it[a + t].hash != it[b + t].hash ||
		    strcmp(it[a + t].canon, it[b + t].canon) != 0)
			return false;
	slots_reset(ma);
	slots_reset(mb);
	for (int t = 0; t < p; t++)
		for (int j = 0; j < it[a + t].nocc; j++)
			if (slot_of(ma, it[a + t].occ[j]) != slot_of(mb, it[b + t].occ[j]))
				return false;
	return true;
}

/* Writes text with each token replaced: by the buffer's name (m NULL) or
 * by the routine parameter r_<slot>. */
static void write_detok(Emit *e, FILE *out, const char *text, SlotMap *m)
{
	for (int key; (key = next_token(&text, out)) >= 0;)
		if (m)
			fprintf(out, "r_%d", slot_of(m, key));
		else
			fputs(key_name(e, key), out);
}

/* The routine for the instance [i, i+p): found by its key, or written to
 * e->decls. Leaves m holding the instance's slots. */
static const char *block_routine(Emit *e, SlotMap *m, int i, int p)
{
	const SeqItem *it = e->items;
	char *key = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&key, &len);
	slots_reset(m);
	for (int t = 0; t < p; t++)
		write_detok(e, f, it[i + t].text, m);
	fputc('\n', f);
	for (int s = 0; s < m->nslots; s++)
		fprintf(f, "%s,", key_type(e, m->keys[s]));
	fclose(f);
	HashProbe hp = hash_probe(&e->block_index, hash_str(key));
	const char *name = NULL;
	while (!name && hash_next(&e->block_index, &hp))
		if (strcmp(e->blocks[hp.entry].key, key) == 0)
			name = e->blocks[hp.entry].name;
	if (!name) {
		Block blk = {arena_strdup(&e->c->arena, key), arena_printf(&e->c->arena, "routine_%d", e->nblocks)};
		VEC_PUSH(&e->c->arena, e->blocks, e->nblocks, e->capblocks, blk);
		hash_put(&e->block_index, &hp, (uint32_t)e->nblocks - 1);
		name = blk.name;
		const Node *n0 = it[i].n;
		fprintf(e->decls, "\n/* %d nodes run by every instance of this code; the comments name the first%s%s */\n", p,
		        n0->scope && *n0->scope ? ", @" : "", n0->scope ? n0->scope : "");
		fprintf(e->decls, "static void %s(void *const *b)\n{\n", name);
		for (int s = 0; s < m->nslots; s++)
			fprintf(e->decls, "\t%s *const r_%d = b[%d];\n", key_type(e, m->keys[s]), s, s);
		for (int t = 0; t < p; t++) {
			fputs(it[i + t].comment, e->decls);
			write_detok(e, e->decls, it[i + t].text, m);
		}
		fputs("}\n", e->decls);
	}
	free(key);
	return name;
}

static void write_call(Emit *e, FILE *out, const char *name, SlotMap *m, int i, int p)
{
	slots_reset(m);
	for (int t = 0; t < p; t++)
		for (int j = 0; j < e->items[i + t].nocc; j++)
			slot_of(m, e->items[i + t].occ[j]);
	const Node *n0 = e->items[i].n;
	fprintf(out, "\t%s((void *const[]){", name);
	for (int s = 0; s < m->nslots; s++)
		fprintf(out, "%s%s", s ? ", " : "", key_name(e, m->keys[s]));
	fprintf(out, "});%s%s%s\n", n0->scope && *n0->scope ? " /* @" : "", n0->scope && *n0->scope ? n0->scope : "",
	        n0->scope && *n0->scope ? " */" : "");
	e->block_calls++;
	e->block_nodes += p;
}

/* nxt[i]: the next node item with item i's canonical hash, -1 none. */
static int *next_same(Emit *e)
{
	int n = e->nitems;
	int *nxt = ARENA_NEWN(&e->c->arena, int, n ? n : 1);
	HashIndex latest = hash_new(&e->c->arena); /* per hash, the item last met (the nearest after i) */
	hash_reserve(&latest, (size_t)n);
	for (int i = n - 1; i >= 0; i--) {
		nxt[i] = -1;
		if (!e->items[i].n)
			continue;
		HashProbe p = hash_probe(&latest, e->items[i].hash);
		while (nxt[i] < 0 && hash_next(&latest, &p))
			if (e->items[p.entry].hash == e->items[i].hash)
				nxt[i] = (int)p.entry;
		if (nxt[i] >= 0)
			hash_set(&latest, &p, (uint32_t)i);
		else
			hash_put(&latest, &p, (uint32_t)i);
	}
	return nxt;
}

/* Whether items [i, i+p) name a buffer: a routine needs a parameter
 * (the members of an update run that only say so name none). */
static bool has_buffers(const Emit *e, int i, int p)
{
	for (int t = 0; t < p; t++)
		if (e->items[i + t].nocc)
			return true;
	return false;
}

/* The longest saving run starting at i: k instances of p items. */
static void find_run(Emit *e, SlotMap *ma, SlotMap *mb, const int *nxt, int i, int *best_p, int *best_k)
{
	int n = e->nitems;
	*best_p = *best_k = 0;
	int tries = 0;
	for (int j = nxt[i]; j >= 0 && tries < SEQ_MAX_TRIES; j = nxt[j], tries++) {
		int p = j - i;
		if (i + 2 * p > n)
			break;
		if (p < SEQ_MIN_NODES || !same_code(e, ma, mb, i, j, p) || !has_buffers(e, i, p))
			continue;
		int k = 2;
		while (i + (k + 1) * p <= n && same_code(e, ma, mb, i, i + k * p, p))
			k++;
		if ((int64_t)(k - 1) * p > (int64_t)(*best_k - 1) * *best_p) {
			*best_p = p;
			*best_k = k;
		}
	}
}

void emit_seq_end(Emit *e)
{
	seq_flush(e);
	fclose(e->out);
	free(e->seq_buf);
	e->seq_buf = NULL;
	e->out = e->seq_out;
	FILE *out = e->out;
	int nkeys = 2 * e->g->nvalues + 2;
	SlotMap maps[2];
	for (int k = 0; k < 2; k++)
		maps[k] = (SlotMap){ARENA_NEWN(&e->c->arena, int, nkeys), ARENA_NEWN(&e->c->arena, int, nkeys), 0, 0,
		                    ARENA_NEWN(&e->c->arena, int, nkeys)};
	const int *nxt = e->share ? next_same(e) : NULL;
	for (int i = 0; i < e->nitems;) {
		const SeqItem *it = &e->items[i];
		int p = 0, k = 0;
		if (it->n && nxt)
			find_run(e, &maps[0], &maps[1], nxt, i, &p, &k);
		if (k >= 2) {
			const char *name = block_routine(e, &maps[0], i, p);
			for (int m = 0; m < k; m++)
				write_call(e, out, name, &maps[0], i + m * p, p);
			i += k * p;
			continue;
		}
		if (it->n) {
			fputs(it->comment, out);
			write_detok(e, out, it->text, NULL);
		} else {
			fputs(it->text, out);
		}
		i++;
	}
	e->nitems = 0;
}
