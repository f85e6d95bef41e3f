/* Fills a table of function pointers from a library opened with dlopen (cuBLAS, NCCL):
 * each entry names a symbol and the offset of its field in the table. C and C++. */
#ifndef OPREG_OPC_DLSYMS_H
#define OPREG_OPC_DLSYMS_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct opc_dlsym {
    const char *name;
    size_t offset; /* of its field in the table */
} opc_dlsym;

/* Looks up n symbols of handle h (the library lib, for the message) into table. 0; or,
 * when one is missing, -1 with "LIB lacks NAME" in why, h closed and table partly
 * written (fill a scratch table and copy it once this succeeds). */
static inline int opc_dlsyms(void *h, const char *lib, const opc_dlsym *syms, size_t n, void *table, char *why,
                             size_t why_len)
{
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f) {
            snprintf(why, why_len, "%s lacks %s", lib, syms[i].name);
            dlclose(h);
            return -1;
        }
        memcpy((char *)table + syms[i].offset, &f, sizeof f); /* object to function pointer */
    }
    return 0;
}

#endif
