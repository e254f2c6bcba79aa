/* cuda_host.cc — the scheduler and runtime API behind cuda_host.h.
 *
 * A launch runs its blocks in turn.  A block's threads run in linear-id
 * order on runner fibers: a runner (a stack of RTCH_STACK bytes from a pool)
 * calls one thread after another, with no switch between them, until the
 * thread it runs waits at a barrier; that thread keeps the runner's stack
 * and a new runner goes on with the next thread.  A block without barriers
 * thus costs two switches, whatever its size; only threads suspended at a
 * barrier hold a stack each (kept for later launches).  Once a thread has
 * waited, the block runs one warp at a time (run_block): the warp's threads
 * start, and its warp barriers release its lanes as soon as all its live
 * lanes wait there, until every one has ended or waits at __syncthreads;
 * then the next warp.  When the last warp is there and every live thread
 * waits at __syncthreads, the whole block is released and the warps go on
 * again in turn; released threads resume in linear-id order (one that ends
 * finishes its runner).  Nothing to release with threads still live is a
 * deadlock (threads of one block or one warp waiting at different
 * barriers): reported, then abort().
 * A block of one thread runs on the caller's stack with no fiber.
 * On x86-64 a fiber switch is a few instructions (rtch_switch: callee-saved
 * registers and the stack pointer); glibc's swapcontext also saves the
 * signal mask with a system call each time, some 20 times slower, and is
 * kept for other machines (or with -DRTCH_UCONTEXT).
 */
#include "cuda_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <ucontext.h>

#include <new>
#include <map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define RTCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RTCH_ASAN 1
#endif
#endif
#ifdef RTCH_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

enum { RTCH_MAX_THREADS = 1024, RTCH_STACK = 256 * 1024 };
enum { F_NEW, F_RUN, F_WARP_BAR, F_BLOCK_BAR, F_DONE };

#if defined(__x86_64__) && !defined(RTCH_UCONTEXT)
#define RTCH_ASM_SWITCH 1
#ifndef RTCH_ASAN
/* A fiber that waits or ends hands over to the next one itself (one
 * switch, not two through the scheduler): see handoff_sp() below. */
#define RTCH_HANDOFF 1
#endif
/* rtch_switch(&save, to): pushes the callee-saved registers, stores the
 * stack pointer in save, loads to, pops and returns into the other fiber. */
extern "C" void rtch_switch(void **save, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".type rtch_switch,@function\n"
        "rtch_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size rtch_switch, .-rtch_switch\n");
#endif

struct rtch_fiber {
  rtch_thread t;  // first: rtch_cur points here
  int state;
#ifdef RTCH_ASM_SWITCH
  void *sp;
#else
  ucontext_t ctx;
#endif
  char *stack;
  void *fake_stack;  // AddressSanitizer's fake stack while switched away
  int slot_set;      // the set of warp slots its next exchange writes
  unsigned xseq;     // its exchanges in this block (rtch_warp_table)
};

rtch_thread *rtch_cur;
rtch_block rtch_blk;

static rtch_fiber rtch_f[RTCH_MAX_THREADS];
#ifdef RTCH_ASM_SWITCH
static void *rtch_sched_sp;
#else
static ucontext_t rtch_sched_ctx;
#endif
static unsigned rtch_n;        // threads per block
static int rtch_direct;        // one thread: no fiber, barriers are no-ops
static void (*rtch_call)(const void *);
static const void *rtch_fn;
static uint64_t rtch_slots[2][RTCH_MAX_THREADS / 32][32];
/* rtch_warp_table's results, per slot set and warp, and the exchange
 * (xseq) whose they are */
static uint64_t rtch_table[2][RTCH_MAX_THREADS / 32][32];
static unsigned rtch_table_seq[2][RTCH_MAX_THREADS / 32];
static unsigned char *rtch_shmem;
static size_t rtch_shmem_n, rtch_shmem_cap;
static cudaError_t rtch_last_error = cudaSuccess;
#ifdef RTCH_ASAN
static const void *rtch_main_bottom;
static size_t rtch_main_size;
#endif

static rtch_fiber *cur_fiber(void) { return (rtch_fiber *)rtch_cur; }

