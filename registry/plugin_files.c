/* The plugin files a context would consider, listed without opening any
 * (opr_plugin_files), and the search path opr_plugin_discover walks; both follow the
 * loader's rules (docs/plugin-abi.md, "Discovery"), so that a tool can vet each file
 * elsewhere (opreg info runs each one's init in a child process) before a context
 * loads them. */
#include "plugin_staging.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct path_list {
    char **items;
    dev_t *devs;
    ino_t *inos;
    int n, cap;
} path_list;

static void list_free(path_list *l)
{
    dir_list_free(l->items, l->n);
    free(l->devs);
    free(l->inos);
    memset(l, 0, sizeof *l);
}

/* Appends path (its identity sb) unless that file is listed already; OPR_ERR_NOMEM. */
/* Hands the list over (rc OK) or frees it (else); returns rc. */
static int list_finish(path_list *l, int rc, char ***paths, int *n)
{
    if (rc) {
        list_free(l);
        return rc;
    }
    free(l->devs);
    free(l->inos);
    *paths = l->items;
    *n = l->n;
    return OPR_OK;
}

static int list_add(path_list *l, const char *path, const struct stat *sb)
{
    for (int i = 0; sb && i < l->n; i++)
        if (l->devs[i] == sb->st_dev && l->inos[i] == sb->st_ino) return OPR_OK;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **items = realloc(l->items, (size_t)cap * sizeof *items);
        if (items) l->items = items;
        dev_t *devs = items ? realloc(l->devs, (size_t)cap * sizeof *devs) : NULL;
        if (devs) l->devs = devs;
        ino_t *inos = devs ? realloc(l->inos, (size_t)cap * sizeof *inos) : NULL;
        if (inos) l->inos = inos;
        if (!inos) return opr_fail(OPR_ERR_NOMEM, "out of memory listing plugin files");
        l->cap = cap;
    }
    if (!(l->items[l->n] = strdup(path))) return opr_fail(OPR_ERR_NOMEM, "out of memory listing plugin files");
    l->devs[l->n] = sb ? sb->st_dev : 0;
    l->inos[l->n] = sb ? sb->st_ino : 0;
    l->n++;
    return OPR_OK;
}

int plugin_search_path(char ***paths, int *n)
{
    path_list l = {0};
    int rc = OPR_OK;
    const char *env = getenv("OPREG_PLUGIN_PATH");
    char *copy = env ? strdup(env) : NULL;
    if (env && !copy) return opr_fail(OPR_ERR_NOMEM, "out of memory reading OPREG_PLUGIN_PATH");
    for (char *save = NULL, *p = copy ? strtok_r(copy, ":", &save) : NULL; p && !rc; p = strtok_r(NULL, ":", &save))
        rc = list_add(&l, p, NULL);
    free(copy);
    data_dir dirs[DATA_DIRS_MAX];
    int ndirs = rc ? 0 : install_data_dirs(DATA_PLUGINS, dirs);
    if (ndirs < 0) rc = opr_fail_wrap(ndirs, "opr_plugin_discover");
    struct stat sb;
    for (int i = 0; i < ndirs && !rc; i++)
        if (!stat(dirs[i], &sb)) rc = list_add(&l, dirs[i], NULL);
    return list_finish(&l, rc, paths, n);
}

/* The files loading `path` would open: the file itself, or the *.so of a directory the
 * loader would look into. Paths that do not exist, dangling links, refused and
 * unreadable directories contribute nothing (the loader opens nothing there). */
static int add_path(path_list *l, const char *path)
{
    struct stat sb;
    char real[PATH_MAX];
    if (stat(path, &sb) || !realpath(path, real)) return OPR_OK;
    if (!S_ISDIR(sb.st_mode)) return list_add(l, real, &sb);
    if (sb.st_mode & S_IWOTH && !(sb.st_mode & S_ISVTX)) return OPR_OK;
    char **names;
    int n, rc = dir_list(path, ".so", true, "plugin directory", &names, &n);
    if (rc) return rc == OPR_ERR_NOMEM ? rc : OPR_OK;
    for (int i = 0; i < n && !rc; i++)
        if (!stat(names[i], &sb) && realpath(names[i], real)) rc = list_add(l, real, &sb);
    dir_list_free(names, n);
    return rc;
}

opr_status opr_plugin_files(const opr_ctx_opts *opts, char ***paths, int *n)
{
    if (!paths || !n) return opr_fail(OPR_ERR_INVALID, "opr_plugin_files: NULL result");
    *paths = NULL;
    *n = 0;
    path_list l = {0};
    int rc = OPR_OK;
    for (int i = 0; opts && opts->plugin_paths && i < opts->n_plugin_paths && !rc; i++)
        if (opts->plugin_paths[i]) rc = add_path(&l, opts->plugin_paths[i]);
    if (!rc && !(opts && opts->skip_plugin_discovery)) {
        char **search = NULL;
        int nsearch = 0;
        rc = plugin_search_path(&search, &nsearch);
        for (int i = 0; !rc && i < nsearch; i++) rc = add_path(&l, search[i]);
        dir_list_free(search, nsearch);
    }
    return list_finish(&l, rc, paths, n);
}

void opr_plugin_files_free(char **paths, int n) { dir_list_free(paths, n); }
