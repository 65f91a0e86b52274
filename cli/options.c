/* options.c - the option groups several commands share, the parser that
 * accepts a command's declared options only, and the per-command help. */
#include "cli/cli.h"

#include <time.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const hr_cli_opt hr_cli_opts_common[] = {
    HR_CLI_OPT("verbose", 'v', FLAG, verbose, NULL, "log at info level"),
    HR_CLI_OPT("log", 0, STR, log_level, "LEVEL", "log level: debug info warn error"),
    HR_CLI_OPT("exact", 0, FLAG, exact, NULL,
               "canonical-order kernels: the same bits on every CPU (or $HEARTH_EXACT=1)"),
    HR_CLI_OPT("help", 'h', FLAG, help, NULL, "show this help"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_model[] = {
    HR_CLI_OPT("model", 'm', STR, model, "FILE", "GGUF model file"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_threads[] = {
    HR_CLI_OPT("threads", 't', COUNT, threads, "N", "worker threads (default: all cores)"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_engine[] = {
    HR_CLI_OPTS(hr_cli_opts_threads),
    HR_CLI_OPT("threads-decode", 0, COUNT, threads_decode, "N", "threads for decode (default -t)"),
    HR_CLI_OPT("groups", 0, INT, groups, "N", "N NUMA thread groups (-1 = one per node)"),
    HR_CLI_OPT("numa", 0, FLAG, numa, NULL, "one thread group per NUMA node"),
    HR_CLI_OPT("tp-reduce", 0, FLAG, tp_reduce, NULL, "groups: column split + partial sums"),
    HR_CLI_OPT("gpu", 0, STR, gpu, "N|auto|any|none",
               "Vulkan device (default $HR_GPU, else auto: a real GPU, never lavapipe)"),
    HR_CLI_OPT("gpu-layers", 0, COUNT, gpu_layers, "N", "run the first N layers on the GPU"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_sampling[] = {
    HR_CLI_OPT("temp", 0, FLOAT, temp, "T", "sampling temperature, 0 = greedy (default 0.8)"),
    HR_CLI_OPT("top-k", 0, COUNT, top_k, "K", "top-k filter, 0 = off (default 40)"),
    HR_CLI_OPT("top-p", 0, FLOAT, top_p, "P", "top-p filter, 1 = off (default 0.95)"),
    HR_CLI_OPT("min-p", 0, FLOAT, min_p, "P", "min-p filter, 0 = off (default 0.05)"),
    HR_CLI_OPT("repeat-penalty", 0, FLOAT, repeat_penalty, "X", "repetition penalty (1 = off)"),
    HR_CLI_OPT("seed", 's', I64, seed, "S", "RNG seed (default: time)"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_penalties[] = {
    HR_CLI_OPT("presence-penalty", 0, FLOAT, presence_penalty, "X", "presence penalty"),
    HR_CLI_OPT("frequency-penalty", 0, FLOAT, frequency_penalty, "X", "frequency penalty"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_reply[] = {
    HR_CLI_OPT("stop", 0, LIST, stop, "STR", "stop string (repeatable, a,b list)"),
    HR_CLI_OPT("max-tokens", 0, COUNT, max_tokens, "N", "most tokens per reply"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_key_dir[] = {
    HR_CLI_OPT("key-dir", 0, STR, key_dir, "DIR", "key folder (default ~/.config/hearth)"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_security[] = {
    HR_CLI_OPTS(hr_cli_opts_key_dir),
    HR_CLI_OPT("head-key", 0, STR, head_key, "KEY|NAME", "the head's public key or trusted name"),
    HR_CLI_OPT("insecure", 0, FLAG, insecure, NULL, "no encryption/authentication (benchmarks)"),
    HR_CLI_OPT_END,
};

const hr_cli_opt hr_cli_opts_client[] = {
    HR_CLI_OPT("head", 0, STR, head, "ADDR:PORT", "the head to ask (default 127.0.0.1:7700)"),
    HR_CLI_OPT("timeout", 0, COUNT, timeout_s, "S", "seconds to wait"),
    HR_CLI_OPTS(hr_cli_opts_security),
    HR_CLI_OPT_END,
};

/* The option of list (groups expanded) with that long name (len bytes) or,
 * when lname is NULL, that short name; the first match. */
static const hr_cli_opt *hr_find(const hr_cli_opt *list, const char *lname, size_t len,
                                 char sname) {
    for (const hr_cli_opt *o = list; o->kind != HR_CLI_END; o++) {
        if (o->kind == HR_CLI_INCLUDE) {
            const hr_cli_opt *f = hr_find(o->group, lname, len, sname);
            if (f)
                return f;
        } else if (lname ? strlen(o->lname) == len && strncmp(o->lname, lname, len) == 0
                         : o->sname == sname) {
            return o;
        }
    }
    return NULL;
}

static const hr_cli_opt *hr_lookup(const hr_cli_cmd *cmd, const char *lname, size_t len,
                                   char sname) {
    const hr_cli_opt *o = hr_find(cmd->opts, lname, len, sname);
    return o ? o : hr_find(hr_cli_opts_common, lname, len, sname);
}

static int hr_set(hr_cli *cli, const hr_cli_cmd *cmd, const hr_cli_opt *o, const char *val) {
    char *end = NULL;
    void *dst = (char *)cli + o->off;
    errno = 0;
    switch (o->kind) {
    case HR_CLI_STR:
        *(const char **)dst = val;
        return 0;
    case HR_CLI_INT: {
        long v = strtol(val, &end, 10);
        if (errno || !*val || *end || v < -1000000000L || v > 1000000000L)
            return hr_cli_fail("%s: option --%s: '%s' is not an integer", cmd->name, o->lname, val);
        *(int *)dst = (int)v;
        return 0;
    }
    case HR_CLI_COUNT: {
        long v = strtol(val, &end, 10);
        if (errno || !*val || *end || v < -1000000000L || v > 1000000000L)
            return hr_cli_fail("%s: option --%s: '%s' is not an integer", cmd->name, o->lname, val);
        if (v < 0)
            return hr_cli_fail("%s: option --%s: %ld is negative (want a count >= 0)", cmd->name,
                               o->lname, v);
        *(int *)dst = (int)v;
        return 0;
    }
    case HR_CLI_I64: {
        long long v = strtoll(val, &end, 10);
        if (errno || !*val || *end)
            return hr_cli_fail("%s: option --%s: '%s' is not an integer", cmd->name, o->lname, val);
        *(int64_t *)dst = v;
        return 0;
    }
    case HR_CLI_FLOAT: {
        float v = strtof(val, &end);
        if (errno || !*val || *end)
            return hr_cli_fail("%s: option --%s: '%s' is not a number", cmd->name, o->lname, val);
        *(float *)dst = v;
        return 0;
    }
    case HR_CLI_FLAG:
        *(bool *)dst = true;
        return 0;
    case HR_CLI_LIST: {
        hr_cli_list *l = dst;
        if (l->n >= HR_CLI_LIST_MAX)
            return hr_cli_fail("%s: option --%s: at most %d values", cmd->name, o->lname,
                               HR_CLI_LIST_MAX);
        l->v[l->n++] = val;
        return 0;
    }
    case HR_CLI_INCLUDE:
    case HR_CLI_END:
        break;
    }
    abort(); /* hr_find returns option rows only */
}

int hr_cli_parse(hr_cli *cli, const hr_cli_cmd *cmd, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const hr_cli_opt *o = NULL;
        const char *inline_val = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            o = hr_lookup(cmd, name, eq ? (size_t)(eq - name) : strlen(name), 0);
            if (o && eq)
                inline_val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2] && !(a[1] >= '0' && a[1] <= '9')) {
            o = hr_lookup(cmd, NULL, 0, a[1]);
        } else {
            if (cli->n_args >= (int)(sizeof cli->args / sizeof cli->args[0])) {
                hr_cli_fail("%s: too many arguments", cmd->name);
                return 2;
            }
            cli->args[cli->n_args++] = a;
            continue;
        }
        if (!o) {
            hr_cli_fail("%s: unknown option '%s'", cmd->name, a);
            hr_cli_help(cmd, stderr);
            return 2;
        }
        const char *val = o->kind == HR_CLI_FLAG ? "" : inline_val;
        if (!val) {
            if (i + 1 >= argc) {
                hr_cli_fail("%s: option --%s needs a value (%s)", cmd->name, o->lname, o->arg);
                hr_cli_help(cmd, stderr);
                return 2;
            }
            val = argv[++i];
        }
        if (hr_set(cli, cmd, o, val))
            return 2;
    }
    return 0;
}

/* Appends list's option rows (groups expanded) to out[n..cap); returns the
 * new count. */
static int hr_flatten(const hr_cli_opt *list, const hr_cli_opt **out, int n, int cap) {
    for (const hr_cli_opt *o = list; o->kind != HR_CLI_END; o++) {
        if (o->kind == HR_CLI_INCLUDE)
            n = hr_flatten(o->group, out, n, cap);
        else if (n < cap)
            out[n++] = o;
        else
            abort(); /* more options than any command has: a cycle of groups */
    }
    return n;
}

static void hr_help_rows(FILE *f, const hr_cli_opt **v, int from, int to) {
    for (int i = from; i < to; i++) {
        const hr_cli_opt *o = v[i];
        char left[64];
        if (o->sname)
            snprintf(left, sizeof left, "-%c, --%s %s", o->sname, o->lname, o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "    --%s %s", o->lname, o->arg ? o->arg : "");
        fprintf(f, "  %-30s %s\n", left, o->help);
    }
}

void hr_cli_help(const hr_cli_cmd *cmd, FILE *f) {
    const hr_cli_opt *v[128];
    int n = hr_flatten(cmd->opts, v, 0, (int)(sizeof v / sizeof v[0]));
    int n_own = n;
    n = hr_flatten(hr_cli_opts_common, v, n, (int)(sizeof v / sizeof v[0]));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(v[i]->lname, v[j]->lname) == 0 ||
                (v[i]->sname && v[i]->sname == v[j]->sname)) {
                fprintf(stderr, "hearth: %s: option --%s (-%c) declared twice\n", cmd->name,
                        v[i]->lname, v[i]->sname ? v[i]->sname : '-');
                abort();
            }
    fprintf(f, "usage: hearth %s\n\n%s\n", cmd->usage, cmd->summary);
    if (n_own > 0) {
        fprintf(f, "\noptions:\n");
        hr_help_rows(f, v, 0, n_own);
    }
    fprintf(f, "\ncommon options:\n");
    hr_help_rows(f, v, n_own, n);
}

hr_sampler_params hr_cli_sampler(const hr_cli *o) {
    hr_sampler_params sp = hr_sampler_params_default();
    sp.temperature = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.repeat_penalty = o->repeat_penalty;
    sp.presence_penalty = o->presence_penalty;
    sp.frequency_penalty = o->frequency_penalty;
    sp.seed = o->seed >= 0 ? (uint64_t)o->seed : (uint64_t)time(NULL);
    return sp;
}

int hr_cli_check(hr_cli *o, const hr_cli_cmd *cmd) {
    if (o->threads == 0)
        return hr_cli_fail("%s: -t 0: give at least 1 thread (leave -t out to use every core)",
                           cmd->name);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->threads > 0 && nproc > 0 && o->threads > nproc)
        fprintf(stderr,
                "hearth: %s: warning: -t %d is more threads than the %ld online cores; threads "
                "then wait for each other and generation slows down\n",
                cmd->name, o->threads, nproc);
    if (o->threads < 0)
        o->threads = 0;                   /* every online core */
    if (!(o->top_p > 0 && o->top_p <= 1)) /* NaN fails too */
        return hr_cli_fail("%s: --top-p %g: must be in (0, 1] (1 = off)", cmd->name, o->top_p);
    if (o->prompt && o->prompt_file)
        return hr_cli_fail("%s: give the prompt with -p TEXT or -f FILE, not both", cmd->name);
    if (o->prompt_file && o->n_args > 0)
        return hr_cli_fail("%s: give the prompt as the argument or with -f FILE, not both",
                           cmd->name);
    return 0;
}
