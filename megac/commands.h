// megac/commands.h: the subcommands of the `megac` program. Each takes the arguments after
// its name and returns the process exit code (0 ok, 2 usage error).
#pragma once

int cmd_layout(int argc, char **argv);      // megac/cmd_layout.c: print a process grid
int cmd_plan(int argc, char **argv);        // megac/cmd_plan.c: predict and rank layouts
int cmd_ablate(int argc, char **argv);      // megac/cmd_ablate.c: run and report a layout sweep
int cmd_train(int argc, char **argv);       // megac/cmd_train.c: pretrain a GPT
int cmd_preprocess(int argc, char **argv);  // megac/cmd_preprocess.c: text -> HDF5 tokens
int cmd_tokenizer(int argc, char **argv);   // megac/cmd_tokenizer.c: train a BPE tokenizer
int cmd_export(int argc, char **argv);      // megac/cmd_export.c: checkpoint -> Hugging Face folder
int cmd_import(int argc, char **argv);      // megac/cmd_import.c: Hugging Face folder -> checkpoint
int cmd_generate(int argc, char **argv);    // megac/cmd_generate.c: text from a checkpoint
int cmd_data(int argc, char **argv);        // megac/cmd_data.c: the training samples' tokens