/* ---- switching (with AddressSanitizer told which stack is live) ---- */
static void to_fiber(rtch_fiber *f) {
  rtch_cur = &f->t;
#ifdef RTCH_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, f->stack, RTCH_STACK);
#endif
#ifdef RTCH_ASM_SWITCH
  rtch_switch(&rtch_sched_sp, f->sp);
#else
  swapcontext(&rtch_sched_ctx, &f->ctx);
#endif
#ifdef RTCH_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

#ifndef RTCH_HANDOFF
static void to_scheduler(rtch_fiber *f) {
#ifdef RTCH_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, rtch_main_bottom, rtch_main_size);
#endif
#ifdef RTCH_ASM_SWITCH
  rtch_switch(&f->sp, rtch_sched_sp);
#else
  swapcontext(&f->ctx, &rtch_sched_ctx);
#endif
#ifdef RTCH_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &rtch_main_bottom, &rtch_main_size);
#endif
}
#endif

/* A runner: the next unstarted threads, one after another, on this stack
 * (see the top of the file). */
static unsigned rtch_next;         // the first thread not started yet
static unsigned rtch_limit;        // the window's end (see run_block)
static int rtch_waited;            // a thread of this block has waited at a barrier
static unsigned rtch_live;         // threads started or not, not ended
static char *rtch_runner_stack;    // the stack the scheduler starts a runner on
static char *rtch_exited;          // the stack of a runner that ended

static void collect_runner(void);
#ifdef RTCH_HANDOFF
static void *handoff_sp(unsigned i);
#endif

static void runner_entry(void) {
  char *stack = rtch_runner_stack;
#ifdef RTCH_ASAN
  __sanitizer_finish_switch_fiber(NULL, &rtch_main_bottom, &rtch_main_size);
#endif
#ifdef RTCH_HANDOFF
  collect_runner();  // (started by a fiber that a runner which ended handed over to)
#endif
  /* (until a thread waits, every thread runs to its end here: a block
   * without barriers costs two switches, whatever its size) */
  unsigned last = 0;
  while (rtch_next < (rtch_waited ? rtch_limit : rtch_n)) {
    last = rtch_next++;
    rtch_fiber *f = &rtch_f[last];
    f->stack = stack;
    f->state = F_RUN;
    rtch_cur = &f->t;
    rtch_call(rtch_fn);
    f->state = F_DONE;
    f->stack = NULL;
    rtch_live--;
  }
  (void)last;
  rtch_exited = stack;
#ifdef RTCH_ASAN
  __sanitizer_start_switch_fiber(NULL, rtch_main_bottom, rtch_main_size);
#endif
#ifdef RTCH_ASM_SWITCH
  void *dead;
#ifdef RTCH_HANDOFF
  /* the next released thread, where the scheduler would go next (whoever
   * resumes gives this stack back to the pool) */
  rtch_switch(&dead, handoff_sp(last));  // never resumed
#else
  rtch_switch(&dead, rtch_sched_sp);  // never resumed
#endif
  __builtin_unreachable();
#endif
  /* returning resumes uc_link: the scheduler */
}

#ifdef RTCH_HANDOFF
static void *runner_sp(void);
/* Where the scheduler's pass over the window (run_block) would go after
 * fiber i waits or ends: the window's next released fiber after i (its
 * loop runs them in order), else a new runner for the window's next thread
 * not started, else the scheduler itself (to release warps or the block,
 * or move the window).  Going there straight keeps the scheduler's order
 * and halves the switches: a warp barrier cost every lane two. */
static void *handoff_sp(unsigned i) {
  for (unsigned j = i + 1; j < rtch_limit && j < rtch_next; j++)
    if (rtch_f[j].state == F_RUN) return rtch_f[j].sp;  // (it sets rtch_cur in wait_at)
  if (rtch_waited && rtch_next < rtch_limit) return runner_sp();
  return rtch_sched_sp;
}
#endif

static void wait_at(int state) {
  if (rtch_direct) return;
  rtch_fiber *f = cur_fiber();
  f->state = state;
  rtch_waited = 1;
#ifdef RTCH_HANDOFF
  rtch_switch(&f->sp, handoff_sp((unsigned)(f - rtch_f)));
  rtch_cur = &f->t;
  collect_runner();  // a runner that ended and handed over to this fiber
#else
  to_scheduler(f);
#endif
}

void __syncthreads(void) { wait_at(F_BLOCK_BAR); }
void rtch_syncwarp(void) { wait_at(F_WARP_BAR); }

/* A warp's exchanges (shuffles, votes) go through two sets of slots in
 * turn: a lane writes its slot of set p, waits for the warp, reads set p,
 * and its next exchange uses the other set.  No lane writes set p again
 * before the whole warp has passed the next exchange's barrier, so after
 * every lane has read set p: one barrier an exchange, not two (every lane
 * of a warp runs the same exchanges, as a full-mask shuffle requires). */
static uint64_t *warp_slots(void) {
  rtch_fiber *f = cur_fiber();
  uint64_t *w = rtch_slots[f->slot_set][f->t.lin / 32];
  f->slot_set ^= 1;
  return w;
}

/* Writes v to the calling lane's slot, waits for the warp; its slots. */
static const uint64_t *exchange(uint64_t v) {
  unsigned lin = rtch_cur->lin;
  uint64_t *w = warp_slots();
  w[lin % 32] = v;
  wait_at(F_WARP_BAR);
  return w;
}

uint64_t rtch_warp_exchange(uint64_t v, int src) { return exchange(v)[src & 31]; }

/* Every lane's value in (the slots) and a table out: the first lane back
 * from the barrier fills it (returns 1), the others read it.  A table is
 * rewritten two exchanges later, after every lane has passed the next
 * exchange's barrier, so after every lane has read it (as the slots). */
int rtch_warp_table(uint64_t v, const uint64_t **in, uint64_t **out) {
  rtch_fiber *f = cur_fiber();
  unsigned w = f->t.lin / 32, p = (unsigned)f->slot_set, seq = ++f->xseq;
  *in = exchange(v);
  *out = rtch_table[p][w];
  if (rtch_table_seq[p][w] == seq) return 0;
  rtch_table_seq[p][w] = seq;
  return 1;
}

void rtch_warp_gather(uint64_t v, uint64_t *slots) { memcpy(slots, exchange(v), 32 * sizeof *slots); }

/* Votes count the lanes that exist (a partial last warp) and are live. */
unsigned __ballot_sync(unsigned mask, int pred) {
  (void)mask;
  uint64_t s[32];
  rtch_warp_gather(pred ? 1 : 0, s);
  unsigned b = 0;
  unsigned base = rtch_cur->lin & ~31u;
  for (unsigned i = 0; i < 32; i++)
    if (base + i < rtch_n && rtch_f[base + i].state != F_DONE && s[i] == 1) b |= 1u << i;
  if (rtch_direct) b = pred ? 1u : 0u;
  return b;
}

int __all_sync(unsigned mask, int pred) {
  (void)mask;
  uint64_t s[32];
  rtch_warp_gather(pred ? 1 : 0, s);
  if (rtch_direct) return pred != 0;
  unsigned base = rtch_cur->lin & ~31u;
  for (unsigned i = 0; i < 32; i++)
    if (base + i < rtch_n && rtch_f[base + i].state != F_DONE && s[i] == 0) return 0;
  return 1;
}

void *rtch_dynamic_shared(void) { return rtch_shmem; }

/* ---- the scheduler ---- */
static void deadlock(void) {
  fprintf(stderr,
          "cuda_host: block (%u,%u,%u) of a launch deadlocked: its live threads wait at "
          "different barriers (a __syncthreads or a warp shuffle that some threads skip)\n",
          rtch_blk.block_idx.x, rtch_blk.block_idx.y, rtch_blk.block_idx.z);
  for (unsigned i = 0; i < rtch_n; i++)
    if (rtch_f[i].state != F_DONE)
      fprintf(stderr, "  thread (%u,%u,%u): %s\n", rtch_f[i].t.tid.x, rtch_f[i].t.tid.y,
              rtch_f[i].t.tid.z,
              rtch_f[i].state == F_WARP_BAR ? "warp barrier" : "__syncthreads");
  fflush(stderr);
  abort();
}

/* Releases the warps of threads [lo, hi) whose live lanes all wait at a
 * warp barrier; 0 when there is none. */
static int release_warps(unsigned lo, unsigned hi) {
  int released = 0;
  for (unsigned w = lo; w < hi; w += 32) {
    unsigned end = w + 32 < hi ? w + 32 : hi, waiting = 0, lanes = 0;
    for (unsigned i = w; i < end; i++) {
      if (rtch_f[i].state == F_DONE) continue;
      lanes++;
      waiting += rtch_f[i].state == F_WARP_BAR;
    }
    if (lanes && waiting == lanes) {
      for (unsigned i = w; i < end; i++)
        if (rtch_f[i].state == F_WARP_BAR) rtch_f[i].state = F_RUN;
      released = 1;
    }
  }
  return released;
}

/* Releases the block when every live thread waits at __syncthreads; 0 when
 * not. */
static int release_block(unsigned live) {
  unsigned at_block = 0;
  for (unsigned i = 0; i < rtch_n; i++) at_block += rtch_f[i].state == F_BLOCK_BAR;
  if (at_block != live) return 0;
  for (unsigned i = 0; i < rtch_n; i++)
    if (rtch_f[i].state == F_BLOCK_BAR) rtch_f[i].state = F_RUN;
  return 1;
}

/* Stacks: a runner takes one from the pool when it starts and gives it back
 * when it ends; a thread suspended at a barrier keeps its runner's.  Kept for
 * later launches. */
static char *rtch_pool[RTCH_MAX_THREADS];
static unsigned rtch_pool_n;

/* Where a stack's frames start below its top: the stacks lie a multiple of
 * the page apart, so that tops at one offset would all fall into the same
 * few cache sets (a block's fibers take turns at every barrier: each switch
 * then missed); 61 colours 1088 bytes apart spread them over 64 KiB. */
static uintptr_t stack_color(const char *stack) {
  return ((uintptr_t)stack >> 12) % 61 * 1088;
}

/* A runner's stack: from the pool, or a new one. */
static char *take_stack(void) {
  char *stack;
  if (rtch_pool_n) {
    stack = rtch_pool[--rtch_pool_n];
  } else {
    stack = (char *)malloc(RTCH_STACK);
    if (!stack) {
      fprintf(stderr, "cuda_host: out of memory for the stacks of %u threads\n", rtch_n);
      abort();
    }
  }
  rtch_runner_stack = stack;
  return stack;
}

#ifdef RTCH_ASM_SWITCH
/* A new runner's first frame on `stack`, to switch to.  From the top: a 0
 * return address for runner_entry (never returns), runner_entry for
 * rtch_switch's ret, six zero registers; runner_entry starts with rsp = 8
 * mod 16 as after a call. */
static void *runner_frame(char *stack) {
  uintptr_t top = ((uintptr_t)stack + RTCH_STACK - stack_color(stack)) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = NULL;
  *--sp = (void *)runner_entry;
  for (int r = 0; r < 6; r++) *--sp = NULL;
  return sp;
}
#endif

#ifdef RTCH_HANDOFF
/* A new runner (its first thread is rtch_next), ready to be switched to
 * from the scheduler or a fiber. */
static void *runner_sp(void) { return runner_frame(take_stack()); }
#endif

/* Starts a runner at thread rtch_next; back when its thread waits or every
 * thread has started and its own has ended (or, with RTCH_HANDOFF, when a
 * fiber or runner hands over to the scheduler). */
static void start_runner(void) {
  char *stack = take_stack();
#ifdef RTCH_ASAN
  /* the stack's last runner left its frames' redzones poisoned */
  ASAN_UNPOISON_MEMORY_REGION(stack, RTCH_STACK);
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, stack, RTCH_STACK);
#endif
#ifdef RTCH_ASM_SWITCH
  rtch_switch(&rtch_sched_sp, runner_frame(stack));
#else
  static ucontext_t ctx;
  getcontext(&ctx);
  ctx.uc_stack.ss_sp = stack;
  ctx.uc_stack.ss_size = RTCH_STACK - stack_color(stack);
  ctx.uc_link = &rtch_sched_ctx;
  makecontext(&ctx, runner_entry, 0);
  swapcontext(&rtch_sched_ctx, &ctx);
#endif
#ifdef RTCH_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* Back in the scheduler: a runner that ended gives its stack back. */
static void collect_runner(void) {
  if (rtch_exited) {
    rtch_pool[rtch_pool_n++] = rtch_exited;
    rtch_exited = NULL;
  }
}

/* RTCH_REVERSE=1 in the environment: a launch's blocks run last first, and
 * a block's threads (of whole warps) last first, so that a kernel that
 * reads what another thread or block writes without the barrier (or the
 * kernel boundary) that orders them reads it unwritten in one of the two
 * orders: the kernel tests run in both. */
bool rtch_env_on(const char *name) {
  const char *e = getenv(name);
  return e && *e && strcmp(e, "0") != 0;
}
static bool rtch_reverse_ = rtch_env_on("RTCH_REVERSE");

static void run_block(void) {
  dim3 bd = rtch_blk.block_dim;
  /* poison the warp slots in use: a lane past the end reads it */
  for (int p = 0; p < 2; p++) {
    memset(rtch_slots[p], 0xff, (rtch_n + 31) / 32 * sizeof rtch_slots[p][0]);
    memset(rtch_table_seq[p], 0, (rtch_n + 31) / 32 * sizeof rtch_table_seq[p][0]);
  }
  if (rtch_shmem_n) memset(rtch_shmem, 0xff, rtch_shmem_n);
  /* RTCH_REVERSE: fiber i is thread n-1-i (whole warps only: the warps run
   * last first, a warp's lanes 31 first) */
  bool rev = rtch_reverse_ && rtch_n % 32 == 0;
  for (unsigned i = 0; i < rtch_n; i++) {
    rtch_fiber *f = &rtch_f[i];
    unsigned lin = rev ? rtch_n - 1 - i : i;
    f->t.lin = lin;
    f->t.tid = dim3(lin % bd.x, lin / bd.x % bd.y, lin / (bd.x * bd.y));  // x fastest, then y, z
    f->state = F_NEW;
    f->slot_set = 0;
    f->xseq = 0;
  }
  if (rtch_direct) {
    rtch_f[0].state = F_RUN;
    rtch_cur = &rtch_f[0].t;
    rtch_call(rtch_fn);
    return;
  }
  /* One warp at a time (the window [lo, hi)): its threads start, run and
   * meet at warp barriers until each has ended or waits at __syncthreads,
   * then the next warp's; when the last warp is there, the block barrier
   * releases every thread and the windows start over.  The fibers of one
   * warp at a time stay in the caches (a 256-thread block's stacks in turn
   * at every shuffle did not), and the stacks of a warp that ended serve
   * the next.  (Any order of warps between two __syncthreads is one a GPU
   * may run.) */
  rtch_next = 0;
  rtch_live = rtch_n;
  rtch_waited = 0;
  unsigned lo = 0, hi = rtch_n < 32 ? rtch_n : 32;
  for (;;) {
    /* the window's released threads, in linear-id order */
    rtch_limit = hi;
    for (unsigned i = lo; i < hi && i < rtch_next; i++)
      if (rtch_f[i].state == F_RUN) {
        to_fiber(&rtch_f[i]);
        collect_runner();
      }
    /* then the window's threads not started, runner after runner */
    while (rtch_next < hi) {
      start_runner();
      collect_runner();
    }
    if (!rtch_live) break;
    if (release_warps(lo, hi)) continue;
    if (hi < rtch_n) {
      lo = hi;
      hi = hi + 32 < rtch_n ? hi + 32 : rtch_n;
      continue;
    }
    if (!release_block(rtch_live)) deadlock();
    lo = 0;
    hi = rtch_n < 32 ? rtch_n : 32;
  }
}

void rtch_misaligned(const void *p, int bytes, const char *what) {
  fprintf(stderr, "cuda_host: %s at %p, not %d-byte aligned (the GPU faults: misaligned address), "
                  "in thread (%u,%u,%u) of block (%u,%u,%u)\n", what, p, bytes,
          rtch_cur ? rtch_cur->tid.x : 0, rtch_cur ? rtch_cur->tid.y : 0,
          rtch_cur ? rtch_cur->tid.z : 0, rtch_blk.block_idx.x, rtch_blk.block_idx.y,
          rtch_blk.block_idx.z);
  abort();
}

static std::map<const void *, int> rtch_func_smem_;  // kernels' raised dynamic shared memory
void rtch_func_smem(const void *fn, int bytes) { rtch_func_smem_[fn] = bytes; }
void rtch_launch_smem_check(const void *fn, size_t shmem, const char *name) {
  if (shmem <= 48 * 1024) return;
  if (!fn) {
    fprintf(stderr, "cuda_host: %s launched by RTC_LAUNCH with %zu bytes of dynamic shared "
                    "memory, above 48 KiB: CUDA fails the launch unless the kernel's limit is "
                    "raised (cudaFuncSetAttribute, then RTC_LAUNCH_SMEM)\n", name, shmem);
    abort();
  }
  auto it = rtch_func_smem_.find(fn);
  if (it != rtch_func_smem_.end() && it->second >= 0 && (size_t)it->second >= shmem) return;
  fprintf(stderr, "cuda_host: %s launched with %zu bytes of dynamic shared memory, above 48 KiB, "
                  "but its cudaFuncAttributeMaxDynamicSharedMemorySize is %d: CUDA fails the "
                  "launch (raise it with cudaFuncSetAttribute first)\n",
          name, shmem, it == rtch_func_smem_.end() ? 48 * 1024 : it->second);
  abort();
}
void rtch_launch_erased(dim3 grid, dim3 block, size_t shmem, void (*call)(const void *),
                        const void *fn) {
  unsigned long long n = (unsigned long long)block.x * block.y * block.z;
  if (n == 0 || n > RTCH_MAX_THREADS || block.z > 64 || !grid.x || !grid.y || !grid.z ||
      grid.y > 65535 || grid.z > 65535) {
    fprintf(stderr,
            "cuda_host: invalid launch: grid (%u,%u,%u), block (%u,%u,%u) (at most %d threads "
            "a block, block.z <= 64, grid.y and grid.z <= 65535, none 0)\n",
            grid.x, grid.y, grid.z, block.x, block.y, block.z, RTCH_MAX_THREADS);
    abort();
  }
  if (shmem > rtch_shmem_cap) {
    free(rtch_shmem);
    rtch_shmem_cap = (shmem + 63) & ~(size_t)63;
    rtch_shmem = (unsigned char *)aligned_alloc(64, rtch_shmem_cap);
    if (!rtch_shmem) {
      fprintf(stderr, "cuda_host: out of memory for %zu bytes of shared memory\n", shmem);
      abort();
    }
  }
  rtch_shmem_n = shmem;
  rtch_n = (unsigned)n;
  rtch_direct = n == 1;
  rtch_call = call;
  rtch_fn = fn;
  rtch_blk.grid_dim = grid;
  rtch_blk.block_dim = block;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        rtch_blk.block_idx = rtch_reverse_ ? dim3(grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z)
                                           : dim3(x, y, z);
        run_block();
      }
  rtch_cur = NULL;
}

