/* Headers bindgen reads; kept in one place so build.rs and shim.c agree. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_common.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_malloc.h>
#include <rte_memzone.h>
#include <rte_ring.h>
#include <rte_telemetry.h>
#include <rte_pdump.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_version.h>

#include "shim.h"
