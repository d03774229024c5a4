/* mt_sample's options: defaults, parsing with domains, and the check mt_sample makes. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "megatrain.h"
#include "train/sample.h"
#include "util/status.h"

mt_sample_options mt_sample_defaults(void) {
    return (mt_sample_options){.prompt = "", .tokens = 200, .temperature = 0.8f, .top_k = 40,
                               .seed = 1, .backend = "auto"};
}

/* Whole-string integers in [0, max]; the message names the option and the range. */
static mt_status parse_count(const char *name, const char *text, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno == ERANGE || v < 0 || v > max)
        return mt_fail(MT_ERR_INVALID, "--%s '%s': must be an integer from 0 to %lld", name, text, max);
    *out = v;
    return MT_OK;
}

mt_status mt_sample_option_set(mt_sample_options *o, const char *name, const char *value) {
    long long v;
    char *end;
    if (!value) return mt_fail(MT_ERR_INVALID, "--%s needs a value", name);
    if (!strcmp(name, "prompt")) {
        o->prompt = value;
    } else if (!strcmp(name, "chat")) {
        o->chat = value;
    } else if (!strcmp(name, "tokens")) {
        MT_TRY(parse_count(name, value, MT_SAMPLE_TOKENS_MAX, &v));
        o->tokens = (int)v;
    } else if (!strcmp(name, "top-k")) {
        MT_TRY(parse_count(name, value, INT_MAX, &v));
        o->top_k = (int)v;
    } else if (!strcmp(name, "seed")) {
        MT_TRY(parse_count(name, value, LLONG_MAX, &v));
        o->seed = (uint64_t)v;
    } else if (!strcmp(name, "temperature")) {
        double t = strtod(value, &end);
        if (end == value || *end || !(t >= 0) || !isfinite((float)t))
            return mt_fail(MT_ERR_INVALID, "--temperature '%s': must be a finite number >= 0 (0: greedy)", value);
        o->temperature = (float)t;
    } else if (!strcmp(name, "backend")) {
        if (strcmp(value, "auto") && strcmp(value, "cpu") && strcmp(value, "cuda"))
            return mt_fail(MT_ERR_INVALID, "--backend '%s': expected auto, cpu or cuda", value);
        o->backend = value;
    } else {
        return mt_fail(MT_ERR_INVALID, "unknown sample option --%s", name);
    }
    return MT_OK;
}

mt_status mt_sample_options_check(const mt_sample_options *o) {
    if (!o->run || !o->run[0]) return mt_fail(MT_ERR_INVALID, "sample: no run directory or checkpoint given");
    if (o->tokens < 0 || o->tokens > MT_SAMPLE_TOKENS_MAX)
        return mt_fail(MT_ERR_INVALID, "--tokens %d: must be an integer from 0 to %d", o->tokens, MT_SAMPLE_TOKENS_MAX);
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return mt_fail(MT_ERR_INVALID, "--temperature %g: must be a finite number >= 0 (0: greedy)", (double)o->temperature);
    if (o->top_k < 0) return mt_fail(MT_ERR_INVALID, "--top-k %d: must be an integer >= 0", o->top_k);
    if (!o->prompt) return mt_fail(MT_ERR_INVALID, "sample: the prompt is NULL (use \"\" for none)");
    if (o->chat && o->prompt[0])
        return mt_fail(MT_ERR_INVALID, "--chat and --prompt: give one (--chat renders its message with the chat template; "
                       "--prompt is text to continue)");
    return MT_OK;
}
