/* Test helper: runs the built megatrain command ($MT_BIN) as a child process, captures its
 * stdout and stderr, and reports how it ended. A test fails with a clear message when MT_BIN is
 * unset or the command cannot be started. */
#ifndef MT_TESTS_CLI_RUN_H
#define MT_TESTS_CLI_RUN_H

#include <sys/types.h>

typedef struct {
    int exit_code;   /* the exit status; -1 when a signal ended the process */
    int signal;      /* the signal that ended it; 0 when it exited */
    int timed_out;   /* it ran past the timeout and was killed */
    char *out, *err; /* everything it wrote, NUL-terminated */
} mt_cli_result;

/* A started command: its process and the read ends of its stdout and stderr pipes. */
typedef struct {
    pid_t pid;
    int out_fd, err_fd;
} mt_cli_process;

/* Starts $MT_BIN with the arguments that follow (after argv[0]), ended by NULL. The child's
 * output waits in pipes until mt_cli_wait reads it, so keep what runs in between short. */
void mt_cli_start(mt_cli_process *p, const char *arg, ...) __attribute__((sentinel));
/* Reads the child's output until it ends, killing it after `timeout_s` seconds. */
void mt_cli_wait(mt_cli_process *p, double timeout_s, mt_cli_result *r);
/* mt_cli_start then mt_cli_wait. */
void mt_cli_run(mt_cli_result *r, double timeout_s, const char *arg, ...) __attribute__((sentinel));
void mt_cli_result_free(mt_cli_result *r);

#endif
