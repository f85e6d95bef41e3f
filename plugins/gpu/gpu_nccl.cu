/* The collectives of registry/ops/dist.yaml on CUDA tensors, on NCCL, over the process
 * groups of the context's provider (the MPI plugin):
 *
 *  - NCCL is opened with dlopen on the first collective, as cuBLAS is: a machine
 *    without it loads the plugin and runs everything else. Without it a collective
 *    returns OPR_ERR_UNSUPPORTED with the reason, so that dispatch runs it on the CPU
 *    (the MPI kernels, on copies) where the fallback is on;
 *  - one communicator per group id and device, made on the group's first collective:
 *    rank 0's ncclGetUniqueId goes to every member through host->group_all_gather
 *    (the provider's MPI), then ncclCommInitRank. Group ids are never reused, so a
 *    communicator never outlives its group's members;
 *  - before the data moves, the members check that they run the same collective
 *    (plugins/common/opc_collective.h), through the same host call;
 *  - the collective runs on the device's stream, after the kernels before it, and the
 *    call waits for it against the provider's time-out: a peer that died makes it
 *    fail with a message (the communicator is aborted and made again next time),
 *    never hang.
 *
 * f32, f64, i64, i32 and bool (a byte, as ncclUint8); strided inputs are packed on the
 * device first; outputs are contiguous. gather_to, scatter_from, all_to_all_single,
 * send and recv are in gpu_nccl_p2p.cu, on NCCL's point to point.
 * HIP builds register nothing here (RCCL has the same API; not wired). The emulated
 * plugin runs this file against tests/gpu_emu's stand-in, an NCCL over MPI. */
#include "gpu_common.cuh"

#if defined(GPU_BACKEND_HIP) || !defined(GPU_HAVE_NCCL)

int gk_register_collective(opr_plugin *self)
{
    (void)self;
    return OPR_OK;
}
void gk_collective_shutdown(void) {}

#else

#include "gpu_nccl.cuh"

#include "../common/opc_collective.h"
#include "../common/opc_dlsyms.h"

#include <map>
#include <mutex>
#include <string>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <utility>
#include <vector>

namespace gk_nccl {

nccl_api nccl;
std::once_flag nccl_once;
char nccl_error[512] = "NCCL not loaded"; /* empty once loaded */
int nccl_version;

/* ncclAvg (the mean) came with NCCL 2.10. */
constexpr int kMinVersion = 21000;

void load_nccl()
{
    const char *env = getenv("OPREG_NCCL_LIBRARY"); /* a library of the user's choosing */
    const char *name = env && env[0] ? env : OPREG_NCCL_LIBRARY;
    if (!name[0]) {
        snprintf(nccl_error, sizeof nccl_error, "no NCCL library was found when this plugin was built "
                 "(OPREG_NCCL_LIBRARY names one)");
        return;
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h && name != env) h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl_error, sizeof nccl_error, "cannot load NCCL (%s): %s", name, dlerror());
        return;
    }
    static const opc_dlsym syms[] = {
        {"ncclGetVersion", offsetof(nccl_api, get_version)},
        {"ncclGetUniqueId", offsetof(nccl_api, get_unique_id)},
        {"ncclCommInitRank", offsetof(nccl_api, comm_init_rank)},
        {"ncclCommDestroy", offsetof(nccl_api, comm_destroy)},
        {"ncclCommAbort", offsetof(nccl_api, comm_abort)},
        {"ncclCommGetAsyncError", offsetof(nccl_api, comm_get_async_error)},
        {"ncclGetErrorString", offsetof(nccl_api, get_error_string)},
        {"ncclGetLastError", offsetof(nccl_api, get_last_error)},
        {"ncclAllReduce", offsetof(nccl_api, all_reduce)},
        {"ncclBroadcast", offsetof(nccl_api, broadcast)},
        {"ncclReduce", offsetof(nccl_api, reduce)},
        {"ncclAllGather", offsetof(nccl_api, all_gather)},
        {"ncclReduceScatter", offsetof(nccl_api, reduce_scatter)},
        {"ncclSend", offsetof(nccl_api, send)},
        {"ncclRecv", offsetof(nccl_api, recv)},
        {"ncclGroupStart", offsetof(nccl_api, group_start)},
        {"ncclGroupEnd", offsetof(nccl_api, group_end)},
    };
    nccl_api api;
    if (opc_dlsyms(h, name, syms, sizeof syms / sizeof syms[0], &api, nccl_error, sizeof nccl_error)) return;
    int v = 0;
    if (api.get_version(&v) != ncclSuccess || v < kMinVersion) {
        snprintf(nccl_error, sizeof nccl_error, "%s is NCCL %d.%d; the collectives need 2.10 or newer (ncclAvg)", name,
                 v / 10000, v / 100 % 100);
        dlclose(h);
        return;
    }
    nccl = api;
    nccl_version = v;
    nccl_error[0] = '\0';
}

