/* cmd_trust.c - `hearth key show` (this machine's public key, the key pair
 * made on first use) and `hearth trust add NAME PUBKEY | list` (the keys
 * allowed to join this agent or to be joined by it). */
#include "cli/cli.h"
#include "ring/ring.h"

#include <stdio.h>
#include <string.h>

const hr_cli_opt hr_cmd_key_opts[] = {
    HR_CLI_OPTS(hr_cli_opts_key_dir),
    HR_CLI_OPT_END,
};

HR_CLI_COMMAND(key) {
    const char *sub = o->n_args > 0 ? o->args[0] : "show";
    if (strcmp(sub, "show") != 0 && strcmp(sub, "token") != 0)
        return hr_cli_fail("usage: hearth key show | hearth key token [--key-dir DIR]");
    char err[HR_ERR_LEN];
    hr_ring_keys *k = NULL;
    if (hr_ring_keys_open(&k, o->key_dir, err))
        return hr_cli_fail("key: %s", err);
    if (strcmp(sub, "token") == 0) { /* the head's join token */
        char tok[96];
        int rc = hr_ring_keys_join_token(k, tok, sizeof tok, err);
        if (rc == 0)
            printf("%s\n", tok);
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
    return hr_cli_fail("usage: hearth trust add NAME PUBKEY | hearth trust list");
}
