/* The demos' table of saved bytes per op (saved_table.h). */
#include "saved_table.h"

#include <stdio.h>
#include <string.h>

void saved_table_collect(void *ud, const opr_node_info *info)
{
    saved_table *t = ud;
    saved_row *r = NULL;
    for (int i = 0; i < t->n && !r; i++)
        if (!strcmp(t->rows[i].op, info->op) && !strcmp(t->rows[i].plan, info->plan)) r = &t->rows[i];
    if (!r && t->n < SAVED_TABLE_ROWS) {
        r = &t->rows[t->n++];
        memset(r, 0, sizeof *r);
        snprintf(r->op, sizeof r->op, "%s", info->op);
        snprintf(r->plan, sizeof r->plan, "%s", info->plan);
    }
    if (!r) return;
    r->nodes++;
    r->saved += info->saved_bytes;
    r->all_inputs += info->all_inputs_bytes;
}

void saved_table_print(const saved_table *t, const char *title)
{
    int op_w = (int)strlen("total"), plan_w = (int)strlen("chosen formulas");
    for (int i = 0; i < t->n; i++) {
        if ((int)strlen(t->rows[i].op) > op_w) op_w = (int)strlen(t->rows[i].op);
        if ((int)strlen(t->rows[i].plan) > plan_w) plan_w = (int)strlen(t->rows[i].plan);
    }
    printf("\n%s\n", title);
    printf("  %-*s %-5s %-*s %12s %14s\n", op_w, "op", "nodes", plan_w, "chosen formulas", "saved bytes",
           "save-all bytes");
    unsigned long long saved = 0, all = 0;
    for (int i = 0; i < t->n; i++) {
        const saved_row *r = &t->rows[i];
        printf("  %-*s %-5d %-*s %12llu %14llu\n", op_w, r->op, r->nodes, plan_w, r->plan,
               (unsigned long long)r->saved, (unsigned long long)r->all_inputs);
        saved += r->saved;
        all += r->all_inputs;
    }
    printf("  %-*s %-5s %-*s %12llu %14llu  (%.0f%% of save-all)\n", op_w, "total", "", plan_w, "", saved, all,
           all ? 100.0 * (double)saved / (double)all : 0.0);
}
