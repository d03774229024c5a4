#include "ref_fixture.h"

#include "model/families.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define LOG_NAME "script.log"
/* Bytes of the script's output kept in an error message (the message buffer holds 1024). */
#define LOG_TAIL 700

/* ---- paths and files ---- */

static void fixture_path(const mt_ref_fixture *fx, const char *name, char *path, size_t size) {
    snprintf(path, size, "%s/%s", fx->dir, name);
}

static mt_status open_file(const mt_ref_fixture *fx, const char *name, const char *how,
                           FILE **f, char *path, size_t size) {
    fixture_path(fx, name, path, size);
    *f = fopen(path, how);
    if (!*f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return MT_OK;
}

static mt_status close_file(FILE *f, const char *path) {
    /* Both must run: fclose flushes, and either may be the one that finds the error. */
    if (ferror(f) | fclose(f))
        return mt_fail(MT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return MT_OK;
}

/* Reads exactly `count` items of `size` bytes, failing when the file holds more or fewer. */
static mt_status read_exact(const mt_ref_fixture *fx, const char *name, void *out, size_t size,
                            size_t count) {
    char path[512];
    FILE *f;
    MT_TRY(open_file(fx, name, "rb", &f, path, sizeof path));
    size_t got = fread(out, size, count, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != count || extra)
        return mt_fail(MT_ERR_INVALID, "%s: expected exactly %zu values of %zu bytes, found %s",
                       path, count, size, extra ? "more" : "fewer");
    return MT_OK;
}

int64_t mt_ref_tensor_position(const mt_layout *lay, int i) {
    const mt_tensor *t = &lay->tensors[i];
    return lay->units[t->unit].offset + t->offset;
}

static int64_t tensor_numel(const mt_tensor *t) { return (int64_t)t->rows * t->cols; }

/* ---- fixture lifetime ---- */

mt_status mt_ref_fixture_create(mt_ref_fixture *fx) {
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/mt-ref-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot create the fixture directory: %s", fx->dir,
                               strerror(errno));
        fx->dir[0] = '\0';
        return st;
    }
    return MT_OK;
}

void mt_ref_fixture_remove(mt_ref_fixture *fx) {
    if (!fx->dir[0]) return;
    DIR *d = opendir(fx->dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            fixture_path(fx, e->d_name, path, sizeof path);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(fx->dir);
    fx->dir[0] = '\0';
}

/* ---- writing ---- */

/* A layer list of the spec's ("layer_windows=4,0"), where any layer's differs from 0. */
static void write_layer_list(FILE *f, const char *key, const mt_config *c, int (*of)(const mt_layer_spec *)) {
    int any = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        any |= of(&s) != 0;
    }
    if (!any) return;
    fprintf(f, "%s=", key);
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        fprintf(f, "%s%d", l ? "," : "", of(&s));
    }
    fprintf(f, "\n");
}
static int window_of(const mt_layer_spec *s) { return s->attn.window; }
static int rope_of(const mt_layer_spec *s) { return s->attn.rope; }
static int mixer_of(const mt_layer_spec *s) { return s->mixer; }

/* llama_ref.py's optional keys, from the layer and model specs, each where it is not the Llama
 * block's (layer 0 speaks for what the reference takes model-wide). */
