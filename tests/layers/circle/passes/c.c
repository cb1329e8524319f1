int a_fn(int n);
int c_fn(int n) { return a_fn(n); }
