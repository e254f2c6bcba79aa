/* test_cost.c — the cost model (passes/cost.c): alpha-beta collectives per
 * algorithm (ring on one node, hierarchical when a slow network joins
 * nodes), GEMM efficiency by shape, and a compiled plan's simulated step:
 * the pipeline bubble shrinks with more microbatches, interleaving shrinks
 * it further, and the per-rank times add up; ranks sharing cores; special
 * functions in fused loops. */
#include <sys/stat.h>
#include <unistd.h>

#include "cost.h"
#include "passes.h"
#include "sema.h"
#include "test.h"
#include "compile.h"
#include "runtime/rt_optim.h"

static Module *compile(const char *path, const char *mesh, const char *strategy) {
  return test_compile(path, mesh, strategy);
}

/* Writes text to a fresh file from the mkstemp template path; 0 on success. */
static int write_temp(char *path, const char *text) {
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  fputs(text, f);
  return fclose(f);
}

/* A test GPU's profile: its FLOPs curves in fp32 and bf16 and the fp32 thin curve */
#define TEST_GPU_PROFILE_HEAD                                                                  \
  "{\"shardc_profile\": 1, \"device\": \"test GPU\", \"np\": 1, \"launch_s\": 0,\n"                 \
  "\"gemm\": [[1e6, 1e12], [1e9, 5e13]], \"gemm_bf16\": [[1e6, 2e12], [1e9, 4e14]],\n"            \
  "\"gemm_thin\": [[16, 1e12], [64, 2e13], [512, 5e13]],\n"

static HwModel h100(int nodes) {
  Mesh me = {.nodes = nodes, .per_node = 8, .ndev = 8 * nodes, .device = ir_device_lookup("H100_SXM")};
  ir_mesh_defaults(&me);
  HwModel hw;
  cost_hw_from_mesh(&hw, &me, DT_BF16);
  return hw;
}

/* the memsets of an instruction's first-written gradients */
static double zeroing(const HwModel *hw, const PInstr *in) {
  double t = 0;
  for (int k = 0; k < in->nzero; k++) t += cost_membound(hw, (double)in->zero_bytes[k], 0);
  return t;
}


/* Loads a profile of text; the error's text (err) or "" where it loaded. */
static const char *load_text(const char *text, HwModel *hw, char *err, int cap) {
  char path[] = "/tmp/shardc_test_prof_XXXXXX";
  err[0] = 0;
  if (write_temp(path, text)) return "(cannot write a temporary file)";
  if (cost_load_profile(hw, path, err, cap) == 0) err[0] = 0;
  else if (!err[0]) snprintf(err, (size_t)cap, "(an empty message)");
  remove(path);
  return err;
}

/* A profile refused with a message holding `want` and `where` (its position). */
static void refused(const char *text, const char *want, const char *where) {
  HwModel hw = h100(1);
  char err[512];
  load_text(text, &hw, err, sizeof err);
  test_checks++;
  if (!err[0] || !strstr(err, want) || (where && !strstr(err, where))) {
    fprintf(stderr, "%s:%d: profile %.60s: error \"%s\" lacks \"%s\" or \"%s\"\n", __FILE__, __LINE__, text,
            err, want, where ? where : "");
    test_failures++;
  }
}

/* A profile is input like a .shard file: out-of-range and non-finite
 * numbers, duplicated keys, text after the object, a profile of no
 * measurements and deep nesting are refused with the key and the position;
 * string escapes are read; files that are not regular are refused before
 * they are opened. */