static void write_spec(FILE *f, const mt_config *c) {
    mt_model_spec m = mt_model_spec_of(c);
    mt_layer_spec s = mt_layer_spec_of(c, 0);
    write_layer_list(f, "layer_windows", c, window_of);
    write_layer_list(f, "layer_ropes", c, rope_of);
    write_layer_list(f, "layer_mixers", c, mixer_of); /* 1: Gated DeltaNet */
    int gated = 0, fused = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec ls = mt_layer_spec_of(c, l);
        gated |= ls.mixer == MT_MIXER_ATTENTION && (ls.attn.flags & MT_ATTN_OUT_GATE);
        fused |= ls.mixer == MT_MIXER_GDN && (ls.gdn.flags & MT_GDN_FUSED);
    }
    if (gated) fprintf(f, "attn_output_gate=1\n");
    if (fused) fprintf(f, "gdn_fused=1\n");
    if (m.rope[0].partial != 0) fprintf(f, "partial_rotary_factor=%.9g\n", (double)m.rope[0].partial);
    if (c->linear_k_heads)
        fprintf(f, "linear_k_heads=%d\nlinear_v_heads=%d\nlinear_k_dim=%d\nlinear_v_dim=%d\n", c->linear_k_heads,
                c->linear_v_heads, c->linear_k_dim, c->linear_v_dim);
    if (m.num_ropes > 1) fprintf(f, "rope_local_theta=%.9g\n", (double)m.rope[1].theta);
    if (m.rope[0].type == MT_ROPE_LINEAR) fprintf(f, "rope_linear_factor=%.9g\n", (double)m.rope[0].factor);
    /* the scale the family planned: a YaRN table's factor, which mt_layer_spec_of folds in, the
     * reference puts on cos and sin as transformers does */
    const mt_rope_spec *r = &m.rope[s.attn.rope];
    double factor = mt_rope_attention_factor(r), q_scale = s.attn.q_scale / (factor * factor);
    if (s.attn.q_scale != 0) fprintf(f, "query_pre_attn_scalar=%.17g\n", 1.0 / (q_scale * q_scale));
    if (r->type == MT_ROPE_YARN)
        fprintf(f, "rope_yarn=1\nrope_beta_fast=%.9g\nrope_beta_slow=%.9g\nrope_truncate=%d\n"
                   "rope_attention_factor=%.9g\n",
                (double)r->beta_fast, (double)r->beta_slow, r->truncate, (double)r->attention_factor);
    if (s.ffn_spec.flags & MT_FFN_ROUTER_BIAS) fprintf(f, "router_bias=1\n");
    if (s.ffn_spec.flags & MT_FFN_EXPERT_BIAS) fprintf(f, "expert_bias=1\n");
    if (s.ffn_spec.act == MT_GLU_SILU_CLAMPED)
        fprintf(f, "glu_act=2\nswiglu_limit=%.9g\nswiglu_alpha=%.9g\n", (double)s.ffn_spec.clamp,
                (double)s.ffn_spec.alpha);
    if (s.attn.logit_softcap != 0) fprintf(f, "attn_logit_softcap=%.9g\n", (double)s.attn.logit_softcap);
    if (m.logit_softcap != 0) fprintf(f, "final_logit_softcap=%.9g\n", (double)m.logit_softcap);
    if (m.embed_scale != 1.0f) fprintf(f, "embed_scale=%.9g\n", (double)m.embed_scale);
    if (s.norm_unit_offset) fprintf(f, "norm_unit_offset=1\n");
    if (s.attn.flags & MT_ATTN_POST_NORM) fprintf(f, "sandwich_norms=1\n");
    if (s.attn.flags & MT_ATTN_BIAS_O) fprintf(f, "o_bias=1\n");
    if (s.attn.flags & MT_ATTN_SINKS) fprintf(f, "attn_sinks=1\n");
    if (s.ffn_spec.act == MT_GLU_GELU_TANH) fprintf(f, "glu_act=1\n");
}

