/* ir_check: calls pass_run (this comment is not the call) */
int pass_run(int n);

int ir_check(int n)
{
	return pass_run(n);
}
