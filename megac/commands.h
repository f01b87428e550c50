// megac/commands.h: the subcommands of the `megac` program. Each takes the arguments after
// its name and returns the process exit code (0 ok, 2 usage error).
#pragma once

int cmd_layout(int argc, char **argv);      // megac/cmd_layout.c: print a process grid
int cmd_train(int argc, char **argv);       // megac/cmd_train.c: pretrain a GPT
int cmd_preprocess(int argc, char **argv);  // megac/cmd_preprocess.c: text -> HDF5 tokens
int cmd_tokenizer(int argc, char **argv);   // megac/cmd_tokenizer.c: train a BPE tokenizer