static mt_status write_config(const mt_ref_fixture *fx, const mt_config *c, int batch, int seq, int micro_batches,
                              const mt_ref_train_settings *train) {
    char path[512];
    FILE *f;
    MT_TRY(open_file(fx, "config.txt", "w", &f, path, sizeof path));
    /* %.9g keeps every float exact through the text. */
    fprintf(f,
            "hidden_size=%d\nintermediate_size=%d\nnum_layers=%d\nnum_heads=%d\n"
            "num_kv_heads=%d\nhead_dim=%d\nvocab_size=%d\nrms_norm_eps=%.9g\nrope_theta=%.9g\n"
            "tie_embeddings=%d\nattention_bias=%d\nqk_norm=%d\nrope_scaling_factor=%.9g\n"
            "rope_low_freq_factor=%.9g\nrope_high_freq_factor=%.9g\n"
            "rope_original_max_position=%d\nseq_len=%d\nbatch=%d\nsteps=%d\n",
            c->hidden_size, c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads,
            c->head_dim, c->vocab_size, (double)c->rms_norm_eps, (double)c->rope_theta,
            c->tie_embeddings, c->attention_bias, c->qk_norm, (double)c->rope_scaling_factor,
            (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
            c->rope_original_max_position, seq, batch, train ? train->steps : 1);
    /* A mixture of experts: the routing, and the blocks mlp_only_layers keeps dense ("-": none). */
    fprintf(f, "num_experts=%d\nexperts_per_token=%d\nmoe_intermediate_size=%d\nnorm_topk_prob=%d\n"
               "shared_expert_intermediate_size=%d\ndecoder_sparse_step=%d\noutput_router_logits=%d\n"
               "router_aux_loss_coef=%.9g\nmicro_batches=%d\nmlp_only_layers=",
            c->num_experts, c->experts_per_token, c->moe_intermediate_size, c->norm_topk_prob,
            c->shared_expert_intermediate_size, c->decoder_sparse_step, c->output_router_logits,
            (double)c->router_aux_loss_coef, micro_batches);
    int listed = 0;
    for (int l = 0; l < c->num_layers; l++)
        if ((c->mlp_only_layers[l / 64] >> (l % 64)) & 1) fprintf(f, "%s%d", listed++ ? "," : "", l);
    fprintf(f, "%s\n", listed ? "" : "-");
    write_spec(f, c);
    if (train)
        fprintf(f, "lr=%.9g\nbeta1=%.9g\nbeta2=%.9g\neps=%.9g\nweight_decay=%.9g\n"
                   "max_grad_norm=%.9g\n",
                (double)train->lr, (double)train->beta1, (double)train->beta2,
                (double)train->eps, (double)train->weight_decay, (double)train->max_grad_norm);
    return close_file(f, path);
}

static mt_status write_tensors(const mt_ref_fixture *fx, const mt_layout *lay,
                               const float *master) {
    char list_path[512], data_path[512];
    FILE *list, *data;
    MT_TRY(open_file(fx, "tensors.txt", "w", &list, list_path, sizeof list_path));
    mt_status st = open_file(fx, "weights.bin", "wb", &data, data_path, sizeof data_path);
    if (st != MT_OK) {
        fclose(list);
        return st;
    }
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        fprintf(list, "%s %d %d\n", t->name, t->rows, t->cols);
        fwrite(master + mt_ref_tensor_position(lay, i), sizeof(float), (size_t)tensor_numel(t),
               data);
    }
    st = close_file(list, list_path);
    mt_status st_data = close_file(data, data_path);
    return st != MT_OK ? st : st_data;
}

static mt_status write_binary(const mt_ref_fixture *fx, const char *name, const void *data,
                              size_t bytes) {
    char path[512];
    FILE *f;
    MT_TRY(open_file(fx, name, "wb", &f, path, sizeof path));
    fwrite(data, 1, bytes, f);
    return close_file(f, path);
}

mt_status mt_ref_fixture_write(const mt_ref_fixture *fx, const mt_layout *layout,
                               const float *master, const int32_t *tokens, int batch, int seq,
                               const mt_ref_train_settings *train) {
    return mt_ref_fixture_write_split(fx, layout, master, tokens, batch, seq, 1, train);
}

mt_status mt_ref_fixture_write_split(const mt_ref_fixture *fx, const mt_layout *layout, const float *master,
                                     const int32_t *tokens, int batch, int seq, int micro_batches,
                                     const mt_ref_train_settings *train) {
    MT_TRY(write_config(fx, &layout->cfg, batch, seq, micro_batches, train));
    MT_TRY(write_tensors(fx, layout, master));
    size_t steps = train ? (size_t)train->steps : 1;
    return write_binary(fx, "tokens.bin", tokens,
                        steps * (size_t)batch * (size_t)(seq + 1) * sizeof(int32_t));
}

mt_status mt_ref_fixture_write_mask(const mt_ref_fixture *fx, const uint8_t *mask, int steps, int batch, int seq) {
    return write_binary(fx, "mask.bin", mask, (size_t)steps * (size_t)batch * (size_t)seq);
}

