/* What one training step's graph saved, per op and chosen formulas, against saving every
 * input (the demos' closing table): fill it with opr_autograd_walk(loss,
 * saved_table_collect, &table) before the backward, then print it. */
#ifndef OPREG_EXAMPLES_SAVED_TABLE_H
#define OPREG_EXAMPLES_SAVED_TABLE_H

#include <opreg/opreg.h>

#include <stdint.h>

#define SAVED_TABLE_ROWS 32

typedef struct saved_row {
    char op[40], plan[160];
    int nodes;
    uint64_t saved, all_inputs; /* bytes: what the chosen formulas keep, what every input would */
} saved_row;

typedef struct saved_table {
    saved_row rows[SAVED_TABLE_ROWS]; /* one per (op, chosen formulas), in order of first sight */
    int n;
} saved_table;

/* opr_autograd_walk's callback (ud: a saved_table, zeroed first): adds the node to its
 * row; nodes past SAVED_TABLE_ROWS distinct rows are left out. */
void saved_table_collect(void *ud, const opr_node_info *info);

/* Prints the table under `title`, a row per (op, formulas) and the total with its share
 * of save-all; the columns as wide as their longest entry. */
void saved_table_print(const saved_table *t, const char *title);

#endif
