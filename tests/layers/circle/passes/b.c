int a_fn(int n);
int b_fn(int n) { return n > 0 ? a_fn(n - 1) : 1; }
