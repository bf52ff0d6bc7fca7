/* sweep_gen.c - a sweep's generated models: their options read through the
 * model-family registry (sweep_impl.h), so a sweep takes exactly the options
 * of `plansim model FAMILY`. */
#include <assert.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "search/sweep/sweep.h"
#include "search/sweep/sweep_impl.h"

/* Sets option x from the JSON value v (jctx c at its path). */
static psim_status set_option(psim_jctx *c, psim_sweep_model *m, const psim_gen_option *x,
                              const cJSON *v) {
  if (x->type == PSIM_GEN_STR && cJSON_IsString(v)) {
    psim_gen_set_string(&m->opts, m->def, x, v->valuestring);
  } else if (x->type == PSIM_GEN_BOOL && cJSON_IsBool(v)) {
    psim_gen_set_bool(&m->opts, m->def, x, cJSON_IsTrue(v));
  } else if (x->type == PSIM_GEN_DBL && cJSON_IsNumber(v) && psim_gen_in_range(x, v->valuedouble)) {
    psim_gen_set_double(&m->opts, m->def, x, v->valuedouble);
  } else if (x->type == PSIM_GEN_INT && cJSON_IsNumber(v) && psim_gen_in_range(x, v->valuedouble) &&
             fabs(v->valuedouble) < 9e15) { /* whole numbers a double holds exactly */
    psim_gen_set_int(&m->opts, m->def, x, (int64_t)v->valuedouble);
  } else {
    const char *want = x->type == PSIM_GEN_STR    ? "a string"
                       : x->type == PSIM_GEN_BOOL ? "true or false"
                                                  : psim_gen_range_text(x);
    return psim_jerr(c, "option '%s' must be %s", x->key, want);
  }
  return PSIM_OK;
}

psim_status psim_sweep_gen_options(psim_jctx *c, psim_sweep_model *m) {
  assert(m->def && m->gen && m->label);
  psim_gen_opts_init(m->def, &m->opts);
  psim_gen_set_string(&m->opts, m->def, psim_gen_option_find(m->def, "name"), m->label);
  size_t saved = psim_jctx_key(c, "options");
  const cJSON *v = NULL;
  cJSON_ArrayForEach(v, m->gen) {
    const psim_gen_option *x = psim_gen_option_find(m->def, v->string);
    size_t at = psim_jctx_key(c, v->string);
    psim_status st = x ? set_option(c, m, x, v)
                       : psim_jerr(c, "unknown option '%s' for %s (see 'plansim help model')",
                                   v->string, m->def->name);
    psim_jctx_pop(c, at);
    PSIM_CHECK(st);
  }
  psim_jctx_pop(c, saved);
  return PSIM_OK;
}