/* Communicators by (group id, device ordinal). */
std::mutex comms_lock;
std::map<std::pair<int64_t, int>, ncclComm_t> comms;
/* Groups whose NCCL collective failed or timed out, and how: the communicator was
 * aborted, and a member that is only late would meet a new one out of step, so no
 * collective runs on the group again (the MPI plugin's groups break alike). */
std::map<int64_t, std::string> broken;
/* The world ranks of each group's members, in group rank order, learnt when its first
 * communicator was made. */
std::map<int64_t, std::vector<int32_t>> members;

double now_s()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

ncclDataType_t nccl_type(opr_dtype dt)
{
    return dt == OPR_F64 ? ncclFloat64 : dt == OPR_I64 ? ncclInt64 : dt == OPR_I32 ? ncclInt32 : dt == OPR_BOOL ? ncclUint8
                                                                                                   : ncclFloat32;
}

ncclComm_t existing_comm(int64_t group, int ordinal, char *why, size_t why_len)
{
    std::lock_guard<std::mutex> g(comms_lock);
    why[0] = '\0';
    auto b = broken.find(group);
    if (b != broken.end()) snprintf(why, why_len, "%s", b->second.c_str());
    auto it = comms.find(std::make_pair(group, ordinal));
    return it == comms.end() ? nullptr : it->second;
}

int fail_nccl(const coll *c, const char *where, ncclResult_t r)
{
    const char *last = nccl.get_last_error ? nccl.get_last_error(c->comm) : "";
    return GK_FAIL(c->k.call, OPR_ERR_BACKEND, "%s: NCCL error in %s: %s%s%s", c->what, where,
                   nccl.get_error_string(r), last && last[0] ? ": " : "", last ? last : "");
}

/* The members' signatures gathered and compared; then the group's communicator on this
 * device, made on first use from rank 0's id. */
