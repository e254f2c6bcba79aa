/* builtins.h — the builtin layers of the DSL: their names (which user
 * declarations may not take) and parameter-path components.  sema checks
 * names against them; lower.c lowers each to primitive IR ops. */
#ifndef SHARDC_BUILTINS_H
#define SHARDC_BUILTINS_H

#include <stdbool.h>

typedef enum {
  B_LINEAR, B_EMBEDDING, B_POSITIONAL, B_LAYERNORM, B_RMSNORM, B_ATTENTION, B_MLP,
  B_GELU, B_RELU, B_SILU, B_SWIGLU, B_SOFTMAX, B_DROPOUT, B_CROSS_ENTROPY, B_COUNT
} Builtin;

typedef struct BuiltinInfo {
  const char *name;
  const char *pname;   /* parameter-path component; NULL if it has no parameters */
} BuiltinInfo;

extern const BuiltinInfo builtins[B_COUNT];

/* The builtin called name, -1 for none. */
int builtin_id(const char *name);
bool builtin_exists(const char *name);

#endif