/* ---- runtime API ---- */
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
  case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
  case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorStreamCaptureUnsupported:
    return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureUnjoined:
    return "capture sequence contains a fork that was not joined to the primary stream";
  case cudaErrorStreamCaptureIsolation:
    return "dependency created on uncaptured work in another stream";
  case cudaErrorCapturedEvent:
    return "operation not permitted on an event last recorded in a capturing stream";
  }
  return "unknown error";
}

static cudaError_t fail(cudaError_t e) { return rtch_last_error = e; }

cudaError_t cudaGetLastError(void) {
  cudaError_t e = rtch_last_error;
  rtch_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return rtch_last_error; }

cudaError_t rtch_malloc(void **p, size_t n) {
  rtch_not_capturing("cudaMalloc");
  if (!p) return fail(cudaErrorInvalidValue);
  *p = NULL;
  if (!n) return cudaSuccess;
  /* 256-byte aligned as cudaMalloc's; aligned_alloc wants a multiple. */
  *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void *p) {
  rtch_not_capturing("cudaFree");
  free(p);
  return cudaSuccess;
}
static std::map<uintptr_t, size_t> rtch_pinned_;  // cudaMallocHost's blocks: start, bytes
cudaError_t rtch_malloc_host(void **p, size_t n) {
  rtch_not_capturing("cudaMallocHost");
  cudaError_t e = rtch_malloc(p, n);
  if (e == cudaSuccess && *p) rtch_pinned_[(uintptr_t)*p] = n;
  return e;
}
cudaError_t cudaFreeHost(void *p) {
  rtch_not_capturing("cudaFreeHost");
  rtch_pinned_.erase((uintptr_t)p);
  free(p);
  return cudaSuccess;
}
/* [p, p + n) lies in one cudaMallocHost block */
static bool rtch_pinned_range_(const void *p, size_t n) {
  auto it = rtch_pinned_.upper_bound((uintptr_t)p);
  if (it == rtch_pinned_.begin()) return false;
  --it;
  return (uintptr_t)p + n <= it->first + it->second;
}
/* ---- deferred streams (cuda_host.h: rtch_stream_defer) ---- */

