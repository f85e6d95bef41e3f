/* CPU backend entry points. The probe always succeeds (score 10): the CPU is the
 * reference backend every machine has. */
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <pthread.h>
#include <stdio.h>

/* Contexts may be created on several threads at once, each running this init. The
 * host table the registrations go through is the init's, so inits take turns (a lock
 * held for the whole init; thread-local storage would do too, but LeakSanitizer's
 * tracer crashes on the TLS of a dlopen'ed module); kernels get the host from their
 * call. The vector loops are chosen once per process. */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static const opr_host_api *init_host;
static pthread_once_t vmath_once = PTHREAD_ONCE_INIT;

int cpu_register_full(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, void *data,
                      bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len))
{
    opr_kernel_desc d = {
        .struct_size = sizeof d, .op = op, .device = "cpu", .dtypes = dtypes, .fn = fn, .data = data, .supports = supports,
    };
    return init_host->register_kernel(self, &d);
}

int cpu_register_data(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn, void *data)
{
    return cpu_register_full(self, op, dtypes, fn, data, NULL);
}

int cpu_register_supports(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn,
                          bool (*supports)(const opr_kernel_call *call, char *why, size_t why_len))
{
    return cpu_register_full(self, op, dtypes, fn, NULL, supports);
}

int cpu_register(opr_plugin *self, const char *op, uint32_t dtypes, opr_kernel_fn fn)
{
    return cpu_register_data(self, op, dtypes, fn, NULL);
}

int cpu_init_error(const char *msg)
{
    init_host->set_error(NULL, "%s", msg);
    return OPR_ERR_INVALID;
}

OPR_PLUGIN_EXPORT int opr_plugin_probe(char *why, size_t why_len)
{
    if (why && why_len) snprintf(why, why_len, "host CPU");
    return 10;
}

static int register_all(const opr_host_api *host, opr_plugin *self)
{
    /* Rough figures for a current x86 core pair with OpenBLAS; the cost model only
     * compares candidates, so the ratios matter more than the absolute values. */
    opr_device_desc dev = {
        .struct_size = sizeof dev, .name = "cpu", .count = 1,
        .flops_per_s = 50e9, .bytes_per_s = 10e9, .launch_ns = 200,
    };
    int rc = host->register_device(self, &dev);
    if (rc) return rc;
    int (*const families[])(opr_plugin *) = {
        cpu_register_elementwise, cpu_register_reduce, cpu_register_reduce_extreme, cpu_register_softmax,
        cpu_register_linalg, cpu_register_index, cpu_register_sort, cpu_register_factory, cpu_register_grad,
        cpu_register_backward, cpu_register_segment, cpu_register_convert, cpu_register_nn, cpu_register_norm,
        cpu_register_loss, cpu_register_attention, cpu_register_conv, cpu_register_pool,
        cpu_register_batch_norm,
        cpu_register_pointwise, cpu_register_scatter, cpu_register_optim, cpu_register_shape, cpu_register_scan,
        cpu_register_random, cpu_register_embedding_bag,
        cpu_register_grid_sample,
        cpu_register_adv_index,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if ((rc = families[i](self)) != OPR_OK) return rc;
    return OPR_OK;
}

OPR_PLUGIN_EXPORT int opr_plugin_init(const opr_host_api *host, opr_plugin *self)
{
    self->abi_major = OPR_ABI_MAJOR;
    self->abi_minor = OPR_ABI_MINOR;
    self->name = "cpu";
    self->version = "0.1.0";
    if (host->abi_major != OPR_ABI_MAJOR) return OPR_ERR_ABI;
    if (pthread_once(&vmath_once, cpu_vmath_init)) return OPR_ERR_BACKEND;
    pthread_mutex_lock(&init_lock);
    init_host = host;
    int rc = register_all(host, self);
    init_host = NULL;
    pthread_mutex_unlock(&init_lock);
    return rc;
}
