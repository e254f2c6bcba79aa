/* builtins.c — the builtin layers' names (see builtins.h). */
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

bool builtin_exists(const char *name) { return builtin_id(name) >= 0; }
