int pass_run(int n);