typedef std::vector<std::pair<cudaStream_t, size_t>> RtchDeps;
struct CUstream_st {
  int flags;
  bool defer;
  unsigned cap;      // the capture it joined (rtch_cap_id_ while that is open), or 0
  size_t cap_ops;    // the work it was given in that capture
  RtchDeps cap_dep;  // each captured stream's work its next work waits for
  std::vector<std::function<void()>> q;  // queued work; q[0..ran) has run
  size_t ran;
  size_t base;                            // work queued and cleared before q[0]
};
struct CUevent_st {
  double ms;          // CLOCK_MONOTONIC at the last record
  bool recorded;      // ever recorded
  unsigned cap;       // the capture it was last recorded in, or 0 (outside one)
  RtchDeps dep;       // then: the captured work it stands for
  cudaStream_t s;     // a deferred stream it was recorded on, or NULL
  size_t upto;        // how much of s's work (counted from its creation) precedes it
};
static std::vector<cudaStream_t> rtch_deferred_;

void rtch_stream_defer(cudaStream_t s) {
  static const bool on = rtch_env_on("RTCH_DEFER_STREAMS");
  if (!s || !on || s->defer) return;
  s->defer = true;
  rtch_deferred_.push_back(s);
}
bool rtch_defer_on(cudaStream_t s, std::function<void()> f) {
  if (!s || !s->defer || rtch_capturing()) return false;
  s->q.push_back(std::move(f));
  return true;
}
static size_t rtch_queued_(cudaStream_t s) { return s->base + s->q.size(); }
/* Runs s's queued work up to (not including) its upto-th since creation. */
static void rtch_flush_(cudaStream_t s, size_t upto) {
  if (!s) return;
  while (s->base + s->ran < upto && s->ran < s->q.size()) {
    std::function<void()> f = std::move(s->q[s->ran]);
    s->ran++;
    f();
  }
  if (s->ran == s->q.size()) {
    s->base += s->q.size();
    s->q.clear();
    s->ran = 0;
  }
}
static void rtch_flush_all_(void) {
  for (cudaStream_t s : rtch_deferred_) rtch_flush_(s, rtch_queued_(s));
}