int same_collective_and_comm(coll *c, int group_arg, bool any_rows)
{
    const opr_kernel_call *call = c->k.call;
    size_t bytes = (size_t)c->size + 1;
    char *all = (char *)calloc(bytes, OPC_COLL_SIG); /* every member's, then this one's */
    if (!all) return GK_FAIL(call, OPR_ERR_NOMEM, "%s: out of memory", c->what);
    char *mine = all + (size_t)c->size * OPC_COLL_SIG;
    opc_coll_describe_rows(call, group_arg, c->self, any_rows, mine);
    char why[640];
    int rc = gk_host->group_all_gather(call, c->group, mine, all, OPC_COLL_SIG, why, sizeof why);
    if (rc) rc = GK_FAIL(call, rc, "%s: %s", c->what, why);
    else if (opc_coll_mismatch(all, c->size, mine, c->what, why, sizeof why) >= 0)
        rc = GK_FAIL(call, OPR_ERR_INVALID, "%s", why);
    free(all);
    if (rc) return rc;

    const auto key = std::make_pair(c->group, c->k.ordinal);
    {
        std::lock_guard<std::mutex> g(comms_lock);
        auto it = comms.find(key);
        if (it != comms.end()) {
            c->comm = it->second;
            return OPR_OK;
        }
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    c->comm = nullptr;
    if (c->rank == 0) {
        ncclResult_t r = nccl.get_unique_id(&id);
        if (r != ncclSuccess) return fail_nccl(c, "ncclGetUniqueId", r); /* the others time out in the gather */
    }
    /* with the id, each member's world rank: dst / src arguments are world ranks */
    struct boot {
        ncclUniqueId id;
        int32_t world;
    } mine_boot;
    memset(&mine_boot, 0, sizeof mine_boot);
    mine_boot.id = id;
    int32_t world_size = 0;
    double timeout_s = 0;
    if ((rc = gk_host->group_info(call, 0, &mine_boot.world, &world_size, &timeout_s, why, sizeof why)))
        return GK_FAIL(call, rc, "%s: %s", c->what, why);
    boot *boots = (boot *)calloc((size_t)c->size, sizeof(boot));
    if (!boots) return GK_FAIL(call, OPR_ERR_NOMEM, "%s: out of memory", c->what);
    rc = gk_host->group_all_gather(call, c->group, &mine_boot, boots, sizeof(boot), why, sizeof why);
    std::vector<int32_t> world_ranks;
    if (!rc) {
        id = boots[0].id;
        for (int r = 0; r < c->size; r++) world_ranks.push_back(boots[r].world);
    }
    free(boots);
    if (rc) return GK_FAIL(call, rc, "%s: the NCCL bootstrap: %s", c->what, why);
    ncclComm_t comm = nullptr;
    ncclResult_t r = nccl.comm_init_rank(&comm, c->size, id, c->rank);
    if (r != ncclSuccess) return fail_nccl(c, "ncclCommInitRank", r);
    std::lock_guard<std::mutex> g(comms_lock);
    comms[key] = comm;
    members[c->group] = world_ranks;
    c->comm = comm;
    return OPR_OK;
}

int member_rank(int64_t group, int64_t world_rank)
{
    std::lock_guard<std::mutex> g(comms_lock);
    auto it = members.find(group);
    if (it == members.end()) return -1;
    for (size_t r = 0; r < it->second.size(); r++)
        if (it->second[r] == world_rank) return (int)r;
    return -1;
}

const char *nccl_load_error()
{
    std::call_once(nccl_once, load_nccl);
    return nccl_error;
}

/* Checks the call, finds or makes the group's communicator after the same-collective
 * check, and packs self into c->send (unless COLL_ROOT_SENDS and not the root). */
int coll_begin(const opr_kernel_call *call, int group_arg, int flags, coll *c)
{
    c->self = gk_arg_t(call, 0);
    c->group = gk_arg_i(call, group_arg);
    c->comm = nullptr;
    c->send = nullptr;
    c->root = 0;
    snprintf(c->what, sizeof c->what, "%s on group %lld", call->op, (long long)c->group);
    int rc = gk_begin(call, call->op, &c->k);
    if (rc) return rc;
    std::call_once(nccl_once, load_nccl);
    if (nccl_error[0]) return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "%s", nccl_error);
    if (c->self->numel > 0x7fffffff) return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "more than 2^31 - 1 elements");
    c->type = nccl_type(c->self->dtype);
    char why[512];
    if ((rc = gk_host->group_info(call, c->group, &c->rank, &c->size, &c->timeout_s, why, sizeof why)))
        return GK_FAIL(call, rc, "%s: %s", c->what, why);
    {
        std::lock_guard<std::mutex> g(comms_lock);
        auto b = broken.find(c->group);
        if (b != broken.end())
            return GK_FAIL(call, OPR_ERR_BACKEND, "%s: group %lld is broken: %s; it cannot be used again (exit, and let "
                           "the launcher restart the job)", c->what, (long long)c->group, b->second.c_str());
    }
    snprintf(c->what, sizeof c->what, "%s on group %lld (rank %d of %d, %s device %d)", call->op, (long long)c->group,
             c->rank, c->size, GPU_NAME, c->k.ordinal);
    if ((rc = same_collective_and_comm(c, group_arg, (flags & COLL_ANY_ROWS) != 0))) return rc;
    /* after the check, which compares the roots too: a member alone with a bad one
     * would leave the others waiting */
    if ((flags & COLL_ROOTED) && opc_coll_root(call, c->size, &c->root, why, sizeof why))
        return GK_FAIL(call, OPR_ERR_INVALID, "%s: %s", c->what, why);
    if ((flags & COLL_ROOT_SENDS) && c->rank != c->root) return OPR_OK;
    if (gk_is_contiguous(c->self)) {
        c->send = c->self->data;
        return OPR_OK;
    }
    int64_t strides[GK_MAXD];
    rc = gk_contiguous_copy(&c->k, c->self, &c->packed, strides);
    c->send = c->packed.p;
    return rc;
}

/* Waits for the collective just enqueued (r: what enqueuing it returned), polling the
 * stream and the communicator against the time-out. A failed or timed-out
 * communicator is aborted (NCCL then writes its buffers no more, so the host may free
 * them) and its group broken: every later NCCL collective on it fails at once. */
