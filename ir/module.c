/* module.c — small facts about a compilation shared by the passes. */
#include <string.h>

#include "module.h"

int opt_states(const Optimizer *o) {
  return !o->kind ? 0 : !strcmp(o->kind, "adamw") ? 2 : o->momentum > 0 ? 1 : 0;
}
