#include "train/settings.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/option_table.h"
#include "train/options.h"
#include "util/log.h"
#include "util/status.h"

#define FIELD(type, opt, o) ((type *)((char *)(o) + (opt)->offset))
#define CFIELD(type, opt, o) ((const type *)((const char *)(o) + (opt)->offset))

static json_t *value_to_json(const mt_option *opt, const mt_train_options *o) {
    if (mt_option_is_unset(opt, o)) return json_null(); /* a model change not asked for; an unset warmup
                                                          * (its default follows the steps) */
    switch (opt->type) {
    case MT_OPT_NAME: return *CFIELD(const char *, opt, o) ? json_string(*CFIELD(const char *, opt, o)) : json_null();
    case MT_OPT_FLAG: return json_boolean(*CFIELD(int, opt, o) > 0);
    case MT_OPT_F32: { /* as written: 0.9, not 0.89999997615814209 */
        char text[32];
        return json_real(strtod(mt_option_format(opt, o, text, sizeof text), NULL));
    }
    case MT_OPT_F64: return json_real(*CFIELD(double, opt, o));
    case MT_OPT_INT: return json_integer(*CFIELD(int, opt, o));
    default: return json_integer(*CFIELD(int64_t, opt, o));
    }
}

json_t *mt_settings_to_json(const mt_train_options *o) {
    json_t *settings = json_object();
    for (const mt_option *opt = mt_options; settings && opt->name; opt++)
        if (opt->policy != MT_OPT_PROCESS && json_object_set_new(settings, opt->name, value_to_json(opt, o)) != 0) {
            json_decref(settings);
            settings = NULL;
        }
    return settings;
}

/* Sets the option in `o` from its stored JSON value; refuses a value of the wrong type. */
static mt_status value_from_json(const mt_option *opt, const json_t *v, const char *checkpoint, mt_train_options *o) {
    int ok;
    switch (opt->type) {
    case MT_OPT_NAME:
        ok = json_is_string(v);
        if (ok) *FIELD(const char *, opt, o) = json_string_value(v);
        break;
    case MT_OPT_FLAG:
        ok = json_is_boolean(v);
        if (ok) *FIELD(int, opt, o) = json_is_true(v);
        break;
    case MT_OPT_F32:
    case MT_OPT_F64:
        ok = json_is_number(v);
        if (ok && opt->type == MT_OPT_F32) *FIELD(float, opt, o) = (float)json_number_value(v);
        else if (ok) *FIELD(double, opt, o) = json_number_value(v);
        break;
    default:
        ok = json_is_integer(v) && (opt->type != MT_OPT_INT || (json_integer_value(v) >= -2147483647 - 1 &&
                                                               json_integer_value(v) <= 2147483647));
        if (ok && opt->type == MT_OPT_INT) *FIELD(int, opt, o) = (int)json_integer_value(v);
        else if (ok) *FIELD(int64_t, opt, o) = json_integer_value(v);
        break;
    }
    if (!ok) return mt_fail(MT_ERR_INVALID, "%s: the stored setting '%s' is not of its type", checkpoint, opt->name);
    MT_TRY(mt_option_check(opt, o));
    return MT_OK;
}

/* A setting given on resume next to the run's stored value. */
static mt_status reconcile(const mt_option *opt, const mt_train_options *given, const mt_train_options *stored,
                           const char *checkpoint) {
    if (mt_option_equal(opt, given, stored)) return MT_OK;
    char now[128], before[128];
    mt_option_format(opt, given, now, sizeof now);
    mt_option_format(opt, stored, before, sizeof before);
    if (opt->policy == MT_OPT_FIXED)
        return mt_fail(MT_ERR_INVALID, "--%s %s: %s is a run with --%s %s, which a resumed run cannot change; "
                       "leave --%s out to keep %s, or start a new run in another --out", opt->name, now, checkpoint,
                       opt->name, before, opt->name, before);
    mt_log_info("resuming with --%s %s instead of the run's %s", opt->name, now, before);
    return MT_OK;
}

/* Fine-tuning's defaults (--init-from a pretrained model) where they differ from pretraining's:
 * Hugging Face's Trainer's, which LLaMA-Factory and axolotl take (no weight decay, beta2 0.999, a
 * cosine to 0), with the learning rate of their full fine-tuning examples; the warmup is a tenth of
 * the steps (LLaMA-Factory's warmup_ratio 0.1), set when the run starts. */
