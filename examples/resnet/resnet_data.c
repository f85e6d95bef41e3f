/* The shapes data set of the ResNet example (resnet_data.h). */
#include "resnet_data.h"

#include "gpt/gpt_rng.h"

#include <math.h>
#include <stdbool.h>

/* Whether pixel (r, c) lies in shape `cls` of centre (cr, cc) and radius rad. */
static bool inside(int cls, double r, double c, double cr, double cc, double rad)
{
    const double dr = r - cr, dc = c - cc;
    switch (cls) {
    case 0: return dr * dr + dc * dc <= rad * rad;
    case 1: return fabs(dr) <= rad * 0.8 && fabs(dc) <= rad * 0.8;
    case 2: return dr >= -rad && dr <= rad * 0.7 && fabs(dc) <= (dr + rad) * 0.6;
    default: return (fabs(dr) <= rad && fabs(dc) <= rad * 0.3) || (fabs(dc) <= rad && fabs(dr) <= rad * 0.3);
    }
}

void resnet_data_draw(uint64_t seed, int64_t first, int n, double *x, int64_t *labels)
{
    const int S = RESNET_DATA_SIZE, plane = S * S;
    for (int i = 0; i < n; i++) {
        /* one stream per image: image i is the same whichever batch draws it */
        gpt_rng rng = gpt_rng_new(seed * 0x100000001B3ull + (uint64_t)(first + i) * 0x9E3779B97F4A7C15ull);
        const int cls = (int)(gpt_rng_next(&rng) % RESNET_DATA_CLASSES);
        double bg[3], fg[3], mean_bg = 0, mean_fg = 0;
        do {
            mean_bg = mean_fg = 0;
            for (int ch = 0; ch < 3; ch++) {
                bg[ch] = gpt_rng_uniform(&rng);
                fg[ch] = gpt_rng_uniform(&rng);
                mean_bg += bg[ch] / 3;
                mean_fg += fg[ch] / 3;
            }
        } while (fabs(mean_bg - mean_fg) < 0.4);
        const double rad = 7 + 6 * gpt_rng_uniform(&rng);
        const double cr = rad + (S - 2 * rad) * gpt_rng_uniform(&rng), cc = rad + (S - 2 * rad) * gpt_rng_uniform(&rng);
        double *img = x + (int64_t)i * 3 * plane;
        for (int r = 0; r < S; r++)
            for (int c = 0; c < S; c++) {
                const bool in = inside(cls, r + 0.5, c + 0.5, cr, cc, rad);
                for (int ch = 0; ch < 3; ch++)
                    img[ch * plane + r * S + c] = (in ? fg[ch] : bg[ch]) + 0.2 * (gpt_rng_uniform(&rng) - 0.5);
            }
        labels[i] = cls;
    }
}
