#include "train/option_table.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "model/config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu_list.h"
#include "util/size.h"

#define OFF(field) offsetof(mt_train_options, field)
#define STEPS_MAX 1e12 /* far past any run, small enough for every sum of steps */
#define SHAPE_MAX (1 << 24)
#define SEED_MAX 9007199254740992.0 /* 2^53: every seed a double holds exactly */
/* Tokens a micro-batch holds (batch x seq) and a step (x micro-batches): the engine sizes its
 * buffers from them in 32-bit counts. */
#define MICRO_BATCH_TOKENS_MAX ((int64_t)1 << 26)
#define STEP_TOKENS_MAX ((int64_t)1 << 30)

static const char *const schedules[] = {"cosine", "constant", NULL};
static const char *const moment_formats[] = {"fp32", "bf16", "8bit", NULL};
static const char *const backends[] = {"auto", "cpu", "cuda", NULL};
static const char *const ends_modes[] = {"auto", "on", "off", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const char *const long_modes[] = {"truncate", "refuse", NULL};

static mt_status check_preset(const char *option, const char *value) {
    mt_config cfg;
    if (mt_config_preset(value, &cfg) == MT_OK) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "--%s '%s': unknown model preset (known: %s)", option, value,
                   mt_config_preset_names());
}

/* A tokenizer.json, or a directory holding one. */
static mt_status check_tokenizer(const char *option, const char *value) {
    struct stat st;
    char json[PATH_MAX + 32];
    if (stat(value, &st) != 0)
        return mt_fail(MT_ERR_INVALID, "--%s %s: %s", option, value, strerror(errno));
    snprintf(json, sizeof json, "%s/tokenizer.json", value);
    if (S_ISDIR(st.st_mode) ? stat(json, &st) != 0 || !S_ISREG(st.st_mode) : !S_ISREG(st.st_mode))
        return mt_fail(MT_ERR_INVALID, "--%s %s: give a tokenizer.json or a directory holding one", option, value);
    return MT_OK;
}

/* A regular file. */
static mt_status check_file(const char *option, const char *value) {
    struct stat st;
    if (stat(value, &st) != 0) return mt_fail(MT_ERR_INVALID, "--%s %s: %s", option, value, strerror(errno));
    if (!S_ISREG(st.st_mode)) return mt_fail(MT_ERR_INVALID, "--%s %s: not a regular file", option, value);
    return MT_OK;
}

/* auto, all or a count; the model's number of blocks is checked once it is known (options.c). */
/* --val-data: comma-separated files, each readable. */
static mt_status check_val_data(const char *option, const char *value) {
    for (const char *p = value; *p;) {
        size_t n = strcspn(p, ",");
        char path[4096];
        if (n == 0 || n >= sizeof path)
            return mt_fail(MT_ERR_INVALID, "--%s '%s': expected FILE[,FILE...]", option, value);
        memcpy(path, p, n);
        path[n] = '\0';
        struct stat st;
        if (stat(path, &st) != 0) return mt_fail(MT_ERR_INVALID, "--%s %s: %s", option, path, strerror(errno));
        if (!S_ISREG(st.st_mode)) return mt_fail(MT_ERR_INVALID, "--%s %s: not a regular file", option, path);
        p += n + (p[n] == ',');
    }
    return MT_OK;
}

static mt_status check_device_blocks(const char *option, const char *value) {
    char *end;
    long n = strtol(value, &end, 10);
    if (!strcmp(value, "auto") || !strcmp(value, "all") || (end != value && !*end && n >= 0 && n <= SHAPE_MAX))
        return MT_OK;
    return mt_fail(MT_ERR_INVALID, "--%s '%s': expected auto, all or a count of blocks", option, value);
}

static mt_status check_cores(const char *option, const char *value) {
    if (!strcmp(value, "none")) return MT_OK;
    int *cores, count;
    char what[64];
    snprintf(what, sizeof what, "--%s", option);
    MT_TRY(mt_cpu_list_parse(value, what, &cores, &count));
    free(cores);
    return MT_OK;
}

/* Run settings: unset by default (MT_UNSET / MT_UNSET_NUMBER / NULL), their defaults here. */
#define SETTING(name, type, field, policy, lo, hi, lo_open, hi_open, def) \
    {name, type, OFF(field), policy, lo, hi, lo_open, hi_open, NULL, NULL, def, NULL}