static void profile_errors(void) {
  refused("{\"shardc_profile\": 1,\n \"launch_s\": -1}", "launch_s must be between 0 and 1 s, got -1",
          "line 2, column 14 (byte offset 35): ");
  refused("{\"shardc_profile\": 1, \"launch_s\": 1e999}", "the number 1e999 is out of range", "column 35");
  refused("{\"shardc_profile\": 1, \"launch_s\": inf}", "expected a number, found 'inf}' (in \"launch_s\")", NULL);
  refused("{\"shardc_profile\": 1, \"launch_s\": nan}", "expected a number, found 'nan}'", NULL);
  refused("{\"shardc_profile\": 1, \"launch_s\": 0x10}", "expected a number, found '0x10}'", NULL);
  refused("{\"shardc_profile\": 1, \"launch_graph_s\": 1e300}", "launch_graph_s must be between 0 and 1 s", NULL);
  refused("{\"shardc_profile\": 1, \"gemm\": [[1e6, 1e9], [1e9, 1e-300]]}",
          "gemm: point 2: the rate must be between 1000 and 1e+18 FLOP/s, got 1e-300", "column 44");
  refused("{\"shardc_profile\": 1, \"bw\": [[0, 1e9]]}", "bw: point 1: the bytes must be between 1 and 1e+15", NULL);
  refused("{\"shardc_profile\": 1, \"attention\": [[128, 0]]}", "the time must be between 1e-12 and 1000 s", NULL);
  refused("{\"shardc_profile\": 1, \"np\": 0, \"launch_s\": 1e-6}", "np must be a whole number from 1 to 1048576, got 0",
          NULL);
  refused("{\"shardc_profile\": 1, \"np\": 1e20}", "np must be a whole number from 1 to 1048576, got 1e20", NULL);
  refused("{\"shardc_profile\": 1, \"np\": 2.5}", "np must be a whole number", NULL);
  refused("{\"shardc_profile\": 1, \"cores\": -4}", "cores must be a whole number from 1 to 1048576, got -4", NULL);
  refused("{\"shardc_profile\": 1.9, \"launch_s\": 1e-6}", "shardc_profile must be 1", NULL);
  refused("{\"shardc_profile\": 1, \"coll\": [{\"op\": \"p2p\", \"n\": -2, \"t\": [[8, 1e-6]]}]}",
          "coll: n must be a whole number", NULL);
  refused("{\"shardc_profile\": 1, \"coll\": [{\"op\": \"p2p\", \"op\": \"x\"}]}", "\"op\" given twice (in \"coll\")",
          NULL);
  refused("{\"shardc_profile\": 1, \"launch_s\": 1e-6, \"launch_s\": -7}", "\"launch_s\" given twice",
          "column 41");
  refused("{\"shardc_profile\": 1, \"special\": {\"exp\": 1e-9, \"exp\": 2e-9}}", "\"exp\" given twice", NULL);
  refused("{\"shardc_profile\": 1, \"launch_s\": 1e-6} x", "text after the profile's closing '}': 'x'", "column 41");
  refused("{\"shardc_profile\": 1, \"launch_s\": 1e-6}{\"shardc_profile\": 1}", "text after the profile's closing",
          NULL);
  refused("{\"shardc_profile\": 1}", "holds no measurements", NULL);
  refused("{\"shardc_profile\": 1, \"coll\": [], \"gemm\": []}", "holds no measurements", NULL);
  /* (the mesh's own figures, a cpu's special functions, are not the profile's) */
  {
    Mesh cm = {.nodes = 1, .per_node = 1, .ndev = 1, .device = ir_device_lookup("cpu")};
    ir_mesh_defaults(&cm);
    HwModel cpu;
    cost_hw_from_mesh(&cpu, &cm, DT_F32);
    char err[512];
    load_text("{\"shardc_profile\": 1, \"device\": \"cpu\"}", &cpu, err, sizeof err);
    ASSERT(1, strstr(err, "holds no measurements") != NULL);
  }
  refused("", "the file is empty", NULL);
  refused("{\"shardc_profile\": 1, \"gemm\": [[1e6, 1e9]", "expected ',' or ']', found the end of the file (in \"gemm\")",
          "line 1, column 42");
  refused("{\"shardc_profile\": 1, \"device\": \"a\\qb\", \"launch_s\": 1e-6}", "an unknown escape '\\qb", NULL);
  refused("{\"shardc_profile\": 1, \"device\": \"ab", "a string without its closing '\"'", "column 33");
  /* nested past the limit: an error, not a stack overflow (a million levels) */
  {
    enum { DEEP = 1000000 };
    const char *head = "{\"shardc_profile\": 1, \"x\": ";
    size_t h = strlen(head);
    char *deep = malloc(h + 2 * DEEP + 2);
    memcpy(deep, head, h);
    memset(deep + h, '[', DEEP);
    memset(deep + h + DEEP, ']', DEEP);
    strcpy(deep + h + 2 * DEEP, "}");
    refused(deep, "arrays and objects nested too deep (limit is 64)", "byte offset 90");
    deep[h + DEEP] = 0; /* unclosed */
    refused(deep, "nested too deep", NULL);
    free(deep);
  }
  /* escapes in strings are read, not ended at the first quote */
  refused("{\"shardc_profile\": 1, \"x\": [[", "expected a number, found the end of the file (in \"x\")", NULL);
  {
    HwModel hw = h100(1);
    char err[512];
    load_text("{\"shardc_profile\": 1, \"device\": \"a \\\"b\\\" \\\\ \\u0021\\n\", \"launch_s\": 1e-6}", &hw, err,
              sizeof err);
    ASSERT_STR("", err);
    ASSERT_STR("a \"b\" \\ !?", hw.profile_device); /* (a control character kept as '?') */
    ASSERT_NEAR(1e-6, hw.launch_s, 1e-18);
  }
  /* the files: missing (strerror), a directory, a FIFO refused before a
   * blocking open, /dev/zero */
  {
    HwModel hw = h100(1);
    char err[512];
    ASSERT(-1, cost_load_profile(&hw, "/nonexistent/p.json", err, sizeof err));
    ASSERT_STR("cannot open it: No such file or directory", err);
    ASSERT(-1, cost_load_profile(&hw, "/tmp", err, sizeof err));
    ASSERT_STR("cannot open it: Is a directory", err);
    ASSERT(-1, cost_load_profile(&hw, "/dev/zero", err, sizeof err));
    ASSERT_STR("cannot open it: not a regular file (a character device)", err);
    char dir[] = "/tmp/shardc_test_fifo_XXXXXX";
    if (mkdtemp(dir)) {
      char *fifo = malloc(strlen(dir) + 8);
      sprintf(fifo, "%s/p", dir);
      if (!mkfifo(fifo, 0600)) {
        ASSERT(-1, cost_load_profile(&hw, fifo, err, sizeof err));
        ASSERT_STR("cannot open it: not a regular file (a pipe)", err);
        remove(fifo);
      }
      free(fifo);
      rmdir(dir);
    }
  }
  /* the calibrators' profiles keep loading: the H200's (GPU, no coll) */
  {
    HwModel hw = h100(1);
    char err[512];
    ASSERT(0, cost_load_profile(&hw, "../bench/results/profile-h200-2026-12-04.json", err, sizeof err));
    ASSERT_STR("NVIDIA H200", hw.profile_device);
  }
}

/* Shampoo's step (cost_shampoo_block, docs/cost-model.md): a block's
 * factor updates, direction and roots; a compiled plan's optimizer step
 * priced over the blocks, the placed one over the data ranks' share. */
