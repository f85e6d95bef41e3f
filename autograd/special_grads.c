/* The special-gradient switch: off is fast mode. Thread-local like grad mode, and read
 * once, when ag_record creates a node (opr_node.fast). */
#include "autograd.h"

static _Thread_local bool special_grads_off; /* zero-initialised: special gradients on */

bool opr_special_grads_set(bool enabled)
{
    bool prev = !special_grads_off;
    special_grads_off = !enabled;
    return prev;
}

bool opr_special_grads_enabled(void) { return !special_grads_off; }
