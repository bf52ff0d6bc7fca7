/* p2p.c - point-to-point transfers: the route between two devices, the
 * cut-through time of bytes over it (summed latency + bytes / the route's
 * bottleneck bandwidth), and the transfer task, which holds the links it fills
 * (collective_impl.h, psim_coll_saturates; docs/simulator.md, "Collectives"). */
#include <math.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"
#include "sim/engine/collective_impl.h"

/* The route from src to dst and the cut-through time of bytes over it. */
static psim_status p2p_route(psim_cluster *c, int32_t src, int32_t dst, double bytes,
                             const int32_t **links, int32_t *nl, double *seconds) {
  *seconds = 0;
  if (src < 0 || src >= c->n_devices || dst < 0 || dst >= c->n_devices || !(bytes >= 0) ||
      !isfinite(bytes))
    return psim_error(PSIM_EINPUT, "transfer: %g bytes from device %d to %d (cluster has %d)",
                      bytes, src, dst, c->n_devices);
  PSIM_CHECK(psim_cluster_route(c, src, dst, links, nl));
  double bw = INFINITY;
  for (int32_t j = 0; j < *nl; j++) {
    const psim_link *l = &c->links[(*links)[j]];
    double b = psim_coll_link_bw(l);
    bw = b < bw ? b : bw;
    *seconds += l->latency_s;
  }
  if (*nl > 0 && bytes > 0)
    *seconds += bytes / bw;
  return PSIM_OK;
}

psim_status psim_p2p_time(psim_cluster *c, int32_t src, int32_t dst, double bytes,
                          double *seconds) {
  const int32_t *links;
  int32_t nl;
  return p2p_route(c, src, dst, bytes, &links, &nl, seconds);
}

psim_status psim_p2p_held_links(psim_cluster *c, int32_t src, int32_t dst, int32_t *held,
                                int32_t cap, int32_t *n) {
  const int32_t *links;
  int32_t nl;
  double t, bw = INFINITY;
  *n = 0;
  PSIM_CHECK(p2p_route(c, src, dst, 0, &links, &nl, &t));
  for (int32_t j = 0; j < nl; j++)
    bw = psim_coll_link_bw(&c->links[links[j]]) < bw ? psim_coll_link_bw(&c->links[links[j]]) : bw;
  for (int32_t j = 0; j < nl && *n < cap; j++)
    if (psim_coll_saturates(bw, psim_coll_link_bw(&c->links[links[j]])))
      held[(*n)++] = links[j];
  return PSIM_OK;
}

psim_status psim_p2p_add(psim_taskgraph *g, psim_cluster *c, int32_t src, int32_t dst, double bytes,
                         const psim_task_info *info, int32_t *entry, int32_t *exit) {
  double t;
  const int32_t *links;
  int32_t nl;
  PSIM_CHECK(p2p_route(c, src, dst, bytes, &links, &nl, &t));
  if (nl == 0) {
    PSIM_CHECK(psim_coll_add_barrier(g, info, src, entry));
    *exit = *entry;
    return PSIM_OK;
  }
  double bw = INFINITY; /* the route's bottleneck: the links the transfer fills */
  for (int32_t j = 0; j < nl; j++)
    bw = psim_coll_link_bw(&c->links[links[j]]) < bw ? psim_coll_link_bw(&c->links[links[j]]) : bw;
  int32_t res[64], *rp = nl <= 64 ? res : psim_malloc((size_t)nl * sizeof *rp), nh = 0;
  if (!rp)
    return psim_error(PSIM_ENOMEM, "transfer: out of memory");
  for (int32_t j = 0; j < nl; j++)
    if (psim_coll_saturates(bw, psim_coll_link_bw(&c->links[links[j]])))
      rp[nh++] = psim_res_link(c->n_devices, links[j]);
  psim_task_info ti = psim_coll_task_info(info, PSIM_TASK_TRANSFER, src);
  psim_status s = psim_tg_add_task(g, t, rp, nh, &ti, entry);
  if (rp != res)
    psim_free(rp);
  if (s == PSIM_OK)
    psim_tg_set_bytes(g, *entry, bytes);
  *exit = *entry;
  return s;
}
