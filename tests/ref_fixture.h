/* Test helper: runs the independent PyTorch reference (tests/reference/llama_ref.py) on a model
 * given in megatrain's own terms and reads its answers back in layout positions.
 *
 * A fixture is a temporary directory holding the model shape, the weights in Hugging Face
 * tensor order, the tokens and, for training, the optimizer settings (the script's docstring
 * gives the file formats). The one-call helpers (mt_ref_run_grads, mt_ref_run_train) are what a
 * test of the engine needs; the fixture-level calls let a test run several fixtures in one
 * Python start, which costs about two seconds (importing torch). Tests must run from the
 * repository root, where the script is found as tests/reference/llama_ref.py. */
#ifndef MT_TESTS_REF_FIXTURE_H
#define MT_TESTS_REF_FIXTURE_H

#include <stdint.h>

#include "model/layout.h"
#include "util/status.h"

#define MT_REF_PYTHON "/usr/bin/python3"
#define MT_REF_SCRIPT "tests/reference/llama_ref.py"

/* A short training run, mirrored in the reference by torch.optim.AdamW (weight decay on
 * matrices only, constant lr) and clip_grad_norm_. */
typedef struct {
    int steps;
    float lr, beta1, beta2, eps, weight_decay;
    float max_grad_norm; /* 0: no clipping */
} mt_ref_train_settings;

typedef struct {
    char dir[256];
} mt_ref_fixture;

/* One element of one tensor (index into layout->tensors) nudged by delta; the reference
 * reports the float64 loss with that one change. */
typedef struct {
    int tensor;
    int64_t element;
    double delta;
} mt_ref_probe;

/* Runs of the script: mode "grads" or "train" on one fixture. */
typedef struct {
    const char *mode;
    const mt_ref_fixture *fixture;
} mt_ref_job;

/* Makes an empty fixture directory under $TMPDIR (or /tmp). */
mt_status mt_ref_fixture_create(mt_ref_fixture *fx);
/* Deletes the directory and everything in it; safe on a fixture never created. */
void mt_ref_fixture_remove(mt_ref_fixture *fx);

/* Writes the model (layout->cfg, master in layout positions) and tokens: int32
 * [steps][batch][seq + 1], steps = train ? train->steps : 1. train may be NULL (grads mode). */
mt_status mt_ref_fixture_write(const mt_ref_fixture *fx, const mt_layout *layout,
                               const float *master, const int32_t *tokens, int batch, int seq,
                               const mt_ref_train_settings *train);
/* The same for a step of `micro_batches` micro-batches (batch / micro_batches sequences each): the
 * load-balancing loss of a mixture of experts is the mean of each micro-batch's forward's. */
mt_status mt_ref_fixture_write_split(const mt_ref_fixture *fx, const mt_layout *layout, const float *master,
                                     const int32_t *tokens, int batch, int seq, int micro_batches,
                                     const mt_ref_train_settings *train);
/* Masks the targets: mask uint8 [steps][batch][seq], 0 where a target carries no loss (the
 * reference then ignores it, as cross_entropy's ignore_index does). */
mt_status mt_ref_fixture_write_mask(const mt_ref_fixture *fx, const uint8_t *mask, int steps, int batch, int seq);
/* Packed examples: positions int32 [steps][batch][seq], each input token's position in its
 * segment (0 starts one; the reference then attends within segments, RoPE at these positions). */
mt_status mt_ref_fixture_write_positions(const mt_ref_fixture *fx, const int32_t *positions, int steps, int batch,
                                         int seq);
/* Asks the grads mode for the loss at each probe as well. */
mt_status mt_ref_fixture_write_probes(const mt_ref_fixture *fx, const mt_layout *layout,
                                      const mt_ref_probe *probes, int count);

/* Runs the jobs in one Python process. On failure the message holds the script's output. */
mt_status mt_ref_run_jobs(const mt_ref_job *jobs, int count);
/* The same with another script of tests/reference (its arguments: MODE DIR pairs). */
mt_status mt_ref_run_script(const char *script, const mt_ref_job *jobs, int count);

/* Results of grads mode: the mean loss and float64 gradients in layout positions (padding 0). */
mt_status mt_ref_read_grads(const mt_ref_fixture *fx, const mt_layout *layout, double *loss,
                            double *grads);
mt_status mt_ref_read_probe_losses(const mt_ref_fixture *fx, int count, double *losses);
/* Results of train mode: losses[steps] and the weights after the last step in layout positions
 * (padding left as it is in master_after). */
mt_status mt_ref_read_train(const mt_ref_fixture *fx, const mt_layout *layout, int steps,
                            float *losses, float *master_after);

/* One call each: write a fixture, run the script, read the results, remove the fixture. */
mt_status mt_ref_run_grads(const mt_layout *layout, const float *master, const int32_t *tokens,
                           int batch, int seq, double *loss, float *grads);
mt_status mt_ref_run_train(const mt_layout *layout, const float *master, const int32_t *tokens,
                           int batch, int seq, const mt_ref_train_settings *train,
                           float *losses, float *master_after);
/* The same with a target mask (mt_ref_fixture_write_mask's layout; NULL: every target counts). */
mt_status mt_ref_run_grads_masked(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, int batch, int seq, double *loss, float *grads);
mt_status mt_ref_run_train_masked(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, int batch, int seq, const mt_ref_train_settings *train,
                                  float *losses, float *master_after);
/* And with positions (packed examples; NULL: none). */
mt_status mt_ref_run_grads_packed(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, const int32_t *positions, int batch, int seq, double *loss,
                                  float *grads);
mt_status mt_ref_run_train_packed(const mt_layout *layout, const float *master, const int32_t *tokens,
                                  const uint8_t *mask, const int32_t *positions, int batch, int seq,
                                  const mt_ref_train_settings *train, float *losses, float *master_after);

/* Where layout->tensors[i] starts in a flat array of layout->total_numel floats. */
int64_t mt_ref_tensor_position(const mt_layout *layout, int i);

/* How far `got` is from `want` (both in layout positions), tensor by tensor. */
typedef struct {
    double max_abs;           /* largest |got - want| over all tensors */
    double worst_rel;         /* largest ||got - want|| / ||want|| of one tensor */
    double worst_max_abs;     /* max |got - want| within that tensor */
    char worst_tensor[64];    /* its name */
} mt_ref_diff;

void mt_ref_compare(const mt_layout *layout, const float *got, const float *want,
                    mt_ref_diff *diff);

#endif