mt_status mt_ref_fixture_write_positions(const mt_ref_fixture *fx, const int32_t *positions, int steps, int batch,
                                         int seq) {
    return write_binary(fx, "positions.bin", positions, (size_t)steps * (size_t)batch * (size_t)seq * sizeof(int32_t));
}

mt_status mt_ref_fixture_write_probes(const mt_ref_fixture *fx, const mt_layout *layout,
                                      const mt_ref_probe *probes, int count) {
    char path[512];
    FILE *f;
    MT_TRY(open_file(fx, "probes.bin", "wb", &f, path, sizeof path));
    for (int i = 0; i < count; i++) {
        const mt_ref_probe *p = &probes[i];
        if (p->tensor < 0 || p->tensor >= layout->num_tensors ||
            p->element < 0 || p->element >= tensor_numel(&layout->tensors[p->tensor])) {
            fclose(f);
            return mt_fail(MT_ERR_INVALID, "probe %d: tensor %d element %lld is outside the model",
                           i, p->tensor, (long long)p->element);
        }
        /* The record: int64 tensor, int64 element, float64 delta (little-endian hosts only). */
        int64_t where[2] = {p->tensor, p->element};
        fwrite(where, sizeof where, 1, f);
        fwrite(&p->delta, sizeof p->delta, 1, f);
    }
    return close_file(f, path);
}

/* ---- running the script ---- */

/* The last LOG_TAIL bytes of the script's output, or "(nothing)". */
static void read_log_tail(const mt_ref_fixture *fx, char tail[LOG_TAIL + 1]) {
    char path[512];
    fixture_path(fx, LOG_NAME, path, sizeof path);
    strcpy(tail, "(nothing)");
    FILE *f = fopen(path, "rb");
    if (!f) return;
    if (fseek(f, -LOG_TAIL, SEEK_END) != 0) rewind(f);
    size_t n = fread(tail, 1, LOG_TAIL, f);
    fclose(f);
    tail[n] = '\0';
    if (n == 0) strcpy(tail, "(nothing)");
}

mt_status mt_ref_run_jobs(const mt_ref_job *jobs, int count) { return mt_ref_run_script(MT_REF_SCRIPT, jobs, count); }

mt_status mt_ref_run_script(const char *script, const mt_ref_job *jobs, int count) {
    if (count < 1) return mt_fail(MT_ERR_INVALID, "mt_ref_run_script: no jobs");
    if (access(MT_REF_PYTHON, X_OK) != 0)
        return mt_fail(MT_ERR_INVALID, "%s not found: the reference model needs Python with "
                       "PyTorch (Debian: apt-get install python3-torch)", MT_REF_PYTHON);
    if (access(script, R_OK) != 0)
        return mt_fail(MT_ERR_INVALID, "%s not found: run the tests from the repository root",
                       script);

    char **argv = mt_calloc((size_t)2 * count + 3, sizeof *argv, "the reference's arguments");
    if (!argv) return MT_ERR_NOMEM;
    argv[0] = MT_REF_PYTHON;
    argv[1] = (char *)script;
    for (int i = 0; i < count; i++) {
        argv[2 + 2 * i] = (char *)jobs[i].mode;
        argv[3 + 2 * i] = (char *)jobs[i].fixture->dir;
    }
    /* The script's stdout and stderr go to a log in the first fixture, quoted on failure. */
    char log_path[512];
    fixture_path(jobs[0].fixture, LOG_NAME, log_path, sizeof log_path);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid;
    int err = posix_spawn(&pid, MT_REF_PYTHON, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    free(argv);
    if (err != 0)
        return mt_fail(MT_ERR_IO, "cannot start %s %s: %s", MT_REF_PYTHON, script,
                       strerror(err));

    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0) {
        if (errno != EINTR)
            return mt_fail(MT_ERR_IO, "waiting for %s: %s", script, strerror(errno));
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return MT_OK;
    char how[64], tail[LOG_TAIL + 1];
    if (WIFEXITED(wstatus))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(wstatus));
    else
        snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(wstatus));
    read_log_tail(jobs[0].fixture, tail);
    return mt_fail(MT_ERR_INVALID, "%s %s %s%s %s; its output ends: %s", script,
                   jobs[0].mode, jobs[0].fixture->dir, count > 1 ? " ..." : "", how, tail);
}

