/* cmd_trust.c - `hearth key show | token | rotate-join` (this machine's
 * public key, the key pair made on first use; the head's join token) and
 * `hearth trust add NAME PUBKEY | remove NAME | list` (the keys allowed to
 * join this agent or to be joined by it). */
#include "cli/cli.h"
#include "ring/ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const hr_cli_opt hr_cmd_key_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_key_dir),
    HR_CLI_OPT_END,
};

/* "until Mon Jan  2 15:04:05 2026" / "with no expiry" for expires. */
static void hr_say_expiry(long long expires) {
    if (expires <= 0) {
        fprintf(stderr, "join token with no expiry (hearth key rotate-join makes one that "
                        "expires)\n");
        return;
    }
    time_t t = (time_t)expires;
    char when[64] = "";
    struct tm tmv;
    if (localtime_r(&t, &tmv))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M %Z", &tmv);
    fprintf(stderr, "join token valid until %s (hearth key rotate-join [HOURS] replaces it)\n",
            when);
}

HR_CLI_COMMAND(key) {
    const char *sub = o->n_args > 0 ? o->args[0] : "show";
    bool rotate = strcmp(sub, "rotate-join") == 0;
    if (strcmp(sub, "show") != 0 && strcmp(sub, "token") != 0 && !rotate)
        return hr_cli_fail("usage: hearth key show | token | rotate-join [HOURS] [--key-dir DIR]");
    long long ttl_s = HR_RING_JOIN_TTL_S;
    if (rotate && o->n_args > 1) {
        char *end;
        double h = strtod(o->args[1], &end);
        if (!*o->args[1] || *end || !(h >= 0) || h > 24.0 * 365 * 10)
            return hr_cli_fail("key rotate-join: HOURS must be a number >= 0 (0: no expiry), "
                               "not '%s'",
                               o->args[1]);
        ttl_s = (long long)(h * 3600.0 + 0.5);
        if (h > 0 && ttl_s == 0)
            ttl_s = 1;
    }
    char err[HR_ERR_LEN];
    hr_ring_keys *k = NULL;
    if (hr_ring_keys_open(&k, o->key_dir, err))
        return hr_cli_fail("key: %s", err);
    if (strcmp(sub, "token") == 0 || rotate) { /* the head's join token */
        char tok[96];
        int rc = rotate ? hr_ring_keys_join_rotate(k, ttl_s, tok, sizeof tok, err)
                        : hr_ring_keys_join_token(k, tok, sizeof tok, err);
        if (rc == 0) {
            printf("%s\n", tok);
            if (rotate)
                fprintf(stderr, "new join token: the old one no longer pairs (a running head "
                                "with this key folder uses the new one)\n");
            hr_say_expiry(hr_ring_keys_join_expires(k));
        }
        hr_ring_keys_close(k);
        return rc ? hr_cli_fail("key: %s", err) : 0;
    }
    printf("%s\n", hr_ring_keys_public(k));
    fprintf(stderr, "key folder %s; on another machine: hearth trust add NAME %s\n",
            hr_ring_keys_dir(k), hr_ring_keys_public(k));
    hr_ring_keys_close(k);
    return 0;
}

const hr_cli_opt hr_cmd_trust_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_key_dir),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(trust) {
    const char *sub = o->n_args > 0 ? o->args[0] : "list";
    char err[HR_ERR_LEN], dir[1024];
    if (o->key_dir)
        snprintf(dir, sizeof dir, "%s", o->key_dir);
    else if (hr_ring_key_dir_default(dir, sizeof dir))
        return hr_cli_fail("key folder path too long");
    if (strcmp(sub, "add") == 0) {
        if (o->n_args != 3)
            return hr_cli_fail("usage: hearth trust add NAME PUBKEY");
        if (hr_ring_trust_add(dir, o->args[1], o->args[2], err))
            return hr_cli_fail("trust: %s", err);
        fprintf(stderr, "trusted %s (%s) in %s/trusted\n", o->args[1], o->args[2], dir);
        return 0;
    }
    if (strcmp(sub, "remove") == 0) {
        if (o->n_args != 2)
            return hr_cli_fail("usage: hearth trust remove NAME");
        if (hr_ring_trust_remove(dir, o->args[1], err))
            return hr_cli_fail("trust: %s", err);
        fprintf(stderr,
                "removed %s from %s/trusted (a running agent refuses its key from its next "
                "connection)\n",
                o->args[1], dir);
        return 0;
    }
    if (strcmp(sub, "list") == 0) {
        char path[1100], line[512];
        snprintf(path, sizeof path, "%s/trusted", dir);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            fputs(line, stdout);
        if (f)
            fclose(f);
        return 0;
    }
    return hr_cli_fail("usage: hearth trust add NAME PUBKEY | remove NAME | list");
}
