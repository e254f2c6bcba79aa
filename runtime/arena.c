/* arena.c — the per-rank arena: one aligned block, a bump allocator, planned
 * static offsets and the high-water mark the memory planner is checked by. */
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rt_internal.h"

#define RT_ARENA_ALIGN 64

RtArena *rt_arena_create(size_t bytes) {
  RtArena *a = calloc(1, sizeof *a);
  if (!a) {
    rt_errorf(RT_ERR_NOMEM, "arena: out of memory");
    return NULL;
  }
  size_t rounded = (bytes + RT_ARENA_ALIGN - 1) / RT_ARENA_ALIGN * RT_ARENA_ALIGN;
  if (rounded < bytes || posix_memalign((void **)&a->base, RT_ARENA_ALIGN,
                                        rounded ? rounded : RT_ARENA_ALIGN) != 0) {
    free(a);
    rt_errorf(RT_ERR_NOMEM, "arena: cannot allocate %zu bytes", bytes);
    return NULL;
  }
  // Zero-filled so a program that forgets to initialize a buffer is still
  // deterministic across runs and ranks.
  memset(a->base, 0, rounded ? rounded : RT_ARENA_ALIGN);
  a->size = bytes;
  return a;
}

RtArena *rt_arena_create_mirror(size_t bytes) {
  RtArena *a = calloc(1, sizeof *a);
  if (!a) {
    rt_errorf(RT_ERR_NOMEM, "arena: out of memory");
    return NULL;
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE), rounded = (bytes + page - 1) / page * page;
  if (rounded < bytes)
    rounded = 0;
  void *p = rounded ? mmap(NULL, rounded, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                    : MAP_FAILED;
  if (p == MAP_FAILED) {
    free(a);
    rt_errorf(RT_ERR_NOMEM, "arena: cannot map a host mirror of %zu bytes", bytes);
    return NULL;
  }
  a->base = p; /* anonymous pages read as zeros until written */
  a->size = bytes;
  a->mapped = rounded;
  return a;
}

void rt_arena_destroy(RtArena *a) {
  if (!a)
    return;
  if (a->mapped)
    munmap(a->base, a->mapped);
  else
    free(a->base);
  free(a);
}

void *rt_alloc(RtArena *a, size_t bytes, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0) {
    rt_errorf(RT_ERR_ARG, "arena: alignment %zu is not a power of two", align);
    return NULL;
  }
  uintptr_t base = (uintptr_t)a->base;
  size_t off = ((base + a->top + align - 1) & ~(uintptr_t)(align - 1)) - base;
  if (off > a->size || bytes > a->size - off) {
    rt_errorf(RT_ERR_NOMEM, "arena: %zu bytes requested with %zu of %zu in use", bytes,
              a->top, a->size);
    return NULL;
  }
  a->top = off + bytes;
  if (a->top > a->peak)
    a->peak = a->top;
  return a->base + off;
}

void *rt_arena_at(RtArena *a, size_t offset, size_t bytes) {
  if (offset > a->size || bytes > a->size - offset) {
    rt_errorf(RT_ERR_ARG, "arena: buffer at offset %zu of %zu bytes exceeds the arena (%zu bytes)",
              offset, bytes, a->size);
    return NULL;
  }
  if (offset + bytes > a->peak)
    a->peak = offset + bytes;
  return a->base + offset;
}

size_t rt_arena_peak(const RtArena *a) { return a->peak; }

size_t rt_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (size_t)ru.ru_maxrss * 1024; // Linux reports KiB
}
