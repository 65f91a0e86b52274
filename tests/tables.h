/* tables.h - the kernel tables a test cannot exercise on this CPU. */
#ifndef HR_TESTS_TABLES_H
#define HR_TESTS_TABLES_H

#include "kernels/quant.h"
#include "tests/check.h"

#include <stdio.h>

/* Records a skip for every table compiled into this build that this CPU
 * cannot run (AVX-512 on an AVX2-only host, i8mm on a core without it),
 * with the features the CPU reports; the number of such tables. */
static inline int hr_skip_unrunnable_tables(const char *what) {
    int n = 0;
    for (int isa = HR_ISA_SCALAR + 1; isa < HR_ISA_COUNT; isa++) {
        if (!hr_isa_built((hr_isa)isa) || hr_kernels_for_isa((hr_isa)isa))
            continue;
        char why[256];
        snprintf(why, sizeof why, "%s: %s table not run, this CPU cannot (it reports: %s)", what,
                 hr_isa_name((hr_isa)isa), hr_isa_features());
        hr_check_skip(why);
        n++;
    }
    return n;
}

#endif
