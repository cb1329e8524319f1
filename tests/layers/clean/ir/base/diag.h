int diag_error(const char *msg);
