/* Versions of the running library, as opposed to the header a program was built
 * with: a program can compare the two. */
#include "core.h"

#define STR_(x) #x
#define STR(x) STR_(x)

const char *opr_version(void)
{
    return STR(OPR_VERSION_MAJOR) "." STR(OPR_VERSION_MINOR) "." STR(OPR_VERSION_PATCH);
}

void opr_abi_version(unsigned *major, unsigned *minor)
{
    if (major) *major = OPR_ABI_MAJOR;
    if (minor) *minor = OPR_ABI_MINOR;
}
