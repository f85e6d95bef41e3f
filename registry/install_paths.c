/* Where the library's own data lies: the op YAML and the plugin directory are found
 * from the path of libopreg.so itself, so that an installed prefix still works after
 * it has been moved or unpacked elsewhere. The build tree's directories are offered
 * only to the build tree's own library: an installed copy never reads from the tree
 * it was built in, even while that tree still exists. */
#define _GNU_SOURCE /* dladdr */
#include "registry.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set by CMakeLists.txt: the install layout relative to the library's directory, and
 * the build tree. An empty one is not searched. */
#ifndef OPREG_YAML_REL_DIR
#define OPREG_YAML_REL_DIR ""
#endif
#ifndef OPREG_PLUGIN_REL_DIR
#define OPREG_PLUGIN_REL_DIR ""
#endif
#ifndef OPREG_BUILD_LIB_DIR
#define OPREG_BUILD_LIB_DIR ""
#endif
#ifndef OPREG_YAML_SOURCE_DIR
#define OPREG_YAML_SOURCE_DIR ""
#endif
#ifndef OPREG_PLUGIN_BUILD_DIR
#define OPREG_PLUGIN_BUILD_DIR ""
#endif

/* realpath that tells running out of memory (glibc may allocate for long paths) from
 * a path that does not resolve: 1 resolved, 0 not, OPR_ERR_NOMEM. */
static int resolve(const char *path, char out[PATH_MAX])
{
    if (realpath(path, out)) return 1;
    return errno == ENOMEM ? opr_fail(OPR_ERR_NOMEM, "out of memory resolving %s", path) : 0;
}

/* The directory of the libopreg.so this code runs in, resolved: dladdr names the file
 * as the loader opened it (through a RUNPATH such as $ORIGIN/../lib, or a soname
 * link), and only the resolved form can be compared with the build tree's. */
static int library_dir(char out[PATH_MAX])
{
    Dl_info info;
    if (!dladdr((void *)install_data_dirs, &info) || !info.dli_fname || !info.dli_fname[0]) return 0;
    int rc = resolve(info.dli_fname, out);
    if (rc <= 0) return rc;
    char *slash = strrchr(out, '/');
    if (slash) *slash = '\0'; /* the root becomes "", which join handles */
    return 1;
}

/* dir/rel, where each leading "../" of rel drops the last component of dir: dir is
 * resolved, so no symbolic link makes ".." mean anything else, and the result reads
 * as the directory it is. False when it does not fit. */
static bool join(char out[PATH_MAX], const char *dir, const char *rel)
{
    snprintf(out, PATH_MAX, "%s", dir);
    while (!strncmp(rel, "../", 3) || !strcmp(rel, "..")) {
        char *slash = strrchr(out, '/');
        if (slash) *slash = '\0';
        rel += rel[2] ? 3 : 2;
    }
    size_t n = strlen(out);
    if (!rel[0]) {
        if (!n) snprintf(out, PATH_MAX, "/");
        return true;
    }
    return snprintf(out + n, PATH_MAX - n, "/%s", rel) < (int)(PATH_MAX - n);
}

int install_data_dirs(data_kind kind, data_dir dirs[DATA_DIRS_MAX])
{
    char lib[PATH_MAX];
    int rc = library_dir(lib);
    if (rc <= 0) return rc;
    int n = 0;
    const char *rel = kind == DATA_OP_YAML ? OPREG_YAML_REL_DIR : OPREG_PLUGIN_REL_DIR;
    if (rel[0] && join(dirs[n], lib, rel)) n++;
    char build[PATH_MAX];
    rc = OPREG_BUILD_LIB_DIR[0] ? resolve(OPREG_BUILD_LIB_DIR, build) : 0;
    if (rc < 0) return rc;
    const char *tree = kind == DATA_OP_YAML ? OPREG_YAML_SOURCE_DIR : OPREG_PLUGIN_BUILD_DIR;
    if (rc && !strcmp(build, lib) && tree[0]) snprintf(dirs[n++], PATH_MAX, "%s", tree);
    return n;
}
