/* builtins.h — the builtins of the DSL: the builtin layers, their names
 * (which user declarations may not take) and parameter-path components, and
 * the elementwise functions defined by an expression (ir/ops.def's EW
 * rows).  sema checks names against them; lower.c lowers each layer to
 * primitive IR ops and each function to a map node. */
#ifndef SHARDC_BUILTINS_H
#define SHARDC_BUILTINS_H

#include <stdbool.h>

#include "sexpr.h"

typedef enum {
  B_LINEAR, B_EMBEDDING, B_POSITIONAL, B_LAYERNORM, B_RMSNORM, B_ATTENTION, B_MLP,
  B_GELU, B_RELU, B_SILU, B_SWIGLU, B_SOFTMAX, B_DROPOUT, B_CROSS_ENTROPY, B_COUNT
} Builtin;

typedef struct BuiltinInfo {
  const char *name;
  const char *pname;   /* parameter-path component; NULL if it has no parameters */
} BuiltinInfo;

extern const BuiltinInfo builtins[B_COUNT];

/* The builtin layer called name, -1 for none. */
int builtin_id(const char *name);
/* Whether name is a builtin layer or function. */
bool builtin_exists(const char *name);

typedef enum {
#define EW(e, name, nargs, expr) EW_##e,
#include "ops.def"
  EW_COUNT
} EwBuiltin;

typedef struct EwInfo {
  const char *name;
  int nargs;
  const char *expr;    /* of x, y, z */
} EwInfo;

extern const EwInfo ew_builtins[EW_COUNT];

/* The builtin function called name, -1 for none. */
int ew_builtin_id(const char *name);
/* Builtin function k as a ScalarFn with its derivatives, built anew
 * (arena memory: one per compilation); NULL with a message in err if its
 * expression does not parse. */
ScalarFn *ew_builtin_fn(int k, char *err, int errcap);

#endif
