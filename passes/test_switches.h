/* The search's test switches: each turns off one refinement of the
 * searches or the memory fit, or makes one thing fail, so that a test
 * can show that the refinement keeps the plan (or that the failure is
 * survived). A compilation carries them (Compilation.test), the fit
 * copies them into every compilation it makes (search_fit_memory), and
 * the searches read them from their Search: no environment variable, no
 * global. Unit tests set the fields; e2e scripts give
 * `netc --test-switch NAME[,NAME...]` (hidden from --help;
 * docs/auto_parallel.md, "Switches for tests"). A new switch is a field
 * here and a row of test_switches.c's table. */
#ifndef NETC_TEST_SWITCHES_H
#define NETC_TEST_SWITCHES_H
#include <stdbool.h>
#include <stddef.h>

/* Every field off: the compiler as users run it. Only bools (the
 * table's rows set them by offset; test_switches.c checks the count). */
typedef struct TestSwitches {
	/* the memory estimate without the conversions' scratch
	 * (search_total.c conversion_scratch), to measure that term:
	 * search_scratch, pipecost.search_memory_{each_stage,converted_copies}_by_hand,
	 * search_limit.stage_prices_kept_only_when_faster */
	bool no_scratch;
	/* dynamic_programming's per-stage prices (search_dp.c dp_stages):
	 * the single price's plan, against which the fits with them are
	 * checked: e2e search_plans (4 x 16, 4 x 8), tests/bench/fit_stages.sh */
	bool no_stage_prices;
	/* the outer search's bounds (search_fit.c outer_search): every
	 * candidate screened, the same plan either way:
	 * optpar_fit.screens_priced_as_fitted, e2e search_plans (16 devices) */
	bool no_bounds;
	/* a recompute fit's first search's cut and bound (search_fit.c
	 * first_search_cut, first_search_bound): every fit compiled, the
	 * same plan either way: search_limit.recompute_fit_cut_keeps_the_plan,
	 * search_limit.first_search_bound_waits_the_retry */
	bool no_first_cut;
	/* the recompute retries' wait (search_fit.c outer_search): each
	 * right after its plain fit, the same plan either way:
	 * search_limit.waiting_retries_keep_the_plan */
	bool rc_inline;
	/* recompute tried where faster (search_fit.c fit_faster_rc): only
	 * where nothing fits without it, the slower plan kept:
	 * fit_recompute.recompute_proposed_where_faster */
	bool rc_only_if_none;
	/* the screens' training passes under the optimizer parallel
	 * (search_fit_screens_train): screens up to the strategies alone,
	 * as before: optpar_fit.screens_priced_as_fitted */
	bool check_screens;
	/* recursive_programming's row memo and candidate index
	 * (search_recursive.c): every price asked of search_edge_cost, every
	 * list scanned, the same plan bit for bit: rp_order.rows_priced_once_same_plans */
	bool rp_direct;
	/* recursive_programming's look-ahead through elementwise readers
	 * only, not reshapes (search_recursive.c
	 * looked_through), as before: rp_order.embedding_not_split_for_a_gather,
	 * rp_order.auto_counts_not_cut_by_the_screen */
	bool rp_elem_only;
	/* recursive_programming without its fourth pass (search_recursive.c,
	 * every operator cut in the first round), as before:
	 * rp_order.data_parallel_found_as_a_whole */
	bool rp_no_split_first;
	/* sharding_propagation's faces and cut (search_propagate.c): every
	 * look-ahead cell priced, the same plan bit for bit:
	 * propagate.look_ahead_rows_priced_by_face_same_plan */
	bool sp_direct;
	/* the edge tables' memo across searches (search_tables.c): every
	 * table priced anew, the reference the memo's must equal: search_tables.* */
	bool no_table_memo;
	/* dynamic_programming's memo of series eliminations (search_dp.c):
	 * every identical layer eliminated anew, or every elimination given
	 * the same hashes (the memo must tell them apart by their inputs):
	 * search.dp_repeated_layers_eliminated_once{,_when_priced} */
	bool dp_no_memo, dp_memo_collide;
	/* the totals' memo of delivered gradients (search_total.c
	 * Delivered): every residual chain walked from each edge, the same
	 * totals bit for bit: search_totals.delivered_gradients_memo_as_walked */
	bool totals_direct;
	/* every screen child (search_jobs.c job_child) exits 1 before it
	 * sends, is killed midway through sending, or waits for a signal,
	 * to show that the parent screens in its place or takes it down:
	 * e2e search_plans (screens in parallel) */
	bool screen_exit, screen_kill, screen_hang;
} TestSwitches;

/* Turns on the switches named in list, "NAME[,NAME...]" (the field
 * names); false where a name is none, with the message in err
 * (listing the names). */
bool test_switches_parse(TestSwitches *t, const char *list, char *err, size_t n);
#endif