static const struct {
    const char *name;
    float value;
} finetune_defaults[] = {{"lr", 1e-5f}, {"weight-decay", 0.0f}, {"beta2", 0.999f}, {"min-lr-ratio", 0.0f}};

/* The option's default for a run of the model `o` names: fine-tuning's with --init-from. */
static void set_default(const mt_option *opt, mt_train_options *o) {
    mt_option_set_default(opt, o);
    if (!o->init_from) return;
    for (size_t i = 0; i < sizeof finetune_defaults / sizeof *finetune_defaults; i++)
        if (!strcmp(opt->name, finetune_defaults[i].name)) *FIELD(float, opt, o) = finetune_defaults[i].value;
}

mt_status mt_settings_resolve(const mt_train_options *given, const json_t *saved, const char *checkpoint,
                              mt_train_options *out) {
    *out = *given;
    for (const mt_option *opt = mt_options; opt->name; opt++) {
        if (opt->policy == MT_OPT_PROCESS) continue;
        const json_t *v = saved ? json_object_get(saved, opt->name) : NULL;
        int stored = v && !json_is_null(v);
        if (opt->policy == MT_OPT_MODEL) {
            /* A resumed run's model is the checkpoint's, as stored: a model the options name is
             * compared with it (train.c) and refused unless it is the same, never stored over it. */
            if (saved && stored) MT_TRY(value_from_json(opt, v, checkpoint, out));
            else if (saved) mt_option_set_unset(opt, out);
            continue;
        }
        if (!mt_option_is_unset(opt, given) && !stored) {
            /* A fixed name the run stored as none (no --tokenizer: bytes) may not be given now. */
            if (v && opt->policy == MT_OPT_FIXED && opt->type == MT_OPT_NAME) {
                mt_train_options none = *given;
                *FIELD(const char *, opt, &none) = NULL;
                MT_TRY(reconcile(opt, given, &none, checkpoint));
            }
            continue;
        }
        if (!stored) {
            set_default(opt, out); /* the model options come first in the table: out names the model */
            continue;
        }
        mt_train_options from_checkpoint = *given;
        MT_TRY(value_from_json(opt, v, checkpoint, &from_checkpoint));
        if (mt_option_is_unset(opt, given)) MT_TRY(value_from_json(opt, v, checkpoint, out));
        else MT_TRY(reconcile(opt, given, &from_checkpoint, checkpoint));
    }
    return MT_OK;
}

void mt_settings_finetune_warmup(mt_train_options *o) {
    if (o->init_from && o->warmup_steps == MT_UNSET) o->warmup_steps = o->steps / 10;
}

void mt_settings_log_defaults(const mt_train_options *given, const mt_train_options *resolved) {
    static const char *const names[] = {"lr", "warmup", "schedule", "min-lr-ratio", "weight-decay", "beta1", "beta2"};
    char list[512] = "", value[128];
    size_t at = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const mt_option *opt = mt_option_find(names[i]);
        if (!mt_option_is_unset(opt, given)) continue;
        if (opt->offset != offsetof(mt_train_options, warmup_steps))
            mt_option_format(opt, resolved, value, sizeof value);
        else if (!isnan(resolved->epochs)) /* the steps follow from the data */
            snprintf(value, sizeof value, "(a tenth of the steps%s)", resolved->init_from ? "" : ", at most 100");
        else snprintf(value, sizeof value, "%lld", (long long)(resolved->init_from ? resolved->steps / 10
                                                                                     : mt_settings_warmup(resolved)));
        int n = snprintf(list + at, sizeof list - at, "%s--%s %s", at ? ", " : "", opt->name, value);
        if (n > 0 && (size_t)n < sizeof list - at) at += (size_t)n;
    }
    if (!at) return;
    if (resolved->init_from)
        mt_log_info("fine-tuning defaults (--init-from): %s, as LLaMA-Factory and axolotl fine-tune; give an option "
                    "to change it", list);
    else
        mt_log_info("pretraining defaults (no --init-from): %s; give an option to change it", list);
}

int64_t mt_settings_warmup(const mt_train_options *o) {
    if (o->warmup_steps != MT_UNSET) return o->warmup_steps;
    return o->steps / 10 < 100 ? o->steps / 10 : 100;
}

const char *mt_settings_model_source(const mt_train_options *o, char *buf, size_t cap) {
    if (o->init_from) snprintf(buf, cap, "--init-from %s", o->init_from);
    else if (o->config_path) snprintf(buf, cap, "--config %s", o->config_path);
    else snprintf(buf, cap, "--preset %s", o->preset ? o->preset : "demo");
    return buf;
}
