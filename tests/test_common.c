/* test_common.c - error table, logger level parsing, and the ranked locks'
 * order check (debug builds). */
#include "tests/check.h"

#include "common/error.h"
#include "common/log.h"
#include "common/sync.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Ranked locks: held ranks are tracked, and taking a lock whose rank is not
 * above every held one aborts (in a child: the test survives it). */
static void test_lock_order(void) {
#ifdef HR_LOCK_CHECK
    pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
    hr_lock(&a, 3);
    hr_lock(&b, 5);
    CHECK(hr_lock_held() == ((1ull << 3) | (1ull << 5)));
    hr_unlock(&b, 5);
    hr_unlock(&a, 3);
    CHECK(hr_lock_held() == 0);
    for (int order = 0; order < 2; order++) { /* 0: in order, 1: inverted */
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGABRT, SIG_DFL);
            hr_lock(order ? &b : &a, order ? 5 : 3);
            hr_lock(order ? &a : &b, order ? 3 : 5);
            _exit(0);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (order)
            CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT); /* the inversion is caught */
        else
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
#else
    hr_check_skip("lock order check: off in release builds (NDEBUG); the debug and sanitizer "
                  "builds run it");
#endif
}

int main(void) {
    CHECK_STR(hr_strerror(HR_OK), "success");
    CHECK_STR(hr_strerror(HR_EFORMAT), "malformed file or message");
    CHECK_STR(hr_strerror(12345), "unknown error");
    char err[HR_ERR_LEN];
    CHECK_EQ(hr_seterr(err, HR_EIO, "read %s at %d", "x.gguf", 7), HR_EIO);
    CHECK_STR(err, "read x.gguf at 7");
    hr_log_level lv;
    CHECK_EQ(hr_log_parse_level("info", &lv), 0);
    CHECK_EQ(lv, HR_LOG_LEVEL_INFO);
    CHECK_EQ(hr_log_parse_level("loud", &lv), HR_EINVAL);
    test_lock_order();
    return hr_check_finish("test_common");
}