static void shampoo_costs(void) {
  HwModel hw = h100(1);
  Optimizer o = {.kind = "shampoo", .block = 256, .precondition_every = 10, .root = RT_ROOT_EIGH};
  double roots, t = cost_shampoo_block(&hw, &o, 256, 128, &roots);
  /* eigh: 9k³ a factor at COST_EIGH_FLOPS (no profile), over 10 steps */
  ASSERT_NEAR(9.0 * (256.0 * 256 * 256 + 128.0 * 128 * 128) / COST_EIGH_FLOPS / 10, roots, 1e-12);
  hw.eigh_flops = 2 * COST_EIGH_FLOPS;
  double roots2;
  cost_shampoo_block(&hw, &o, 256, 128, &roots2);
  ASSERT_NEAR(roots / 2, roots2, 1e-12);
  /* the GEMMs: SYRKs at half their GEMMs, two direction GEMMs; fp32 on a
   * GPU at the plain fp32 rate where the plan's peak is bf16's */
  double g = COST_SYRK_OF_GEMM * (cost_gemm(&hw, 256, 256, 128) + cost_gemm(&hw, 128, 128, 256)) +
             cost_gemm(&hw, 256, 128, 256) + cost_gemm(&hw, 256, 128, 128);
  /* (a GPU's kernels also mirror the factors' triangles: a strided pass) */
  ASSERT_NEAR((hw.vec_flops > 0 && hw.peak > hw.vec_flops ? g * hw.peak / hw.vec_flops : g) +
                  cost_membound(&hw, 8.0 * (256 * 256 + 128 * 128), 0),
              t, 1e-15);

  /* a compiled plan: Shampoo's step costs more than AdamW's on the same
   * model, and spreading the blocks over 2 data ranks halves roughly its
   * share of them */
  Module *sh = compile("dist/gpt_shampoo.shard", "2", "dp=2");
  Module *ad = compile("../samples/gpt.shard", "2", "dp=2");
  Module *sh1 = compile("dist/gpt_shampoo.shard", "1", "dp=1");
  ASSERT(1, sh && ad && sh1);
  if (sh && ad && sh1) {
    HwModel c, c1;
    cost_hw_from_mesh(&c, sh->train.mesh, DT_F32);
    cost_hw_from_mesh(&c1, sh1->train.mesh, DT_F32);
    /* the cpu runtime keeps the factors' upper triangles only: no
     * mirroring pass */
    double rc, tc = cost_shampoo_block(&c, &o, 256, 128, &rc);
    ASSERT(1, tc > 0);
    ASSERT_NEAR(COST_SYRK_OF_GEMM * (cost_gemm(&c, 256, 256, 128) + cost_gemm(&c, 128, 128, 256)) +
                    cost_gemm(&c, 256, 128, 256) + cost_gemm(&c, 256, 128, 128),
                tc, 1e-15);
    CostResult rs, ra, r1;
    ASSERT(0, cost_module(sh, &c, &rs));
    ASSERT(0, cost_module(ad, &c, &ra));
    ASSERT(0, cost_module(sh1, &c1, &r1));
    ASSERT(1, rs.stage[0].step_s > ra.stage[0].step_s);
    ASSERT(1, rs.stage[0].step_s < 0.8 * r1.stage[0].step_s);
  }
}

/* Adafactor's step (cost_adafactor_elems): 10 passes and 4 square-root
 * times an element whole; tp's phases split the same work; a compiled plan
 * prices it above AdamW's 7 passes, on one rank and with the phases of
 * tp=2. */
static void adafactor_costs(void) {
  Module *af = compile("dist/gpt_adafactor.shard", "1", "dp=1");
  Module *ad = compile("../samples/gpt.shard", "1", "dp=1");
  Module *af2 = compile("dist/gpt_adafactor.shard", "2", "tp=2");
  ASSERT(1, af && ad && af2);
  if (!af || !ad || !af2) return;
  HwModel c;
  cost_hw_from_mesh(&c, af->train.mesh, DT_F32);
  const double e = 1e6;
  ASSERT_NEAR(cost_membound(&c, 40 * e, 20 * e) + 4 * e * c.special[COST_SF_SQRT],
              cost_adafactor_elems(&c, e, COST_AF_ALL), 1e-15);
  double sums = cost_adafactor_elems(&c, e, COST_AF_SUMS), sq = cost_adafactor_elems(&c, e, COST_AF_SQUARES),
         fin = cost_adafactor_elems(&c, e, COST_AF_FINISH);
  ASSERT(1, sums > 0 && sq > 0 && fin > sq);
  /* (each phase pays its own call) */
  ASSERT_NEAR(cost_adafactor_elems(&c, e, COST_AF_ALL), sums + sq + fin, 1e-5);
  CostResult rf, ra, r2;
  ASSERT(0, cost_module(af, &c, &rf));
  ASSERT(0, cost_module(ad, &c, &ra));
  ASSERT(0, cost_module(af2, &c, &r2));
  ASSERT(1, rf.stage[0].tail[COST_TAIL_OPT] > 1.5 * ra.stage[0].tail[COST_TAIL_OPT]);
  /* tp=2: each rank's half of the split tensors, in three phases */
  ASSERT(1, r2.stage[0].tail[COST_TAIL_OPT] > 0.3 * rf.stage[0].tail[COST_TAIL_OPT] &&
                r2.stage[0].tail[COST_TAIL_OPT] < 0.8 * rf.stage[0].tail[COST_TAIL_OPT]);
}

