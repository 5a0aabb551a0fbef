/* See shim.h. Compiled with DPDK's own pkg-config cflags. */
#include "wrapper.h"

uint16_t dpdk_shim_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{ return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts); }
uint16_t dpdk_shim_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{ return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts); }

struct rte_mbuf *dpdk_shim_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int dpdk_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count)
{ return rte_pktmbuf_alloc_bulk(mp, mbufs, count); }
void dpdk_shim_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void dpdk_shim_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }
void *dpdk_shim_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
char *dpdk_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *dpdk_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *dpdk_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int dpdk_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
uint16_t dpdk_shim_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t dpdk_shim_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
uint16_t dpdk_shim_pktmbuf_data_len(const struct rte_mbuf *m) { return m->data_len; }
uint32_t dpdk_shim_pktmbuf_pkt_len(const struct rte_mbuf *m) { return m->pkt_len; }
uint16_t dpdk_shim_pktmbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }
void dpdk_shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len) { m->data_len = len; m->pkt_len = len; }
int dpdk_shim_pktmbuf_is_contiguous(const struct rte_mbuf *m) { return rte_pktmbuf_is_contiguous(m); }
struct rte_mempool *dpdk_shim_pktmbuf_pool(const struct rte_mbuf *m) { return m->pool; }

unsigned int dpdk_shim_lcore_id(void) { return rte_lcore_id(); }
uint64_t dpdk_shim_rdtsc(void) { return rte_rdtsc(); }
int dpdk_shim_errno(void) { return rte_errno; }
void dpdk_shim_pause(void) { rte_pause(); }
void dpdk_shim_prefetch0(const void *p) { rte_prefetch0(p); }

unsigned int dpdk_shim_ring_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n, unsigned int *free_space)
{ return rte_ring_enqueue_burst(r, obj_table, n, free_space); }
unsigned int dpdk_shim_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n, unsigned int *available)
{ return rte_ring_dequeue_burst(r, obj_table, n, available); }
unsigned int dpdk_shim_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned int dpdk_shim_ring_free_count(const struct rte_ring *r) { return rte_ring_free_count(r); }

/* Keep in sync with the hand-written constants in src/lib.rs. */
_Static_assert(RTE_ETH_RSS_IP == ((1ULL << 2) | (1ULL << 3) | (1ULL << 7) | (1ULL << 8) | (1ULL << 9) | (1ULL << 13) | (1ULL << 15)), "RTE_ETH_RSS_IP");
_Static_assert(RTE_ETH_RSS_UDP == ((1ULL << 5) | (1ULL << 11) | (1ULL << 17)), "RTE_ETH_RSS_UDP");
_Static_assert(RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE == (1ULL << 16), "RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE");
