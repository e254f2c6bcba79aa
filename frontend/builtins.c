/* builtins.c — the builtin layers' names and the builtin functions (see
 * builtins.h). */
#include "builtins.h"

#include <string.h>

const BuiltinInfo builtins[B_COUNT] = {
    [B_LINEAR] = {"linear", "linear"},       [B_EMBEDDING] = {"embedding", "embed"},
    [B_POSITIONAL] = {"positional", "pos"},  [B_LAYERNORM] = {"layernorm", "ln"},
    [B_RMSNORM] = {"rmsnorm", "norm"},       [B_ATTENTION] = {"attention", "attn"},
    [B_MLP] = {"mlp", "mlp"},                [B_GELU] = {"gelu", NULL},
    [B_RELU] = {"relu", NULL},               [B_SILU] = {"silu", NULL},
    [B_SWIGLU] = {"swiglu", NULL},           [B_SOFTMAX] = {"softmax", NULL},
    [B_DROPOUT] = {"dropout", NULL},         [B_CROSS_ENTROPY] = {"cross_entropy", NULL},
};

int builtin_id(const char *name) {
  for (int i = 0; i < B_COUNT; i++)
    if (!strcmp(builtins[i].name, name)) return i;
  return -1;
}

bool builtin_exists(const char *name) { return builtin_id(name) >= 0 || ew_builtin_id(name) >= 0; }

const EwInfo ew_builtins[EW_COUNT] = {
#define EW(e, name, nargs, expr) [EW_##e] = {name, nargs, expr},
#include "ops.def"
};

int ew_builtin_id(const char *name) {
  for (int i = 0; i < EW_COUNT; i++)
    if (!strcmp(ew_builtins[i].name, name)) return i;
  return -1;
}

ScalarFn *ew_builtin_fn(int k, char *err, int errcap) {
  static const char *const argnames[] = {"x", "y", "z"};
  const EwInfo *b = &ew_builtins[k];
  if (b->nargs < 1 || b->nargs > 3) {
    snprintf(err, (size_t)errcap, "%d arguments (x, y, z: 1 to 3)", b->nargs);
    return NULL;
  }
  return sx_fn_parse(b->name, b->expr, argnames, b->nargs, err, errcap);
}
