/* Test hook MT_TEST_ALLOC_FAIL=pinned:N or device:N: the N-th (1-based) host_alloc or dev_alloc
 * of the process fails the way the backend's real allocator fails (cuda: cudaErrorMemoryAllocation,
 * cpu: a NULL from the C allocator), through the same error path, so that tests can check that an
 * allocation failure ends a run cleanly on every backend. */
#ifndef MT_BACKEND_ALLOC_FAULT_H
#define MT_BACKEND_ALLOC_FAULT_H

typedef enum { MT_ALLOC_PINNED, MT_ALLOC_DEVICE } mt_alloc_kind;

/* Counts one allocation of `kind` and returns 1 when the hook fails it. Reads the variable once;
 * safe from any thread. */
int mt_alloc_fault_hit(mt_alloc_kind kind);

/* What a failure message ends with, so that nobody mistakes an injected failure for a real one:
 * " (test hook MT_TEST_ALLOC_FAIL)" when hit, else "". */
const char *mt_alloc_fault_note(int hit);

#endif
