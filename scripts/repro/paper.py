"""What the KV-Direct paper (Li et al., SOSP'17) says about each figure we reproduce, in
its own words.

Every passage in double quotes is copied word for word from the paper
(../shared/papers/kv-direct-sosp17.txt; `source` names the section, figure or table it
comes from), and scripts/repro/check.py checks that each one is there. Targets the
project set itself are marked as ours ("our target: ..."), never as the paper's.
"""

ABSTRACT_180 = ("\"allow a single NIC KV-Direct to achieve up to 180 M key-value operations per second, "
                "equivalent to the throughput of tens of CPU cores\"")
ABSTRACT_TAIL = ("\"Compared with CPU based KVS implementation, KV-Direct improves power efficiency by 3x, "
                 "while keeping tail latency below 10 μ s.\"")
ABSTRACT_SCALE = ("\"KV-Direct can achieve near linear scalability with multiple NICs. With 10 programmable "
                  "NIC cards in a commodity server, we achieve 1.22 billion KV operations per second\"")

CLAIMS = {
    "fig06": ("Fig. 6", "§3.3.1",
              "\"As shown in Figure 6, for a certain inline threshold, the average memory access count "
              "increases with memory utilization, due to more hash collisions. Higher inline threshold shows "
              "a more steep growth curve of memory access count, so an optimal inline threshold can be found "
              "to minimize memory accesses under a given memory utilization.\""),
    "fig09": ("Fig. 9", "§5.1.1",
              "\"As shown in Figure 9a, when hash index ratio grows, more KV pairs can be stored in-line, "
              "yielding a lower average memory access time. Figure 9b shows the increase of memory accesses "
              "as more memory is utilized.\" \"For inline KVs, KV-Direct has close to 1 memory access per GET "
              "and close to 2 memory accesses per PUT under non-extreme memory utilizations.\" Our target "
              "(not the paper's numbers): about 1.1 lines per GET and 2.2 per PUT at 50 % utilization."),
    "fig10": ("Fig. 10", "§5.1.1",
              "\"As shown in Figure 10, the maximal achievable memory utilization drops under higher hash "
              "index ratio, because less memory is available for dynamic allocation. Consequently, aiming to "
              "accommodate the entire corpus in a given memory size, the hash index ratio has an upper "
              "bound.\""),
    "fig11": ("Fig. 11", "§5.1.1",
              "\"For inline KVs, KV-Direct has close to 1 memory access per GET and close to 2 memory "
              "accesses per PUT under non-extreme memory utilizations. GET and PUT for non-inline KVs have one "
              "additional memory access.\" \"Since the hash table of MemC3 and FaRM cannot support more than "
              "55% memory utilization for 10B KV size\""),
    "fig12": ("Fig. 12", "§5.1.2",
              "\"merging all 4 billion free slab slots in a 16 GiB vector requires 30 seconds on a single "
              "core, or only 1.8 seconds on 32 cores using radix sort\""),
    "fig13": ("Fig. 13", "§5.1.3, §5.2.2",
              "(a) \"With out-of-order execution, single-key atomics throughput improves by 191x and reaches "
              "the clock frequency bound of 180 Mops.\" (b) \"Under long-tail workload, the out-of-order "
              "execution engine merges up to\" about 15 % of \"operations on the most popular keys\""),
    "table2": ("Table 2", "§5.1.5 and Table 2",
               "\"Table 2 compares the throughput of atomic vector increment with two alternative approaches: "
               "(1) If each element is stored as a unique key, the bottleneck is the network to transfer the KV "
               "operations. (2) If the vector is stored as a large opaque value, retrieving the vector to the "
               "client also overwhelms the network.\" Table 2 gives 11.52 GB/s for vector update with return, "
               "2.09 for one key per element and 0.03-0.46 for fetching to the client."),
    "fig14": ("Fig. 14, Tables 5-6", "§5.1.4",
              "\"Under uniform workload, the caching effect of DRAM is negligible because its size is only 6% "
              "of host KVS memory. Under long-tail workload,\" about 30 % \"of memory accesses are served by "
              "the DRAM cache.\""),
    "fig15": ("Fig. 15", "§5.1.5 and the abstract",
              "\"Figure 15 shows that network batching increases network throughput by up to 4x, while keeping "
              "networking latency below 3.5 μ s.\" The abstract: " + ABSTRACT_TAIL),
    "fig16": ("Fig. 16", "§5.2.2 and the abstract",
              "\"Long-tail workload has higher throughput than uniform workload and able to reach the clock "
              "frequency bound of 180 Mops under read-intensive workload, or reach the network throughput "
              "bound for ≥ 62 B KV sizes.\" The abstract: " + ABSTRACT_180 + "."),
    "fig17": ("Fig. 17", "§5.2.4 and the abstract",
              "\"Without network batching, the tail latency ranges from 3~9 μ s depending on KV size, "
              "operation type and key distribution.\" The abstract: " + ABSTRACT_TAIL),
    "ycsb": ("Figs. 16-17 (YCSB)", "§5",
             "\"For system benchmark, we use YCSB workload\" with \"skewness 0.99\" for the long-tail "
             "workload. The paper runs read-intensive and write-intensive mixes; the other YCSB core "
             "workloads (C read only, D read latest, F read-modify-write) are ours. Workload E (scans) does "
             "not apply: KV-Direct has no scan operation."),
    "fig20": ("Fig. 20", "§6.2 and the abstract",
              ABSTRACT_SCALE + "; \"Under YCSB long-tail workload, the highest-loaded NIC has 1.5x load of the "
              "average\" \"Figure 20 shows that KV-Direct throughput scales almost linearly with the number of "
              "NICs on a server.\""),
    "peers": ("§5 comparison", "abstract and Table 3",
              ABSTRACT_180 + ". Table 3 lists MICA (24 cores) at 137 Mops GET, HERD'16 (12 cores) at 98.3 "
              "Mops GET and Memcached at 1.5 Mops."),
}


def claim(fid):
    """The paper's claim for figure `fid`: ref (figure number), source, text."""
    ref, source, text = CLAIMS[fid]
    return {"ref": ref, "source": source, "claim": text}
