/* -DCOUNT_MALLOC: glibc's allocator wrapped to count the allocations made while
 * `counting` is set (a model's run path must make none). For the AOT C tests. */
#ifndef HODU_TESTS_COUNT_MALLOC_H_
#define HODU_TESTS_COUNT_MALLOC_H_
#ifdef COUNT_MALLOC
#include <stddef.h>
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
static volatile int counting, allocations;
void* malloc(size_t n) { if (counting) ++allocations; return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { if (counting) ++allocations; return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { if (counting) ++allocations; return __libc_realloc(p, n); }
#endif
#endif
