/* profile_colls.h — the collectives a device profile times, in its "coll"
 * entries' "op": written by `shardc calibrate` (driver/calib_bench.c on
 * MPI, runtime/cuda/rtc_calib.cu on NCCL), read and priced by the cost
 * model (passes/cost.c, which refuses any other name).  Header-only. */
#ifndef SHARDC_PROFILE_COLLS_H
#define SHARDC_PROFILE_COLLS_H

#define PROFILE_COLL_OPS "all_reduce", "all_gather", "reduce_scatter", "broadcast", "p2p"
enum { PROFILE_NCOLL_OPS = 5 };

#endif
