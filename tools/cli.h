/* Shared pieces of the opreg command-line tool. */
#ifndef OPREG_CLI_H
#define OPREG_CLI_H

#include <opreg/opreg.h>

#include <stdbool.h>

/* Each command: argv[0] is the command name. Returns the process exit status. */
int cmd_info(int argc, char **argv);
int cmd_ops(int argc, char **argv);
int cmd_demo(int argc, char **argv);
/* opreg demo --model gpt (cmd_demo_gpt.c); argv as cmd_demo's. */
int cmd_demo_gpt(int argc, char **argv);
/* opreg demo --model resnet (cmd_demo_resnet.c); argv as cmd_demo's. */
int cmd_demo_resnet(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_gradcheck(int argc, char **argv);
/* opreg run: replays a captured program (cmd_run.c). */
int cmd_run(int argc, char **argv);

/* True if argv holds -h or --help. */
bool cli_wants_help(int argc, char **argv);
/* Most --plugin options a command takes. */
#define CLI_MAX_PLUGINS 16
/* Context options with argv's --plugin PATH and --yaml FILE options (extra op
 * definitions, loaded after the built-in ones), pointing into the two arrays
 * (CLI_MAX_PLUGINS entries each; further options are ignored). */
opr_ctx_opts cli_ctx_opts(int argc, char **argv, const char **plugin_paths, const char **yaml_paths);
/* Creates a context with default discovery plus the --plugin PATH and --yaml FILE
 * options of argv; prints the error and returns NULL on failure. */
opr_ctx *cli_ctx_new(int argc, char **argv);

#endif
