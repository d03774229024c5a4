/* Every option of mt_train_options in one table: its command-line name, its type, its domain, its
 * default, and whether it is a run setting (stored in the checkpoints; see settings.h) or says
 * how this process runs the job. The command line sets options through it (mt_train_option_set,
 * which checks the domain where the option is parsed), mt_train checks a whole struct through
 * it, and settings.c walks it to store and resume a run's settings. */
#ifndef MT_TRAIN_OPTION_TABLE_H
#define MT_TRAIN_OPTION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "megatrain.h"

typedef enum { MT_OPT_INT, MT_OPT_I64, MT_OPT_F32, MT_OPT_F64, MT_OPT_SIZE, MT_OPT_NAME, MT_OPT_FLAG } mt_opt_type;

typedef enum {
    MT_OPT_PROCESS,     /* how this process runs the job: not stored, a concrete default */
    MT_OPT_MODEL,       /* which model: stored; a resumed run compares the model itself */
    MT_OPT_MAY_CHANGE,  /* stored; a resumed run may change it (a log line says so) */
    MT_OPT_FIXED,       /* stored; a resumed run may not change it */
} mt_opt_policy;

typedef struct {
    const char *name;              /* on the command line, without "--" */
    mt_opt_type type;
    size_t offset;                 /* of its field in mt_train_options */
    mt_opt_policy policy;
    double min, max;               /* numbers and sizes: the domain */
    int min_open, max_open;        /* the bound itself is outside it */
    const char *const *choices;    /* names: the values allowed, NULL-terminated; NULL: any */
    mt_status (*check)(const char *option, const char *value); /* names: a check of its own */
    double default_number;         /* numbers: the default (MT_OPT_PROCESS: the value meaning
                                    * "none"/"auto", which the library accepts outside the domain) */
    const char *default_name;      /* names */
} mt_option;

/* The table, ended by an entry whose name is NULL. */
extern const mt_option mt_options[];

const mt_option *mt_option_find(const char *name);

/* The option's value is unset (MT_UNSET, MT_UNSET_NUMBER or NULL; flags are never unset). */
int mt_option_is_unset(const mt_option *opt, const mt_train_options *o);
/* Sets the option to its default; for a run setting whose default depends on others (the
 * warmup), the caller sets it after. */
void mt_option_set_default(const mt_option *opt, mt_train_options *o);
/* Sets a run setting unset (MT_UNSET, MT_UNSET_NUMBER or NULL). */
void mt_option_set_unset(const mt_option *opt, mt_train_options *o);
/* Checks the option's value against its domain, naming "--<name>" and the domain. */
mt_status mt_option_check(const mt_option *opt, const mt_train_options *o);
/* The option's value as text ("0.003", "cosine", "16"), for messages. */
const char *mt_option_format(const mt_option *opt, const mt_train_options *o, char *buf, size_t cap);
/* 1 when both hold the same value of the option. */
int mt_option_equal(const mt_option *opt, const mt_train_options *a, const mt_train_options *b);

/* YAML 1.1's booleans (true/false, yes/no, on/off, y/n, any case) into *value; 0 for another
 * word. A flag takes one as its value (--sequential=false, sequential: false in a run file). */
int mt_option_boolean(const char *text, int *value);

/* Checks every option that is set against its domain, and the tokens a micro-batch and a step
 * hold; unset run settings pass. */
mt_status mt_train_options_check(const mt_train_options *o);

#endif
