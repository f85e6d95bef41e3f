/* The GPT example's text and batches (see gpt_data.h). */
#include "gpt_data.h"

#include "gpt_ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

opr_status gpt_text_load(const char *path, gpt_text *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return gpt_fail(OPR_ERR_IO, "gpt: cannot open the text %s: %s", path, strerror(errno));
    unsigned char *bytes = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            unsigned char *grown = realloc(bytes, cap);
            if (!grown) {
                free(bytes);
                fclose(f);
                return gpt_fail(OPR_ERR_NOMEM, "gpt: out of memory reading %s", path);
            }
            bytes = grown;
        }
        size_t got = fread(bytes + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const bool failed = ferror(f);
    fclose(f);
    if (failed || n == 0) {
        free(bytes);
        return gpt_fail(failed ? OPR_ERR_IO : OPR_ERR_INVALID, "gpt: %s: %s", path, failed ? "read error" : "empty text");
    }
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++) seen[bytes[i]] = true;
    for (int c = 0; c < 256; c++) {
        out->token_of[c] = seen[c] ? out->vocab_size : -1;
        if (seen[c]) out->chars[out->vocab_size++] = (unsigned char)c;
    }
    out->tokens = malloc(n * sizeof *out->tokens);
    if (!out->tokens) {
        free(bytes);
        return gpt_fail(OPR_ERR_NOMEM, "gpt: out of memory for %zu tokens", n);
    }
    for (size_t i = 0; i < n; i++) out->tokens[i] = out->token_of[bytes[i]];
    out->n = (int64_t)n;
    free(bytes);
    return OPR_OK;
}

void gpt_text_free(gpt_text *t)
{
    free(t->tokens);
    t->tokens = NULL;
    t->n = 0;
}

opr_status gpt_text_batch(const gpt_text *t, gpt_rng *rng, int batch, int block, int64_t *x, int64_t *y)
{
    if (batch < 1 || block < 1 || t->n <= block)
        return gpt_fail(OPR_ERR_INVALID, "gpt: a batch of %d x %d from a text of %lld tokens (must be longer)", batch,
                        block, (long long)t->n);
    const uint64_t starts = (uint64_t)(t->n - block);
    for (int b = 0; b < batch; b++) {
        const int64_t s = (int64_t)(gpt_rng_next(rng) % starts);
        memcpy(x + (int64_t)b * block, t->tokens + s, (size_t)block * sizeof *x);
        memcpy(y + (int64_t)b * block, t->tokens + s + 1, (size_t)block * sizeof *y);
    }
    return OPR_OK;
}
