/* dynamic_programming's edge tables (search_dp.c reads them): each
 * edge's price per pair of candidates, and the bytes it holds. Priced
 * once per distinct table of the process, not once per compilation: the
 * outer search (search_fit.c) compiles one (stages, micro-batches)
 * candidate again and again (its screen, its fit, fit_loop's later
 * compiles, the recompute screen and fit), and every compilation of it
 * prices the same tables (GPT-3 x 1024 devices: 4 million cells, ~3 s,
 * issue 28). */
#ifndef NETC_SEARCH_TABLES_H
#define NETC_SEARCH_TABLES_H
#include "search_graph.h"

/* Each edge's cost table T[e] (NULL for a vertex's edge to itself) and
 * memory table T[ne + e] (NULL where it holds nothing): Mat tables
 * (search_mat.h), each entry a reference. Tables with the same content
 * key (search_table_key) come from the process's memo, the cost and the
 * memory tables each by their own. */
double **search_edge_tables(Search *s);
/* The same shape of tables, each edge's search_edge_forward by cell and
 * no memory table: priced anew by every call (only the bound of one
 * outer-search candidate reads them, search_dp_bound), the same content
 * once per call. Freed by search_edge_tables_free. */
double **search_forward_tables(Search *s);
void search_edge_tables_free(Search *s, double **T);

/* What edge e's cost table (memory false) or memory table depends on,
 * as a 128-bit hash: both ends' layouts as the edge sees them under every
 * candidate (search_edge_from, _to), the element type and an f32's bytes
 * (--precision f64), training, the
 * ends' fixed candidates; for the cost table the gradient's layouts, the
 * stage crossing, w_micro and the machine's figures that price a
 * redistribution or a stage transfer; for the memory table the reader's
 * recompute marks and its stage's micro-batch slots. False where a
 * layout is ragged (its fields do not say it all): that table is priced
 * apart. */
typedef struct TableKey {
	uint64_t h1, h2;
	int nu, nv;
	bool memory;
} TableKey;
bool search_table_key(const Search *s, int e, bool memory, TableKey *k);

/* The memo dropped: every table it holds freed (no later compilation of
 * the process needs them: the outer search is done). A search with
 * TestSwitches.no_table_memo prices every table anew, outside it. */
void search_tables_drop(void);
/* The bytes the memo keeps before it evicts (0: the default, 512 MB;
 * tests set a few bytes to evict at every search). */
void search_tables_bound(size_t bytes);
/* Tables taken from the memo and priced into it since the last drop. */
typedef struct TableStats {
	long hits, priced, evicted;
	size_t bytes, peak; /* held now, and the most held at once */
} TableStats;
TableStats search_tables_stats(void);
#endif
