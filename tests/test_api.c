/* test_api.c - the head's OpenAI-compatible HTTP API, the parts that need no
 * cluster: request parsing and validation (types, ranges, stop lists, chat
 * content parts), error bodies, API key checks, UTF-8 cleaning, finish
 * reasons and the status page's text. The API served by a running cluster
 * is test_api_cluster.c. */
#include "api/http.h"

#include "check.h"

#include <jansson.h>

/* ---- unit ---- */

static int parse(hr_api_req *r, hr_api_kind kind, const char *body, hr_api_err *e) {
    memset(e, 0, sizeof *e);
    return hr_api_parse(r, kind, body, strlen(body), 512, e);
}

static void expect_bad(hr_api_kind kind, const char *body, const char *param) {
    hr_api_req r;
    hr_api_err e;
    int rc = parse(&r, kind, body, &e);
    CHECK_EQ(rc, HR_EINVAL);
    CHECK_EQ(e.status, 400);
    if (rc == 0 || strcmp(e.param, param) != 0)
        fprintf(stderr, "  body %s: param '%s' (want '%s'): %s\n", body, e.param, param, e.msg);
    CHECK_STR(e.param, param);
    hr_api_req_free(&r);
}

static void test_parse(void) {
    hr_api_req r;
    hr_api_err e;
    CHECK_EQ(parse(&r, HR_API_COMPLETIONS,
                   "{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":7,\"temperature\":0,"
                   "\"top_p\":0.5,\"top_k\":3,\"min_p\":0.1,\"seed\":42,\"stop\":[\"a\",\"bc\"],"
                   "\"presence_penalty\":0.5,\"frequency_penalty\":-1,\"repeat_penalty\":1.1,"
                   "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                   &e),
             0);
    CHECK_STR(r.prompt, "hi");
    CHECK_STR(r.model, "m");
    CHECK_EQ(r.max_tokens, 7);
    CHECK_NEAR(r.sp.temperature, 0, 0);
    CHECK_NEAR(r.sp.top_p, 0.5, 1e-6);
    CHECK_EQ(r.sp.top_k, 3);
    CHECK_NEAR(r.sp.min_p, 0.1, 1e-6);
    CHECK_NEAR(r.sp.presence_penalty, 0.5, 1e-6);
    CHECK_NEAR(r.sp.frequency_penalty, -1, 1e-6);
    CHECK_NEAR(r.sp.repeat_penalty, 1.1, 1e-6);
    CHECK_EQ(r.sp.seed, 42);
    CHECK(r.seed_given && r.stream && r.include_usage);
    CHECK_EQ(r.n_stop, 2);
    CHECK_STR(r.stop[1], "bc");
    hr_api_req_free(&r);
    /* defaults: the CLI's sampler, max_tokens = the limit; [prompt] and 5.0 as an integer */
    CHECK_EQ(
        parse(&r, HR_API_COMPLETIONS, "{\"prompt\":[\"x\"],\"top_k\":5.0,\"stop\":\"\\n\"}", &e),
        0);
    CHECK_STR(r.prompt, "x");
    CHECK_EQ(r.max_tokens, 512);
    CHECK_EQ(r.sp.top_k, 5);
    CHECK_NEAR(r.sp.temperature, hr_sampler_params_default().temperature, 0);
    CHECK(!r.stream && !r.seed_given);
    CHECK_EQ(r.n_stop, 1);
    hr_api_req_free(&r);
    /* more than the limit (the context): the limit, not an error (the reply
     * finishes with "length"); max_completion_tokens likewise */
    CHECK_EQ(parse(&r, HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":513}", &e), 0);
    CHECK_EQ(r.max_tokens, 512);
    hr_api_req_free(&r);
    CHECK_EQ(parse(&r, HR_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                   "\"max_completion_tokens\":4000000000}",
                   &e),
             0);
    CHECK_EQ(r.max_tokens, 512);
    hr_api_req_free(&r);
    /* chat, with content parts and a null assistant content */
    CHECK_EQ(
        parse(&r, HR_API_CHAT,
              "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"he\"},"
              "{\"type\":\"text\",\"text\":\"llo\"}]},{\"role\":\"assistant\",\"content\":null},"
              "{\"role\":\"user\",\"content\":\"again\"}]}",
              &e),
        0);
    CHECK_EQ(r.n_msgs, 4);
    CHECK_STR(r.msgs[1].role, "user");
    CHECK_STR(r.msgs[1].content, "hello");
    CHECK_STR(r.msgs[2].content, "");
    hr_api_req_free(&r);
    /* malformed and wrong */
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":", "");
    expect_bad(HR_API_COMPLETIONS, "", "");
    expect_bad(HR_API_COMPLETIONS, "[1,2]", "");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", "");
    expect_bad(HR_API_COMPLETIONS, "{}", "prompt");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":5}", "prompt");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":-1}", "temperature");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":1.5}", "top_p");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"top_k\":2.5}", "top_k");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":\"ten\"}", "max_tokens");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"seed\":\"x\"}", "seed");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":1}", "stream");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":5}", "stop");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"a\",1]}", "stop");
    expect_bad(HR_API_COMPLETIONS,
               "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
               "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
               "stop");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"n\":2}", "n");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"logprobs\":3}", "logprobs");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"model\":3}", "model");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"presence_penalty\":3}", "presence_penalty");
    /* parameters that would change the answer are refused, not ignored */
    expect_bad(HR_API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
               "\"response_format\":{\"type\":\"json_object\"}}",
               "response_format");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"response_format\":\"json\"}",
               "response_format");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":10}}", "logit_bias");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"suffix\":\"end\"}", "suffix");
    expect_bad(HR_API_COMPLETIONS, "{\"prompt\":\"a\",\"best_of\":3}", "best_of");
    expect_bad(HR_API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
               "top_logprobs");
    expect_bad(HR_API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
               "\"required\"}",
               "tool_choice");
    expect_bad(HR_API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":"
               "[\"audio\"]}",
               "modalities");
    /* ... unless they ask for what happens anyway */
    CHECK_EQ(parse(&r, HR_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                   "{\"type\":\"text\"},\"logit_bias\":{},\"tool_choice\":\"none\","
                   "\"modalities\":[\"text\"],\"best_of\":1,\"model\":\"gpt-4o\"}",
                   &e),
             0);
    CHECK_STR(r.model, "gpt-4o"); /* parsing keeps it; the server checks it (404) */
    hr_api_req_free(&r);
    expect_bad(HR_API_CHAT, "{\"messages\":\"hi\"}", "messages");
    expect_bad(HR_API_CHAT, "{\"messages\":[]}", "messages");
    expect_bad(HR_API_CHAT, "{\"messages\":[5]}", "messages[0]");
    expect_bad(HR_API_CHAT, "{\"messages\":[{\"role\":\"user\"},{\"role\":7}]}",
               "messages[1].role");
    expect_bad(HR_API_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
               "messages[0].role");
    expect_bad(HR_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":{}}]}",
               "messages[0].content");
    expect_bad(HR_API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               "messages[0].content");
    /* error body */
    hr_api_fail(&e, 400, "invalid_request_error", NULL, "top_p", "bad \xff value");
    char *s = hr_api_error_json(&e);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    CHECK(j != NULL);
    const char *type = NULL, *param = NULL, *msg = NULL;
    json_t *code = NULL;
    CHECK_EQ(json_unpack(j, "{s:{s:s,s:s,s:s,s:o}}", "error", "type", &type, "param", &param,
                         "message", &msg, "code", &code),
             0);
    CHECK_STR(type, "invalid_request_error");
    CHECK_STR(param, "top_p");
    CHECK_STR(msg, "bad \xEF\xBF\xBD value");
    CHECK(json_is_null(code));
    json_decref(j);
    free(s);
    /* auth */
    CHECK(hr_api_auth_ok(NULL, NULL));
    CHECK(hr_api_auth_ok(NULL, ""));
    CHECK(hr_api_auth_ok("Bearer k1", "k1"));
    CHECK(!hr_api_auth_ok(NULL, "k1"));
    CHECK(!hr_api_auth_ok("Bearer k", "k1"));
    CHECK(!hr_api_auth_ok("Bearer k12", "k1"));
    CHECK(!hr_api_auth_ok("Basic k1", "k1"));
    CHECK(hr_api_auth_ok("bearer k1", "k1")); /* the scheme in any case (RFC 7235) */
    CHECK(hr_api_auth_ok("BEARER k1", "k1"));
    CHECK(!hr_api_auth_ok("bearer k2", "k1"));
    /* UTF-8 */
    char out[64];
    CHECK_EQ(hr_api_utf8_clean("a\xc3\xa9z", 4, out, sizeof out), 4);
    CHECK_STR(out, "a\xc3\xa9z");
    hr_api_utf8_clean("a\xc3(\xed\xa0\x80\xf0\x9f\x98\x80", 10, out, sizeof out);
    CHECK_STR(out, "a\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xf0\x9f\x98\x80");
    CHECK_EQ(hr_api_utf8_clean("\xe4\xb8\xad\xe4\xb8\xad", 6, out, 5), 3); /* whole chars only */
    CHECK_STR(hr_api_finish_reason(HR_FINISH_EOS), "stop");
    CHECK_STR(hr_api_finish_reason(HR_FINISH_LENGTH), "length");
    const char *page = hr_http_status_page();
    CHECK(strstr(page, "/v1/cluster") != NULL);
    CHECK(strstr(page, "src=\"http") == NULL && strstr(page, "href=\"http") == NULL);
}

int main(void) {
    test_parse();
    return hr_check_finish("test_api");
}