int main(void) {
  /* ring all-reduce inside a node: 2(n-1)a + 2(n-1)/n S/b */
  HwModel hw = h100(1);
  double S = 1 << 30, b = hw.intra_bw * hw.link_eff, a = hw.intra_lat;
  CostAlg alg;
  double t = cost_coll(&hw, "all_reduce", 8, 1, S, &alg);
  ASSERT(ALG_RING, alg);
  ASSERT_NEAR(14 * a + 2.0 * 7 / 8 * S / b, t, 1e-9);
  /* all-gather: (n-1)a + (n-1)/n S/b */
  ASSERT_NEAR(7 * a + 7.0 / 8 * S / b, cost_coll(&hw, "all_gather", 8, 1, S, NULL), 1e-9);
  /* bus bandwidth of a large all-reduce on 8 GPUs: ~0.8 of 450 GB/s (NCCL ~370) */
  double busbw = S / t * 2 * 7 / 8;
  ASSERT(1, busbw > 330e9 && busbw < 400e9);
  /* small messages: the tree's log-depth latency beats the ring's */
  HwModel hw16 = h100(16);
  cost_coll(&hw16, "all_reduce", 128, 1, 1024, &alg);
  ASSERT(ALG_TREE, alg);
  /* across 16 nodes, 8 ranks each: hierarchical (the inter-node ring on 1/8
   * of the data) beats a flat ring bounded by the NIC everywhere */
  double th = cost_coll(&hw16, "all_reduce", 128, 1, S, &alg);
  ASSERT(ALG_HIER, alg);
  double flat = 2 * 127 * hw16.inter_lat + 2.0 * 127 / 128 * S / (hw16.inter_bw * hw16.link_eff);
  ASSERT(1, th < flat);
  /* a tp group 8 apart spans nodes: slower than the same group inside one */
  ASSERT(1, cost_coll(&hw16, "all_reduce", 8, 8, S, NULL) >
                cost_coll(&hw16, "all_reduce", 8, 1, S, NULL) * 3);
  /* p2p: one message */
  ASSERT_NEAR(a + S / b, cost_coll(&hw, "p2p", 2, 1, S, NULL), 1e-9);
  /* a measured curve: interpolated inside it, the smallest message's time
   * below it, and beyond its largest the time grows with the bytes at the
   * largest's rate (not flat: Shampoo's 100 MB direction gather) */
  {
    HwModel hm = h100(1);
    CostColl *c = &hm.coll[hm.ncoll++];
    snprintf(c->op, sizeof c->op, "all_gather");
    c->nranks = 4;
    c->t.n = 2;
    c->t.x[0] = 1 << 20, c->t.y[0] = 2e-4;
    c->t.x[1] = 16 << 20, c->t.y[1] = 4e-3;
    ASSERT_NEAR(4e-3, cost_coll(&hm, "all_gather", 4, 1, 16 << 20, &alg), 1e-15);
    ASSERT(ALG_MEASURED, alg);
    ASSERT_NEAR(4e-3 * 6, cost_coll(&hm, "all_gather", 4, 1, 96 << 20, NULL), 1e-15);
    ASSERT_NEAR(2e-4, cost_coll(&hm, "all_gather", 4, 1, 1024, NULL), 1e-15);
    double mid = cost_coll(&hm, "all_gather", 4, 1, 4 << 20, NULL);
    ASSERT(1, mid > 2e-4 && mid < 4e-3);
  }

  /* GEMMs: a large one reaches ~75% of peak; a skinny one much less */
  double big = cost_gemm(&hw, 8192, 8192, 8192);
  double eff = 2.0 * 8192 * 8192 * 8192 / big / hw.peak;
  ASSERT(1, eff > 0.7 && eff < 0.8);
  double skinny = cost_gemm(&hw, 8, 8192, 8192);
  ASSERT(1, 2.0 * 8 * 8192 * 8192 / skinny / hw.peak < 0.2);
  /* memory-bound: bytes over ~88% of HBM bandwidth */
  ASSERT_NEAR(1e9 / (hw.mem_bw * 0.88) + hw.launch_s, cost_membound(&hw, 1e9, 0), 1e-9);

  /* compiled plans: the bubble grows with the stages at a fixed number of
   * microbatches, (p-1)/(m+p-1) */
  Module *m1 = compile("../samples/gpt.shard", "4", "pp=4,mb=4");
  Module *m2 = compile("../samples/gpt.shard", "2", "pp=2,mb=4");
  if (m1 && m2) {
    HwModel c;
    cost_hw_from_mesh(&c, m1->train.mesh, DT_F32);
    CostResult r1, r2;
    HwModel c2;
    cost_hw_from_mesh(&c2, m2->train.mesh, DT_F32);
    ASSERT(0, cost_module(m1, &c, &r1));
    ASSERT(0, cost_module(m2, &c2, &r2));
    ASSERT(4, r1.nstages);
    ASSERT(1, r1.bubble_frac > r2.bubble_frac);
    /* 1F1B with p stages and m microbatches: about (p-1)/(m+p-1) idle */
    ASSERT(1, r1.bubble_frac > 0.25 && r1.bubble_frac < 0.6);
    for (int k = 0; k < 4; k++) ASSERT(1, r1.stage[k].end_s <= r1.step_s + 1e-12);
    ASSERT(1, r1.model_flops > 0 && r1.tokens == 16 * 64);
  }
  /* a GPU's graphed step (the CUDA target, and pipelines whose messages
   * are NCCL groups, 1F1B's and interleaved's with Megatron's pairs):
   * every kernel at launch_graph_s where measured; one whose messages are
   * staged (pipe_mpi) runs eagerly */
  {
    Module *g1 = compile("../samples/gpt.shard", "1:H100_SXM", "dp=1");
    Module *g2 = compile("../samples/gpt.shard", "2:H100_SXM", "pp=2,mb=4");
    Module *g3 = compile("../samples/gpt.shard", "2:H100_SXM", "pp=2,mb=4,schedule=interleaved:2");
    if (g1 && g2 && g3) {
      ASSERT(0, g2->rprog[0]->pipe_mpi);
      ASSERT(0, g3->rprog[0]->pipe_mpi);
      ASSERT(1, g3->rprog[0]->pairs);
      HwModel e1, q1, e2, q2;
      cost_hw_from_mesh(&e1, g1->train.mesh, DT_F32);
      cost_hw_from_mesh(&e2, g2->train.mesh, DT_F32);
      e1.launch_s = e2.launch_s = 10e-6;
      q1 = e1;
      q2 = e2;
      q1.launch_graph_s = q2.launch_graph_s = 1e-6;
      CostResult a, b, c, d, e, f;
      ASSERT(0, cost_module(g1, &e1, &a));
      ASSERT(0, cost_module(g1, &q1, &b));
      ASSERT(0, cost_module(g2, &e2, &c));
      ASSERT(0, cost_module(g2, &q2, &d));
      ASSERT(0, cost_module(g3, &e2, &e));
      ASSERT(0, cost_module(g3, &q2, &f));
      /* hundreds of kernels a step, each 9 us cheaper */
      ASSERT(1, a.step_s - b.step_s > 300 * 9e-6);
      ASSERT(1, c.step_s - d.step_s > 300 * 9e-6);
      ASSERT(1, e.step_s - f.step_s > 300 * 9e-6);
      g3->rprog[0]->pipe_mpi = true; /* staged: eager */
      ASSERT(0, cost_module(g3, &q2, &f));
      ASSERT_NEAR(e.step_s, f.step_s, 1e-15);
    }
  }
  Module *mi = compile("../samples/gpt.shard", "2", "pp=2,mb=4,schedule=interleaved:2");
  Module *mf = compile("../samples/gpt.shard", "2", "pp=2,mb=4");
  if (mi && mf) {
    HwModel c;
    cost_hw_from_mesh(&c, mi->train.mesh, DT_F32);
    CostResult ri, rf;
    ASSERT(0, cost_module(mi, &c, &ri));
    ASSERT(0, cost_module(mf, &c, &rf));
    ASSERT(1, ri.bubble_frac < rf.bubble_frac);
  }
  /* ranks sharing cores: a profile measured 4 single-threaded ranks on 2
   * cores, bound round robin (ranks 0 and 2 on core 0, 1 and 3 on core 1).
   * pp=4: with stages 0 and 1 computing, each has a whole core (twice the
   * profile's rate); stages 0, 1, 2: 0 and 2 split core 0 (the profile's
   * rate), 1 has core 1 to itself; all four: the profile's rate.  pp=2 of
   * two ranks each (dp=2): stage 0 alone has both cores.  Dedicated
   * devices (cores unknown, or cores >= np) never speed up. */
  {
    HwModel sh = hw;
    sh.cores = 2;
    sh.profile_np = 4;
    double r[4];
    bool run01[4] = {1, 1, 0, 0}, run012[4] = {1, 1, 1, 0}, all[4] = {1, 1, 1, 1};
    cost_stage_rates(&sh, 4, 1, run01, r);
    ASSERT_NEAR(2.0, r[0], 1e-12);
    ASSERT_NEAR(2.0, r[1], 1e-12);
    cost_stage_rates(&sh, 4, 1, run012, r);
    ASSERT_NEAR(1.0, r[0], 1e-12);
    ASSERT_NEAR(2.0, r[1], 1e-12);
    ASSERT_NEAR(1.0, r[2], 1e-12);
    cost_stage_rates(&sh, 4, 1, all, r);
    for (int k = 0; k < 4; k++) ASSERT_NEAR(1.0, r[k], 1e-12);
    bool run0[2] = {1, 0};
    cost_stage_rates(&sh, 2, 2, run0, r);
    ASSERT_NEAR(2.0, r[0], 1e-12);
    cost_stage_rates(&sh, 2, 2, all, r);
    ASSERT_NEAR(1.0, r[1], 1e-12);
    sh.cores = 0;
    cost_stage_rates(&sh, 4, 1, run01, r);
    ASSERT_NEAR(1.0, r[0], 1e-12);
    sh.cores = 8;
    cost_stage_rates(&sh, 4, 1, run01, r);
    ASSERT_NEAR(1.0, r[0], 1e-12);
  }
  /* A pipeline's bubbles on shared cores: the stages that compute while
   * others wait run faster, so the step is shorter than on dedicated
   * devices of the profile's speed, and never shorter than its work spread
   * over all the cores; a plan without a pipeline keeps every rank busy
   * and its step does not change. */
  Module *ps = compile("../samples/gpt.shard", "4", "pp=4,mb=4");
  Module *pd = compile("../samples/gpt.shard", "4", "dp=4");
  ASSERT(1, ps && pd);
  if (ps && pd) {
    HwModel ded;
    cost_hw_from_mesh(&ded, ps->train.mesh, DT_F32);
    HwModel shr = ded;
    shr.cores = 2;
    shr.profile_np = 4;
    CostResult a, b;
    ASSERT(0, cost_module(ps, &ded, &a));
    ASSERT(0, cost_module(ps, &shr, &b));
    ASSERT(1, b.step_s < a.step_s * 0.95);
    double work = 0, tail = 0;
    for (int k = 0; k < 4; k++) {
      work += a.stage[k].busy_s;
      if (a.stage[k].step_s > tail) tail = a.stage[k].step_s;
    }
    /* all four ranks' work on 2 cores, each busy rank at most twice the
     * profile's rate: at least work / 4 (the dedicated floor) */
    ASSERT(1, b.step_s >= work / 4 - 1e-12);
    ASSERT_NEAR(a.stage[0].busy_s, b.stage[0].busy_s, 1e-12); /* the work itself is the same */
    ASSERT(0, cost_module(pd, &ded, &a));
    ASSERT(0, cost_module(pd, &shr, &b));
    ASSERT_NEAR(a.step_s, b.step_s, 1e-12);
  }
  /* A fused loop's special functions: each distinct call once per element
   * (GELU's tanh, in a loop that also adds the bias under 2D tensor
   * parallelism), charged at the profile's figure on top of its memory time */
  Module *mg = compile("../samples/gpt.shard", "4", "tp2d=2x2");
  ASSERT(1, mg != NULL);
  if (mg) {
    HwModel z;
    cost_hw_from_mesh(&z, mg->train.mesh, DT_F32);
    for (int k = 0; k < COST_SF_N; k++) z.special[k] = 0;
    HwModel t1 = z;
    t1.special[COST_SF_TANH] = 1e-6;
    int loops = 0;
    const RankProg *rp = mg->rprog[0];
    for (int i = 0; i < rp->chunk[0].fwd.n; i++) {
      const PInstr *in = &rp->chunk[0].fwd.ins[i];
      if (in->kind != PI_LOOP) continue;
      bool gelu = false;
      for (int k = 0; k < in->nnodes; k++) gelu |= in->nodes[k]->op == OP_GELU;
      double d = cost_instr(&t1, mg, in) - cost_instr(&z, mg, in);
      ASSERT_NEAR(gelu ? (double)in->loop->n * 1e-6 : 0.0, d, 1e-12);
      loops += gelu;
    }
    ASSERT(1, loops > 0);
    /* SUMMA's local GEMMs (q = 2) and the memory passes around them:
     * the forward's output set once; in the backward, per step the dX and
     * dW partials zeroed (BLAS at beta 0), and on the rank that is the
     * step's root the reduce's sum and the axpy (three passes each).  The
     * passes are what a faster memory takes off (the GEMMs and the
     * broadcasts do not depend on it). */
    HwModel f = z;
    f.mem_bw *= 1e3;
    int summa = 0;
    for (int i = 0; i < rp->chunk[0].bwd.n; i++) {
      const PInstr *in = &rp->chunk[0].bwd.ins[i];
      if (in->kind != PI_KERNEL || !in->n || in->n->op != OP_MATMUL_BWD) continue;
      if (ir_summa_q(in->n) != 2) continue;
      const Node *n = in->n;
      double N = (double)n->in[2]->shape.d[0].n, K = (double)n->in[2]->shape.d[1].n;
      double M = (double)ir_numel(&n->in[0]->shape) / N, bx = M * K * 4, bw = N * K * 4;
      double pz = 2 * (cost_membound(&z, bx, 0) + cost_membound(&z, bw, 0)) +
                  2 * (cost_membound(&z, 3 * bx, 0) + cost_membound(&z, 3 * bw, 0)) + zeroing(&z, in);
      double pf = 2 * (cost_membound(&f, bx, 0) + cost_membound(&f, bw, 0)) +
                  2 * (cost_membound(&f, 3 * bx, 0) + cost_membound(&f, 3 * bw, 0)) + zeroing(&f, in);
      ASSERT(1, pz > pf);
      ASSERT_NEAR(pz - pf, cost_instr(&z, mg, in) - cost_instr(&f, mg, in), 1e-12);
      summa++;
    }
    ASSERT(1, summa > 0);
  }
  /* Ring attention (P = 2, causal): the ranks exchange K/V blocks in
   * step, and the last one computes in all P steps, so the kernel costs P
   * local blocks (the part a faster device takes off; messages do not
   * depend on it); on the CPU its messages block */
  Module *mr = compile("../samples/gpt.shard", "2", "sp=ring:2");
  ASSERT(1, mr != NULL);
  if (mr) {
    HwModel z, f;
    cost_hw_from_mesh(&z, mr->train.mesh, DT_F32);
    f = z;
    f.peak *= 2;
    int rings = 0;
    const RankProg *rp = mr->rprog[0];
    for (int c = 0; c < 2; c++) {
      const PBlock *b = c ? &rp->chunk[0].bwd : &rp->chunk[0].fwd;
      for (int i = 0; i < b->n; i++) {
        const PInstr *in = &b->ins[i];
        if (in->kind != PI_KERNEL || !in->n || ir_ring_size(in->n) != 2) continue;
        ASSERT(1, in->n->a.i[0] != 0); /* causal */
        ASSERT_NEAR(2 * (cost_node(&z, in->n) - cost_node(&f, in->n)),
                    cost_instr(&z, mr, in) - cost_instr(&f, mr, in), 1e-12);
        /* where the target overlaps (the CUDA target's 0.9): step 0's K, V
         * travel while it computes, the backward's dK, dV after each step
         * (units of the blocking time X: 1 forward, 2(P-1)+1 backward) */
        HwModel o = z;
        o.overlap = 0.9;
        double cb = cost_node(&z, in->n), blocking = cost_instr(&z, mr, in);
        double X = blocking - 2 * cb - zeroing(&z, in);
        int bwd = in->n->op == OP_ATTENTION_BWD;
        double u = X / (bwd ? 3 : 1);
        ASSERT(1, X > 0);
        ASSERT_NEAR(cb + u - 0.9 * (cb < u ? cb : u) + cb + (bwd ? 2 * u : 0) + zeroing(&z, in),
                    cost_instr(&o, mr, in), 1e-12);
        ASSERT(1, cost_instr(&o, mr, in) < blocking);
        rings++;
      }
    }
    ASSERT(1, rings > 0);
  }
  /* Bias gradients: summed by the matmul's backward call (one more pass
   * over dy), or, where that call cannot (ZeRO's gradient staging), by a
   * loop whose broadcast output is one row kept in cache: its memory is
   * the input's pass and the row, not a full-size read-modify-write */
  Module *md = pd; /* gpt on 4 ranks, dp=4 (above) */
  Module *mz = compile("../samples/gpt.shard", "4", "dp=4,zero=2");
  ASSERT(1, md && mz);
  if (md && mz) {
    HwModel z;
    cost_hw_from_mesh(&z, md->train.mesh, DT_F32);
    for (int k = 0; k < COST_SF_N; k++) z.special[k] = 0;
    int fused = 0, loops = 0;
    const PBlock *b = &md->rprog[0]->chunk[0].bwd;
    for (int i = 0; i < b->n; i++) {
      const PInstr *in = &b->ins[i];
      if (in->kind != PI_KERNEL || !in->n || in->n->op != OP_MATMUL_BWD || !in->dbias.v) continue;
      double dy = (double)ir_numel(&in->n->in[0]->shape) * 4;
      ASSERT_NEAR(cost_node(&z, in->n) + cost_membound(&z, dy, 0) - z.launch_s + zeroing(&z, in),
                  cost_instr(&z, md, in), 1e-12);
      fused++;
    }
    b = &mz->rprog[0]->chunk[0].bwd;
    for (int i = 0; i < b->n; i++) {
      const PInstr *in = &b->ins[i];
      const PLoop *l = in->loop;
      if (in->kind != PI_LOOP || !l || l->nin != 1 || l->nout != 1 || !l->out[0].bcast) continue;
      double flops = 0;
      for (int k = 0; k < in->nnodes; k++) flops += cost_node_flops(in->nodes[k]);
      double bytes = (double)l->n * 4 + 2.0 * (double)l->inner * 4;
      ASSERT_NEAR(cost_membound(&z, bytes, flops) + zeroing(&z, in), cost_instr(&z, mz, in), 1e-12);
      loops++;
    }
    ASSERT(1, fused > 0);
    ASSERT(1, loops > 0);
  }
  /* the same model FLOPs under any plan */
  Module *a1 = compile("../samples/gpt.shard", "1", "dp=1");
  Module *a4 = compile("../samples/gpt.shard", "4", "tp=2,dp=2");
  if (a1 && a4) {
    HwModel c;
    cost_hw_from_mesh(&c, a1->train.mesh, DT_F32);
    CostResult x, y;
    cost_module(a1, &c, &x);
    cost_module(a4, &c, &y);
    ASSERT_NEAR(x.model_flops, y.model_flops, x.model_flops * 1e-9);
  }
  /* A profile's gemm_bf16 curve prices a 16-bit plan's GEMMs; fp32 plans
   * (and profiles without it, the cpu's) keep gemm */
  {
    char path[] = "/tmp/shardc_test_cost_XXXXXX";
    int wrote = write_temp(path, TEST_GPU_PROFILE_HEAD
                           "\"bw\": [[1e6, 1e12]], \"kernels\": {\"gelu\": 3e-9, \"future\": 1e-9, "
                           "\"layernorm_bwd\": 5e-9},\n\"coll\": []}\n");
    ASSERT(0, wrote);
    if (wrote == 0) {
      HwModel b16 = h100(1), f32 = h100(1);
      f32.elt = 4;
      char err[256];
      ASSERT(0, cost_load_profile(&b16, path, err, sizeof err));
      ASSERT(0, cost_load_profile(&f32, path, err, sizeof err));
      ASSERT_NEAR(4e14, cost_curve(&b16.gemm, 1e9), 1);
      ASSERT_NEAR(5e13, cost_curve(&f32.gemm, 1e9), 1);
      /* 1000^3: 2e9 FLOPs, past the curve's end */
      ASSERT_NEAR(2e9 / 4e14, cost_gemm(&b16, 1000, 1000, 1000), 1e-12);
      ASSERT_NEAR(2e9 / 5e13, cost_gemm(&f32, 1000, 1000, 1000), 1e-12);
      /* a thin dim bounds the rate, in any position: 4000 x 1000 x 64 at
       * gemm_thin(64), below the FLOPs curve's 5e13; the fp32 thin curve
       * does not bound the bf16 GEMMs (their curve replaced gemm) */
      ASSERT_NEAR(2.0 * 4000 * 1000 * 64 / 2e13, cost_gemm(&f32, 4000, 1000, 64), 1e-12);
      ASSERT_NEAR(2.0 * 4000 * 1000 * 64 / 2e13, cost_gemm(&f32, 64, 4000, 1000), 1e-12);
      ASSERT(0, b16.gemm_thin.n);
      /* a GPU profile's own bf16 thin curve (gemm_thin_bf16) bounds them */
      {
        char p2[] = "/tmp/shardc_test_cost_thin16_XXXXXX";
        int wrote2 = write_temp(p2, TEST_GPU_PROFILE_HEAD
                                "\"gemm_thin_bf16\": [[16, 1e13], [64, 1e14], [2048, 4e14]], \"coll\": []}\n");
        ASSERT(0, wrote2);
        if (wrote2 == 0) {
          HwModel t16 = h100(1), t32 = h100(1);
          t32.elt = 4;
          ASSERT(0, cost_load_profile(&t16, p2, err, sizeof err));
          ASSERT(0, cost_load_profile(&t32, p2, err, sizeof err));
          ASSERT_NEAR(2.0 * 4000 * 1000 * 64 / 1e14, cost_gemm(&t16, 4000, 64, 1000), 1e-12);
          ASSERT_NEAR(2.0 * 4000 * 1000 * 64 / 2e13, cost_gemm(&t32, 4000, 64, 1000), 1e-12);
          /* up to the bf16 curve's last point (2048), not the fp32 one's */
          ASSERT(1, cost_gemm(&t16, 4000, 4000, 1024) > 2.0 * 4000 * 4000 * 1024 / 4e14 * 1.01);
          ASSERT_NEAR(2.0 * 4000 * 4000 * 2048 / 4e14, cost_gemm(&t16, 4000, 4000, 2048), 1e-12);
        }
        remove(p2);
      }
      /* a GPU profile's attention curves (seconds a (batch, head) row at
       * D = 64, causal) price the gpt sample's attention: B·H rows, D/64,
       * T² past the last point; the bf16 ones for a 16-bit plan; without
       * them the GEMM-based formula */
      {
        char p3[] = "/tmp/shardc_test_cost_att_XXXXXX";
        int wrote3 = write_temp(p3, TEST_GPU_PROFILE_HEAD
                                "\"attention\": [[32, 1e-6], [128, 4e-6]], \"attention_bwd\": [[32, 3e-6], "
                                "[128, 9e-6]], \"attention_bf16\": [[32, 5e-7], [128, 2e-6]], "
                                "\"attention_bwd_bf16\": [[32, 1e-6], [128, 5e-6]], \"coll\": []}\n");
        ASSERT(0, wrote3);
        Module *ma = compile("../samples/gpt.shard", "1", "dp=1");
        if (wrote3 == 0 && ma) {
          HwModel a16 = h100(1), a32 = h100(1), plain = h100(1);
          a32.elt = 4;
          ASSERT(0, cost_load_profile(&a16, p3, err, sizeof err));
          ASSERT(0, cost_load_profile(&a32, p3, err, sizeof err));
          int seen = 0;
          for (int i = 0; i < ma->graph->nodes.len; i++) {
            const Node *n = ma->graph->nodes.data[i];
            if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_BWD) continue;
            const Shape *q = &n->in[n->op == OP_ATTENTION ? 0 : 1]->shape; /* [B, T=64, H, D] */
            double B = (double)q->d[0].n, T = (double)q->d[1].n, H = (double)q->d[2].n,
                   D = (double)q->d[3].n;
            ASSERT(64, (int)T);
            bool f = n->op == OP_ATTENTION;
            /* T = 64 between the points 32 and 128, log-log: 2e-6 and 6e-6 fp32, 1e-6 and 2.236e-6 bf16 */
            double r32 = f ? 2e-6 : 3e-6 * sqrt(3.0), r16 = f ? 1e-6 : 1e-6 * sqrt(5.0);
            ASSERT_NEAR(B * H * r32 * D / 64, cost_node(&a32, n), 1e-12);
            ASSERT_NEAR(B * H * r16 * D / 64, cost_node(&a16, n), 1e-12);
            ASSERT(1, fabs(cost_node(&plain, n) - cost_node(&a16, n)) > 1e-9);
            seen |= f ? 1 : 2;
          }
          ASSERT(3, seen);
        }
        remove(p3);
      }
      /* without curves, a GPU's attention from its figures (cost_attention):
       * all heads in one kernel, so a small problem is not B·H launches
       * (the gpt sample's 4 x 4 heads of 64 were priced 592 us on an H200
       * profile, measured ~30); causal tiles above the diagonal skipped;
       * the backward's seven products and two softmax passes against the
       * forward's two and one; a CPU's attention is its caller's (-1) */
      {
        HwModel g = h100(1);
        double fw = cost_attention(&g, true, true, 4, 64, 64, 4, 16);
        ASSERT(1, fw > g.launch_s && fw < 16 * g.launch_s);
        double c = cost_attention(&g, true, true, 8, 4096, 4096, 16, 128) - g.launch_s;
        double u = cost_attention(&g, true, false, 8, 4096, 4096, 16, 128) - g.launch_s;
        ASSERT_NEAR(65.0 / 128, c / u, 1e-9);
        double bw = cost_attention(&g, false, true, 8, 4096, 4096, 16, 128) - 3 * g.launch_s;
        ASSERT(1, bw > 2.5 * c && bw < 3.5 * c);
        /* the softmax's share at D = 64 on an H100: 16/67e12 + 10/67e12 s a
         * score beside 2 x 128 FLOPs of products at the catalog's rate of a
         * GEMM with K = 64 (~19% of 989e12): a fifth of the kernel */
        double d64 = cost_attention(&g, true, false, 8, 4096, 4096, 16, 64) - g.launch_s;
        double sm = 8.0 * 16 * 4096 * 4096 * 26 / 67e12;
        ASSERT(1, sm > 0.15 * d64 && sm < 0.3 * d64);
        Mesh cm = {.nodes = 1, .per_node = 1, .ndev = 1, .device = ir_device_lookup("cpu")};
        ir_mesh_defaults(&cm);
        HwModel cpu;
        cost_hw_from_mesh(&cpu, &cm, DT_F32);
        ASSERT_NEAR(-1.0, cost_attention(&cpu, true, true, 4, 64, 64, 4, 16), 1e-12);
      }
      /* at 512 and above, the FLOPs curve alone */
      ASSERT_NEAR(2.0 * 4000 * 1000 * 512 / 5e13, cost_gemm(&f32, 4000, 1000, 512), 1e-12);
      /* and where the FLOPs curve is the lower: 100 x 100 x 64 (1.28e6 FLOPs) */
      ASSERT_NEAR(1.28e6 / cost_curve(&f32.gemm, 1.28e6), cost_gemm(&f32, 100, 100, 64), 1e-12);
      /* the runtime kernels' times per element (names it does not know skipped) */
      ASSERT_NEAR(3e-9, f32.kern[COST_K_GELU], 1e-20);
      ASSERT_NEAR(5e-9, f32.kern[COST_K_LAYERNORM_BWD], 1e-20);
      ASSERT_NEAR(0.0, f32.kern[COST_K_SILU], 1e-20);
      /* and the nodes priced by them: a GELU and a layernorm backward of
       * the gpt sample, per element of their input (x: the backward's
       * second operand); a layernorm forward keeps the streaming formula */
      Module *m1 = compile("../samples/gpt.shard", "1", "dp=1");
      ASSERT(1, m1 != NULL);
      int seen = 0;
      for (int i = 0; m1 && i < m1->graph->nodes.len; i++) {
        const Node *n = m1->graph->nodes.data[i];
        if (n->op == OP_GELU || n->op == OP_LAYERNORM_BWD) {
          double per = n->op == OP_GELU ? 3e-9 : 5e-9;
          const Value *x = n->in[n->op == OP_GELU ? 0 : 1];
          ASSERT_NEAR((double)ir_numel(&x->shape) * per, cost_node(&f32, n), 1e-15);
          seen |= n->op == OP_GELU ? 1 : 2;
        } else if (n->op == OP_LAYERNORM) {
          HwModel none = f32;
          memset(none.kern, 0, sizeof none.kern);
          ASSERT_NEAR(cost_node(&none, n), cost_node(&f32, n), 1e-15);
        }
      }
      ASSERT(3, seen);
      remove(path);
    }
  }
  /* ZeRO-3's gathers one layer ahead on GPUs (collectives on a stream
   * beside the kernels): the step is shorter than with every gather
   * blocking, by no more than the gathers' own time; on the cpu target
   * (overlap 0) they block where they are.  bf16: the weight casts run as
   * one launch there, a loop each on the cpu. */
  {
    Module *mz = compile("../samples/gpt.shard", "4x1:H100_SXM", "dp=4,zero=3");
    ASSERT(1, mz != NULL);
    if (mz) {
      HwModel g;
      cost_hw_from_mesh(&g, mz->train.mesh, DT_F32);
      ASSERT(1, g.overlap > 0);
      HwModel blocking = g;
      blocking.overlap = 0;
      CostResult a, b;
      ASSERT(0, cost_module(mz, &g, &a));
      ASSERT(0, cost_module(mz, &blocking, &b));
      const RankProg *rp = mz->rprog[0];
      double gathers = 0;
      int nahead = 0;
      for (int c = 0; c < rp->nchunks; c++)
        for (int f = 0; f < 2; f++) {
          const PBlock *blk = f ? &rp->chunk[c].bwd : &rp->chunk[c].fwd;
          for (int i = 0; i < blk->n; i++)
            if (blk->ins[i].ahead) {
              gathers += cost_instr(&g, mz, &blk->ins[i]);
              nahead++;
            }
        }
      ASSERT(1, nahead > 2);
      ASSERT(1, a.step_s < b.step_s);
      /* per microbatch, each gather hidden at most once */
      int M = mz->train.plan.mb > 0 ? mz->train.plan.mb : 1;
      ASSERT(1, b.step_s - a.step_s <= gathers * M + 1e-12);
      /* most of a small model's gathers hide behind its kernels */
      ASSERT(1, b.step_s - a.step_s > 0.3 * gathers * M);
    }
    /* the gpt sample at precision = bf16 */
    char path[] = "/tmp/shardc_test_cost_bf16_XXXXXX";
    int fd = mkstemp(path);
    FILE *src = fopen("../samples/gpt.shard", "r");
    ASSERT(1, fd >= 0 && src != NULL);
    if (fd >= 0 && src) {
      FILE *dst = fdopen(fd, "w");
      char line[512];
      while (fgets(line, sizeof line, src)) {
        char *p = strstr(line, "precision = fp32");
        if (p) memcpy(p, "precision = bf16", 16);
        fputs(line, dst);
      }
      fclose(dst);
      Module *mc = compile(path, "2x1:H100_SXM", "dp=2");
      ASSERT(1, mc != NULL);
      if (mc) {
        HwModel g;
        cost_hw_from_mesh(&g, mc->train.mesh, DT_BF16);
        const PBlock *cast = &mc->rprog[0]->chunk[0].cast;
        ASSERT(1, cast->n > 1);
        CostResult a, b;
        HwModel cpu_like = g;
        cpu_like.overlap = 0;
        ASSERT(0, cost_module(mc, &g, &a));
        ASSERT(0, cost_module(mc, &cpu_like, &b));
        ASSERT_NEAR((cast->n - 1) * g.launch_s, b.stage[0].cast_s - a.stage[0].cast_s, 1e-12);
      }
      remove(path);
    }
    if (src) fclose(src);
  }
  profile_errors();
  shampoo_costs();
  adafactor_costs();
  TEST_MAIN_END();
}
