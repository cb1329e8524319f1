#include <inttypes.h>

#include "layout.h"

void layout_print(const Layout *l, FILE *out)
{
	char buf[SHAPE_STR_MAX];
	fputs("layout(dev=[", out);
	for (int i = 0; i < l->ndev; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", l->dev[i]);
	fputs("], map=[", out);
	for (int i = 0; i < l->rank; i++)
		fprintf(out, "%s%d", i ? ", " : "", l->map[i] < 0 ? -1 : l->ndev - 1 - l->map[i]);
	fprintf(out, "], slice=%s", shape_str(&l->slice, buf, sizeof buf));
	if (l->partial)
		fprintf(out, ", partial=0x%x", l->partial);
	fputc(')', out);
}
