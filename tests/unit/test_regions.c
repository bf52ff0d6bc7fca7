/* test_regions.c - region plans (sim/builder/regions.c): the regions of an op's shards of
 * one tensor from intervals tabled per dim and coordinate, the dims no op dim splits set
 * once (folding's locality check reads them for every shard of a stage, issue 19), and
 * psim_build_covers, the check's containment test. */
#include <check.h>
#include <stdlib.h>

#include "sim/builder/build_impl.h"

/* For random ops (up to 5 dims, degrees 1-5, extents 1-40 so that some do not divide
 * and some shards are empty) and tensors over a random subset of the op's dims in a
 * random order: every shard's region from the plan, shards visited in a random order
 * into one region (its unsplit dims set once by psim_build_plan_fixed), is
 * psim_build_tensor_region's, and the plan tables an interval per coordinate of every
 * split dim. */
START_TEST(plans_give_tensor_regions) {
  srand(23);
  for (int trial = 0; trial < 800; trial++) {
    psim_dim dims[PSIM_MAX_OP_DIMS] = {0};
    psim_op op = {0};
    psim_op_config cfg = {0};
    psim_tensor ten = {0};
    op.kind = PSIM_OP_MATMUL;
    op.n_dims = 1 + rand() % 5;
    int32_t shards = 1;
    for (int32_t i = 0; i < op.n_dims; i++) {
      dims[i].size = 1 + rand() % 40;
      op.dims[i].dim = i;
      cfg.degree[i] = 1 + rand() % 5;
      shards *= cfg.degree[i];
    }
    for (int32_t i = 0; i < op.n_dims && ten.rank < PSIM_MAX_RANK; i++)
      if (rand() % 3)
        ten.dims[ten.rank++] = i;
    for (int32_t j = ten.rank - 1; j > 0; j--) { /* a random layout order */
      int32_t k = rand() % (j + 1), d = ten.dims[j];
      ten.dims[j] = ten.dims[k];
      ten.dims[k] = d;
    }
    cfg.replicas = 1;
    cfg.n_devices = shards;
    psim_model m = {0};
    psim_strategy st = {0};
    m.dims = dims;
    m.n_dims = op.n_dims;
    m.ops = &op;
    m.n_ops = 1;
    m.tensors = &ten;
    m.n_tensors = 1;
    st.ops = &cfg;
    psim_build b = {0};
    b.m = &m;
    b.s = &st;
    psim_region_plan p;
    psim_build_region_plan_init(&b, 0, 0, &p);
    for (int32_t j = 0; j < ten.rank; j++)
      ck_assert(p.i[j] < 0 || p.lo[j] != NULL);
    psim_region r, want;
    psim_build_plan_fixed(&p, &r);
    for (int32_t n = 0; n < 2 * shards; n++) {
      int32_t shard = rand() % shards;
      psim_build_plan_region(&b, &p, 0, shard, 0, &r);
      psim_build_tensor_region(&b, 0, shard, 0, &want);
      for (int32_t j = 0; j < ten.rank; j++) {
        ck_assert_int_eq(r.lo[j], want.lo[j]);
        ck_assert_int_eq(r.hi[j], want.hi[j]);
      }
    }
    psim_build_region_plan_free(&p);
  }
}
END_TEST

/* psim_build_covers against the products it replaces, for random regions of ranks 1-4 with
 * bounds in [0, 6] (empty dims, equal bounds, nesting and partial overlaps all drawn). */
START_TEST(covers_is_overlap_equals_elems) {
  srand(53);
  int32_t seen[2] = {0, 0};
  for (int trial = 0; trial < 200000; trial++) {
    int32_t rank = 1 + rand() % 4;
    psim_region a, c;
    for (int32_t j = 0; j < rank; j++) {
      a.lo[j] = rand() % 7;
      a.hi[j] = rand() % 7;
      c.lo[j] = rand() % 7;
      c.hi[j] = rand() % 7;
    }
    bool want = psim_build_overlap(&a, &c, rank) == psim_build_region_elems(&c, rank);
    ck_assert_int_eq(psim_build_covers(&a, &c, rank), want);
    seen[want]++;
  }
  ck_assert_int_gt(seen[0], 1000);
  ck_assert_int_gt(seen[1], 1000);
}
END_TEST

int main(void) {
  Suite *s = suite_create("regions");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, plans_give_tensor_regions);
  tcase_add_test(tc, covers_is_overlap_equals_elems);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