/* ---- reading results ---- */

static mt_status read_text_numbers(const mt_ref_fixture *fx, const char *name, int count,
                                   double *out) {
    char path[512];
    FILE *f;
    MT_TRY(open_file(fx, name, "r", &f, path, sizeof path));
    int got = 0;
    while (got < count && fscanf(f, "%lf", &out[got]) == 1) got++;
    fclose(f);
    if (got != count)
        return mt_fail(MT_ERR_INVALID, "%s: expected %d numbers, read %d", path, count, got);
    return MT_OK;
}

mt_status mt_ref_read_grads(const mt_ref_fixture *fx, const mt_layout *layout, double *loss,
                            double *grads) {
    MT_TRY(read_text_numbers(fx, "ref_loss.txt", 1, loss));
    int64_t total = 0;
    for (int i = 0; i < layout->num_tensors; i++) total += tensor_numel(&layout->tensors[i]);
    double *packed = mt_malloc((size_t)total * sizeof *packed, "the reference gradients");
    if (!packed) return MT_ERR_NOMEM;
    mt_status st = read_exact(fx, "ref_grads.bin", packed, sizeof *packed, (size_t)total);
    if (st == MT_OK) {
        memset(grads, 0, (size_t)layout->total_numel * sizeof *grads);
        const double *src = packed;
        for (int i = 0; i < layout->num_tensors; i++) {
            int64_t n = tensor_numel(&layout->tensors[i]);
            memcpy(grads + mt_ref_tensor_position(layout, i), src, (size_t)n * sizeof *grads);
            src += n;
        }
    }
    free(packed);
    return st;
}

mt_status mt_ref_read_probe_losses(const mt_ref_fixture *fx, int count, double *losses) {
    return read_exact(fx, "ref_probe_losses.bin", losses, sizeof *losses, (size_t)count);
}

mt_status mt_ref_read_train(const mt_ref_fixture *fx, const mt_layout *layout, int steps,
                            float *losses, float *master_after) {
    double *loss64 = mt_malloc((size_t)steps * sizeof *loss64, "the reference losses");
    if (!loss64) return MT_ERR_NOMEM;
    mt_status st = read_text_numbers(fx, "ref_losses.txt", steps, loss64);
    for (int s = 0; st == MT_OK && s < steps; s++) losses[s] = (float)loss64[s];
    free(loss64);
    MT_TRY(st);

    int64_t total = 0;
    for (int i = 0; i < layout->num_tensors; i++) total += tensor_numel(&layout->tensors[i]);
    float *packed = mt_malloc((size_t)total * sizeof *packed, "the reference weights");
    if (!packed) return MT_ERR_NOMEM;
    st = read_exact(fx, "ref_weights_after.bin", packed, sizeof *packed, (size_t)total);
    if (st == MT_OK) {
        const float *src = packed;
        for (int i = 0; i < layout->num_tensors; i++) {
            int64_t n = tensor_numel(&layout->tensors[i]);
            memcpy(master_after + mt_ref_tensor_position(layout, i), src, (size_t)n * sizeof *src);
            src += n;
        }
    }
    free(packed);
    return st;
}

/* ---- one-call helpers ---- */

mt_status mt_ref_run_grads_packed(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, const int32_t *positions, int batch, int seq, double *loss,
                                  float *grads) {
    mt_ref_fixture fx;
    MT_TRY(mt_ref_fixture_create(&fx));
    double *grads64 = mt_malloc((size_t)layout->total_numel * sizeof *grads64,
                                "the reference gradients");
    mt_status st = grads64 ? MT_OK : MT_ERR_NOMEM;
    if (st == MT_OK) st = mt_ref_fixture_write(&fx, layout, master, tokens, batch, seq, NULL);
    if (st == MT_OK && mask) st = mt_ref_fixture_write_mask(&fx, mask, 1, batch, seq);
    if (st == MT_OK && positions) st = mt_ref_fixture_write_positions(&fx, positions, 1, batch, seq);
    if (st == MT_OK) st = mt_ref_run_jobs(&(mt_ref_job){"grads", &fx}, 1);
    if (st == MT_OK) st = mt_ref_read_grads(&fx, layout, loss, grads64);
    for (int64_t i = 0; st == MT_OK && i < layout->total_numel; i++) grads[i] = (float)grads64[i];
    free(grads64);
    mt_ref_fixture_remove(&fx);
    return st;
}

