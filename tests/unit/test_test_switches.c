/* The test switches by name (passes/test_switches.c, --test-switch):
 * each name sets its own field and no other, an unknown or empty name is
 * an error that lists the names, and the names listed set every field
 * (a field without a row could be set by no e2e script). */
#include <criterion/criterion.h>
#include <string.h>

#include "passes/test_switches.h"

Test(test_switches, names_set_their_fields)
{
	TestSwitches t = {0};
	char err[512];
	cr_assert(test_switches_parse(&t, "rc_inline,no_bounds", err, sizeof err), "%s", err);
	cr_assert(test_switches_parse(&t, "screen_kill", err, sizeof err), "%s", err);
	TestSwitches want = {.rc_inline = true, .no_bounds = true, .screen_kill = true};
	cr_expect(memcmp(&t, &want, sizeof t) == 0, "other fields set than rc_inline, no_bounds and screen_kill");
}

Test(test_switches, unknown_names_are_errors)
{
	TestSwitches t = {0};
	char err[512];
	const char *bad[] = {"no_bound", "no_bounds,", "", "no_bounds,,rc_inline", "NO_BOUNDS"};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
		cr_expect(!test_switches_parse(&t, bad[k], err, sizeof err), "'%s' taken", bad[k]);
	cr_expect(!test_switches_parse(&t, "no_bounds,no_bound", err, sizeof err));
	cr_expect(strncmp(err, "unknown test switch 'no_bound' (", 32) == 0, "%s", err);
}

/* the names the error lists, all given at once: every field on */
Test(test_switches, every_field_has_a_name)
{
	TestSwitches t = {0};
	char err[512], names[512];
	cr_assert(!test_switches_parse(&t, "?", err, sizeof err));
	const char *open = strchr(err, '('), *close = strrchr(err, ')');
	cr_assert(open && close && close > open, "%s", err);
	size_t n = 0;
	for (const char *p = open + 1; p < close; p++)
		if (*p != ' ')
			names[n++] = *p;
	names[n] = 0;
	cr_assert(test_switches_parse(&t, names, err, sizeof err), "%s", err);
	const unsigned char *b = (const unsigned char *)&t;
	for (size_t i = 0; i < sizeof t; i++)
		cr_expect_eq(b[i], 1, "field at byte %zu not set by any of %s", i, names);
}