/* ---- stream capture: the open capture's closures, replayed by a graph ---- */

struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};
static CUgraph_st *rtch_capture;  // the open capture, or NULL
static unsigned rtch_cap_id_;     // the open (or last) capture's number, from 1
static cudaStream_t rtch_cap_origin_, rtch_launch_stream_;
static std::vector<cudaStream_t> rtch_cap_streams_;  // the streams that joined it

bool rtch_capturing(void) { return rtch_capture != NULL; }
void rtch_launch_stream(cudaStream_t s) { rtch_launch_stream_ = s; }
void rtch_not_capturing(const char *call) {
  if (!rtch_capture) return;
  fprintf(stderr, "cuda_host: %s during a stream capture: a synchronous call is an error in CUDA "
                  "(the step cannot be captured as a graph)\n", call);
  abort();
}
static bool rtch_in_capture_(cudaStream_t s) { return s && s->cap == rtch_cap_id_ && rtch_capture; }
/* dep (a stream's or an event's) grown to cover `other` too */
static void rtch_dep_merge_(RtchDeps &dep, const RtchDeps &other) {
  for (const auto &o : other) {
    bool seen = false;
    for (auto &d : dep)
      if (d.first == o.first) {
        if (o.second > d.second) d.second = o.second;
        seen = true;
      }
    if (!seen) dep.push_back(o);
  }
}
static size_t rtch_dep_of_(const RtchDeps &dep, cudaStream_t s) {
  for (const auto &d : dep)
    if (d.first == s) return d.second;
  return 0;
}
void rtch_record_on(cudaStream_t s, std::function<void()> f) {
  if (!s) s = rtch_launch_stream_ ? rtch_launch_stream_ : rtch_cap_origin_;
  if (!rtch_in_capture_(s)) {
    fprintf(stderr, "cuda_host: work issued during a stream capture on a stream that is not part "
                    "of it: CUDA runs it at once, outside the graph (join the stream to the "
                    "capture first: record an event on a captured stream, wait for it there)\n");
    abort();
  }
  s->cap_ops++;
  rtch_capture->work.push_back(std::move(f));
}

