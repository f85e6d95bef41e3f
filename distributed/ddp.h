/* Private to the data-parallel helper: its state, shared by its construction
 * (ddp.c: the buckets, the layout agreed by every member, the broadcast) and its step
 * (ddp_backward.c: the buckets' reductions, the step agreed with them). */
#ifndef OPREG_DISTRIBUTED_DDP_H
#define OPREG_DISTRIBUTED_DDP_H

#include "dist.h"

/* What the members gather to agree on (provider->all_gather_bytes), 64 bytes as the
 * collectives' own signatures (plugins/common/opc_collective.h), whose text it starts
 * with: a member running another collective at that point is named, not misread. */
#define DDP_RECORD_BYTES 64
#define DDP_TAG_BYTES 32

typedef struct bucket {
    opr_dtype dtype;
    int64_t numel;
    void *buf;           /* CPU: the gradients, packed; reduced in place */
    opr_tensor *dev;     /* another device: the same, a 1-d tensor there */
    int nparams, ready;
    bool started, done;  /* done: a poll saw it complete */
    bool abandoned;      /* its reduction failed in flight: MPI may still write buf, never freed */
    int64_t req;
} bucket;

struct opr_ddp {
    opr_ctx *ctx;
    const opr_group_provider *provider;
    opr_group group;
    opr_device device;    /* the parameters' */
    int n;
    opr_tensor **params;  /* retained */
    opr_ptr_index index;  /* of params */
    int *bucket_of;
    int64_t *offset;      /* in its bucket, in elements */
    bool *got;            /* this backward delivered its gradient */
    bucket *buckets;
    int nbuckets;
    int next_start;       /* buckets start in index order, on every member alike */
    int64_t step;         /* of the next opr_ddp_backward */
    opr_ddp_event *events;
    int nevents, cap;
    double t0;
    int error;            /* the first failure of this step on this member */
    char error_msg[1024];
    char broken[900];     /* set once a reduction failed in flight: every later call says it */
};

/* A record's tag: the text the record starts with, NUL-padded. */
void ddp_tag(char *record, const char *tag);
/* The first member whose record's tag differs from mine, with "rank R is running
 * something else (TEXT)" in why; -1 when none. */
int ddp_other_tag(const char *all, int size, const char *mine, char *why, size_t len);

#endif
