/* Directory listings for the loaders: the op YAML of a directory and the plugins of a
 * directory are both read in name order, so that what loads first (and wins a name
 * clash) does not depend on the file system. */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void dir_list_free(char **paths, int n)
{
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

int dir_list(const char *dir, const char *suffix, bool skip_hidden, const char *what, char ***paths, int *n)
{
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d && errno == ENOMEM) return opr_fail(OPR_ERR_NOMEM, "out of memory opening %s %s", what, dir);
    if (!d) return opr_fail(OPR_ERR_IO, "cannot open %s %s: %s", what, dir, strerror(errno));
    size_t slen = strlen(suffix);
    char **names = NULL;
    int count = 0;
    bool nomem = false;
    for (struct dirent *e; !nomem && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if ((skip_hidden && e->d_name[0] == '.') || len <= slen || strcmp(e->d_name + len - slen, suffix)) continue;
        char **grown = realloc(names, ((size_t)count + 1) * sizeof *names);
        size_t size = strlen(dir) + len + 2;
        if (grown) names = grown;
        if (!grown || !(names[count] = malloc(size))) nomem = true;
        else snprintf(names[count++], size, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (nomem) {
        dir_list_free(names, count);
        return opr_fail(OPR_ERR_NOMEM, "out of memory listing %s %s", what, dir);
    }
    if (count) qsort(names, (size_t)count, sizeof *names, cmp_str);
    *paths = names;
    *n = count;
    return OPR_OK;
}
