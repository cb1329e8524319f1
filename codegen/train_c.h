/* The training run around the step (codegen/train_c.c): learning-rate
 * schedule, clipping by global norm, the log's extra columns. */
#ifndef NETC_TRAIN_C_H
#define NETC_TRAIN_C_H
#include "../passes/schedule.h"
#include "emit.h"

/* what the schedule and clipping cannot do yet, said where they are set */
bool emit_train_checks(Emit *e);
/* main(): after the options (--lr's warning); after --init (--eval-data) */
void emit_train_main_start(Emit *e);
void emit_train_eval_open(Emit *e, bool eval);
/* file scope: lr_schedule[], log_columns[], grad_norm */
void emit_train_decls(Emit *e);
/* how many log_columns[] emit_train_decls wrote */
int emit_train_log_columns(const Emit *e);
/* in main's loop, around train_step(`step`): the step's rate; the
 * values for nrt_log_values */
void emit_train_step_begin(Emit *e, const char *step);
void emit_train_step_end(Emit *e, const char *log);
/* after the step's log line: --save-every's checkpoint */
void emit_train_step_after(Emit *e, const char *step);
/* evaluate(): the held-out loss (after train_step: it calls forward()) */
void emit_train_eval(Emit *e);
/* in main's loop after train_step(`step`): the evaluation when due */
void emit_train_eval_call(Emit *e, const char *step);
/* clip_gradients(), which the update phase calls before its first update */
void emit_train_clip_fn(Emit *e);
#endif
