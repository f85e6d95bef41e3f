/* The training text of the GPT example: bytes as tokens over the text's own alphabet,
 * and the random batches cut from it. */
#ifndef OPREG_EXAMPLE_GPT_DATA_H
#define OPREG_EXAMPLE_GPT_DATA_H

#include "gpt_rng.h"

#include <opreg/opreg.h>

typedef struct gpt_text {
    int vocab_size;        /* distinct bytes of the text */
    unsigned char chars[256]; /* token -> byte, in increasing byte order (Python's sorted(set(text))) */
    int token_of[256];     /* byte -> token, -1 for bytes the text lacks */
    int64_t *tokens;       /* the text as tokens */
    int64_t n;
} gpt_text;

/* Reads the file at path. OPR_ERR_IO when it can't be read, OPR_ERR_INVALID when it is
 * empty; gpt_error() says which. Free with gpt_text_free. */
opr_status gpt_text_load(const char *path, gpt_text *out);
/* Frees the tokens of a loaded text. */
void gpt_text_free(gpt_text *t);

/* One batch: for b < batch, start_b = gpt_rng_next(rng) % (n - block) (drawn in
 * order), x[b, :] = tokens[start_b .. start_b + block), y[b, :] the same shifted by one
 * (the next character to predict). x and y hold batch * block entries. The text must
 * be longer than block (OPR_ERR_INVALID otherwise). */
opr_status gpt_text_batch(const gpt_text *t, gpt_rng *rng, int batch, int block, int64_t *x, int64_t *y);

#endif
