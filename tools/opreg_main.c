/* opreg: inspect backends and ops, run the demo. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const struct command {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} commands[] = {
    {"info", cmd_info, "plugins found, their versions, devices and scores, and why any was refused"},
    {"ops", cmd_ops, "every registered op, one schema per line"},
    {"plan", cmd_plan, "how an op's gradients would be computed: candidates, costs, saved bytes"},
    {"check", cmd_check, "conformance: ops on each backend vs the CPU, every backward vs finite differences"},
    {"gradcheck", cmd_gradcheck, "an op's gradients on its samples against finite differences in f64"},
    {"run", cmd_run, "replays a program captured from PyTorch (opreg-capture), checking it node by node"},
    {"demo", cmd_demo, "trains an MLP on three spirals (default) or a character-level GPT (--model gpt)"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: opreg COMMAND [OPTIONS]\n\n"
            "Tensor operators on backends loaded at run time.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\nEvery command accepts --help, --plugin PATH (repeatable) to load a plugin file or\n"
            "directory before discovery, and --yaml FILE (repeatable) to add op definitions\n"
            "after the built-in ones. Environment: OPREG_PLUGIN_PATH (colon-separated plugin\n"
            "files or directories), OPREG_YAML_DIR (replaces the built-in op definitions),\n"
            "OPREG_YAML_PATH (colon-separated op files or directories added after them).\n");
}

bool cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
    return false;
}

/* The values of argv's `option VALUE` pairs, at most max. */
static int option_values(int argc, char **argv, const char *option, const char **values, int max)
{
    int n = 0;
    for (int i = 1; i + 1 < argc && n < max; i++)
        if (!strcmp(argv[i], option)) values[n++] = argv[++i];
    return n;
}

opr_ctx_opts cli_ctx_opts(int argc, char **argv, const char **plugin_paths, const char **yaml_paths)
{
    return (opr_ctx_opts){.struct_size = sizeof(opr_ctx_opts), .plugin_paths = plugin_paths,
                          .n_plugin_paths = option_values(argc, argv, "--plugin", plugin_paths, CLI_MAX_PLUGINS),
                          .yaml_paths = yaml_paths,
                          .n_yaml_paths = option_values(argc, argv, "--yaml", yaml_paths, CLI_MAX_PLUGINS)};
}

opr_ctx *cli_ctx_new(int argc, char **argv)
{
    const char *paths[CLI_MAX_PLUGINS], *yamls[CLI_MAX_PLUGINS];
    opr_ctx_opts opts = cli_ctx_opts(argc, argv, paths, yamls);
    opr_ctx *ctx = opr_ctx_new(&opts);
    if (!ctx) fprintf(stderr, "opreg: %s\n", opr_last_error());
    return ctx;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("opreg %s\n", opr_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "opreg: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