mt_status mt_ref_run_grads_masked(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, int batch, int seq, double *loss, float *grads) {
    return mt_ref_run_grads_packed(layout, master, tokens, mask, NULL, batch, seq, loss, grads);
}

mt_status mt_ref_run_grads(const mt_layout *layout, const float *master, const int32_t *tokens,
                           int batch, int seq, double *loss, float *grads) {
    return mt_ref_run_grads_masked(layout, master, tokens, NULL, batch, seq, loss, grads);
}

mt_status mt_ref_run_train_packed(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, const int32_t *positions, int batch, int seq,
                                  const mt_ref_train_settings *train, float *losses, float *master_after) {
    mt_ref_fixture fx;
    MT_TRY(mt_ref_fixture_create(&fx));
    mt_status st = mt_ref_fixture_write(&fx, layout, master, tokens, batch, seq, train);
    if (st == MT_OK && mask) st = mt_ref_fixture_write_mask(&fx, mask, train->steps, batch, seq);
    if (st == MT_OK && positions) st = mt_ref_fixture_write_positions(&fx, positions, train->steps, batch, seq);
    if (st == MT_OK) st = mt_ref_run_jobs(&(mt_ref_job){"train", &fx}, 1);
    if (st == MT_OK) {
        memcpy(master_after, master, (size_t)layout->total_numel * sizeof *master);
        st = mt_ref_read_train(&fx, layout, train->steps, losses, master_after);
    }
    mt_ref_fixture_remove(&fx);
    return st;
}

mt_status mt_ref_run_train_masked(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, int batch, int seq, const mt_ref_train_settings *train,
                                  float *losses, float *master_after) {
    return mt_ref_run_train_packed(layout, master, tokens, mask, NULL, batch, seq, train, losses, master_after);
}

mt_status mt_ref_run_train(const mt_layout *layout, const float *master, const int32_t *tokens,
                           int batch, int seq, const mt_ref_train_settings *train,
                           float *losses, float *master_after) {
    return mt_ref_run_train_masked(layout, master, tokens, NULL, batch, seq, train, losses, master_after);
}

/* ---- comparison ---- */

void mt_ref_compare(const mt_layout *layout, const float *got, const float *want,
                    mt_ref_diff *diff) {
    memset(diff, 0, sizeof *diff);
    for (int i = 0; i < layout->num_tensors; i++) {
        const mt_tensor *t = &layout->tensors[i];
        int64_t at = mt_ref_tensor_position(layout, i);
        const float *a = got + at, *b = want + at;
        double err2 = 0, want2 = 0, max_abs = 0;
        for (int64_t j = 0; j < tensor_numel(t); j++) {
            double e = (double)a[j] - (double)b[j];
            err2 += e * e;
            want2 += (double)b[j] * b[j];
            if (fabs(e) > max_abs || isnan(e)) max_abs = isnan(e) ? INFINITY : fabs(e);
        }
        /* A tensor that should be all zero has no scale: any error there is infinite. */
        double rel = want2 > 0 ? sqrt(err2 / want2) : (err2 > 0 ? INFINITY : 0);
        if (isnan(rel)) rel = INFINITY;
        if (max_abs > diff->max_abs) diff->max_abs = max_abs;
        if (i == 0 || rel > diff->worst_rel) {
            diff->worst_rel = rel;
            diff->worst_max_abs = max_abs;
            snprintf(diff->worst_tensor, sizeof diff->worst_tensor, "%s", t->name);
        }
    }
}
