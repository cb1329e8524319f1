/* The test switches by name (test_switches.h). */
#include "test_switches.h"

#include <stdio.h>
#include <string.h>

/* One row a field: a switch's name is its field's. */
#define ROW(f) {#f, offsetof(TestSwitches, f)}
static const struct {
	const char *name;
	size_t at;
} rows[] = {ROW(no_scratch),   ROW(no_stage_prices),   ROW(no_bounds),     ROW(no_first_cut),
            ROW(rc_inline),    ROW(rc_only_if_none),   ROW(check_screens), ROW(rp_direct),
            ROW(rp_elem_only), ROW(rp_no_split_first), ROW(sp_direct),     ROW(no_table_memo),
            ROW(dp_no_memo),   ROW(dp_memo_collide),   ROW(totals_direct), ROW(screen_exit),
            ROW(screen_kill),  ROW(screen_hang)};
#undef ROW
enum { NROWS = sizeof rows / sizeof rows[0] };
/* a field without a row could be set by no script */
_Static_assert(sizeof(TestSwitches) == NROWS * sizeof(bool), "a row of the table for each TestSwitches field");

bool test_switches_parse(TestSwitches *t, const char *list, char *err, size_t n)
{
	for (const char *p = list;; p++) {
		size_t len = strcspn(p, ","), i = 0;
		while (i < NROWS && !(strlen(rows[i].name) == len && strncmp(p, rows[i].name, len) == 0))
			i++;
		if (i == NROWS) {
			int k = snprintf(err, n, "unknown test switch '%.*s' (", (int)len, p);
			for (size_t r = 0; r < NROWS && k >= 0 && (size_t)k < n; r++)
				k += snprintf(err + k, n - (size_t)k, "%s%s", rows[r].name, r + 1 < NROWS ? ", " : ")");
			return false;
		}
		*(bool *)((char *)t + rows[i].at) = true;
		p += len;
		if (!*p)
			return true;
	}
}
