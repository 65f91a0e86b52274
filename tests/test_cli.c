/* test_cli.c - the `hearth` binary end to end: info, logits against the
 * llama.cpp reference, run (greedy text), mkmodel + bench on a generated
 * model, and clear one-line errors for bad paths, corrupt files, negative
 * counts and an API port that is the agent's data port; profile -o. */
#include "tests/check.h"

#include "common/sync.h"
#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/tokenizer.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];

/* Runs a shell command, captures stdout and stderr (truncated to cap), and
 * returns the exit status. */
static int sh(char *out, size_t cap, char *errout, size_t ecap, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int sh(char *out, size_t cap, char *errout, size_t ecap, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4096 + 2 * sizeof tmpdir + 64];
    snprintf(full, sizeof full, "(%s) >%s/out.txt 2>%s/err.txt", cmd, tmpdir, tmpdir);
    int st = system(full);
    char path[300];
    snprintf(path, sizeof path, "%s/out.txt", tmpdir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/err.txt", tmpdir);
    f = fopen(path, "r");
    n = f ? fread(errout, 1, ecap - 1, f) : 0;
    errout[n] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Copies s replacing each byte that does not start a valid UTF-8 sequence
 * by U+FFFD (what a terminal-safe stream must print). */
static void utf8_sanitize(const unsigned char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap;) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++)
            ok = (s[i + k] & 0xC0) == 0x80;
        if (ok) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Reads fd into buf[*len..cap) until needle appears after from, or secs
 * pass; a pointer to the match or NULL. */
static char *read_until(int fd, char *buf, size_t *len, size_t cap, size_t from, const char *needle,
                        double secs) {
    double until = hr_now_s() + secs;
    for (;;) {
        char *m = *len > from ? strstr(buf + from, needle) : NULL;
        if (m)
            return m;
        int left = (int)((until - hr_now_s()) * 1000);
        if (left <= 0 || *len + 1 >= cap)
            return NULL;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0)
            return NULL;
        for (ssize_t i = 0; i < n; i++)
            if (buf[*len + (size_t)i] == 0)
                buf[*len + (size_t)i] = '.'; /* a random model's bytes: strstr goes on */
        *len += (size_t)n;
        buf[*len] = 0;
    }
}

/* The context position the stats line at s says ("context N/"), -1 if none. */
static int chat_pos(const char *s) {
    const char *c = s ? strstr(s, "| context ") : NULL;
    int n = -1;
    if (c)
        sscanf(c, "| context %d/", &n);
    return n;
}

/* `hearth chat` on a pseudo-terminal: Ctrl-C during a reply stops the
 * reply (not the program) and the next turn continues the same
 * conversation; /help and unknown slash commands are answered, not sent. */
