/*
 * dpdk-sys C shim: out-of-line copies of DPDK's static-inline functions and
 * macros, so that Rust can call them. Every function is a one-line forwarder;
 * semantics are exactly those of the DPDK function named in the comment.
 */
#ifndef DPDK_SYS_SHIM_H
#define DPDK_SYS_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

/* ethdev fast path */
uint16_t dpdk_shim_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t dpdk_shim_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

/* mbuf */
struct rte_mbuf *dpdk_shim_pktmbuf_alloc(struct rte_mempool *mp);
int dpdk_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);
void dpdk_shim_pktmbuf_free(struct rte_mbuf *m);
void dpdk_shim_pktmbuf_reset(struct rte_mbuf *m);
void *dpdk_shim_pktmbuf_mtod(struct rte_mbuf *m);
char *dpdk_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *dpdk_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *dpdk_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int dpdk_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t dpdk_shim_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_tailroom(const struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t dpdk_shim_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_nb_segs(const struct rte_mbuf *m);
/* Sets data_len and pkt_len of a single-segment mbuf. */
void dpdk_shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
int dpdk_shim_pktmbuf_is_contiguous(const struct rte_mbuf *m);
struct rte_mempool *dpdk_shim_pktmbuf_pool(const struct rte_mbuf *m);

/* lcore / time / misc */
unsigned int dpdk_shim_lcore_id(void);
uint64_t dpdk_shim_rdtsc(void);
int dpdk_shim_errno(void);
void dpdk_shim_pause(void);
void dpdk_shim_prefetch0(const void *p);

/* ring (burst; MP/MC vs SP/SC follows the flags given to rte_ring_create) */
unsigned int dpdk_shim_ring_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n, unsigned int *free_space);
unsigned int dpdk_shim_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n, unsigned int *available);
unsigned int dpdk_shim_ring_count(const struct rte_ring *r);
unsigned int dpdk_shim_ring_free_count(const struct rte_ring *r);

#endif
