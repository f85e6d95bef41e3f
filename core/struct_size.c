/* struct_size on the structs of the public API (opreg.h). A struct only grows at the
 * end, so a program built against an older header hands in a shorter one: the library
 * accepts any size from the first version's up, reads only the bytes the caller's size
 * covers (the rest count as zero) and writes only those. */
#include "core.h"

#include <string.h>

bool opr_struct_read(void *dst, size_t dst_size, const void *src, size_t minimum, size_t *given)
{
    memset(dst, 0, dst_size);
    memcpy(given, src, sizeof *given); /* every such struct starts with its size_t struct_size */
    if (*given < minimum) return false;
    memcpy(dst, src, *given < dst_size ? *given : dst_size);
    return true;
}

int opr_struct_in(void *dst, size_t dst_size, const void *src, size_t minimum, const char *who, const char *type)
{
    size_t given;
    if (!src) {
        memset(dst, 0, dst_size);
    } else if (!opr_struct_read(dst, dst_size, src, minimum, &given)) {
        return opr_fail(OPR_ERR_INVALID, "%s: %s.struct_size is %zu, less than the %zu of its first version "
                        "(set it to sizeof(%s))", who, type, given, minimum, type);
    }
    *(size_t *)dst = dst_size;
    return OPR_OK;
}

int opr_struct_out(void *dst, const void *src, size_t src_size, size_t minimum, const char *who, const char *type)
{
    size_t room = *(const size_t *)dst;
    if (room < minimum)
        return opr_fail(OPR_ERR_INVALID, "%s: %s.struct_size is %zu, less than the %zu of its first version "
                        "(set it to sizeof(%s))", who, type, room, minimum, type);
    /* the caller's struct_size stays: it says what the caller's struct holds */
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
           (room < src_size ? room : src_size) - sizeof(size_t));
    return OPR_OK;
}
