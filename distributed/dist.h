/* Private definitions of the distributed layer: process groups over a plugin's provider. */
#ifndef OPREG_DISTRIBUTED_DIST_H
#define OPREG_DISTRIBUTED_DIST_H

#include "../core/core.h"

#include <opreg/dist.h>

/* The context's group provider, or NULL with OPR_ERR_NOT_FOUND and a message saying
 * what to load. */
const opr_group_provider *dist_provider(opr_ctx *ctx);
/* Fails with "WHAT: WHY" (rc, a positive one becoming OPR_ERR_BACKEND). */
int dist_fail(int rc, const char *what, const char *why);

#endif
