/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the checks and
 * planners here cannot report errors themselves (host->set_error belongs to each
 * plugin), so they write the message into a caller's buffer, `why`, which the plugin
 * then hands to set_error with "%s". */
#ifndef OPREG_OPC_WHY_H
#define OPREG_OPC_WHY_H

/* Room for any message written to why (longer ones are cut short). */
#define OPC_WHY_SIZE 256

#endif
