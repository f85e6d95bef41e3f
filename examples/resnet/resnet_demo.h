/* The ResNet demo as a program: its options, and one run (build the model, train it on
 * the shapes data set, print what the first step's graph saved per op, measure the test
 * accuracy). Used by `opreg demo --model resnet`. */
#ifndef OPREG_EXAMPLE_RESNET_DEMO_H
#define OPREG_EXAMPLE_RESNET_DEMO_H

#include <opreg/opreg.h>

#include <stdio.h>

/* Writes the option list, one "  --option ARG  meaning" line each. */
void resnet_demo_options_help(FILE *out);

/* Parses argv's options (argv[0] is the command name; --model, --plugin and --yaml with
 * their values are left to the caller), then trains on the CPU of ctx. Prints to
 * stdout, errors to stderr prefixed by prog. Returns the exit status: 0 when the run
 * finished and reached the stated test accuracy (RESNET_DEMO_TARGET with the default
 * options; with others, when the loss went down), 1 otherwise, 2 for bad options. */
int resnet_demo_run(opr_ctx *ctx, int argc, char **argv, const char *prog);

/* The test accuracy the default run must reach. */
#define RESNET_DEMO_TARGET 0.9

#endif