#define NAME_SETTING(name, field, policy, choices, check, def) \
    {name, MT_OPT_NAME, OFF(field), policy, 0, 0, 0, 0, choices, check, 0, def}

const mt_option mt_options[] = {
    NAME_SETTING("preset", preset, MT_OPT_MODEL, NULL, check_preset, NULL),
    NAME_SETTING("config", config_path, MT_OPT_MODEL, NULL, NULL, NULL),
    NAME_SETTING("init-from", init_from, MT_OPT_MODEL, NULL, NULL, NULL),
    SETTING("max-positions", MT_OPT_INT, max_positions, MT_OPT_MODEL, 1, SHAPE_MAX, 0, 0, MT_UNSET),
    SETTING("rope-theta", MT_OPT_F32, rope_theta, MT_OPT_MODEL, 0, 1e30, 1, 0, MT_UNSET_NUMBER),
    NAME_SETTING("data", data_path, MT_OPT_MAY_CHANGE, NULL, NULL, "data/kjv.txt"),
    /* Stored as the resolved absolute path (train.c); fixed, since it changes the data's ids. */
    NAME_SETTING("tokenizer", tokenizer, MT_OPT_FIXED, NULL, check_tokenizer, NULL),
    /* Stored as an absolute path (train.c); fixed, as the tokenizer: they make the data's ids and masks. */
    NAME_SETTING("chat-template", chat_template, MT_OPT_FIXED, NULL, check_file, NULL),
    NAME_SETTING("loss-on", loss_on, MT_OPT_FIXED, mt_chat_loss_names, NULL, "assistant"),
    NAME_SETTING("analysis-loss", analysis_loss, MT_OPT_FIXED, on_off, NULL, "on"),
    SETTING("val-fraction", MT_OPT_F64, val_fraction, MT_OPT_FIXED, 0, 1, 0, 1, 0.05),
    NAME_SETTING("val-data", val_data, MT_OPT_MAY_CHANGE, NULL, check_val_data, NULL),
    SETTING("sequential", MT_OPT_FLAG, sequential, MT_OPT_FIXED, 0, 1, 0, 0, 0),
    /* Unset: resolved from the data when it is opened (train_data.h), and stored so. */
    NAME_SETTING("packing", packing, MT_OPT_FIXED, on_off, NULL, NULL),
    SETTING("doc-mask", MT_OPT_FLAG, doc_mask, MT_OPT_FIXED, 0, 1, 0, 0, 0),
    NAME_SETTING("long-examples", long_examples, MT_OPT_MAY_CHANGE, long_modes, NULL, "truncate"),
    SETTING("seed", MT_OPT_I64, seed, MT_OPT_FIXED, 0, SEED_MAX, 0, 0, 1337),
    SETTING("seq", MT_OPT_INT, seq_len, MT_OPT_FIXED, 1, SHAPE_MAX, 0, 0, 256),
    SETTING("batch", MT_OPT_INT, batch, MT_OPT_FIXED, 1, SHAPE_MAX, 0, 0, 8),
    SETTING("micro-batches", MT_OPT_INT, micro_batches, MT_OPT_FIXED, 1, SHAPE_MAX, 0, 0, 1),
    SETTING("steps", MT_OPT_I64, steps, MT_OPT_MAY_CHANGE, 0, STEPS_MAX, 0, 0, 600),
    /* Unset: --steps decides; set, it decides the steps once the data is open (train.c). */
    SETTING("epochs", MT_OPT_F64, epochs, MT_OPT_MAY_CHANGE, 0, 1e6, 1, 0, MT_UNSET_NUMBER),
    SETTING("lr", MT_OPT_F32, lr, MT_OPT_MAY_CHANGE, 0, INFINITY, 0, 0, 3e-3),
    NAME_SETTING("schedule", schedule, MT_OPT_MAY_CHANGE, schedules, NULL, "cosine"),
    /* Its default, a tenth of the steps (at most 100), follows the steps: settings.h. */
    SETTING("warmup", MT_OPT_I64, warmup_steps, MT_OPT_MAY_CHANGE, 0, STEPS_MAX, 0, 0, MT_UNSET),
    SETTING("min-lr-ratio", MT_OPT_F32, min_lr_ratio, MT_OPT_MAY_CHANGE, 0, 1, 0, 0, 0.1),
    SETTING("weight-decay", MT_OPT_F32, weight_decay, MT_OPT_MAY_CHANGE, 0, INFINITY, 0, 0, 0.1),
    SETTING("beta1", MT_OPT_F32, beta1, MT_OPT_MAY_CHANGE, 0, 1, 0, 1, 0.9),
    SETTING("beta2", MT_OPT_F32, beta2, MT_OPT_MAY_CHANGE, 0, 1, 0, 1, 0.95),
    SETTING("eps", MT_OPT_F32, eps, MT_OPT_MAY_CHANGE, 0, 1, 1, 0, 1e-8),
    SETTING("clip", MT_OPT_F32, max_grad_norm, MT_OPT_MAY_CHANGE, 0, INFINITY, 0, 0, 1.0),
    SETTING("max-skips", MT_OPT_INT, max_skips, MT_OPT_MAY_CHANGE, 0, 1 << 30, 0, 0, 10),
    SETTING("diverge-after", MT_OPT_INT, diverge_after, MT_OPT_MAY_CHANGE, 0, 1 << 30, 0, 0, 20),
    NAME_SETTING("moments", moments, MT_OPT_FIXED, moment_formats, NULL, "fp32"),
    SETTING("ckpt-every", MT_OPT_I64, ckpt_every, MT_OPT_MAY_CHANGE, 0, STEPS_MAX, 0, 0, 200),
    SETTING("eval-every", MT_OPT_I64, eval_every, MT_OPT_MAY_CHANGE, 0, STEPS_MAX, 0, 0, 100),
    SETTING("eval-batches", MT_OPT_I64, eval_batches, MT_OPT_MAY_CHANGE, 0, 1 << 30, 0, 0, 8),
    SETTING("keep", MT_OPT_INT, keep, MT_OPT_MAY_CHANGE, 0, 1 << 30, 0, 0, 2),
    /* How this process runs it: concrete defaults; a default outside the domain means none/auto. */
    NAME_SETTING("backend", backend, MT_OPT_PROCESS, backends, NULL, "auto"),
    SETTING("threads", MT_OPT_INT, threads, MT_OPT_PROCESS, 0, 1 << 16, 0, 0, 0),
    SETTING("slots", MT_OPT_INT, slots, MT_OPT_PROCESS, 2, 1 << 16, 0, 0, 2),
    SETTING("grad-ring", MT_OPT_INT, grad_ring, MT_OPT_PROCESS, 0, 1 << 16, 0, 0, 0),
    SETTING("all-experts", MT_OPT_FLAG, all_experts, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("opt-threads", MT_OPT_INT, opt_threads, MT_OPT_PROCESS, 0, 1 << 16, 0, 0, 0),
    NAME_SETTING("opt-cores", opt_cores, MT_OPT_PROCESS, NULL, check_cores, NULL),
    NAME_SETTING("ends-on-device", ends_on_device, MT_OPT_PROCESS, ends_modes, NULL, NULL),
    NAME_SETTING("device-blocks", device_blocks, MT_OPT_PROCESS, NULL, check_device_blocks, NULL),
    SETTING("lm-chunk", MT_OPT_INT, lm_chunk, MT_OPT_PROCESS, 1, SHAPE_MAX, 0, 0, 512),
    SETTING("chunk", MT_OPT_INT, chunk, MT_OPT_PROCESS, 0, SHAPE_MAX, 0, 0, MT_ENGINE_CHUNK),
    SETTING("attn-tile", MT_OPT_INT, attn_tile, MT_OPT_PROCESS, 0, SHAPE_MAX, 0, 0, MT_ENGINE_ATTN_TILE),
    SETTING("gpus", MT_OPT_INT, gpus, MT_OPT_PROCESS, 1, 1 << 10, 0, 0, 1),
    SETTING("gpu-mem", MT_OPT_SIZE, gpu_mem, MT_OPT_PROCESS, 1, (double)MT_SIZE_MAX, 0, 0, 0),
    SETTING("host-mem", MT_OPT_SIZE, host_mem, MT_OPT_PROCESS, 1, (double)MT_SIZE_MAX, 0, 0, 0),
    /* Rates a plan states its floor against, within physical range: far beyond any machine's
     * above, a thousandth (1 GFLOP/s, 1 MB/s, a million parameters/s) below; 0 measures. */
    SETTING("rate-gemm", MT_OPT_F64, rate_gemm, MT_OPT_PROCESS, 1e-3, 1e5, 0, 0, 0),
    SETTING("rate-pcie", MT_OPT_F64, rate_pcie, MT_OPT_PROCESS, 1e-3, 1e4, 0, 0, 0),
    SETTING("rate-adamw", MT_OPT_F64, rate_adamw, MT_OPT_PROCESS, 1e-3, 1e4, 0, 0, 0),
    NAME_SETTING("out", out_dir, MT_OPT_PROCESS, NULL, NULL, "runs/demo"),
    SETTING("resume", MT_OPT_FLAG, resume, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("resume-diverged", MT_OPT_FLAG, resume_diverged, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("accept-changed-data", MT_OPT_FLAG, accept_changed_data, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("continue-on-save-error", MT_OPT_FLAG, continue_on_save_error, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("sync-save", MT_OPT_FLAG, sync_save, MT_OPT_PROCESS, 0, 1, 0, 0, 0),
    SETTING("save-staging", MT_OPT_SIZE, save_staging, MT_OPT_PROCESS, 0, (double)MT_SIZE_MAX, 0, 0, -1),
    {NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL},
};

const mt_option *mt_option_find(const char *name) {
    for (const mt_option *opt = mt_options; opt->name; opt++)
        if (!strcmp(opt->name, name)) return opt;
    return NULL;
}

const char *mt_train_option_name(int i, int *takes_value) {
    static const int count = sizeof mt_options / sizeof mt_options[0] - 1;
    if (i < 0 || i >= count) return NULL;
    if (takes_value) *takes_value = mt_options[i].type != MT_OPT_FLAG;
    return mt_options[i].name;
}

/* ---- the field behind an option ---- */

#define FIELD(type, opt, o) ((type *)((char *)(o) + (opt)->offset))
#define CFIELD(type, opt, o) ((const type *)((const char *)(o) + (opt)->offset))

/* Integers and flags as int64, numbers as double. */
static int64_t get_int(const mt_option *opt, const mt_train_options *o) {
    return opt->type == MT_OPT_I64 || opt->type == MT_OPT_SIZE ? *CFIELD(int64_t, opt, o) : *CFIELD(int, opt, o);
}

static void set_int(const mt_option *opt, mt_train_options *o, int64_t v) {
    if (opt->type == MT_OPT_I64 || opt->type == MT_OPT_SIZE) *FIELD(int64_t, opt, o) = v;
    else *FIELD(int, opt, o) = (int)v;
}

static double get_number(const mt_option *opt, const mt_train_options *o) {
    return opt->type == MT_OPT_F32 ? (double)*CFIELD(float, opt, o) : *CFIELD(double, opt, o);
}

static void set_number(const mt_option *opt, mt_train_options *o, double v) {
    if (opt->type == MT_OPT_F32) *FIELD(float, opt, o) = (float)v;
    else *FIELD(double, opt, o) = v;
}

static int is_number(const mt_option *opt) { return opt->type == MT_OPT_F32 || opt->type == MT_OPT_F64; }

int mt_option_is_unset(const mt_option *opt, const mt_train_options *o) {
    if (opt->type == MT_OPT_NAME) return *CFIELD(const char *, opt, o) == NULL;
    if (opt->policy == MT_OPT_PROCESS) return 0;
    if (is_number(opt)) return isnan(get_number(opt, o));
    return get_int(opt, o) == MT_UNSET;
}

void mt_option_set_default(const mt_option *opt, mt_train_options *o) {
    if (opt->type == MT_OPT_NAME) *FIELD(const char *, opt, o) = opt->default_name;
    else if (is_number(opt)) set_number(opt, o, opt->default_number);
    else set_int(opt, o, (int64_t)opt->default_number);
}

void mt_option_set_unset(const mt_option *opt, mt_train_options *o) {
    if (opt->type == MT_OPT_NAME) *FIELD(const char *, opt, o) = NULL;
    else if (is_number(opt)) set_number(opt, o, MT_UNSET_NUMBER);
    else set_int(opt, o, MT_UNSET);
}

mt_train_options mt_train_defaults(void) {
    mt_train_options o;
    memset(&o, 0, sizeof o);
    for (const mt_option *opt = mt_options; opt->name; opt++) {
        if (opt->policy == MT_OPT_PROCESS) mt_option_set_default(opt, &o);
        else mt_option_set_unset(opt, &o);
    }
    return o;
}

const char *mt_option_format(const mt_option *opt, const mt_train_options *o, char *buf, size_t cap) {
    if (opt->type == MT_OPT_NAME) snprintf(buf, cap, "%s", *CFIELD(const char *, opt, o) ? *CFIELD(const char *, opt, o) : "(none)");
    else if (opt->type == MT_OPT_F32) {
        /* The shortest decimal that reads back as the same float: 0.9, not 0.899999976. */
        float f = *CFIELD(float, opt, o);
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, cap, "%.*g", digits, (double)f);
            if ((float)strtod(buf, NULL) == f) break;
        }
    } else if (is_number(opt)) {
        /* likewise for doubles: 0.05, not 0.050000000000000003 */
        double x = get_number(opt, o);
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, cap, "%.*g", digits, x);
            if (strtod(buf, NULL) == x) break;
        }
    }
    else if (opt->type == MT_OPT_SIZE) mt_size_format(get_int(opt, o), buf, cap);
    else snprintf(buf, cap, "%" PRId64, get_int(opt, o));
    return buf;
}

int mt_option_equal(const mt_option *opt, const mt_train_options *a, const mt_train_options *b) {
    if (opt->type == MT_OPT_NAME) {
        const char *x = *CFIELD(const char *, opt, a), *y = *CFIELD(const char *, opt, b);
        return x == y || (x && y && !strcmp(x, y));
    }
    if (is_number(opt)) return get_number(opt, a) == get_number(opt, b);
    return get_int(opt, a) == get_int(opt, b);
}

/* ---- domains ---- */

/* "a number in [0, 1)", "a finite number >= 0", "an integer from 1 to 16777216". */
static const char *domain_text(const mt_option *opt, char *buf, size_t cap) {
    if (is_number(opt) && isinf(opt->max))
        snprintf(buf, cap, "a finite number %s %g", opt->min_open ? ">" : ">=", opt->min);
    else if (is_number(opt))
        snprintf(buf, cap, "a number in %c%g, %g%c", opt->min_open ? '(' : '[', opt->min, opt->max,
                 opt->max_open ? ')' : ']');
    else if (opt->type == MT_OPT_SIZE) {
        char lo[32], hi[32];
        snprintf(buf, cap, "a size from %s to %s", mt_size_format((int64_t)opt->min, lo, sizeof lo),
                 mt_size_format((int64_t)opt->max, hi, sizeof hi));
    } else
        snprintf(buf, cap, "an integer from %.0f to %.0f", opt->min, opt->max);
    return buf;
}

static int in_domain(const mt_option *opt, double v) {
    if (!isfinite(v)) return 0;
    int above = opt->min_open ? v > opt->min : v >= opt->min;
    int below = opt->max_open ? v < opt->max : v <= opt->max;
    return above && below;
}

/* "expected cosine or constant" */
static const char *choices_text(const char *const *choices, char *buf, size_t cap) {
    size_t at = 0;
    int n = 0;
    while (choices[n]) n++;
    at += (size_t)snprintf(buf, cap, "expected ");
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", choices[i]);
    return buf;
}

static mt_status check_name(const mt_option *opt, const char *value) {
    size_t bad;
    if (!value[0]) return mt_fail(MT_ERR_INVALID, "--%s: the value is empty", opt->name);
    /* Names and paths are stored as JSON strings (the checkpoints' settings, metrics.jsonl). */
    if (mt_utf8_check(value, strlen(value), &bad) != 0)
        return mt_fail(MT_ERR_INVALID, "--%s: the value is not UTF-8 (byte 0x%02x at offset %zu): give a name or path "
                       "in UTF-8, renaming the file or directory if need be", opt->name,
                       (unsigned char)value[bad], bad);
    if (opt->check) return opt->check(opt->name, value);
    if (!opt->choices) return MT_OK;
    for (const char *const *c = opt->choices; *c; c++)
        if (!strcmp(*c, value)) return MT_OK;
    char expected[128];
    return mt_fail(MT_ERR_INVALID, "--%s '%s': %s", opt->name, value,
                   choices_text(opt->choices, expected, sizeof expected));
}

/* The domain refusal; `shown` is the value as the user wrote it, or as it is. */
static mt_status out_of_domain(const mt_option *opt, const char *shown) {
    char domain[96];
    return mt_fail(MT_ERR_INVALID, "--%s %s: must be %s", opt->name, shown, domain_text(opt, domain, sizeof domain));
}

static int value_in_domain(const mt_option *opt, const mt_train_options *o) {
    if (opt->type == MT_OPT_FLAG) return 1;
    return in_domain(opt, is_number(opt) ? get_number(opt, o) : (double)get_int(opt, o));
}

mt_status mt_option_check(const mt_option *opt, const mt_train_options *o) {
    char value[64];
    if (opt->type == MT_OPT_NAME) return check_name(opt, *CFIELD(const char *, opt, o));
    return value_in_domain(opt, o) ? MT_OK : out_of_domain(opt, mt_option_format(opt, o, value, sizeof value));
}

/* ---- parsing ---- */

int mt_option_boolean(const char *text, int *value) {
    static const char *const yes[] = {"true", "yes", "on", "y"}, *const no[] = {"false", "no", "off", "n"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(text, yes[i])) return *value = 1, 1;
        if (!strcasecmp(text, no[i])) return *value = 0, 1;
    }
    return 0;
}

