/* The GPT demo as a program: its options, and one run (load the text, build the model,
 * train, sample). Shared by examples/gpt.c and `opreg demo --model gpt`. */
#ifndef OPREG_EXAMPLE_GPT_DEMO_H
#define OPREG_EXAMPLE_GPT_DEMO_H

#include <opreg/opreg.h>

#include <stdio.h>

/* Writes the option list, one "  --option ARG  meaning" line each. */
void gpt_demo_options_help(FILE *out);

/* Parses argv's GPT options (argv[0] is the program or command name; --model and
 * --plugin, with their values, are left to the caller), then trains and samples on
 * the CPU of ctx. Prints to stdout, errors to stderr prefixed by `prog`. Returns the
 * process exit status: 0 when the run finished and the loss went down, 1 on a
 * failure, 2 for bad options. */
int gpt_demo_run(opr_ctx *ctx, int argc, char **argv, const char *prog);

#endif
