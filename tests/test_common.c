/* test_common.c - error table and logger level parsing. */
#include "tests/check.h"

#include "common/error.h"
#include "common/log.h"

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
    return hr_check_finish("test_common");
}