static mt_status parse_value(const mt_option *opt, const char *text, mt_train_options *o) {
    char what[64], shown[96];
    char *end;
    snprintf(shown, sizeof shown, "'%s'", text ? text : "");
    errno = 0;
    switch (opt->type) {
    case MT_OPT_FLAG: {
        int on = 1;
        if (text && !mt_option_boolean(text, &on))
            return mt_fail(MT_ERR_INVALID, "--%s %s: expected true or false", opt->name, shown);
        set_int(opt, o, on);
        return MT_OK;
    }
    case MT_OPT_NAME: *FIELD(const char *, opt, o) = text; return check_name(opt, text);
    case MT_OPT_SIZE: {
        int64_t bytes;
        snprintf(what, sizeof what, "--%s", opt->name);
        MT_TRY(mt_size_parse(what, text, (int64_t)opt->min, &bytes));
        set_int(opt, o, bytes);
        return MT_OK;
    }
    case MT_OPT_F32:
    case MT_OPT_F64: {
        double v = strtod(text, &end);
        if (end == text || *end) return out_of_domain(opt, shown);
        set_number(opt, o, v);
        break;
    }
    default: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno == ERANGE || !in_domain(opt, (double)v)) return out_of_domain(opt, shown);
        set_int(opt, o, v);
        break;
    }
    }
    /* Checked as stored: a float can round a tiny --eps to 0. */
    return value_in_domain(opt, o) ? MT_OK : out_of_domain(opt, shown);
}

