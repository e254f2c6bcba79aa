#include <string.h>
/* test_plan.c — strategy SPEC parsing and resolution against mesh sizes. */
#include "ir.h"
#include "test.h"

static int parse_resolve(const char *spec, int ndev, Plan *p, char *err) {
  plan_default(p);
  if (plan_parse_spec(spec, p, err, 256)) return -1;
  return plan_resolve(p, ndev, err, 256);
}

int main(void) {
  Plan p;
  char err[256], s[256];

  ASSERT(0, parse_resolve("dp=2,tp=2", 4, &p, err));
  ASSERT(2, p.dp);
  ASSERT(2, p.tp);

  /* dp absorbs what the other axes leave. */
  ASSERT(0, parse_resolve("tp=2,pp=2", 8, &p, err));
  ASSERT(2, p.dp);
  plan_str(&p, s, sizeof s);
  ASSERT_STR("dp=2,tp=2,pp=2,schedule=1f1b", s);

  ASSERT(0, parse_resolve("tp2d=2x2", 8, &p, err));
  ASSERT(2, p.tp2d);
  ASSERT(2, p.dp);

  /* sp=ring takes what is left when dp is given. */
  ASSERT(0, parse_resolve("dp=2,sp=ring", 8, &p, err));
  ASSERT(4, p.sp);
  ASSERT(SP_RING, p.sp_kind);
  ASSERT(0, parse_resolve("sp=ring:2,tp=2", 8, &p, err));
  ASSERT(2, p.sp);
  ASSERT(2, p.dp);

  ASSERT(0, parse_resolve("pp=4,schedule=interleaved:3", 4, &p, err));
  ASSERT(SCHED_INTERLEAVED, p.schedule);
  ASSERT(3, p.vchunks);
  ASSERT(0, parse_resolve("dp=4,zero=3,recompute=selective", 4, &p, err));
  ASSERT(3, p.zero);
  ASSERT(RECOMPUTE_SELECTIVE, p.recompute);
  ASSERT(0, parse_resolve("pp=4:memory", 4, &p, err));
  ASSERT(1, p.balance_memory);
  ASSERT(0, p.nstage_layers);
  plan_str(&p, s, sizeof s);
  ASSERT_STR("dp=1,pp=4:memory,schedule=1f1b", s);
  ASSERT(-1, parse_resolve("pp=4:mem", 4, &p, err));
  /* interleaved chunk sizes: pp x V of them, the schedule given before or after */
  ASSERT(0, parse_resolve("pp=2:0.5+1.5+1+1,schedule=interleaved:2", 2, &p, err));
  ASSERT(4, p.nstage_layers);
  ASSERT(50, p.stage_frac[0]);
  ASSERT(1, p.stage_layers[1]);
  plan_str(&p, s, sizeof s);
  ASSERT_STR("dp=1,pp=2:0.5+1.5+1+1,schedule=interleaved:2", s);
  ASSERT(0, parse_resolve("schedule=interleaved:3,pp=2:1+1+1+1+1+1", 2, &p, err));
  ASSERT(6, p.nstage_layers);
  ASSERT(-1, parse_resolve("pp=2:2+2,schedule=interleaved:2", 2, &p, err));
  ASSERT(1, strstr(err, "interleaved:2 has 4 chunks, but 2 stage sizes are given") != NULL);
  ASSERT(-1, parse_resolve("pp=2:1+1+1+1,schedule=interleaved:3", 2, &p, err));
  ASSERT(1, strstr(err, "interleaved:3 has 6 chunks, but 4 stage sizes are given") != NULL);
  ASSERT(-1, parse_resolve("pp=2:1+1+1+1,schedule=1f1b", 2, &p, err));
  ASSERT(1, strstr(err, "pp=2 gives 4 stage sizes for 2 stages") != NULL);
  ASSERT(-1, parse_resolve("pp=2:1+1+1", 2, &p, err));
  ASSERT(1, strstr(err, "gives 3 stage sizes for 2 stages") != NULL);
  /* recompute per pipeline stage */
  ASSERT(0, parse_resolve("pp=3,recompute=full+selective+none", 3, &p, err));
  ASSERT(RECOMPUTE_FULL, p.recompute);
  ASSERT(RECOMPUTE_FULL, plan_recompute_at(&p, 0));
  ASSERT(RECOMPUTE_SELECTIVE, plan_recompute_at(&p, 1));
  ASSERT(RECOMPUTE_NONE, plan_recompute_at(&p, 2));
  ASSERT(RECOMPUTE_SELECTIVE, plan_recompute_at(&p, 4)); /* interleaved: virtual stage 4 is on device 1 */
  plan_str(&p, s, sizeof s);
  ASSERT_STR("dp=1,pp=3,schedule=1f1b,recompute=full+selective+none", s);
  ASSERT(0, parse_resolve("recompute=full", 1, &p, err));
  ASSERT(RECOMPUTE_FULL, plan_recompute_at(&p, 0));
  ASSERT(0, parse_resolve("pp=2,recompute=auto+none", 2, &p, err));
  ASSERT(RECOMPUTE_AUTO, plan_recompute_at(&p, 0));
  ASSERT(RECOMPUTE_NONE, plan_recompute_at(&p, 1));
  plan_str(&p, s, sizeof s);
  ASSERT_STR("dp=1,pp=2,schedule=1f1b,recompute=auto+none", s);
  ASSERT(-1, parse_resolve("pp=2,recompute=full+none+none", 2, &p, err));
  ASSERT(1, strstr(err, "recompute gives 3 policies (one per pipeline stage) but the plan has 2 stages") != NULL);
  ASSERT(-1, parse_resolve("pp=2,recompute=full+", 2, &p, err));
  ASSERT(-1, parse_resolve("recompute=full+none", 1, &p, err));
  ASSERT(0, parse_resolve("auto", 16, &p, err));
  ASSERT(1, p.is_auto);
  ASSERT(0, parse_resolve("tp=2,sp=megatron", 2, &p, err));
  ASSERT(SP_MEGATRON, p.sp_kind);

  /* errors */
  ASSERT(-1, parse_resolve("dp=2,tp=4", 4, &p, err));
  ASSERT(1, strstr(err, "uses 8 devices but the mesh has 4") != NULL);
  ASSERT(-1, parse_resolve("tp=3", 4, &p, err));
  ASSERT(1, strstr(err, "does not divide the mesh size 4") != NULL);
  ASSERT(-1, parse_resolve("tp=2,tp2d=2x2", 8, &p, err));
  ASSERT(-1, parse_resolve("tp2d=2x4", 8, &p, err));
  ASSERT(1, strstr(err, "must be square") != NULL);
  ASSERT(-1, parse_resolve("sp=megatron", 4, &p, err));
  ASSERT(-1, parse_resolve("schedule=interleaved", 4, &p, err));
  ASSERT(-1, parse_resolve("zero=4", 4, &p, err));
  ASSERT(-1, parse_resolve("zero=1", 1, &p, err));
  ASSERT(-1, parse_resolve("dp=0", 1, &p, err));
  ASSERT(-1, parse_resolve("dp=x", 1, &p, err));
  ASSERT(-1, parse_resolve("dp", 1, &p, err));
  ASSERT(-1, parse_resolve("", 1, &p, err));
  ASSERT(-1, parse_resolve("pp=2,schedule=zigzag", 2, &p, err));
  ASSERT(-1, parse_resolve("sp=ring", 1, &p, err));
  ASSERT(-1, parse_resolve("recompute=some", 1, &p, err));
  ASSERT(-1, parse_resolve("dp=99999999999", 1, &p, err));

  /* devices */
  ASSERT(1, ir_device_lookup("H100_SXM") != NULL);
  ASSERT(1, ir_device_lookup("H100_SXM")->flops_bf16 == 989e12);
  ASSERT(1, ir_device_lookup("nope") == NULL);
  ASSERT(1, ir_device_lookup("H200_SXM")->mem_bw == 4800e9);
  ASSERT(1, ir_device_lookup("A100_SXM_40GB")->mem_bytes == 40e9);
  ASSERT(1, ir_device_lookup("A100_SXM")->flops_tf32 == 156e12);
  {
    Mesh me = {.nodes = 4, .per_node = 8, .ndev = 32, .device = ir_device_lookup("H100_SXM")};
    ir_mesh_defaults(&me);
    ASSERT(1, me.inter_bw == 50e9);   /* 8 NDR ports for 8 GPUs */
    ASSERT(1, me.intra_bw == 450e9);
    ASSERT(1, !strcmp(me.link, "nvswitch"));
    ASSERT(1, me.peak_bf16 == 989e12 && me.launch_s > 0 && me.inter_lat > me.intra_lat);
  }
  TEST_MAIN_END();
}
