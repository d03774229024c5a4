/* The tests' time limits: hang detectors, never speed measurements (bench/ measures speed).
 * Each is written for the plain build with a margin of at least ten times the test's time on an
 * idle 2-core machine, so that a slow or busy machine does not fail it. The sanitizer builds run
 * the same code several times slower (ASan+UBSan about 5x on the training tests, measured on that
 * machine), so there every limit is MT_TEST_SLOWDOWN times longer: a verdict must depend neither on
 * the build nor on the machine's load. */
#ifndef MT_TESTS_TEST_LIMITS_H
#define MT_TESTS_TEST_LIMITS_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MT_TEST_SLOWDOWN 5
#else
#define MT_TEST_SLOWDOWN 1
#endif

/* A limit of `x` (seconds, or polls of a fixed period) in the plain build. */
#define MT_TEST_LIMIT(x) ((x) * MT_TEST_SLOWDOWN)

#endif