mt_status mt_train_option_set(mt_train_options *o, const char *name, const char *value) {
    const mt_option *opt = mt_option_find(name);
    if (!opt) return mt_fail(MT_ERR_INVALID, "unknown training option --%s", name);
    if (opt->type != MT_OPT_FLAG && !value) return mt_fail(MT_ERR_INVALID, "--%s needs a value", name);
    mt_train_options changed = *o;
    MT_TRY(parse_value(opt, value, &changed));
    *o = changed;
    return MT_OK;
}

/* ---- a whole set of options ---- */

static mt_status check_combinations(const mt_train_options *o) {
    if (o->seq_len > 0 && o->batch > 0 && (int64_t)o->seq_len * o->batch > MICRO_BATCH_TOKENS_MAX)
        return mt_fail(MT_ERR_INVALID, "--batch %d x --seq %d = %lld tokens a micro-batch: at most %lld", o->batch,
                       o->seq_len, (long long)o->seq_len * o->batch, (long long)MICRO_BATCH_TOKENS_MAX);
    if (o->seq_len > 0 && o->batch > 0 && o->micro_batches > 0 &&
        (int64_t)o->seq_len * o->batch * o->micro_batches > STEP_TOKENS_MAX)
        return mt_fail(MT_ERR_INVALID, "--micro-batches %d x --batch %d x --seq %d = %lld tokens a step: at most %lld",
                       o->micro_batches, o->batch, o->seq_len, (long long)o->seq_len * o->batch * o->micro_batches,
                       (long long)STEP_TOKENS_MAX);
    return MT_OK;
}

mt_status mt_train_options_check(const mt_train_options *o) {
    for (const mt_option *opt = mt_options; opt->name; opt++) {
        if (mt_option_is_unset(opt, o)) continue;
        /* A process option's "none"/"auto" value lies outside the domain on purpose. */
        if (opt->policy == MT_OPT_PROCESS && opt->type != MT_OPT_NAME &&
            (is_number(opt) ? get_number(opt, o) : (double)get_int(opt, o)) == opt->default_number)
            continue;
        MT_TRY(mt_option_check(opt, o));
    }
    if (!o->out_dir || !o->out_dir[0]) return mt_fail(MT_ERR_INVALID, "--out: no run directory given");
    return check_combinations(o);
}
