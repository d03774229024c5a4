#include "cli_run.h"
#include "test_limits.h"
#include "util/clock.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64

extern char **environ;

/* The stop signals' default actions for the commands the tests start, whatever this program
 * inherited: a suite started in the background or under nohup ignores SIGINT or SIGHUP, which
 * an exec keeps, and megatrain, as a shell does, leaves a signal ignored that it was started
 * ignoring. A test that ignores one itself (before starting a command) still passes that on. */
__attribute__((constructor)) static void stop_signals_default(void) {
    const int stops[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
        struct sigaction was;
        if (sigaction(stops[i], NULL, &was) == 0 && was.sa_handler == SIG_IGN) signal(stops[i], SIG_DFL);
    }
}

static void start_v(mt_cli_process *p, const char *first, va_list ap) {
    const char *bin = getenv("MT_BIN");
    cr_assert(bin && *bin, "MT_BIN is not set: run the tests as 'MT_BIN=build/megatrain build/run-tests' "
                           "(make test does this)");
    char *argv[MAX_ARGS + 2] = {(char *)bin};
    int argc = 1;
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        cr_assert(argc <= MAX_ARGS, "more than %d arguments for %s", MAX_ARGS, bin);
        argv[argc++] = (char *)a;
    }
    int out[2], err[2];
    cr_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    int rc = posix_spawn(&p->pid, bin, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    cr_assert(rc == 0, "cannot run MT_BIN=%s: %s", bin, strerror(rc));
    p->out_fd = out[0];
    p->err_fd = err[0];
}

void mt_cli_start(mt_cli_process *p, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    start_v(p, arg, ap);
    va_end(ap);
}

typedef struct {
    char *data;
    size_t len, cap;
} buffer;

/* Room for at least 4 KiB more and the terminating NUL. */
static void reserve(buffer *b) {
    if (b->cap - b->len >= 4096 + 1) return;
    b->cap = 2 * b->cap + 4096 + 1;
    b->data = realloc(b->data, b->cap);
    cr_assert_not_null(b->data, "out of memory capturing output");
    b->data[b->len] = '\0';
}

/* Appends what one read returns; 0 at end of file. */
static ssize_t read_into(int fd, buffer *b) {
    reserve(b);
    ssize_t n = read(fd, b->data + b->len, b->cap - b->len - 1);
    if (n > 0) b->len += (size_t)n;
    b->data[b->len] = '\0';
    return n;
}

/* A read's result means the pipe is finished: end of file, or an error other than a signal. */
static int at_end(ssize_t n) { return n == 0 || (n < 0 && errno != EINTR); }

void mt_cli_wait(mt_cli_process *p, double timeout_s, mt_cli_result *r) {
    double deadline = mt_now() + MT_TEST_LIMIT(timeout_s); /* test_limits.h */
    buffer bufs[2] = {{0}};
    struct pollfd fds[2] = {{.fd = p->out_fd, .events = POLLIN}, {.fd = p->err_fd, .events = POLLIN}};
    *r = (mt_cli_result){0};
    reserve(&bufs[0]); /* both strings exist even when nothing came */
    reserve(&bufs[1]);
    int open = 2, status;
    pid_t done = 0;
    /* Drain both pipes until the child closes them, then reap it; kill it at the deadline. */
    while (open > 0 || (done = waitpid(p->pid, &status, WNOHANG)) == 0) {
        double left = deadline - mt_now();
        if (left <= 0 && !r->timed_out) {
            kill(p->pid, SIGKILL);
            r->timed_out = 1;
        }
        if (open == 0) {
            nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
            continue;
        }
        if (poll(fds, 2, left > 0 ? (int)(left * 1000) + 1 : 100) < 0 && errno != EINTR)
            cr_assert_fail("poll: %s", strerror(errno));
        for (int i = 0; i < 2; i++)
            if (fds[i].fd >= 0 && fds[i].revents && at_end(read_into(fds[i].fd, &bufs[i]))) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open--;
            }
    }
    cr_assert(done == p->pid, "waitpid: %s", strerror(errno));
    r->out = bufs[0].data;
    r->err = bufs[1].data;
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

void mt_cli_run(mt_cli_result *r, double timeout_s, const char *arg, ...) {
    mt_cli_process p;
    va_list ap;
    va_start(ap, arg);
    start_v(&p, arg, ap);
    va_end(ap);
    mt_cli_wait(&p, timeout_s, r);
}

void mt_cli_result_free(mt_cli_result *r) {
    free(r->out);
    free(r->err);
    *r = (mt_cli_result){0};
}
