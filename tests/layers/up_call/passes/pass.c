int pass_run(int n) { return n + 1; }