static void test_chat_tty(const char *bin, const char *model) {
    int mfd = -1;
    pid_t pid = forkpty(&mfd, NULL, NULL, NULL);
    CHECK(pid >= 0);
    if (pid < 0)
        return;
    if (pid == 0) {
        execl(bin, bin, "chat", "-m", model, "--ctx", "2048", "--temp", "0", "-t", "1",
              (char *)NULL);
        _exit(127);
    }
    static char buf[1 << 20];
    size_t len = 0, mark;
    buf[0] = 0;
    CHECK(read_until(mfd, buf, &len, sizeof buf, 0, "> ", 60) != NULL);
    mark = len;
    CHECK(write(mfd, "hello\n", 6) == 6);
    /* a reply of up to 2000 tokens takes seconds: stop it once it writes */
    read_until(mfd, buf, &len, sizeof buf, mark, "\x01never", 1.0);
    double t0 = hr_now_s();
    CHECK(write(mfd, "\x03", 1) == 1);
    char *st1 = read_until(mfd, buf, &len, sizeof buf, mark, "stopped by Ctrl-C", 10);
    double t_stop = hr_now_s() - t0;
    CHECK(st1 != NULL);
    CHECK(t_stop < 3.0);
    int pos1 = chat_pos(st1);
    CHECK(pos1 > 0 && pos1 < 2000); /* stopped before the context filled */
    size_t at = st1 ? (size_t)(st1 - buf) : mark;
    CHECK(read_until(mfd, buf, &len, sizeof buf, at, "> ", 10) != NULL);
    CHECK_EQ(waitpid(pid, NULL, WNOHANG), 0); /* still running */
    mark = len;
    CHECK(write(mfd, "/help\n", 6) == 6);
    CHECK(read_until(mfd, buf, &len, sizeof buf, mark, "Ctrl-C   stop the reply", 10) != NULL);
    mark = len;
    CHECK(write(mfd, "/frobnicate\n", 12) == 12);
    CHECK(read_until(mfd, buf, &len, sizeof buf, mark, "unknown command /frobnicate", 10) != NULL);
    CHECK(strstr(buf + mark, "[prompt") == NULL); /* nothing went to the model */
    mark = len;
    CHECK(write(mfd, "again\n", 6) == 6);
    read_until(mfd, buf, &len, sizeof buf, mark, "\x01never", 1.0);
    CHECK(write(mfd, "\x03", 1) == 1);
    char *st2 = read_until(mfd, buf, &len, sizeof buf, mark, "stopped by Ctrl-C", 10);
    CHECK(st2 != NULL);
    int pos2 = chat_pos(st2);
    const char *pl = strstr(buf + mark, "[prompt ");
    int n_new = -1;
    if (pl)
        sscanf(pl, "[prompt %d tokens", &n_new);
    /* the same conversation: the second turn starts where the first ended
     * and evaluates only its new tokens */
    CHECK(pos2 > pos1);
    CHECK(n_new > 0 && n_new < pos1);
    printf("chat on a tty: Ctrl-C stopped the reply in %.2f s at %d tokens; the next turn: %d "
           "new tokens, context %d\n",
           t_stop, pos1, n_new, pos2);
    mark = len;
    CHECK(write(mfd, "/exit\n", 6) == 6);
    read_until(mfd, buf, &len, sizeof buf, mark, "\x01never", 2.0);
    int st = -1;
    pid_t w = 0;
    for (int i = 0; i < 50 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
        usleep(100000);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!st1 || !st2)
        fprintf(stderr, "chat transcript, the end:\n%s\n", len > 3000 ? buf + len - 3000 : buf);
    close(mfd);
}