/* Queues f on a deferred stream s, or records it while a capture is open
 * (true: done with it); false: the caller runs it now. */
static bool rtch_later_(cudaStream_t s, const std::function<void()> &f) {
  if (rtch_defer_on(s, f)) return true;
  if (!rtch_capture) return false;
  rtch_record_on(s, f);
  return true;
}

/* s joins the open capture (its origin, or a fork) */
static void rtch_cap_join_(cudaStream_t s) {
  s->cap = rtch_cap_id_;
  s->cap_ops = 0;
  s->cap_dep.clear();
  rtch_cap_streams_.push_back(s);
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)mode;
  if (!s) return fail(cudaErrorInvalidValue);   // the legacy stream cannot be captured
  rtch_flush_all_();
  if (rtch_capture) {
    fprintf(stderr, "cuda_host: cudaStreamBeginCapture while a capture is open\n");
    abort();
  }
  rtch_capture = new CUgraph_st;
  rtch_cap_id_++;
  rtch_cap_origin_ = s;
  rtch_cap_streams_.clear();
  rtch_cap_join_(s);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  if (!rtch_capture || !g || s != rtch_cap_origin_) return fail(cudaErrorInvalidValue);
  /* every stream that joined: its last work is waited for by the origin */
  cudaError_t e = cudaSuccess;
  for (cudaStream_t x : rtch_cap_streams_) {
    if (x != s && x->cap_ops > rtch_dep_of_(s->cap_dep, x)) {
      fprintf(stderr, "cuda_host: cudaStreamEndCapture: a stream that joined the capture has %zu "
                      "of its %zu works not waited for by the capturing stream (join it: record "
                      "an event after its last work, wait for it on the capturing stream)\n",
              x->cap_ops - rtch_dep_of_(s->cap_dep, x), x->cap_ops);
      e = cudaErrorStreamCaptureUnjoined;
    }
  }
  for (cudaStream_t x : rtch_cap_streams_) {
    x->cap = 0;
    x->cap_dep.clear();
  }
  rtch_cap_streams_.clear();
  rtch_cap_origin_ = NULL;
  if (e != cudaSuccess) {
    delete rtch_capture;
    rtch_capture = NULL;
    *g = NULL;
    return fail(e);
  }
  *g = rtch_capture;
  rtch_capture = NULL;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
  (void)flags;
  if (!e || !g) return fail(cudaErrorInvalidValue);
  *e = new CUgraphExec_st;
  (*e)->work = g->work;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  (void)s;
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  rtch_not_capturing("cudaGraphLaunch");
  for (auto &f : e->work) f();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

