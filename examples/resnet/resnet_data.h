/* The image data set of the ResNet example, drawn by the program (nothing is
 * downloaded): 32x32 RGB images of one filled shape each, the class being the shape:
 * 0 disc, 1 square, 2 triangle, 3 plus sign. Each image has a random background
 * colour, a shape colour at least 0.4 away from it in every channel's mean, a random
 * centre and size (radius 7 to 13 pixels), and uniform noise of +-0.1. Image i of a
 * set depends only on (seed, i), so a training run and a test set never overlap when
 * their seeds differ. */
#ifndef OPREG_EXAMPLE_RESNET_DATA_H
#define OPREG_EXAMPLE_RESNET_DATA_H

#include <stdint.h>

#define RESNET_DATA_CLASSES 4
#define RESNET_DATA_SIZE 32

/* Draws images first .. first + n - 1 of the set `seed` into x (n x 3 x 32 x 32 values,
 * row-major [N, C, H, W]) and their classes into labels (n). */
void resnet_data_draw(uint64_t seed, int64_t first, int n, double *x, int64_t *labels);

#endif
