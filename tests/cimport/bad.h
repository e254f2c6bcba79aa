/* bad.h — each function uses one construct shardc must reject. */
#include <math.h>
#include <stdio.h>

float g;
static float g2 = 2;

float loop(float x) {
  float s = 0;
  for (int i = 0; i < 3; i++) s += x;
  return s;
}

float whileloop(float x) {
  while (x > 1) x = x / 2;
  return x;
}

float ptr(float x, float *p) { return x; }

float intparam(float x, int n) { return x; }

int intret(float x) { return 1; }

float readglobal(float x) { return x * g; }

float writeglobal(float x) {
  g = x;
  return x;
}

float fact(float x) { return x < 1 ? 1 : x * fact(x - 1); }

float ping(float x);
float pong(float x) { return ping(x) + 1; }
float ping(float x) { return x > 0 ? pong(x - 1) : 0; }

float prints(float x) {
  printf("%f\n", x);
  return x;
}

float unknown(float x);
float callsunknown(float x) { return unknown(x); }

float noreturn_path(float x) {
  if (x > 0) return x;
}

float uninit(float x) {
  float y;
  if (x > 0) y = 1;
  return y;
}

float helper_loops(float x) {
  do { x = x - 1; } while (x > 0);
  return x;
}
float calls_bad_helper(float x) { return 2 * helper_loops(x); }

float intlocal(float x) {
  int n = 3;
  return x * n;
}

float truncs(float x) { return (int)x; }

float switches(float x) {
  switch ((int)2) { default: return x; }
}

float array(float x) {
  float a[2] = {x, x};
  return a[0];
}

float staticlocal(float x) {
  static float acc;
  acc = acc + x;
  return acc;
}

float comma(float x) { return (x, 2 * x); }

float gotos(float x) {
  goto out;
out:
  return x;
}