int coll_wait(coll *c, const char *where, ncclResult_t r)
{
    if (r != ncclSuccess && r != ncclInProgress) return fail_nccl(c, where, r);
    const double deadline = now_s() + c->timeout_s;
    long pause_ns = 1000;
    for (;;) {
        gpuError_t e = gpuStreamQuery(c->k.stream);
        if (e == gpuSuccess) return OPR_OK;
        if (e != gpuErrorNotReady) return gk_fail_gpu(&c->k, where, e);
        ncclResult_t async = ncclSuccess;
        nccl.comm_get_async_error(c->comm, &async);
        const bool late = now_s() > deadline;
        if ((async != ncclSuccess && async != ncclInProgress) || late) {
            int rc = late ? GK_FAIL(c->k.call, OPR_ERR_BACKEND,
                                    "%s: timed out after %g s waiting for the other members (one may have died, or "
                                    "not called the same collective; opr_dist_set_timeout sets the limit)",
                                    c->what, c->timeout_s)
                          : fail_nccl(c, where, async);
            {
                std::lock_guard<std::mutex> g(comms_lock);
                comms.erase(std::make_pair(c->group, c->k.ordinal));
                char how[160];
                snprintf(how, sizeof how, "%s %s on %s device %d", c->k.call->op,
                         late ? "timed out" : "failed", GPU_NAME, c->k.ordinal);
                broken.emplace(c->group, how);
            }
            /* stops NCCL's kernels and proxy: nothing writes the buffers once it returns */
            nccl.comm_abort(c->comm);
            return rc;
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, nullptr);
        if (pause_ns < 200000) pause_ns *= 2;
    }
}

/* The NCCL reduction of op on dtype dt into *r; false where NCCL has none (the bitwise
 * ones on i64 and i32, bxor on bool: PyTorch's NCCL backend refuses them too), for
 * OPR_ERR_UNSUPPORTED, so that dispatch runs the MPI kernel on host copies where the
 * CPU fallback is on. bool is a byte: sum, bor and max are any (ncclMax); prod, band
 * and min all (ncclMin). */
bool red_op(const char *op, opr_dtype dt, ncclRedOp_t *r)
{
    if (dt == OPR_BOOL) {
        if (!strcmp(op, "bxor")) return false;
        *r = (!strcmp(op, "prod") || !strcmp(op, "band") || !strcmp(op, "min")) ? ncclMin : ncclMax;
        return true;
    }
    if (op[0] == 'b') return false;
    *r = !strcmp(op, "max") ? ncclMax : !strcmp(op, "min") ? ncclMin : !strcmp(op, "mean") ? ncclAvg
         : !strcmp(op, "prod") ? ncclProd : ncclSum;
    return true;
}

/* red_op's refusal, before anything collective (every member refuses alike). */
int no_red_op(const opr_kernel_call *call, const char *op)
{
    return GK_FAIL(call, OPR_ERR_UNSUPPORTED, "%s: NCCL has no %s reduction of %s", call->op, op,
                   gk_arg_t(call, 0)->dtype == OPR_BOOL ? "bool" : "i64");
}

/* all_reduce(self, op, group) */
int k_all_reduce(const opr_kernel_call *call)
{
    ncclRedOp_t op;
    if (!red_op(call->args[1]->u.s, gk_arg_t(call, 0)->dtype, &op)) return no_red_op(call, call->args[1]->u.s);
    coll c;
    int rc = coll_begin(call, 2, 0, &c);
    if (rc) return rc;
    opr_tensor_view *out = call->outputs[0];
    ncclResult_t r = enqueue([&] {
        return nccl.all_reduce(c.send, out->data, (size_t)out->numel, c.type, op, c.comm, c.k.stream);
    });
    return coll_wait(&c, "ncclAllReduce", r);
}

/* all_gather(self, group): [size * n, ...] */
int k_all_gather(const opr_kernel_call *call)
{
    coll c;
    int rc = coll_begin(call, 1, 0, &c);
    if (rc) return rc;
    int64_t shape[GK_MAXD];
    char why[160];
    opc_coll_dim0_shape(c.self, c.size, 1, shape, why, sizeof why);
    if ((rc = gk_host->alloc_output(call, 0, c.self->ndim, shape))) return rc;
    void *recv = call->outputs[0]->data;
    ncclResult_t r = enqueue([&] {
        return nccl.all_gather(c.send, recv, (size_t)c.self->numel, c.type, c.comm, c.k.stream);
    });
    return coll_wait(&c, "ncclAllGather", r);
}

