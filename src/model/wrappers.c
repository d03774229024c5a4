/* The registry of wrappers (model/wrappers.h) and their names; each row lives in its text
 * family's file. */
#include "model/wrappers.h"

#include <stdio.h>
#include <string.h>

extern const mt_wrapper mt_wrapper_gemma3, mt_wrapper_qwen3_5, mt_wrapper_qwen3_5_moe;

const mt_wrapper *const mt_wrappers[] = {&mt_wrapper_gemma3, &mt_wrapper_qwen3_5, &mt_wrapper_qwen3_5_moe, NULL};

const mt_wrapper *mt_wrapper_find(const char *architecture, const char *model_type) {
    for (const mt_wrapper *const *w = mt_wrappers; *w && (architecture || model_type); w++)
        if (architecture ? !strcmp((*w)->architecture, architecture) : !strcmp((*w)->model_type, model_type))
            return *w;
    return NULL;
}

const char *mt_wrapper_architectures(void) {
    static char list[256];
    if (list[0]) return list;
    size_t at = 0;
    for (const mt_wrapper *const *w = mt_wrappers; *w && at < sizeof list; w++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", w == mt_wrappers ? "" : ", ", (*w)->architecture);
    return list;
}

static const char TEXT_PREFIX[] = "model.", TEXT_LM_HEAD[] = "lm_head.weight";

int mt_wrapper_text_name(const mt_wrapper_layout *l, const char *name, char *out, size_t cap) {
    size_t n = strlen(l->text);
    if (!strcmp(name, l->lm_head)) snprintf(out, cap, "%s", TEXT_LM_HEAD);
    else if (!strncmp(name, l->text, n)) snprintf(out, cap, "%s%s", TEXT_PREFIX, name + n);
    else return 0;
    return 1;
}

void mt_wrapper_hub_name(const mt_wrapper_layout *l, const char *text_name, char *out, size_t cap) {
    size_t n = sizeof TEXT_PREFIX - 1;
    if (!strcmp(text_name, TEXT_LM_HEAD)) snprintf(out, cap, "%s", l->lm_head);
    else if (!strncmp(text_name, TEXT_PREFIX, n)) snprintf(out, cap, "%s%s", l->text, text_name + n);
    else snprintf(out, cap, "%s", text_name);
}

int mt_wrapper_kept(const mt_wrapper_layout *l, const char *name) {
    for (const char *const *p = l->kept; *p; p++)
        if (!strncmp(name, *p, strlen(*p))) return 1;
    return 0;
}
