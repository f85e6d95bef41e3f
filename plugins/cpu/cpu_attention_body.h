/* The typed body of cpu_attention.c, included once per dtype with
 *   AT       the element type (float, double)
 *   AT_SFX   the name suffix (f32, f64)
 *   AT_GEMM  its cblas_?gemm
 *   AT_EXP   its vector exp (cpu_vm.exp_f32, ...), in place
 * Every matrix is one batch's, row-major with unit column stride; q, k, v and dout are
 * read at the row strides d->ldq, ldk, ldv, ldo (the caller's att_matrix packs an
 * operand whose layout a GEMM cannot read), the results are contiguous. */
#define AT_CAT2(a, b) a##_##b
#define AT_CAT(a, b) AT_CAT2(a, b)
#define AT_FN(name) AT_CAT(name, AT_SFX)

/* Row i of scores s (n entries) plus the mask, with the causal keys (j > i) removed. */
static void AT_FN(att_mask_row)(AT *s, int64_t n, int64_t i, const att_mask *m, const char *mbase, bool causal)
{
    if (mbase) {
        const AT *mr = (const AT *)mbase + i * m->rs;
        for (int64_t j = 0; j < n; j++) s[j] += mr[j * m->cs];
    }
    if (causal)
        for (int64_t j = i + 1; j < n; j++) s[j] = -INFINITY;
}

/* One batch of the forward: attn = softmax(scale q k^T + mask), out = attn v,
 * lse[i] = log sum_j exp(scale q_i k_j + mask_ij). */
static void AT_FN(att_forward)(const att_dims *d, const AT *q, const AT *k, const AT *v, const att_mask *m,
                               const char *mbase, AT *attn, AT *lse, int64_t lse_stride, AT *out)
{
    const int64_t L = d->L, S = d->S, E = d->E, Ev = d->Ev;
    if (S > 0 && L > 0)
        AT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)L, (blasint)S, (blasint)E, (AT)d->scale, q,
                (blasint)d->ldq, k, (blasint)d->ldk, 0, attn, (blasint)S);
    _Pragma("omp parallel for if (L * S >= CPU_PAR_THRESHOLD)")
    for (int64_t i = 0; i < L; i++) {
        AT *s = attn + i * S;
        AT_FN(att_mask_row)(s, S, i, m, mbase, d->causal);
        AT mx = -INFINITY;
        for (int64_t j = 0; j < S; j++) mx = s[j] > mx ? s[j] : mx;
        for (int64_t j = 0; j < S; j++) s[j] -= mx;
        AT_EXP(S, s, s);
        double sum = 0;
        for (int64_t j = 0; j < S; j++) sum += s[j];
        for (int64_t j = 0; j < S; j++) s[j] = (AT)(s[j] / sum);
        lse[i * lse_stride] = (AT)(mx + log(sum));
    }
    if (L > 0 && Ev > 0)
        AT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)L, (blasint)Ev, (blasint)S, 1, attn,
                (blasint)(S ? S : 1), v, (blasint)d->ldv, 0, out, (blasint)Ev);
}

/* One batch of the fused backward, by blocks of ATT_ROWS query rows: each block's
 * probabilities are recomputed from lse (P = exp(scale q k^T + mask - lse)), then
 * dP = dout v^T + gattn, dS = P (dP - rowsum(P dP) + glse) scale,
 * dq = dS k, dk += dS^T q, dv += P^T dout. Under is_causal a block of rows ending at
 * i1 sees only keys j < i1. dq, dk, dv may be NULL (not wanted); dk and dv start at 0.
 * sb, db: scratch of ATT_ROWS * S each. */
static void AT_FN(att_backward)(const att_dims *d, const AT *q, const AT *k, const AT *v, const att_mask *m,
                                const char *mbase, const AT *lse, int64_t lse_stride, const AT *dout,
                                const att_rowgrad *ga, const char *gattn, const char *glse, AT *dq, AT *dk, AT *dv,
                                AT *sb, AT *db)
{
    const int64_t L = d->L, S = d->S, E = d->E, Ev = d->Ev;
    const blasint le = (blasint)(E ? E : 1), lq = (blasint)d->ldq, lk = (blasint)d->ldk, lv = (blasint)d->ldv,
                  lo = (blasint)d->ldo;
    const bool want_qk = dq || dk;
    for (int64_t i0 = 0; i0 < L; i0 += ATT_ROWS) {
        const int64_t rb = L - i0 < ATT_ROWS ? L - i0 : ATT_ROWS;
        const int64_t se = d->causal ? (S < i0 + rb ? S : i0 + rb) : S;
        if (se == 0) {
            if (dq) memset(dq + i0 * E, 0, (size_t)(rb * E) * sizeof(AT));
            continue;
        }
        AT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rb, (blasint)se, (blasint)E, (AT)d->scale,
                q + i0 * d->ldq, lq, k, lk, 0, sb, (blasint)se);
        if (want_qk && Ev > 0)
            AT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rb, (blasint)se, (blasint)Ev, 1,
                    dout + i0 * d->ldo, lo, v, lv, 0, db, (blasint)se);
        else if (want_qk)
            memset(db, 0, (size_t)(rb * se) * sizeof(AT));
        _Pragma("omp parallel for if (rb * se >= CPU_PAR_THRESHOLD)")
        for (int64_t r = 0; r < rb; r++) {
            const int64_t i = i0 + r;
            AT *s = sb + r * se, *dp = db + r * se;
            AT_FN(att_mask_row)(s, se, i, m, mbase, d->causal);
            const AT l = lse[i * lse_stride];
            for (int64_t j = 0; j < se; j++) s[j] -= l;
            AT_EXP(se, s, s);
            if (!want_qk) continue;
            if (gattn) {
                const AT *g = (const AT *)gattn + i * ga->rs;
                for (int64_t j = 0; j < se; j++) dp[j] += g[j * ga->cs];
            }
            double dsum = 0;
            for (int64_t j = 0; j < se; j++) dsum += (double)s[j] * dp[j];
            const AT shift = (AT)(glse ? ((const AT *)glse)[i * ga->lse_stride] - dsum : -dsum);
            for (int64_t j = 0; j < se; j++) dp[j] = (AT)(s[j] * (dp[j] + shift) * d->scale);
        }
        if (dq)
            AT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)rb, (blasint)E, (blasint)se, 1, db,
                    (blasint)se, k, lk, 0, dq + i0 * E, le);
        if (dk)
            AT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)se, (blasint)E, (blasint)rb, 1, db,
                    (blasint)se, q + i0 * d->ldq, lq, 1, dk, le);
        if (dv && Ev > 0)
            AT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)se, (blasint)Ev, (blasint)rb, 1, sb,
                    (blasint)se, dout + i0 * d->ldo, lo, 1, dv, (blasint)(Ev ? Ev : 1));
    }
}

#undef AT_FN
#undef AT_CAT
#undef AT_CAT2
