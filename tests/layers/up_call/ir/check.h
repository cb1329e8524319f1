int pass_run(int n);
#define IR_CHECK(n) pass_run(n)
