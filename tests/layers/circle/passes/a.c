int b_fn(int n);
int a_fn(int n) { return n > 0 ? b_fn(n - 1) : 0; }