/* While capturing: an async copy of n bytes whose host side is pageable
 * memory (an error in CUDA); true and the error set if it is. */
static bool rtch_pageable_(const void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  const void *host = kind == cudaMemcpyHostToDevice ? src : kind == cudaMemcpyDeviceToHost ? dst : NULL;
  if (!host || rtch_pinned_range_(host, n)) return false;
  fprintf(stderr, "cuda_host: an async copy %s pageable host memory during a stream capture "
                  "(CUDA: not permitted; use cudaMallocHost's memory)\n",
          kind == cudaMemcpyHostToDevice ? "from" : "to");
  fail(cudaErrorStreamCaptureUnsupported);
  return true;
}
static cudaError_t copy_(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  if ((unsigned)kind > cudaMemcpyDefault || (n && (!dst || !src)))
    return fail(cudaErrorInvalidValue);
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  rtch_not_capturing("cudaMemcpy");
  return copy_(dst, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if ((unsigned)kind > cudaMemcpyDefault || (n && (!dst || !src)))
    return fail(cudaErrorInvalidValue);
  if (rtch_capture && n && rtch_pageable_(dst, src, n, kind)) return rtch_last_error;
  // (a replayed or deferred copy reads its source then, as a graph's copy node does)
  if (rtch_later_(s, [=]() { copy_(dst, src, n, kind); })) return cudaSuccess;
  return copy_(dst, src, n, kind);
}
static cudaError_t copy2d_(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, cudaMemcpyKind kind) {
  for (size_t r = 0; r < height; r++) {
    cudaError_t e = copy_((char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  if (rtch_capture && width && height &&
      rtch_pageable_(dst, src, (height - 1) * (kind == cudaMemcpyHostToDevice ? spitch : dpitch) + width,
                     kind))
    return rtch_last_error;
  if (rtch_later_(s, [=]() { copy2d_(dst, dpitch, src, spitch, width, height, kind); }))
    return cudaSuccess;
  return copy2d_(dst, dpitch, src, spitch, width, height, kind);
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
  rtch_not_capturing("cudaMemset");
  if (n && !p) return fail(cudaErrorInvalidValue);
  if (n) memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (n && !p) return fail(cudaErrorInvalidValue);
  if (!n || rtch_later_(s, [=]() { memset(p, v, n); })) return cudaSuccess;
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  rtch_not_capturing("cudaDeviceSynchronize");
  rtch_flush_all_();
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  rtch_not_capturing("cudaStreamSynchronize");
  if (s) rtch_flush_(s, rtch_queued_(s));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  if (!s) return fail(cudaErrorInvalidValue);
  *s = new (std::nothrow) CUstream_st();
  if (!*s) return fail(cudaErrorMemoryAllocation);
  (*s)->flags = (int)flags;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaSuccess;
  rtch_flush_(s, rtch_queued_(s));
  for (size_t k = 0; k < rtch_deferred_.size(); k++)
    if (rtch_deferred_[k] == s) rtch_deferred_.erase(rtch_deferred_.begin() + (long)k);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  if (!e) return fail(cudaErrorInvalidValue);
  *e = new (std::nothrow) CUevent_st();
  return *e ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
/* An event last recorded in a capture now closed (CUDA: cudaErrorCapturedEvent). */
static cudaError_t rtch_captured_event_(cudaEvent_t e, const char *call) {
  if (!e->cap || (rtch_capture && e->cap == rtch_cap_id_)) return cudaSuccess;
  fprintf(stderr, "cuda_host: %s on an event last recorded in a stream capture (record it again "
                  "outside the capture first)\n", call);
  return fail(cudaErrorCapturedEvent);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->cap = 0;
  e->dep.clear();
  if (rtch_in_capture_(s)) {   /* a node of the capture: what it stands for */
    e->cap = rtch_cap_id_;
    e->dep = s->cap_dep;
    rtch_dep_merge_(e->dep, RtchDeps{{s, s->cap_ops}});
  } else if (rtch_capture && !s) {
    fprintf(stderr, "cuda_host: cudaEventRecord on the legacy stream during a stream capture\n");
    abort();
  }
  /* on a deferred stream: after what is queued there so far */
  bool later = s && s->defer && !rtch_capturing() && s->ran < s->q.size();
  e->s = later ? s : NULL;
  e->upto = later ? rtch_queued_(s) : 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  e->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  rtch_not_capturing("cudaEventSynchronize");
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (rtch_captured_event_(e, "cudaEventSynchronize")) return rtch_last_error;
  if (e->s) rtch_flush_(e->s, e->upto);
  e->s = NULL;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (rtch_captured_event_(start, "cudaEventElapsedTime") ||
      rtch_captured_event_(end, "cudaEventElapsedTime"))
    return rtch_last_error;
  *ms = (float)(end->ms - start->ms);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  (void)flags;
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (rtch_captured_event_(e, "cudaStreamWaitEvent")) return rtch_last_error;
  if (rtch_capture && e->cap == rtch_cap_id_) {
    /* a fork (s joins the capture) or a join: s's next work waits for the
     * event's captured work */
    if (!s) {
      fprintf(stderr, "cuda_host: the legacy stream waits for a captured event\n");
      abort();
    }
    if (!rtch_in_capture_(s)) rtch_cap_join_(s);
    rtch_dep_merge_(s->cap_dep, e->dep);
    return cudaSuccess;
  }
  if (rtch_in_capture_(s) && e->recorded) {
    fprintf(stderr, "cuda_host: a stream of a capture waits for an event recorded outside it\n");
    return fail(cudaErrorStreamCaptureIsolation);
  }
  /* the waiting stream's next work runs after what precedes the event:
   * the deferred stream's queue up to it runs now */
  if (e->s) rtch_flush_(e->s, e->upto);
  e->s = NULL;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d) {
  if (!d) return fail(cudaErrorInvalidValue);
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n) {
  if (!n) return fail(cudaErrorInvalidValue);
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  struct sysinfo si;
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  if (sysinfo(&si) != 0) return fail(cudaErrorInvalidValue);
  *free_bytes = (size_t)si.freeram * si.mem_unit;
  *total_bytes = (size_t)si.totalram * si.mem_unit;
  /* RTCH_DEVICE_MEMORY=BYTES: a device of that size, all free (tests of the
   * out-of-memory report that must not depend on the machine's RAM) */
  const char *dm = getenv("RTCH_DEVICE_MEMORY");
  if (dm && *dm) *free_bytes = *total_bytes = (size_t)strtoull(dm, NULL, 10);
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
  if (!p) return fail(cudaErrorInvalidValue);
  if (d != 0) return fail(cudaErrorInvalidDevice);
  size_t fr, tot;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "host");
  p->totalGlobalMem = cudaMemGetInfo(&fr, &tot) == cudaSuccess ? tot : 0;
  p->sharedMemPerBlock = 48 * 1024;
  /* an sm_90 block's, opted in (the shim has no limit); RTCH_SMEM_OPTIN
   * plays a smaller GPU for the tests of the launchers' checks */
  const char *so = getenv("RTCH_SMEM_OPTIN");
  p->sharedMemPerBlockOptin = so && atol(so) > 0 ? (size_t)atol(so) : 227 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = RTCH_MAX_THREADS;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->multiProcessorCount = 1;  // blocks run one at a time
  p->major = 0;
  p->minor = 0;
  p->l2CacheSize = 0;
  return cudaSuccess;
}
