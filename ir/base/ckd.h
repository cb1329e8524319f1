/* Overflow-checked integer arithmetic, in the spelling of C23's
 * <stdckdint.h> (ckd_add(&r, a, b) is true when the exact result does not
 * fit r): sizes, element counts and device products come from user files
 * and must never wrap into a plausible value. GCC and Clang provide the
 * builtins; C23 compilers the header itself. */
#ifndef NETC_CKD_H
#define NETC_CKD_H
#if defined(__has_include)
#if __has_include(<stdckdint.h>) && __STDC_VERSION__ > 201710L
#include <stdckdint.h>
#define NETC_HAVE_STDCKDINT 1
#endif
#endif
#ifndef NETC_HAVE_STDCKDINT
#define ckd_add(r, a, b) __builtin_add_overflow((a), (b), (r))
#define ckd_sub(r, a, b) __builtin_sub_overflow((a), (b), (r))
#define ckd_mul(r, a, b) __builtin_mul_overflow((a), (b), (r))
#endif
#endif