/* reduce_scatter(self, op, group): rows [rank * n, (rank + 1) * n) of the sum or mean */
int k_reduce_scatter(const opr_kernel_call *call)
{
    coll c;
    int rc = coll_begin(call, 2, 0, &c);
    if (rc) return rc;
    int64_t shape[GK_MAXD];
    char why[160];
    if (opc_coll_dim0_shape(c.self, c.size, 0, shape, why, sizeof why))
        return GK_FAIL(call, OPR_ERR_INVALID, "%s: %s", c.what, why);
    if ((rc = gk_host->alloc_output(call, 0, c.self->ndim, shape))) return rc;
    opr_tensor_view *out = call->outputs[0];
    ncclRedOp_t op;
    red_op(call->args[1]->u.s, out->dtype, &op); /* sum or mean, on floats */
    ncclResult_t r = enqueue([&] {
        return nccl.reduce_scatter(c.send, out->data, (size_t)out->numel, c.type, op, c.comm, c.k.stream);
    });
    return coll_wait(&c, "ncclReduceScatter", r);
}

/* broadcast_from(self, root, group): root's self everywhere */
int k_broadcast(const opr_kernel_call *call)
{
    coll c;
    int rc = coll_begin(call, 2, COLL_ROOTED | COLL_ROOT_SENDS, &c);
    if (rc) return rc;
    opr_tensor_view *out = call->outputs[0];
    const void *send = c.send ? c.send : out->data; /* only the root's is read */
    ncclResult_t r = enqueue([&] {
        return nccl.broadcast(send, out->data, (size_t)out->numel, c.type, c.root, c.comm, c.k.stream);
    });
    return coll_wait(&c, "ncclBroadcast", r);
}

/* reduce_to(self, root, op, group): the reduction on root, zeros on the others */
int k_reduce(const opr_kernel_call *call)
{
    ncclRedOp_t op;
    if (!red_op(call->args[2]->u.s, gk_arg_t(call, 0)->dtype, &op)) return no_red_op(call, call->args[2]->u.s);
    coll c;
    int rc = coll_begin(call, 3, COLL_ROOTED, &c);
    if (rc) return rc;
    opr_tensor_view *out = call->outputs[0];
    ncclResult_t r = enqueue([&] {
        return nccl.reduce(c.send, out->data, (size_t)out->numel, c.type, op, c.root, c.comm, c.k.stream);
    });
    if ((rc = coll_wait(&c, "ncclReduce", r))) return rc;
    if (c.rank != c.root)
        GK_TRY(&c.k, gpuMemsetAsync(out->data, 0, (size_t)out->numel * gk_dtype_size(out->dtype), c.k.stream));
    return OPR_OK;
}

} // namespace gk_nccl

using namespace gk_nccl;

int gk_register_collective(opr_plugin *self)
{
    /* a host without the kernel-time group services (before they came in 2.2) gets none */
    if (gk_host->struct_size < OPR_STRUCT_SIZE(opr_host_api, group_all_gather)) return OPR_OK;
    static const struct {
        const char *op;
        opr_kernel_fn fn;
    } kernels[] = {
        {"all_reduce", k_all_reduce}, {"all_gather", k_all_gather}, {"reduce_scatter", k_reduce_scatter},
        {"broadcast_from", k_broadcast}, {"reduce_to", k_reduce}, {"gather_to", k_gather_to},
        {"scatter_from", k_scatter_from}, {"all_to_all_single", k_all_to_all_single}, {"send", k_send},
        {"recv", k_recv},
    };
    for (const auto &k : kernels) {
        int rc = gk_register(self, k.op, GK_NUMERIC | GK_I32 | GK_BIT(OPR_BOOL), k.fn);
        if (rc) return rc;
    }
    return OPR_OK;
}

/* The communicators go with the last context (gpu_device.cu's plugin_shutdown). */
void gk_collective_shutdown(void)
{
    std::lock_guard<std::mutex> g(comms_lock);
    for (auto &kv : comms) nccl.comm_destroy(kv.second);
    comms.clear();
}

#endif
