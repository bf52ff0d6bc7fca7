/* sweep_impl.h - private to search/sweep/: reading a generated model's options. */
#ifndef PSIM_SWEEP_IMPL_H
#define PSIM_SWEEP_IMPL_H

#include "search/sweep/sweep.h"
#include "sim/core/json.h"

/* Reads m->gen (the "options" object of a generated model, whose family is
 * m->def) into m->opts through the family registry (models/registry.h): an
 * option the family does not take, a wrong type or a number out of range is
 * refused with its JSON path, as `plansim model` refuses it. The model's name
 * defaults to its label. */
psim_status psim_sweep_gen_options(psim_jctx *c, psim_sweep_model *m);

#endif