int main(void) {
    const char *bin = getenv("HR_BIN");
    if (!bin)
        bin = "./hearth";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hearth-cli-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    static char out[1 << 16], err[1 << 16];
    char model[512], ref[512], refj[512];
    hr_shared_path("models/tiny-llama-f32.gguf", model, sizeof model);
    hr_shared_path("reference/tiny-llama-f32.logits", ref, sizeof ref);
    hr_shared_path("reference/tiny-llama-f32.json", refj, sizeof refj);

    /* info */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s info -m %s", bin, model), 0);
    CHECK(strstr(out, "arch:        llama") != NULL);
    CHECK(strstr(out, "f32") != NULL);
    /* without -m: this machine, the CPU first (the GPUs after it) */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s info", bin), 0);
    CHECK(strncmp(out, "cpu:         ", 13) == 0);
    CHECK(strstr(out, "threads online; kernels ") != NULL);
    CHECK(strstr(out, "\ngpu:") != NULL);

    /* logits + compare against the reference */
    json_error_t je;
    json_t *root = json_load_file(refj, 0, &je);
    CHECK(root != NULL);
    char ids[2048] = "", greedy_text[4096] = "";
    json_t *arr = json_object_get(root, "prompt_ids");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char b[16];
        snprintf(b, sizeof b, "%s%lld", i ? "," : "", json_integer_value(json_array_get(arr, i)));
        strcat(ids, b);
    }
    const char *prompt = json_string_value(json_object_get(root, "prompt"));
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s logits -m %s --ids %s -o %s/l.bin --compare %s", bin, model, ids, tmpdir, ref),
             0);
    double rel = 1;
    int agree = 0, npos = 0;
    const char *c = strstr(out, "max rel error");
    CHECK(c != NULL);
    if (c)
        sscanf(c, "max rel error %lf", &rel);
    c = strstr(out, "argmax agree");
    if (c)
        sscanf(c, "argmax agree %d/%d", &agree, &npos);
    CHECK(rel <= 1e-4); /* an F32 model: 1.9e-5 measured */
    CHECK_EQ(agree, npos);
    CHECK_EQ(npos, (int)json_array_size(arr));

    /* greedy run prints the text of the reference greedy ids: decode them
     * with the model's tokenizer through `hearth run` on the same prompt. */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s run -m %s -p '%s' -n 32 --temp 0 -t 2", bin,
                model, prompt),
             0);
    CHECK(strstr(err, "tokens/s") != NULL);
    /* expected text: the reference greedy ids decoded by the model's tokenizer */
    hr_gguf *g = NULL;
    hr_tokenizer *tok = NULL;
    char gerr[HR_ERR_LEN];
    CHECK_EQ(hr_gguf_open(&g, model, gerr), 0);
    CHECK_EQ(hr_tokenizer_create(&tok, g, gerr), 0);
    json_t *garr = json_object_get(root, "greedy_ids");
    int32_t gids[64];
    int ng = 0;
    for (size_t i = 0; i < json_array_size(garr) && ng < 64; i++)
        gids[ng++] = (int32_t)json_integer_value(json_array_get(garr, i));
    CHECK_EQ(ng, 32);
    int tl = hr_tokenizer_decode(tok, gids, ng, false, false, greedy_text, sizeof greedy_text);
    CHECK(tl > 0 && (size_t)tl < sizeof greedy_text);
    size_t ol = strlen(out);
    CHECK(ol > 0 && out[ol - 1] == '\n');
    if (ol > 0)
        out[ol - 1] = 0; /* run ends the text with a newline */
    /* the continuation holds a lone byte token: the stream prints U+FFFD */
    static char want[8192];
    utf8_sanitize((const unsigned char *)greedy_text, (size_t)tl, want, sizeof want);
    CHECK_STR(out, want);
    hr_tokenizer_destroy(tok);
    hr_gguf_close(g);
    json_decref(root);

    /* errors: one clear line, non-zero exit */
    CHECK(sh(out, sizeof out, err, sizeof err, "%s info -m %s/missing.gguf", bin, tmpdir) != 0);
    CHECK_EQ(count_lines(err), 1);
    CHECK(strstr(err, "missing.gguf") != NULL);
    CHECK(sh(out, sizeof out, err, sizeof err,
             "head -c 5000 %s > %s/trunc.gguf && %s run -m "
             "%s/trunc.gguf -p hi",
             model, tmpdir, bin, tmpdir) != 0);
    CHECK_EQ(count_lines(err), 1);
    CHECK(sh(out, sizeof out, err, sizeof err,
             "cp %s %s/flip.gguf && chmod u+w %s/flip.gguf && printf 'XXXX' | dd of=%s/flip.gguf "
             "bs=1 seek=0 conv=notrunc 2>/dev/null && %s info -m %s/flip.gguf",
             model, tmpdir, tmpdir, tmpdir, bin, tmpdir) != 0);
    CHECK_EQ(count_lines(err), 1);
    CHECK(strstr(err, "magic") != NULL);
    CHECK(sh(out, sizeof out, err, sizeof err, "%s frobnicate", bin) != 0);
    CHECK(sh(out, sizeof out, err, sizeof err, "%s run -m %s", bin, model) != 0);
    CHECK_EQ(count_lines(err), 1);

    /* mkmodel + bench on a generated model, every weight type loads and runs */
    const char *types[] = {"q4_0",   "q4_1", "q5_0", "q5_1", "q8_0", "q4_k_m",
                           "q5_k_m", "q6_k", "f16",  "bf16", "f32"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                    "%s mkmodel -o %s/m.gguf --embd 256 --layers 2 --heads 4 --heads-kv 2 --ffn "
                    "512 --vocab-size 1000 --type %s --seed 3",
                    bin, tmpdir, types[i]),
                 0);
        int rc = sh(out, sizeof out, err, sizeof err, "%s bench -m %s/m.gguf -t 2 -P 8 -N 4 -r 1",
                    bin, tmpdir);
        CHECK_EQ(rc, 0);
        if (rc)
            fprintf(stderr, "bench %s failed: %s\n", types[i], err);
        CHECK(strstr(out, "generation:") != NULL);
        CHECK(strstr(out, "bandwidth ratio") != NULL);
        /* progress on stderr: what is measured, before each step's result */
        const char *bw = strstr(err, "bench: measuring memory bandwidth");
        const char *reps = strstr(err, "repetition of a 8-token prompt and 4 generated tokens ...");
        const char *rep1 = strstr(err, "rep 1: prompt");
        CHECK(bw != NULL && reps != NULL && rep1 != NULL && bw < reps && reps < rep1);
        rc = sh(out, sizeof out, err, sizeof err,
                "%s run -m %s/m.gguf -p 'hello world' -n 8 "
                "--seed 1",
                bin, tmpdir);
        CHECK_EQ(rc, 0);
    }
    /* bench --isa: every table this CPU runs, one after another, each with
     * its own numbers; a table it cannot name or run is refused */
    {
        int rc = sh(out, sizeof out, err, sizeof err,
                    "%s bench -m %s/m.gguf -t 2 -P 4 -N 2 -r 1 --isa all", bin, tmpdir);
        CHECK_EQ(rc, 0);
        CHECK(strstr(out, "cpu: ") != NULL);
        CHECK(strstr(out, "[scalar]") != NULL);
        const char *best = hr_isa_name(hr_kernels_best()->isa);
        char tag[32];
        snprintf(tag, sizeof tag, "[%s]", best);
        if (hr_kernels_best()->isa != HR_ISA_SCALAR)
            CHECK(strstr(out, tag) != NULL);
        rc = sh(out, sizeof out, err, sizeof err, "%s bench -m %s/m.gguf -P 4 -N 2 --isa avx3", bin,
                tmpdir);
        CHECK(rc != 0);
        CHECK(strstr(err, "no kernel table 'avx3'") != NULL);
    }
    /* qwen2 shape */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s mkmodel -o %s/q.gguf --arch qwen2 --embd 128 --layers 2 --heads 4 --heads-kv "
                "2 --ffn 256 --vocab-size 500 --type q8_0 && %s run -m %s/q.gguf -p hi -n 4",
                bin, tmpdir, bin, tmpdir),
             0);
    CHECK(sh(out, sizeof out, err, sizeof err, "%s mkmodel -o %s/x.gguf --type q9_9", bin,
             tmpdir) != 0);

    /* offline planning from saved profiles; a profile of another model is refused */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s profile -m %s --quick --json -o %s/dev1.json --cache-dir %s/cache -t 1", bin,
                model, tmpdir, tmpdir),
             0);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "cp %s/dev1.json %s/dev2.json && %s plan --model %s %s/dev1.json %s/dev2.json",
                tmpdir, tmpdir, bin, model, tmpdir, tmpdir),
             0);
    CHECK(strstr(out, "hearth plan: k =") != NULL);
    CHECK(strstr(out, "dev1") != NULL);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s plan --model %s %s/dev1.json --json", bin,
                model, tmpdir),
             0);
    CHECK(strstr(out, "\"schema_version\"") != NULL);
    CHECK(sh(out, sizeof out, err, sizeof err, "%s plan --model %s/q.gguf %s/dev1.json", bin,
             tmpdir, tmpdir) != 0);
    CHECK(strstr(err, "profiled with model") != NULL);
    CHECK(sh(out, sizeof out, err, sizeof err, "%s plan --model %s %s/missing.json", bin, model,
             tmpdir) != 0);
    CHECK_EQ(count_lines(err), 1);

    /* options belong to their commands: a foreign one is refused before the
     * command runs, with exit status 2 and the command's usage on stderr */
    static const struct {
        const char *args, *opt, *cmd;
    } foreign[] = {
        {"info -m %s --api-key x", "'--api-key'", "info"},
        {"run -m %s -p hi -n 1 --windows 1,2", "'--windows'", "run"},
        {"status --temp 0.5", "'--temp'", "status"},
        {"chat -m %s -n 4 </dev/null", "'-n'", "chat"},
        {"bench -m %s -p hi", "'-p'", "bench"},
        {"prompt --presence-penalty 1 hi", "'--presence-penalty'", "prompt"},
        {"key show --insecure", "'--insecure'", "key"},
        {"mkmodel -o %s/f.gguf --shape tiny --kv", "'--kv'", "mkmodel"},
    };
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        char args[512], msg[128];
        if (strstr(foreign[i].args, "-o %s"))
            snprintf(args, sizeof args, foreign[i].args, tmpdir);
        else
            snprintf(args, sizeof args, foreign[i].args, model);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s %s", bin, args), 2);
        CHECK_STR(out, "");
        snprintf(msg, sizeof msg, "hearth: %s: unknown option %s\n", foreign[i].cmd,
                 foreign[i].opt);
        CHECK(strncmp(err, msg, strlen(msg)) == 0);
        snprintf(msg, sizeof msg, "usage: hearth %s", foreign[i].cmd);
        CHECK(strstr(err, msg) != NULL);
        if (strncmp(err, "hearth:", 7) != 0 || !strstr(err, msg))
            fprintf(stderr, "hearth %s: %s\n", args, err);
    }
    char fpath[512];
    snprintf(fpath, sizeof fpath, "%s/f.gguf", tmpdir);
    CHECK(access(fpath, F_OK) != 0); /* mkmodel did not run */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s run -m %s -p hi -n", bin, model), 2);
    CHECK(strstr(err, "option --n-predict needs a value") != NULL);
    CHECK(strstr(err, "usage: hearth run") != NULL);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s run -m %s -p hi --temp warm", bin, model), 2);
    CHECK_EQ(count_lines(err), 1);
    CHECK(strstr(err, "'warm' is not a number") != NULL);

    /* `hearth CMD --help`: its usage and its own options, not the others' */
    static const struct {
        const char *cmd;
        const char *has[6];
        const char *lacks[3];
    } helps[] = {
        {"run",
         {"-m, --model", "-p, --prompt", "--temp", "--stop", "--groups", "--presence-penalty"},
         {"--windows", "--api-key", "--kv"}},
        {"chat",
         {"--template", "--system", "--max-tokens", "--top-k", "-t, --threads", "--ctx"},
         {"--n-predict", "--groups", "--key-dir"}},
        {"logits", {"--ids", "-o, --out", "--compare", "--batch", "--numa"}, {"--temp T", "--kv"}},
        {"tokenize", {"--bos", "--special", "-f, --file", "-m, --model"}, {"--temp T", "--ctx"}},
        {"info", {"-m, --model", "--kv"}, {"--api-key", "--temp T", "--threads"}},
        {"mkmodel",
         {"--shape", "--type", "--arch", "--vocab-size", "--heads-kv", "-s, --seed"},
         {"--model", "--temp T"}},
        {"bench",
         {"-P, --n-prompt", "-N, --n-gen", "-r, --reps", "--threads-decode", "--tp-reduce"},
         {"--temp T", "--prompt"}},
        {"agent",
         {"--listen", "--peers", "--windows", "--cluster", "--no-discovery", "--cache-gb"},
         {"--temp T", "--n-predict", "--kv"}},
        {"prompt",
         {"--head", "--timeout", "-n, --n-predict", "--temp", "--seed", "--key-dir"},
         {"--windows", "--api-key", "--stop"}},
        {"status", {"--head", "--json", "--timeout", "--insecure"}, {"--temp T", "--model"}},
        {"discover", {"--timeout", "--json", "--discovery-port", "--key-dir"}, {"--model"}},
        {"key", {"--key-dir"}, {"--insecure", "--model"}},
        {"trust", {"--key-dir"}, {"--head-key", "--model"}},
        {"plan", {"-m, --model", "--ctx", "--k", "--json"}, {"--windows", "--temp T"}},
        {"profile",
         {"--quick", "--no-cache", "--cache-dir", "--peer", "-o, --out", "-P, --n-prompt"},
         {"--temp T", "--windows"}},
    };
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s --help", bin), 0);
    static char top[1 << 16]; /* as large as out: the whole top-level help */
    memcpy(top, out, sizeof top < sizeof out ? sizeof top : sizeof out);
    top[sizeof top - 1] = 0;
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", helps[i].cmd);
        CHECK(strstr(top, line) != NULL); /* `hearth --help` lists it */
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s %s --help", bin, helps[i].cmd), 0);
        snprintf(line, sizeof line, "usage: hearth %s", helps[i].cmd);
        CHECK(strncmp(out, line, strlen(line)) == 0);
        CHECK(strstr(out, "-h, --help") != NULL);
        for (int k = 0; k < 6 && helps[i].has[k]; k++) {
            CHECK(strstr(out, helps[i].has[k]) != NULL);
            if (!strstr(out, helps[i].has[k]))
                fprintf(stderr, "hearth %s --help lacks %s\n", helps[i].cmd, helps[i].has[k]);
        }
        for (int k = 0; k < 3 && helps[i].lacks[k]; k++) {
            CHECK(strstr(out, helps[i].lacks[k]) == NULL);
            if (strstr(out, helps[i].lacks[k]))
                fprintf(stderr, "hearth %s --help names %s\n", helps[i].cmd, helps[i].lacks[k]);
        }
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s help %s", bin, helps[i].cmd), 0);
        CHECK(strncmp(out, line, strlen(line)) == 0);
    }
    CHECK(sh(out, sizeof out, err, sizeof err, "%s help frobnicate", bin) != 0);
    /* every command `hearth --help` lists has a help (which also checks its
     * option table for names declared twice), and the list above covers it */
    int n_listed = 0;
    for (const char *l = strstr(top, "commands:\n"); l && (l = strchr(l, '\n')) && l[1] == ' ';) {
        char name[32] = "";
        l++;
        if (sscanf(l, " %31s", name) != 1)
            break;
        n_listed++;
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s %s --help", bin, name), 0);
        bool covered = false;
        for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++)
            covered = covered || strcmp(helps[i].cmd, name) == 0;
        CHECK(covered);
    }
    CHECK_EQ(n_listed, (int)(sizeof helps / sizeof helps[0]));

    /* key and trust take --key-dir (as deploy/cluster.sh pairs its agents) */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s key show --key-dir %s/keys", bin, tmpdir), 0);
    char pub[128] = "";
    sscanf(out, "%127s", pub);
    CHECK(strlen(pub) > 20);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s trust add laptop '%s' --key-dir=%s/keys", bin,
                pub, tmpdir),
             0);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s trust list --key-dir %s/keys", bin, tmpdir),
             0);
    CHECK(strstr(out, "laptop") != NULL && strstr(out, pub) != NULL);
    /* and revoke it: trust remove NAME; a name not there is an error */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s trust remove laptop --key-dir %s/keys", bin,
                tmpdir),
             0);
    CHECK(strstr(err, "removed laptop") != NULL);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s trust list --key-dir %s/keys", bin, tmpdir),
             0);
    CHECK(strstr(out, "laptop") == NULL);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s trust remove laptop --key-dir %s/keys", bin,
                tmpdir),
             1);
    CHECK(strstr(err, "no trusted key is named 'laptop'") != NULL);
    /* the join token: it expires; rotate-join replaces it (HOURS: its life) */
    {
        char tok1[128] = "", tok2[128] = "", tok3[128] = "";
        CHECK_EQ(
            sh(out, sizeof out, err, sizeof err, "%s key token --key-dir %s/keys", bin, tmpdir), 0);
        sscanf(out, "%127s", tok1);
        CHECK(strstr(err, "join token valid until ") != NULL);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s key rotate-join 2 --key-dir %s/keys", bin,
                    tmpdir),
                 0);
        sscanf(out, "%127s", tok2);
        CHECK(strstr(err, "the old one no longer pairs") != NULL);
        CHECK_EQ(
            sh(out, sizeof out, err, sizeof err, "%s key token --key-dir %s/keys", bin, tmpdir), 0);
        sscanf(out, "%127s", tok3);
        CHECK_EQ(strlen(tok1), 83);
        CHECK(strcmp(tok1, tok2) != 0);
        CHECK_STR(tok2, tok3); /* kept until it expires or is rotated */
        CHECK(sh(out, sizeof out, err, sizeof err, "%s key rotate-join soon --key-dir %s/keys", bin,
                 tmpdir) != 0);
        CHECK(strstr(err, "HOURS must be a number") != NULL);
    }

    /* negative counts are refused before anything runs (not "until the context ends") */
    static const char *const negative[] = {"run -m %s -p hi -n -5", "run -m %s -p hi --ctx -1",
                                           "bench -m %s -N -2", "prompt -n -3 hi"};
    for (size_t i = 0; i < sizeof negative / sizeof negative[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, negative[i], model);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s %s", bin, args), 2);
        CHECK(strstr(err, "is negative") != NULL);
        CHECK_EQ(out[0], 0);
        if (!strstr(err, "is negative"))
            fprintf(stderr, "  %s: %s\n", args, err);
    }
    /* values that parse but make no sense are refused (exit 2, one line,
     * nothing printed); doubtful ones warn and run */
    static const struct {
        const char *args, *says;
    } senseless[] = {
        {"run -m %s -p hi -n 1 -t 0", "-t 0: give at least 1 thread"},
        {"run -m %s -p hi -n 1 --top-p 7", "--top-p 7: must be in (0, 1]"},
        {"run -m %s -p hi -n 1 --top-p 0", "--top-p 0: must be in (0, 1]"},
        {"run -m %s -p hi -n 1 --top-p nan", "must be in (0, 1]"},
        {"run -m %s -p hi -n 1 -f /dev/null", "-p TEXT or -f FILE, not both"},
        {"tokenize -m %s -f /dev/null hi", "or with -f FILE, not both"},
        {"agent -m %s -t 0 --no-profile", "-t 0: give at least 1 thread"},
    };
    for (size_t i = 0; i < sizeof senseless / sizeof senseless[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, senseless[i].args, model);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s %s", bin, args), 2);
        CHECK(strstr(err, senseless[i].says) != NULL);
        CHECK_EQ(count_lines(err), 1);
        CHECK_EQ(out[0], 0);
        if (!strstr(err, senseless[i].says))
            fprintf(stderr, "  %s: %s\n", args, err);
    }
    {
        long nproc = sysconf(_SC_NPROCESSORS_ONLN);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s run -m %s -p hi -n 2 --temp 0 -t %ld",
                    bin, model, nproc + 1),
                 0);
        CHECK(strstr(err, "more threads than the") != NULL);
        CHECK(out[0] != 0); /* it ran */
        /* a context past the trained one warns (the tiny model: 512) */
        CHECK_EQ(
            sh(out, sizeof out, err, sizeof err, "%s run -m %s -p hi -n 2 --ctx 4096", bin, model),
            0);
        CHECK(strstr(err, "context 4096 is larger than the 512 tokens the model was trained on") !=
              NULL);
        /* -v says the context and the threads in use */
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s run -m %s -p hi -n 2 -v -t 1 --ctx 300",
                    bin, model),
                 0);
        CHECK(strstr(err, "context 300 tokens (the model was trained on 512), 1 thread\n") != NULL);
        if (!strstr(err, "context 300 tokens"))
            fprintf(stderr, "  run -v: %s\n", err);
    }
    /* --api-listen on the agent's own data port (control + 1) is refused up front */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s agent -m %s --listen 127.0.0.1:47700 --api-listen 127.0.0.1:47701 "
                "--no-profile",
                bin, model),
             1);
    CHECK(strstr(err, "data port") != NULL);
    CHECK_EQ(count_lines(err), 1);
    /* an API port that is taken: refused at once with the reason, before
     * profiling and before the listening line and the join token */
    {
        int hold = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof sa;
        CHECK(hold >= 0 && bind(hold, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              listen(hold, 4) == 0 && getsockname(hold, (struct sockaddr *)&sa, &sl) == 0);
        int port = ntohs(sa.sin_port);
        double t0 = hr_now_s();
        CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                    "%s agent -m %s --listen 127.0.0.1:0 --api-listen 127.0.0.1:%d "
                    "--no-discovery --key-dir %s/keys",
                    bin, model, port, tmpdir),
                 1);
        double secs = hr_now_s() - t0;
        char wantl[96];
        snprintf(wantl, sizeof wantl, "cannot listen on 127.0.0.1:%d for the HTTP API: ", port);
        CHECK(strstr(err, wantl) != NULL);
        CHECK(strstr(err, "Address already in use") != NULL);
        CHECK(strstr(err, "listening") == NULL && strstr(err, "--join") == NULL);
        CHECK(strstr(err, "profil") == NULL);
        CHECK_EQ(count_lines(err), 1);
        CHECK(secs < 3.0); /* no profile was taken */
        if (!strstr(err, wantl))
            fprintf(stderr, "taken API port: %s\n", err);
        close(hold);
    }
    /* a worker the head does not trust: the head logs the attempt once with
     * the key and how to pair it; the worker says after 10 s that the head
     * did not accept it and how to pair */
    {
        int hp = 0;
        for (int tries = 0; tries < 20 && hp == 0; tries++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0), fd2 = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET,
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            socklen_t sl = sizeof sa;
            if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
                getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
                int p = ntohs(sa.sin_port);
                sa.sin_port = htons((uint16_t)(p + 1));
                if (p < 65535 && bind(fd2, (struct sockaddr *)&sa, sizeof sa) == 0)
                    hp = p; /* the control port and the data port after it are free */
            }
            close(fd);
            close(fd2);
        }
        CHECK(hp > 0);
        char hpub[128] = "", wpub[128] = "";
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s key show --key-dir %s/kh", bin, tmpdir),
                 0);
        sscanf(out, "%127s", hpub);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "%s key show --key-dir %s/kw", bin, tmpdir),
                 0);
        sscanf(out, "%127s", wpub);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                    "timeout 17 %s agent -m %s --listen 127.0.0.1:%d --key-dir %s/kh --no-profile "
                    "--no-discovery 2>%s/head.log & sleep 1; timeout 12 %s agent -m %s "
                    "--listen 127.0.0.1:0 --key-dir %s/kw --head 127.0.0.1:%d --head-key '%s' "
                    "--no-profile --name w1; kill %%1; wait",
                    bin, model, hp, tmpdir, tmpdir, bin, model, tmpdir, hp, hpub),
                 0);
        char want_w[256];
        snprintf(want_w, sizeof want_w, "hearth trust add w1 '%s'", wpub);
        CHECK(strstr(err, "has not accepted this device in 1") != NULL);
        CHECK(strstr(err, "--join TOKEN") != NULL && strstr(err, want_w) != NULL);
        if (!strstr(err, want_w))
            fprintf(stderr, "unpaired worker said: %s\n", err);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err, "cat %s/head.log", tmpdir), 0);
        int n_refused = 0;
        for (const char *q = out; (q = strstr(q, "refused a join attempt")); q++)
            n_refused++;
        CHECK_EQ(n_refused, 1); /* the worker tried for 11 s: logged once */
        char want_h[256];
        snprintf(want_h, sizeof want_h, "hearth trust add NAME '%s'", wpub);
        CHECK(strstr(out, want_h) != NULL);
        /* without --name the listening line names the agent by host:port */
        char want_l[96];
        snprintf(want_l, sizeof want_l, ":%d: listening on tcp://127.0.0.1:%d (head)", hp, hp);
        CHECK(strstr(out, want_l) != NULL);
        CHECK(strstr(out, "hearth agent : ") == NULL);
        if (n_refused != 1 || !strstr(out, want_h))
            fprintf(stderr, "head log: %s\n", out);
    }
    {
        char cm[300];
        snprintf(cm, sizeof cm, "%s/chat.gguf", tmpdir);
        CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                    "%s mkmodel -o %s --embd 512 --layers 4 --heads 8 --heads-kv 4 --ffn 1024 "
                    "--vocab-size 1000 --type f32 --seed 5",
                    bin, cm),
                 0);
        test_chat_tty(bin, cm);
    }
    /* profile --json -o FILE: the JSON goes to the file only */
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s profile -m %s --quick --json -o %s/dev3.json --cache-dir %s/cache -t 1", bin,
                model, tmpdir, tmpdir),
             0);
    CHECK_EQ(out[0], 0);
    char dev3[300];
    snprintf(dev3, sizeof dev3, "%s/dev3.json", tmpdir);
    json_t *pj = json_load_file(dev3, 0, &je);
    CHECK(pj != NULL && json_object_get(pj, "device") != NULL);
    json_decref(pj);
    CHECK_EQ(sh(out, sizeof out, err, sizeof err,
                "%s profile -m %s --quick --json --cache-dir %s/cache -t 1", bin, model, tmpdir),
             0);
    CHECK(out[0] == '{');
    /* progress: the first line comes before the measuring, the last says how long */
    CHECK(strncmp(err, "hearth profile: profiling this device (quick) ...\n", 50) == 0);
    CHECK(strstr(err, "hearth profile: read from the cache in ") != NULL ||
          strstr(err, "hearth profile: measured in ") != NULL);
    /* a profile taken while every core is busy is not cached */
    {
        long nproc = sysconf(_SC_NPROCESSORS_ONLN);
        int rc = sh(out, sizeof out, err, sizeof err,
                    "for i in $(seq %ld); do timeout 20 sh -c 'while :; do :; done' & done; "
                    "%s profile -m %s --quick --json -o %s/busy.json --cache-dir %s/busycache "
                    "-t %ld; r=$?; kill $(jobs -p) 2>/dev/null; wait; exit $r",
                    2 * nproc, bin, model, tmpdir, tmpdir, nproc);
        CHECK_EQ(rc, 0);
        CHECK(strstr(err, "the machine was busy while profiling") != NULL);
        CHECK(strstr(err, "not cached") != NULL);
        CHECK(sh(out, sizeof out, err, sizeof err, "ls %s/busycache/device-*.json", tmpdir) != 0);
        if (!strstr(err, "not cached"))
            fprintf(stderr, "busy profile: %s\n", err);
    }

    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf %s", tmpdir);
    if (system(rm) != 0)
        fprintf(stderr, "cleanup failed\n");
    return hr_check_finish("test_cli");
}
