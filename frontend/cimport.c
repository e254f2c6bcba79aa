/* cimport.c — `use NAME from "file.h"`: read a C scalar function with
 * libclang and turn its body into an SExpr.
 *
 * The body is executed symbolically: locals and parameters map to SExprs,
 * assignments rebind them, `if` runs both branches and merges every variable
 * with select(cond, then, else).  The result is an expression with a hole
 * (a placeholder node) for "what the rest of the body returns": `return v`
 * fills the hole with v, and an `if` fills it with select(cond, then-result,
 * else-result), whose branches may have holes of their own.  The fillings
 * are kept as a list and substituted at the end of the function or branch
 * (cimp_result): substituting at every `if` re-walks the whole result, which
 * is quadratic in a chain of early returns.  Straight-line
 * code, early returns and if/else chains all reduce to one expression;
 * anything that needs real control flow (loops, goto, switch) or memory
 * (pointers, globals) is an error that points into the header.
 *
 * libclang 14 exposes neither binary nor unary operator kinds, so operators
 * are read from the source tokens (the last token before the right operand);
 * inside a macro expansion, where tokens are not visible, they are read from
 * clang's pretty-printed function instead (see cimp_opmap).
 */
#include "sexpr.h"

#include <clang-c/Index.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SHARDC_CLANG_RESOURCE_DIR
#define SHARDC_CLANG_RESOURCE_DIR ""
#endif

/* What one import may cost.  Inlining repeats a callee's body at every call
 * (f2(x) = f1(f1(x)) walks f1 twice), and so does a macro that uses its
 * argument twice, so a short header can ask for an exponential amount of
 * work; and every walk, here and in ir/sexpr.c, recurses once per level of
 * nesting.  Real activations stay far below: a few dozen operations, a few
 * levels of calls. */
enum {
  CIMP_MAX_DEPTH = 64,     /* chain of inlined calls */
  CIMP_MAX_NEST = 1000,    /* statements and expressions nested in the walk:
                              about 1 KiB of stack each, libclang's included
                              (a sum of 9000 terms overflowed 8 MiB) */
  CIMP_MAX_OPS = 20000,    /* statements and expressions walked, each inlined
                              body counted at every call: about 0.05 s */
};

/* One token of a header file, by byte offset (comments dropped). */
typedef struct CimpTok {
  unsigned off;
  const char *text;
  int punct;
} CimpTok;

typedef struct CimpTokFile {
  CXFile file;
  CimpTok *toks;
  int n;
} CimpTokFile;

/* Operators of one function recovered from its pretty-printed text. */
typedef struct CimpOpMap {
  CXCursor fn;
  int ok;
  int too_big;      /* more operators than CIMP_MAX_OPS: not built */
  int n;
  CXCursor *nodes;
  const char **ops;
  int *index;       /* open addressing on clang_hashCursor: slot -> i, or -1 */
  unsigned mask;
} CimpOpMap;

typedef struct CimpVar {
  CXCursor decl;
  const char *name;
  SExpr *val;       /* NULL: declared but not (definitely) assigned */
} CimpVar;

/* One filling of the hole: an `if`'s select or a `return`'s value. */
typedef struct CimpPart {
  SExpr *e;
  CXCursor at;      /* the statement, for a depth error */
} CimpPart;

/* Symbolic machine state at one program point. */
typedef struct CimpState {
  CimpVar *vars;
  int n, cap;
  CimpPart *rv;     /* the result: rv[0], its hole filled with rv[1], whose
                       hole is filled with rv[2]...; the last hole (no parts:
                       the hole itself) stands for whatever the code still to
                       run returns */
  int nrv, caprv;
  int open;         /* some path can still fall through to that code */
} CimpState;

/* The chain of functions being inlined, innermost first. */
typedef struct CimpFrame {
  CXCursor fn;
  const char *name;
  CXCursor call;    /* the call that inlined fn (not for the imported one) */
  int has_call;
  struct CimpFrame *up;
} CimpFrame;

typedef struct Cimp {
  CXTranslationUnit tu;
  const char *top;  /* the imported function: prefix of every message */
  CXCursor def;     /* and its definition, where limits on the whole are reported */
  SExpr *hole;
  int failed;
  int depth;        /* inlined calls open */
  int nest;         /* statements and expressions open */
  int ops;          /* statements and expressions walked */
  CimpFrame *frame;
  PtrVec tokfiles;  /* CimpTokFile* */
  PtrVec opmaps;    /* CimpOpMap* */
} Cimp;

/* ---- small libclang helpers ---- */

static const char *cimp_str(CXString s) {
  const char *c = clang_getCString(s);
  const char *r = arena_strdup(c ? c : "");
  clang_disposeString(s);
  return r;
}

typedef struct CimpKids {
  CXCursor *c;
  int n, cap;
} CimpKids;

static enum CXChildVisitResult cimp_kids_visit(CXCursor c, CXCursor parent, CXClientData d) {
  CimpKids *k = d;
  k->c = arena_grow(k->c, k->n, &k->cap, sizeof *k->c, 8);
  k->c[k->n++] = c;
  return CXChildVisit_Continue;
}

static CimpKids cimp_kids(CXCursor c) {
  CimpKids k = {0};
  clang_visitChildren(c, cimp_kids_visit, &k);
  return k;
}

/* The last child that is an expression: the operand of a cast (after an
 * optional TypeRef) or the initializer of a VarDecl. */
static int cimp_last_expr(CXCursor c, CXCursor *out) {
  CimpKids k = cimp_kids(c);
  for (int i = k.n - 1; i >= 0; i--)
    if (clang_isExpression(clang_getCursorKind(k.c[i]))) {
      *out = k.c[i];
      return 1;
    }
  return 0;
}

static CXCursor cimp_strip_parens(CXCursor c) {
  while (clang_getCursorKind(c) == CXCursor_ParenExpr) {
    CimpKids k = cimp_kids(c);
    if (k.n != 1) break;
    c = k.c[0];
  }
  return c;
}

static int cimp_is_float_type(CXType t) {
  enum CXTypeKind k = clang_getCanonicalType(t).kind;
  return k == CXType_Float || k == CXType_Double;
}

static int cimp_is_int_type(CXType t) {
  enum CXTypeKind k = clang_getCanonicalType(t).kind;
  return (k >= CXType_Bool && k <= CXType_Int128) || k == CXType_Enum;
}

static int cimp_is_pointer_type(CXType t) {
  enum CXTypeKind k = clang_getCanonicalType(t).kind;
  return k == CXType_Pointer || k == CXType_ConstantArray || k == CXType_IncompleteArray ||
         k == CXType_VariableArray;
}

static const char *cimp_type_name(CXType t) { return cimp_str(clang_getTypeSpelling(t)); }

static int cimp_in_system_header(CXCursor c) {
  return clang_Location_isInSystemHeader(clang_getCursorLocation(c));
}

/* Where a cursor is, as the user sees it: macro uses map to the macro's
 * invocation in the header. */
static void cimp_where(CXCursor c, const char **path, int *line, int *col) {
  CXFile f = NULL;
  unsigned l = 0, co = 0;
  clang_getExpansionLocation(clang_getCursorLocation(c), &f, &l, &co, NULL);
  *path = f ? cimp_str(clang_getFileName(f)) : "<unknown>";
  *line = (int)l;
  *col = (int)co;
}

/* Expansion offset of the first character of a cursor's extent. */
static int cimp_begin(CXCursor c, CXFile *f, unsigned *off) {
  *f = NULL;
  *off = 0;
  clang_getExpansionLocation(clang_getRangeStart(clang_getCursorExtent(c)), f, NULL, NULL, off);
  return *f != NULL;
}

/* ---- diagnostics ---- */

static SrcLoc cimp_srcloc(CXCursor c) {
  const char *path;
  int line, col;
  cimp_where(c, &path, &line, &col);
  SrcLoc loc = {0};
  loc.file = src_load(path);
  loc.line = loc.file ? line : 0;
  loc.col = col;
  loc.len = 1;
  return loc;
}

/* Report the first error only: after one unsupported construct the rest of
 * the walk is unreliable, and one precise message is what users act on. */
static void cimp_verror(Cimp *C, const char *path, int line, int col, int chain,
                        const char *fmt, va_list ap) {
  if (C->failed) return;
  C->failed = 1;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  diag_error_at_path(path, line, col, "%s: %s", C->top, msg);
  for (CimpFrame *f = C->frame; chain && f; f = f->up)
    if (f->has_call) diag_note(cimp_srcloc(f->call), "'%s' is inlined here", f->name);
}

__attribute__((format(printf, 3, 4)))
static void cimp_error(Cimp *C, CXCursor at, const char *fmt, ...) {
  const char *path;
  int line, col;
  cimp_where(at, &path, &line, &col);
  va_list ap;
  va_start(ap, fmt);
  cimp_verror(C, path, line, col, 1, fmt, ap);
  va_end(ap);
}

/* An error about the imported function as a whole (a limit on what it
 * inlines to), at its definition: the chain of calls that happened to cross
 * the limit says little about what to change. */
__attribute__((format(printf, 2, 3)))
static void cimp_error_fn(Cimp *C, const char *fmt, ...) {
  const char *path;
  int line, col;
  cimp_where(C->def, &path, &line, &col);
  va_list ap;
  va_start(ap, fmt);
  cimp_verror(C, path, line, col, 0, fmt, ap);
  va_end(ap);
}

static void cimp_error_ops(Cimp *C) {
  cimp_error_fn(C, "too many operations once calls and macros are expanded (limit is %d)",
                CIMP_MAX_OPS);
}

/* An error at the closing brace of a compound statement. */
__attribute__((format(printf, 3, 4)))
static void cimp_error_at_end(Cimp *C, CXCursor block, const char *fmt, ...) {
  CXFile f = NULL;
  unsigned line = 0, col = 0;
  clang_getExpansionLocation(clang_getRangeEnd(clang_getCursorExtent(block)), &f, &line, &col,
                             NULL);
  const char *path = f ? cimp_str(clang_getFileName(f)) : "<unknown>";
  va_list ap;
  va_start(ap, fmt);
  /* The end is one past the '}'. */
  cimp_verror(C, path, (int)line, col > 1 ? (int)col - 1 : 1, 1, fmt, ap);
  va_end(ap);
}

/* ---- tokens and operators ---- */

static int cimp_is_binop(const char *t) {
  static const char *const ops[] = {"+",  "-",  "*",  "/",  "%",  "<",   "<=",  ">",  ">=",
                                    "==", "!=", "&&", "||", "&",  "|",   "^",   "<<", ">>",
                                    "=",  "+=", "-=", "*=", "/=", "%=",  "&=",  "|=", "^=",
                                    "<<=", ">>=", ","};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(t, ops[i])) return 1;
  return 0;
}

static int cimp_is_unop(const char *t) {
  static const char *const ops[] = {"-", "+", "!", "~", "++", "--", "*", "&"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(t, ops[i])) return 1;
  return 0;
}

static CimpTokFile *cimp_tokfile(Cimp *C, CXFile file) {
  for (int i = 0; i < C->tokfiles.len; i++) {
    CimpTokFile *tf = C->tokfiles.data[i];
    if (clang_File_isEqual(tf->file, file)) return tf;
  }
  CimpTokFile *tf = arena_alloc(sizeof *tf);
  tf->file = file;
  vec_push(&C->tokfiles, tf);
  size_t size = 0;
  if (!clang_getFileContents(C->tu, file, &size)) return tf;
  CXSourceRange all = clang_getRange(clang_getLocationForOffset(C->tu, file, 0),
                                     clang_getLocationForOffset(C->tu, file, (unsigned)size));
  CXToken *toks = NULL;
  unsigned n = 0;
  clang_tokenize(C->tu, all, &toks, &n);
  tf->toks = arena_alloc(sizeof(CimpTok) * (n ? n : 1));
  for (unsigned i = 0; i < n; i++) {
    CXTokenKind k = clang_getTokenKind(toks[i]);
    if (k == CXToken_Comment) continue;
    CimpTok *t = &tf->toks[tf->n++];
    clang_getSpellingLocation(clang_getTokenLocation(C->tu, toks[i]), NULL, NULL, NULL, &t->off);
    t->text = cimp_str(clang_getTokenSpelling(C->tu, toks[i]));
    t->punct = k == CXToken_Punctuation;
  }
  if (toks) clang_disposeTokens(C->tu, toks, n);
  return tf;
}

/* Index of the last token starting before `off` (-1 if none). */
static int cimp_tok_before(const CimpTokFile *tf, unsigned off) {
  int lo = 0, hi = tf->n;   /* first token with t.off >= off */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (tf->toks[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/* --- operators from clang's pretty printer (macro expansions) ---
 *
 * The pretty-printed function has macros expanded, and it prints exactly one
 * operator token per BinaryOperator, CompoundAssignOperator and
 * UnaryOperator plus one '=' per initialized VarDecl, in the order of a
 * left-to-right walk of the AST.  Pairing the two sequences recovers every
 * operator; a count mismatch (pointer declarators, comma operators...) marks
 * the map unusable and the caller reports the operator as unreadable. */

typedef struct CimpSlots {
  CXCursor *c;
  int n, cap;
} CimpSlots;

static void cimp_slot_push(CimpSlots *s, CXCursor c) {
  s->c = arena_grow(s->c, s->n, &s->cap, sizeof *s->c, 32);
  s->c[s->n++] = c;
}

/* The to-do stack of cimp_slots_walk: visit a cursor, or emit it as a slot. */
typedef struct CimpTodo {
  CXCursor c;
  int emit;
} CimpTodo;

typedef struct CimpTodos {
  CimpTodo *t;
  int n, cap;
} CimpTodos;

static void cimp_todo(CimpTodos *s, CXCursor c, int emit) {
  s->t = arena_grow(s->t, s->n, &s->cap, sizeof *s->t, 64);
  s->t[s->n++] = (CimpTodo){c, emit};
}

/* Appends the operator slots under root in walk order; 0 once there would
 * be more than max.  Iterative because it runs before the symbolic walk has
 * checked the nesting: a body may be nested thousands deep. */
static int cimp_slots_walk(CimpSlots *s, CXCursor root, int max) {
  CimpTodos todo = {0};
  cimp_todo(&todo, root, 0);
  while (todo.n > 0) {
    CimpTodo t = todo.t[--todo.n];
    if (t.emit) {
      if (s->n >= max) return 0;
      cimp_slot_push(s, t.c);
      continue;
    }
    enum CXCursorKind k = clang_getCursorKind(t.c);
    CimpKids kids = cimp_kids(t.c);
    /* Pushed in reverse, to come off in walk order. */
    if ((k == CXCursor_BinaryOperator || k == CXCursor_CompoundAssignOperator) && kids.n == 2) {
      cimp_todo(&todo, kids.c[1], 0);
      cimp_todo(&todo, t.c, 1);
      cimp_todo(&todo, kids.c[0], 0);
      continue;
    }
    CXCursor init;
    int has_init = k == CXCursor_VarDecl && cimp_last_expr(t.c, &init);
    for (int i = kids.n - 1; i >= 0; i--) {
      cimp_todo(&todo, kids.c[i], 0);
      if (has_init && clang_equalCursors(kids.c[i], init)) cimp_todo(&todo, t.c, 1);
    }
    if (k == CXCursor_UnaryOperator) cimp_todo(&todo, t.c, 1);
  }
  return 1;
}

/* Operator tokens of C source text, in order. */
static int cimp_lex_ops(const char *p, const char ***out) {
  static const char *const puncts[] = {
      "<<=", ">>=", "...", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&",
      "||",  "+=",  "-=",  "*=", "/=", "%=", "&=", "|=", "^=", "##", "+",  "-",  "*",
      "/",   "%",   "<",   ">",  "!", "~",  "&",  "|",  "^",  "=",  "?",  ":",  ",",
      ";",   "(",   ")",   "[",  "]", "{",  "}",  ".",  "#"};
  PtrVec v = {0};
  while (*p) {
    unsigned char ch = (unsigned char)*p;
    if (ch <= ' ') {
      p++;
    } else if (ch == '_' || ((ch | 32) >= 'a' && (ch | 32) <= 'z')) {
      while (*p == '_' || ((*p | 32) >= 'a' && (*p | 32) <= 'z') || (*p >= '0' && *p <= '9')) p++;
    } else if ((ch >= '0' && ch <= '9') || (ch == '.' && p[1] >= '0' && p[1] <= '9')) {
      /* pp-number: 1.0E-3, 0.F, 0x1p-2 */
      for (;;) {
        if (*p && strchr("eEpP", *p) && (p[1] == '+' || p[1] == '-')) p += 2;
        else if (*p == '.' || *p == '_' || ((*p | 32) >= 'a' && (*p | 32) <= 'z') ||
                 (*p >= '0' && *p <= '9'))
          p++;
        else break;
      }
    } else if (ch == '"' || ch == '\'') {
      p++;
      while (*p && *p != (char)ch) p += (*p == '\\' && p[1]) ? 2 : 1;
      if (*p) p++;
    } else {
      size_t i, len = 1;
      const char *tok = NULL;
      for (i = 0; i < sizeof puncts / sizeof puncts[0]; i++) {
        len = strlen(puncts[i]);
        if (!strncmp(p, puncts[i], len)) {
          tok = puncts[i];
          break;
        }
      }
      if (!tok) len = 1;
      else if (cimp_is_binop(tok) || cimp_is_unop(tok)) {
        if (strcmp(tok, ",") != 0) vec_push(&v, (void *)tok);
      }
      p += len;
    }
  }
  *out = (const char **)v.data;
  return v.len;
}

static CimpOpMap *cimp_opmap(Cimp *C, CXCursor fn) {
  for (int i = 0; i < C->opmaps.len; i++) {
    CimpOpMap *m = C->opmaps.data[i];
    if (clang_equalCursors(m->fn, fn)) return m;
  }
  CimpOpMap *m = arena_alloc(sizeof *m);
  m->fn = fn;
  vec_push(&C->opmaps, m);
  /* The slots first: a body with more operators than the walk may visit
   * (a macro doubling its argument, nested, expands to 2^n) is refused
   * before clang prints all of it. */
  CimpKids kids = cimp_kids(fn);
  if (kids.n == 0) return m;
  CimpSlots slots = {0};
  if (!cimp_slots_walk(&slots, kids.c[kids.n - 1], CIMP_MAX_OPS)) {
    m->too_big = 1;
    return m;
  }
  CXPrintingPolicy pol = clang_getCursorPrintingPolicy(fn);
  const char *text = cimp_str(clang_getCursorPrettyPrinted(fn, pol));
  clang_PrintingPolicy_dispose(pol);
  const char *body = strchr(text, '{');
  if (!body) return m;
  const char **ops;
  int nops = cimp_lex_ops(body, &ops);
  if (nops != slots.n) return m;
  for (int i = 0; i < nops; i++) {
    enum CXCursorKind k = clang_getCursorKind(slots.c[i]);
    int good = k == CXCursor_VarDecl ? !strcmp(ops[i], "=")
               : k == CXCursor_UnaryOperator ? cimp_is_unop(ops[i])
                                             : cimp_is_binop(ops[i]);
    if (!good) return m;
  }
  m->ok = 1;
  m->n = nops;
  m->nodes = slots.c;
  m->ops = ops;
  /* Looked up once per operator walked: hashed, or a macro-built body of n
   * operators costs n^2 cursor comparisons. */
  unsigned size = 16;
  while (size < 2u * (unsigned)nops) size *= 2;
  m->mask = size - 1;
  m->index = arena_alloc(sizeof(int) * size);
  for (unsigned j = 0; j < size; j++) m->index[j] = -1;
  for (int i = 0; i < nops; i++) {
    unsigned j = clang_hashCursor(m->nodes[i]) & m->mask;
    while (m->index[j] >= 0) j = (j + 1) & m->mask;
    m->index[j] = i;
  }
  return m;
}

/* The operator of a cursor inside a macro expansion, from the map of the
 * function being walked; reports why when there is none. */
static const char *cimp_op_from_map(Cimp *C, CXCursor op) {
  CimpOpMap *m = C->frame ? cimp_opmap(C, C->frame->fn) : NULL;
  if (m && m->too_big) {
    cimp_error_ops(C);
    return NULL;
  }
  if (m && m->ok) {
    for (unsigned j = clang_hashCursor(op) & m->mask; m->index[j] >= 0; j = (j + 1) & m->mask)
      if (clang_equalCursors(m->nodes[m->index[j]], op)) return m->ops[m->index[j]];
  }
  cimp_error(C, op, "cannot read this operator (it comes from a macro expansion); "
                    "write the expression without the macro");
  return NULL;
}

/* The operator of a BinaryOperator / CompoundAssignOperator: the token just
 * before the right operand, when both lie in plain source text. */
static const char *cimp_binop(Cimp *C, CXCursor op, CXCursor rhs) {
  CXFile f1, f2;
  unsigned o1, o2;
  if (cimp_begin(op, &f1, &o1) && cimp_begin(rhs, &f2, &o2) && clang_File_isEqual(f1, f2) &&
      o2 > o1) {
    CimpTokFile *tf = cimp_tokfile(C, f1);
    int i = cimp_tok_before(tf, o2);
    if (i >= 0 && tf->toks[i].off >= o1 && tf->toks[i].punct && cimp_is_binop(tf->toks[i].text))
      return tf->toks[i].text;
  }
  return cimp_op_from_map(C, op);
}

/* A prefix operator is the first token of its expression. */
static const char *cimp_unop(Cimp *C, CXCursor op, CXCursor sub) {
  CXFile f1, f2;
  unsigned o1, o2;
  if (cimp_begin(op, &f1, &o1) && cimp_begin(sub, &f2, &o2) && clang_File_isEqual(f1, f2) &&
      o2 > o1) {
    CimpTokFile *tf = cimp_tokfile(C, f1);
    int i = cimp_tok_before(tf, o1 + 1);
    if (i >= 0 && tf->toks[i].off == o1 && tf->toks[i].punct && cimp_is_unop(tf->toks[i].text))
      return tf->toks[i].text;
  }
  return cimp_op_from_map(C, op);
}

/* ---- variables ---- */

static CimpVar *cimp_lookup(CimpState *S, CXCursor decl) {
  for (int i = S->n - 1; i >= 0; i--)
    if (clang_equalCursors(S->vars[i].decl, decl)) return &S->vars[i];
  return NULL;
}

static void cimp_define(CimpState *S, CXCursor decl, const char *name, SExpr *v) {
  S->vars = arena_grow(S->vars, S->n, &S->cap, sizeof *S->vars, 8);
  CimpVar *var = &S->vars[S->n++];
  var->decl = decl;
  var->name = name;
  var->val = v;
}

/* A branch of an `if` at S: S's variables, and a fresh hole for its result
 * ("what this branch returns, given what the code after the if returns"). */
static CimpState cimp_branch(const CimpState *S) {
  CimpState c = {0};
  c.n = S->n;
  c.cap = S->n > 0 ? S->n : 1;
  c.vars = arena_alloc(sizeof(CimpVar) * (size_t)c.cap);
  if (S->n) memcpy(c.vars, S->vars, sizeof(CimpVar) * (size_t)S->n);
  c.open = S->open;
  return c;
}

static void cimp_fill(CimpState *S, CXCursor at, SExpr *e) {
  S->rv = arena_grow(S->rv, S->nrv, &S->caprv, sizeof *S->rv, 8);
  S->rv[S->nrv++] = (CimpPart){e, at};
}

/* ---- limits ---- */

/* Opens one level of the walk at `at` (an expression or statement): 0 after
 * reporting when that is too deep or too much work.  cimp_leave closes it. */
static int cimp_enter(Cimp *C, CXCursor at, const char *what) {
  if (C->nest >= CIMP_MAX_NEST) {
    cimp_error(C, at, "%s nested too deeply (limit is %d levels)", what, CIMP_MAX_NEST);
    return 0;
  }
  if (++C->ops > CIMP_MAX_OPS) {
    cimp_error_ops(C);
    return 0;
  }
  C->nest++;
  return 1;
}

static void cimp_leave(Cimp *C) { C->nest--; }

/* v, or NULL after reporting when it is deeper than the rest of shardc
 * handles (SX_MAX_DEPTH).  Substitution makes values deeper than the
 * source they come from: `x = sinf(x);` a thousand times, or f(f(x)). */
static SExpr *cimp_depth_ok(Cimp *C, CXCursor at, SExpr *v) {
  if (!v || v->depth <= SX_MAX_DEPTH || C->failed) return v;
  cimp_error_fn(C, "expression nested too deeply once calls and local variables are "
                   "substituted (limit is %d levels)", SX_MAX_DEPTH);
  diag_note(cimp_srcloc(at), "here it is %u levels deep", v->depth);
  return NULL;
}

/* ---- expressions ---- */

static SExpr *cimp_expr(Cimp *C, CimpState *S, CXCursor e);
static SExpr *cimp_function(Cimp *C, CXCursor fn, SExpr **args, int nargs, const CXCursor *call);

/* A constant that clang can fold (literals, sizeof, integer constant
 * expressions, const globals): C semantics exactly, e.g. 1/2 == 0. */
static int cimp_eval_const(CXCursor c, double *out) {
  CXEvalResult r = clang_Cursor_Evaluate(c);
  if (!r) return 0;
  int ok = 1;
  switch (clang_EvalResult_getKind(r)) {
  case CXEval_Int:
    *out = clang_EvalResult_isUnsignedInt(r) ? (double)clang_EvalResult_getAsUnsigned(r)
                                             : (double)clang_EvalResult_getAsLongLong(r);
    break;
  case CXEval_Float:
    *out = clang_EvalResult_getAsDouble(r);
    break;
  default:
    ok = 0;
  }
  clang_EvalResult_dispose(r);
  return ok;
}

typedef struct CimpMathFn {
  const char *name;
  int nargs;
} CimpMathFn;

/* The C math functions we understand (the float 'f' variants too). */
static const CimpMathFn cimp_math[] = {
    {"exp", 1},  {"log", 1},  {"tanh", 1},  {"sqrt", 1},  {"sin", 1},   {"cos", 1},
    {"fabs", 1}, {"erf", 1},  {"pow", 2},   {"fmax", 2},  {"fmin", 2},  {"log1p", 1},
    {"expm1", 1}, {"tan", 1}, {"sinh", 1},  {"cosh", 1},  {"exp2", 1},  {"log2", 1},
    {"log10", 1}};

static const CimpMathFn *cimp_math_fn(const char *name) {
  if (!strncmp(name, "__builtin_", 10)) name += 10;
  size_t len = strlen(name);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < sizeof cimp_math / sizeof cimp_math[0]; i++) {
      size_t n = strlen(cimp_math[i].name);
      if (!strncmp(name, cimp_math[i].name, n) && len == n + (size_t)pass &&
          (pass == 0 || name[n] == 'f'))
        return &cimp_math[i];
    }
  }
  return NULL;
}

static SExpr *cimp_math_call(const char *f, SExpr **a) {
  SExpr *one = sx_const(1);
  if (!strcmp(f, "exp")) return sx_un(SX_EXP, a[0]);
  if (!strcmp(f, "log")) return sx_un(SX_LOG, a[0]);
  if (!strcmp(f, "tanh")) return sx_un(SX_TANH, a[0]);
  if (!strcmp(f, "sqrt")) return sx_un(SX_SQRT, a[0]);
  if (!strcmp(f, "sin")) return sx_un(SX_SIN, a[0]);
  if (!strcmp(f, "cos")) return sx_un(SX_COS, a[0]);
  if (!strcmp(f, "fabs")) return sx_un(SX_ABS, a[0]);
  if (!strcmp(f, "erf")) return sx_un(SX_ERF, a[0]);
  if (!strcmp(f, "pow")) return sx_bin(SX_POW, a[0], a[1]);
  if (!strcmp(f, "fmax")) return sx_bin(SX_MAX, a[0], a[1]);
  if (!strcmp(f, "fmin")) return sx_bin(SX_MIN, a[0], a[1]);
  /* The rest are rewritten into the core set; numerically a little worse
   * near their special points, which does not matter for activations. */
  if (!strcmp(f, "log1p")) return sx_un(SX_LOG, sx_bin(SX_ADD, one, a[0]));
  if (!strcmp(f, "expm1")) return sx_bin(SX_SUB, sx_un(SX_EXP, a[0]), one);
  if (!strcmp(f, "tan")) return sx_bin(SX_DIV, sx_un(SX_SIN, a[0]), sx_un(SX_COS, a[0]));
  if (!strcmp(f, "sinh") || !strcmp(f, "cosh")) {
    SExpr *ep = sx_un(SX_EXP, a[0]), *em = sx_un(SX_EXP, sx_un(SX_NEG, a[0]));
    SExpr *s = sx_bin(!strcmp(f, "sinh") ? SX_SUB : SX_ADD, ep, em);
    return sx_bin(SX_MUL, sx_const(0.5), s);
  }
  if (!strcmp(f, "exp2")) return sx_bin(SX_POW, sx_const(2), a[0]);
  if (!strcmp(f, "log2")) return sx_bin(SX_MUL, sx_const(1.4426950408889634), sx_un(SX_LOG, a[0]));
  if (!strcmp(f, "log10"))
    return sx_bin(SX_MUL, sx_const(0.43429448190325176), sx_un(SX_LOG, a[0]));
  return NULL;
}

static SExpr *cimp_call(Cimp *C, CimpState *S, CXCursor e) {
  const char *name = cimp_str(clang_getCursorSpelling(e));
  CXCursor ref = clang_getCursorReferenced(e);
  if (clang_Cursor_isNull(ref) || clang_getCursorKind(ref) != CXCursor_FunctionDecl) {
    cimp_error(C, e, "calls through function pointers are not supported");
    return NULL;
  }
  int nargs = clang_Cursor_getNumArguments(e);
  if (nargs < 0) nargs = 0;
  SExpr **args = arena_alloc(sizeof(SExpr *) * (size_t)(nargs ? nargs : 1));
  CXCursor def = clang_getCursorDefinition(ref);
  int user_def = !clang_Cursor_isNull(def) && !cimp_in_system_header(def);
  const CimpMathFn *m = user_def ? NULL : cimp_math_fn(name);
  if (!m && !user_def) {
    if (!clang_Cursor_isNull(def) || cimp_in_system_header(ref))
      cimp_error(C, e, "unsupported call to '%s'", name);
    else
      cimp_error(C, e, "unsupported call to '%s' (it has no definition in the header)", name);
    return NULL;
  }
  for (int i = 0; i < nargs; i++) {
    CXCursor a = clang_Cursor_getArgument(e, (unsigned)i);
    if (!cimp_is_float_type(clang_getCursorType(a)) && !cimp_is_int_type(clang_getCursorType(a))) {
      cimp_error(C, a, "argument of type '%s' is not supported",
                 cimp_type_name(clang_getCursorType(a)));
      return NULL;
    }
    if (!(args[i] = cimp_expr(C, S, a))) return NULL;
  }
  if (m) {
    if (nargs != m->nargs) {
      cimp_error(C, e, "'%s' takes %d argument%s, not %d", name, m->nargs,
                 m->nargs == 1 ? "" : "s", nargs);
      return NULL;
    }
    return cimp_math_call(m->name, args);
  }
  for (CimpFrame *f = C->frame; f; f = f->up)
    if (clang_equalCursors(f->fn, def)) {
      cimp_error(C, e, "recursive call to '%s'", name);
      return NULL;
    }
  if (C->depth >= CIMP_MAX_DEPTH) {
    cimp_error(C, e, "calls nested too deeply (limit is %d)", CIMP_MAX_DEPTH);
    return NULL;
  }
  return cimp_function(C, def, args, nargs, &e);
}

static SExpr *cimp_declref(Cimp *C, CimpState *S, CXCursor e) {
  CXCursor ref = clang_getCursorReferenced(e);
  enum CXCursorKind rk = clang_getCursorKind(ref);
  const char *name = cimp_str(clang_getCursorSpelling(e));
  if (rk == CXCursor_ParmDecl || rk == CXCursor_VarDecl) {
    CimpVar *v = cimp_lookup(S, ref);
    if (v) {
      if (!v->val) cimp_error(C, e, "'%s' may be used uninitialized", name);
      return v->val;
    }
    /* Not a local: a global or a static local.  Constants are fine, since
     * nothing can change them; anything else is state we cannot see. */
    CXType t = clang_getCursorType(ref);
    double val;
    if (rk == CXCursor_VarDecl && clang_isConstQualifiedType(t) &&
        (cimp_is_float_type(t) || cimp_is_int_type(t)) && cimp_eval_const(ref, &val))
      return sx_const(val);
    cimp_error(C, e, "reads global variable '%s'", name);
    return NULL;
  }
  if (rk == CXCursor_EnumConstantDecl) return sx_const((double)clang_getEnumConstantDeclValue(ref));
  if (rk == CXCursor_FunctionDecl) {
    cimp_error(C, e, "function '%s' used as a value (function pointers are not supported)", name);
    return NULL;
  }
  cimp_error(C, e, "unsupported reference to '%s'", name);
  return NULL;
}

static SxKind cimp_binop_kind(const char *op) {
  static const struct { const char *op; SxKind k; } t[] = {
      {"+", SX_ADD}, {"-", SX_SUB}, {"*", SX_MUL}, {"/", SX_DIV}, {"<", SX_LT},
      {"<=", SX_LE}, {">", SX_GT},  {">=", SX_GE}, {"==", SX_EQ}, {"!=", SX_NE},
      {"&&", SX_AND}, {"||", SX_OR}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(op, t[i].op)) return t[i].k;
  return SX_NKINDS;
}

static SExpr *cimp_binary(Cimp *C, CimpState *S, CXCursor e) {
  CimpKids k = cimp_kids(e);
  if (k.n != 2) {
    cimp_error(C, e, "malformed binary expression");
    return NULL;
  }
  const char *op = cimp_binop(C, e, k.c[1]);
  if (!op) return NULL;
  if (!strcmp(op, ",")) {
    cimp_error(C, e, "the comma operator is not supported");
    return NULL;
  }
  if (op[0] && op[strlen(op) - 1] == '=' && strcmp(op, "==") && strcmp(op, "!=") &&
      strcmp(op, "<=") && strcmp(op, ">=")) {
    cimp_error(C, e, "assignments inside expressions are not supported");
    return NULL;
  }
  SxKind kind = cimp_binop_kind(op);
  /* Constant integer expressions were folded by the caller already; what is
   * left are ints built from comparisons such as (x > 0) * 2, where + - *
   * agree with float arithmetic but truncating division does not. */
  if (kind == SX_NKINDS || (kind == SX_DIV && cimp_is_int_type(clang_getCursorType(e)))) {
    cimp_error(C, e, "integer operator '%s' on non-constant values is not supported "
                     "(use float arithmetic)", op);
    return NULL;
  }
  SExpr *a = cimp_expr(C, S, k.c[0]);
  if (!a) return NULL;
  SExpr *b = cimp_expr(C, S, k.c[1]);
  if (!b) return NULL;
  return sx_bin(kind, a, b);
}

static SExpr *cimp_unary(Cimp *C, CimpState *S, CXCursor e) {
  CimpKids k = cimp_kids(e);
  if (k.n != 1) {
    cimp_error(C, e, "malformed unary expression");
    return NULL;
  }
  const char *op = cimp_unop(C, e, k.c[0]);
  if (!op) return NULL;
  if (!strcmp(op, "++") || !strcmp(op, "--")) {
    cimp_error(C, e, "'%s' inside an expression is not supported", op);
    return NULL;
  }
  if (!strcmp(op, "*")) {
    cimp_error(C, e, "pointer dereference is not supported");
    return NULL;
  }
  if (!strcmp(op, "&")) {
    cimp_error(C, e, "taking an address is not supported");
    return NULL;
  }
  if (!strcmp(op, "~")) {
    cimp_error(C, e, "integer operator '~' on non-constant values is not supported");
    return NULL;
  }
  SExpr *a = cimp_expr(C, S, k.c[0]);
  if (!a) return NULL;
  if (!strcmp(op, "-")) return sx_un(SX_NEG, a);
  if (!strcmp(op, "!")) return sx_un(SX_NOT, a);
  return a; /* unary + */
}

static SExpr *cimp_cast(Cimp *C, CimpState *S, CXCursor e) {
  CXCursor sub;
  if (!cimp_last_expr(e, &sub)) {
    cimp_error(C, e, "unsupported expression");
    return NULL;
  }
  CXType tt = clang_getCursorType(e), st = clang_getCursorType(sub);
  int tnum = cimp_is_float_type(tt) || cimp_is_int_type(tt);
  int snum = cimp_is_float_type(st) || cimp_is_int_type(st);
  if (tnum && snum) {
    /* Float <-> double and int -> float conversions are transparent (we
     * compute in double and emit float).  Float -> int truncates; constant
     * cases were folded before we got here. */
    if (cimp_is_int_type(tt) && cimp_is_float_type(st)) {
      cimp_error(C, e, "conversion from '%s' to '%s' is not supported (use float)",
                 cimp_type_name(st), cimp_type_name(tt));
      return NULL;
    }
    return cimp_expr(C, S, sub);
  }
  if (clang_getCanonicalType(tt).kind == CXType_Void) {
    cimp_error(C, e, "cast to void is only allowed as a statement");
    return NULL;
  }
  if (cimp_is_pointer_type(tt) || cimp_is_pointer_type(st)) {
    cimp_error(C, e, "pointers are not supported in imported functions");
    return NULL;
  }
  cimp_error(C, e, "values of type '%s' are not supported (only float and double)",
             cimp_type_name(cimp_is_float_type(tt) ? st : tt));
  return NULL;
}

static SExpr *cimp_expr_node(Cimp *C, CimpState *S, CXCursor e) {
  enum CXCursorKind k = clang_getCursorKind(e);
  CXType t = clang_getCursorType(e);
  double val;
  if (cimp_is_int_type(t) && cimp_eval_const(e, &val)) return sx_const(val);
  switch (k) {
  case CXCursor_IntegerLiteral:
  case CXCursor_FloatingLiteral:
  case CXCursor_CharacterLiteral:
  case CXCursor_UnaryExpr: /* sizeof, _Alignof */
    if (cimp_eval_const(e, &val)) return sx_const(val);
    cimp_error(C, e, "cannot evaluate this constant");
    return NULL;
  case CXCursor_ParenExpr: {
    CimpKids kids = cimp_kids(e);
    if (kids.n == 1) return cimp_expr(C, S, kids.c[0]);
    break;
  }
  case CXCursor_UnexposedExpr: /* mostly ImplicitCastExpr in C */
  case CXCursor_CStyleCastExpr:
    return cimp_cast(C, S, e);
  case CXCursor_DeclRefExpr:
    return cimp_declref(C, S, e);
  case CXCursor_UnaryOperator:
    return cimp_unary(C, S, e);
  case CXCursor_BinaryOperator:
    return cimp_binary(C, S, e);
  case CXCursor_CompoundAssignOperator:
    cimp_error(C, e, "assignments inside expressions are not supported");
    return NULL;
  case CXCursor_ConditionalOperator: {
    CimpKids kids = cimp_kids(e);
    if (kids.n != 3) break;
    SExpr *c = cimp_expr(C, S, kids.c[0]);
    SExpr *a = c ? cimp_expr(C, S, kids.c[1]) : NULL;
    SExpr *b = a ? cimp_expr(C, S, kids.c[2]) : NULL;
    return b ? sx_select(c, a, b) : NULL;
  }
  case CXCursor_CallExpr:
    return cimp_call(C, S, e);
  case CXCursor_ArraySubscriptExpr:
    cimp_error(C, e, "array subscripts are not supported");
    return NULL;
  case CXCursor_MemberRefExpr:
    cimp_error(C, e, "struct member access is not supported");
    return NULL;
  case CXCursor_StringLiteral:
    cimp_error(C, e, "string literals are not supported");
    return NULL;
  case CXCursor_StmtExpr:
    cimp_error(C, e, "statement expressions are not supported");
    return NULL;
  case CXCursor_InitListExpr:
  case CXCursor_CompoundLiteralExpr:
    cimp_error(C, e, "initializer lists and compound literals are not supported");
    return NULL;
  default:
    break;
  }
  cimp_error(C, e, "unsupported expression (%s)",
             cimp_str(clang_getCursorKindSpelling(k)));
  return NULL;
}

/* Every expression passes here, so the limits hold for all kinds. */
static SExpr *cimp_expr(Cimp *C, CimpState *S, CXCursor e) {
  if (C->failed || !cimp_enter(C, e, "expression")) return NULL;
  SExpr *v = cimp_expr_node(C, S, e);
  cimp_leave(C);
  return cimp_depth_ok(C, e, v);
}

/* ---- statements ---- */

static void cimp_stmt(Cimp *C, CimpState *S, CXCursor s);

/* S's result as one expression: the parts substituted from the innermost
 * out, so that each substitution walks one part only. */
static SExpr *cimp_result(Cimp *C, const CimpState *S) {
  if (S->nrv == 0) return C->hole;
  SExpr *v = S->rv[S->nrv - 1].e;
  for (int i = S->nrv - 2; i >= 0 && v; i--)
    v = cimp_depth_ok(C, S->rv[i].at, sx_subst(S->rv[i].e, C->hole, v));
  return v;
}

static void cimp_return(CimpState *S, CXCursor s, SExpr *v) {
  cimp_fill(S, s, v);
  S->open = 0;
}

static void cimp_decl(Cimp *C, CimpState *S, CXCursor d) {
  const char *name = cimp_str(clang_getCursorSpelling(d));
  if (clang_getCursorKind(d) != CXCursor_VarDecl) {
    /* Local struct / enum / typedef declarations change nothing we model. */
    if (clang_getCursorKind(d) == CXCursor_FunctionDecl)
      cimp_error(C, d, "local function declarations are not supported");
    return;
  }
  CXType t = clang_getCursorType(d);
  enum CX_StorageClass sc = clang_Cursor_getStorageClass(d);
  if (sc == CX_SC_Static || sc == CX_SC_Extern) {
    /* A static const local is just a named constant: leave it out of the
     * environment and cimp_declref treats it like a const global. */
    if (sc == CX_SC_Static && clang_isConstQualifiedType(t)) return;
    cimp_error(C, d, "%s local variable '%s' is not supported (imported functions must be pure)",
               sc == CX_SC_Static ? "static" : "extern", name);
    return;
  }
  if (cimp_is_pointer_type(t)) {
    cimp_error(C, d, "pointer or array local '%s' is not supported (locals must be float)", name);
    return;
  }
  if (!cimp_is_float_type(t)) {
    cimp_error(C, d, "local variable '%s' has type '%s' (locals must be float)", name,
               cimp_type_name(t));
    return;
  }
  CXCursor init;
  SExpr *v = NULL;
  if (cimp_last_expr(d, &init) && !(v = cimp_expr(C, S, init))) return;
  cimp_define(S, d, name, v);
}

/* `x = e`, `x += e`, `x++` as statements: rebind x. */
static void cimp_assign(Cimp *C, CimpState *S, CXCursor e, CXCursor lhs, const char *op,
                        SExpr *rhs) {
  lhs = cimp_strip_parens(lhs);
  if (clang_getCursorKind(lhs) != CXCursor_DeclRefExpr) {
    cimp_error(C, lhs, "assignment to this kind of expression is not supported "
                       "(only to float locals and parameters)");
    return;
  }
  CXCursor ref = clang_getCursorReferenced(lhs);
  const char *name = cimp_str(clang_getCursorSpelling(lhs));
  CimpVar *v = cimp_lookup(S, ref);
  if (!v) {
    cimp_error(C, lhs, "writes global variable '%s'", name);
    return;
  }
  if (!strcmp(op, "=")) {
    v->val = rhs;
    return;
  }
  if (!v->val) {
    cimp_error(C, lhs, "'%s' may be used uninitialized", name);
    return;
  }
  SxKind k = cimp_binop_kind(arena_strndup(op, strlen(op) - 1));   /* "+=" -> "+" */
  if (k != SX_ADD && k != SX_SUB && k != SX_MUL && k != SX_DIV) {
    cimp_error(C, e, "operator '%s' is not supported", op);
    return;
  }
  v->val = cimp_depth_ok(C, e, sx_bin(k, v->val, rhs));
}

static void cimp_expr_stmt(Cimp *C, CimpState *S, CXCursor s) {
  CXCursor e = cimp_strip_parens(s);
  enum CXCursorKind k = clang_getCursorKind(e);
  CimpKids kids = cimp_kids(e);
  if ((k == CXCursor_BinaryOperator || k == CXCursor_CompoundAssignOperator) && kids.n == 2) {
    const char *op = cimp_binop(C, e, kids.c[1]);
    if (!op) return;
    if (k == CXCursor_CompoundAssignOperator || !strcmp(op, "=")) {
      SExpr *rhs = cimp_expr(C, S, kids.c[1]);
      if (rhs) cimp_assign(C, S, e, kids.c[0], op, rhs);
      return;
    }
  }
  if (k == CXCursor_UnaryOperator && kids.n == 1) {
    const char *op = cimp_unop(C, e, kids.c[0]);
    if (!op) return;
    if (!strcmp(op, "++") || !strcmp(op, "--")) {
      cimp_assign(C, S, e, kids.c[0], op[0] == '+' ? "+=" : "-=", sx_const(1));
      return;
    }
  }
  CXCursor sub;
  if (k == CXCursor_CStyleCastExpr &&
      clang_getCanonicalType(clang_getCursorType(e)).kind == CXType_Void && cimp_last_expr(e, &sub))
    e = sub; /* (void)x; — evaluated for errors only */
  /* Any other expression has no effect on the result, but it must still be
   * something we understand (this is where `printf(...)` is caught). */
  cimp_expr(C, S, e);
}

static void cimp_if(Cimp *C, CimpState *S, CXCursor s) {
  CimpKids k = cimp_kids(s);
  if (k.n < 2 || k.n > 3) {
    cimp_error(C, s, "unsupported form of 'if'");
    return;
  }
  SExpr *c = cimp_expr(C, S, k.c[0]);
  if (!c) return;
  CimpState T = cimp_branch(S), E = cimp_branch(S);
  cimp_stmt(C, &T, k.c[1]);
  if (k.n == 3) cimp_stmt(C, &E, k.c[2]);
  if (C->failed) return;
  /* Merge the variables that existed before the if; a branch that has
   * returned on every path contributes nothing to them. */
  for (int i = 0; i < S->n; i++) {
    SExpr *a = T.vars[i].val, *b = E.vars[i].val;
    if (!T.open) S->vars[i].val = b;
    else if (!E.open) S->vars[i].val = a;
    else S->vars[i].val = a && b ? sx_select(c, a, b) : NULL;
  }
  SExpr *t = cimp_result(C, &T), *e = t ? cimp_result(C, &E) : NULL;
  if (!e) return;
  SExpr *r = cimp_depth_ok(C, s, sx_select(c, t, e));
  if (!r) return;
  cimp_fill(S, s, r);
  S->open = T.open || E.open;
}

static void cimp_stmt_node(Cimp *C, CimpState *S, CXCursor s) {
  enum CXCursorKind k = clang_getCursorKind(s);
  switch (k) {
  case CXCursor_CompoundStmt: {
    CimpKids kids = cimp_kids(s);
    for (int i = 0; i < kids.n && !C->failed; i++) cimp_stmt(C, S, kids.c[i]);
    return;
  }
  case CXCursor_DeclStmt: {
    CimpKids kids = cimp_kids(s);
    for (int i = 0; i < kids.n && !C->failed; i++) cimp_decl(C, S, kids.c[i]);
    return;
  }
  case CXCursor_ReturnStmt: {
    CXCursor e;
    if (!cimp_last_expr(s, &e)) {
      cimp_error(C, s, "'return' without a value");
      return;
    }
    SExpr *v = cimp_expr(C, S, e);
    if (v) cimp_return(S, s, v);
    return;
  }
  case CXCursor_IfStmt:
    cimp_if(C, S, s);
    return;
  case CXCursor_NullStmt:
    return;
  case CXCursor_ForStmt:
  case CXCursor_WhileStmt:
  case CXCursor_DoStmt:
    cimp_error(C, s, "loops are not supported in imported functions");
    return;
  case CXCursor_SwitchStmt:
    cimp_error(C, s, "'switch' is not supported in imported functions");
    return;
  case CXCursor_GotoStmt:
  case CXCursor_IndirectGotoStmt:
  case CXCursor_LabelStmt:
    cimp_error(C, s, "'goto' and labels are not supported in imported functions");
    return;
  case CXCursor_GCCAsmStmt:
  case CXCursor_MSAsmStmt:
    cimp_error(C, s, "inline assembly is not supported in imported functions");
    return;
  default:
    break;
  }
  if (clang_isExpression(k)) {
    cimp_expr_stmt(C, S, s);
    return;
  }
  cimp_error(C, s, "unsupported statement (%s)", cimp_str(clang_getCursorKindSpelling(k)));
}

static void cimp_stmt(Cimp *C, CimpState *S, CXCursor s) {
  if (C->failed || !S->open) return;   /* code after return is dead */
  if (!cimp_enter(C, s, "statement")) return;
  cimp_stmt_node(C, S, s);
  cimp_leave(C);
}

/* ---- functions ---- */

static int cimp_check_signature(Cimp *C, CXCursor fn, int is_top) {
  const char *name = cimp_str(clang_getCursorSpelling(fn));
  CXType rt = clang_getCursorResultType(fn);
  if (!cimp_is_float_type(rt)) {
    if (is_top)
      cimp_error(C, fn, "return type must be float (or double), not '%s'", cimp_type_name(rt));
    else
      cimp_error(C, fn, "called function '%s' must return float (or double), not '%s'", name,
                 cimp_type_name(rt));
    return 0;
  }
  if (clang_Cursor_isVariadic(fn)) {
    cimp_error(C, fn, "variadic function '%s' is not supported", name);
    return 0;
  }
  int n = clang_Cursor_getNumArguments(fn);
  for (int i = 0; i < n; i++) {
    CXCursor p = clang_Cursor_getArgument(fn, (unsigned)i);
    CXType t = clang_getCursorType(p);
    const char *pn = cimp_str(clang_getCursorSpelling(p));
    if (!*pn) pn = arena_printf("#%d", i + 1);
    if (cimp_is_float_type(t)) continue;
    if (cimp_is_pointer_type(t))
      cimp_error(C, p, "pointer parameter '%s' is not supported (parameters must be float)", pn);
    else
      cimp_error(C, p, "parameter '%s' has type '%s' (parameters must be float)", pn,
                 cimp_type_name(t));
    return 0;
  }
  return 1;
}

/* Inline fn with its parameters bound to args; call is the call site (NULL
 * for the imported function itself). */
static SExpr *cimp_function(Cimp *C, CXCursor fn, SExpr **args, int nargs, const CXCursor *call) {
  if (!cimp_check_signature(C, fn, call == NULL)) return NULL;
  const char *name = cimp_str(clang_getCursorSpelling(fn));
  int n = clang_Cursor_getNumArguments(fn);
  if (n != nargs) {
    cimp_error(C, call ? *call : fn, "'%s' takes %d argument%s, not %d", name, n,
               n == 1 ? "" : "s", nargs);
    return NULL;
  }
  CimpKids kids = cimp_kids(fn);
  if (kids.n == 0 || clang_getCursorKind(kids.c[kids.n - 1]) != CXCursor_CompoundStmt) {
    cimp_error(C, fn, "'%s' has no body", name);
    return NULL;
  }
  CimpFrame frame = {fn, name, call ? *call : clang_getNullCursor(), call != NULL, C->frame};
  C->frame = &frame;
  C->depth++;
  CimpState S = {0};
  S.open = 1;
  for (int i = 0; i < n; i++) {
    CXCursor p = clang_Cursor_getArgument(fn, (unsigned)i);
    cimp_define(&S, p, cimp_str(clang_getCursorSpelling(p)), args[i]);
  }
  cimp_stmt(C, &S, kids.c[kids.n - 1]);
  if (!C->failed && S.open)
    cimp_error_at_end(C, kids.c[kids.n - 1], "control can reach the end of '%s' without a 'return'",
                      name);
  SExpr *v = C->failed ? NULL : cimp_result(C, &S);
  C->depth--;
  C->frame = frame.up;
  return v;
}

/* ---- entry point ---- */

typedef struct CimpFind {
  const char *name;
  CXCursor def, decl, other;
} CimpFind;

static enum CXChildVisitResult cimp_find_visit(CXCursor c, CXCursor parent, CXClientData d) {
  CimpFind *F = d;
  if (cimp_in_system_header(c)) return CXChildVisit_Continue;
  CXString s = clang_getCursorSpelling(c);
  int same = !strcmp(clang_getCString(s), F->name);
  clang_disposeString(s);
  if (!same) return CXChildVisit_Continue;
  if (clang_getCursorKind(c) == CXCursor_FunctionDecl) {
    if (clang_isCursorDefinition(c)) F->def = c;
    else if (clang_Cursor_isNull(F->decl)) F->decl = c;
  } else if (clang_Cursor_isNull(F->other)) {
    F->other = c;
  }
  return CXChildVisit_Continue;
}

static const char *cimp_resolve(const char *header, const char *base_dir) {
  if (header[0] == '/' || !base_dir || !*base_dir || !strcmp(base_dir, ".")) return header;
  size_t n = strlen(base_dir);
  return arena_printf("%s%s%s", base_dir, base_dir[n - 1] == '/' ? "" : "/", header);
}

/* The files a header includes by a quoted name (or an absolute path) must
 * pass the source limits too, checked before libclang reads any of them:
 * `#include "/dev/zero"` would otherwise run it out of memory.  Follows
 * quoted includes found next to their includer, depth-first, each file once;
 * <system> headers are trusted.  0, or -1 after reporting. */
static int cimp_check_includes(const char *path, StrMap *seen, int depth) {
  if (depth > 32 || strmap_get(seen, path)) return 0;
  strmap_put(seen, path, (void *)path);
  SrcFile *f = src_load(path);
  if (!f) return 0;   /* the includer itself was checked by its own includer */
  const char *dir = strrchr(path, '/');
  char *base = dir ? arena_strndup(path, (size_t)(dir - path)) : ".";
  int line = 1;
  for (const char *p = f->text; *p; line++) {
    const char *e = strchr(p, '\n');
    if (!e) e = p + strlen(p);
    const char *q = p;
    while (q < e && (*q == ' ' || *q == '\t')) q++;
    if (q < e && *q == '#') {
      q++;
      while (q < e && (*q == ' ' || *q == '\t')) q++;
      if (e - q > 7 && !strncmp(q, "include", 7)) {
        const char *o = q + 7;
        while (o < e && (*o == ' ' || *o == '\t')) o++;
        char close = o < e && *o == '"' ? '"' : o < e && *o == '<' ? '>' : 0;
        const char *c = close ? memchr(o + 1, close, (size_t)(e - o - 1)) : NULL;
        if (c) {
          char *name = arena_strndup(o + 1, (size_t)(c - o - 1));
          const char *inc = name[0] == '/' ? name : close == '"' ? cimp_resolve(name, base) : NULL;
          struct stat st;
          if (inc && !stat(inc, &st)) {
            const char *why = src_refusal(inc);
            if (why) {
              diag_error_at_path(path, line, (int)(o - p) + 1, "cannot include '%s': %s", name, why);
              return -1;
            }
            if (cimp_check_includes(inc, seen, depth + 1)) return -1;
          }
        }
      }
    }
    p = *e ? e + 1 : e;
  }
  return 0;
}

/* libclang's first error, reported where it points. */
static int cimp_parse_errors(CXTranslationUnit tu, const char *header, const char *name,
                             SrcLoc use_loc) {
  unsigned n = clang_getNumDiagnostics(tu);
  for (unsigned i = 0; i < n; i++) {
    CXDiagnostic d = clang_getDiagnostic(tu, i);
    enum CXDiagnosticSeverity sev = clang_getDiagnosticSeverity(d);
    if (sev >= CXDiagnostic_Error) {
      CXFile f = NULL;
      unsigned line = 0, col = 0;
      clang_getExpansionLocation(clang_getDiagnosticLocation(d), &f, &line, &col, NULL);
      const char *msg = cimp_str(clang_getDiagnosticSpelling(d));
      if (f)
        diag_error_at_path(cimp_str(clang_getFileName(f)), (int)line, (int)col, "%s", msg);
      else
        diag_error(use_loc, "%s: %s", header, msg);
      diag_note(use_loc, "while importing '%s' from '%s'", name, header);
      clang_disposeDiagnostic(d);
      return 1;
    }
    clang_disposeDiagnostic(d);
  }
  return 0;
}

/* Find `name` in the parsed header and import it. */
static ScalarFn *cimp_import_tu(CXTranslationUnit tu, const char *header, const char *path,
                                const char *name, SrcLoc use_loc) {
  if (cimp_parse_errors(tu, header, name, use_loc)) return NULL;
  CimpFind F = {name, clang_getNullCursor(), clang_getNullCursor(), clang_getNullCursor()};
  clang_visitChildren(clang_getTranslationUnitCursor(tu), cimp_find_visit, &F);
  if (clang_Cursor_isNull(F.def)) {
    CXCursor at = !clang_Cursor_isNull(F.decl) ? F.decl : F.other;
    if (clang_Cursor_isNull(at)) {
      diag_error(use_loc, "function '%s' not found in '%s'", name, header);
      return NULL;
    }
    const char *p;
    int line, col;
    cimp_where(at, &p, &line, &col);
    if (!clang_Cursor_isNull(F.decl))
      diag_error_at_path(p, line, col,
                         "%s: declared without a body (imported functions must be defined "
                         "in the header)", name);
    else
      diag_error_at_path(p, line, col, "%s: not a function", name);
    diag_note(use_loc, "while importing '%s' from '%s'", name, header);
    return NULL;
  }

  Cimp C = {0};
  C.tu = tu;
  C.top = arena_strdup(name);
  C.def = F.def;
  C.hole = sx_arg(-1);   /* never escapes: an open result is an error */
  int n = clang_Cursor_getNumArguments(F.def);
  if (n < 0) n = 0;
  SExpr **argv = arena_alloc(sizeof(SExpr *) * (size_t)(n ? n : 1));
  const char **argnames = arena_alloc(sizeof(char *) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    argv[i] = sx_arg(i);
    CXCursor p = clang_Cursor_getArgument(F.def, (unsigned)i);
    const char *pn = cimp_str(clang_getCursorSpelling(p));
    argnames[i] = *pn ? pn : arena_printf("arg%d", i);
  }
  SExpr *body = cimp_function(&C, F.def, argv, n, NULL);
  if (!body) {
    diag_note(use_loc, "while importing '%s' from '%s'", name, header);
    return NULL;
  }
  const char *hpath;
  int line, col;
  cimp_where(F.def, &hpath, &line, &col);
  ScalarFn *fn = arena_alloc(sizeof *fn);
  fn->name = C.top;
  fn->header = arena_strdup(path);
  fn->line = line;
  fn->nargs = n;
  fn->argnames = argnames;
  fn->body = body;
  fn->dbody = arena_alloc(sizeof(SExpr *) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) fn->dbody[i] = sx_diff(body, i);
  return fn;
}

/* libclang's parser recurses once per nested unary operator or cast (no
 * bracket, so -fbracket-depth does not bound it) on its own 8 MiB stack:
 * some 4000 of them in a header kill the process before cimport sees a
 * tree.  Headers (with their quoted includes) of more than CIMP_PROBE_BYTES,
 * the least that can hold that many, are parsed first in a child process;
 * if it dies, the import is refused with a message.  Activation headers
 * are a few hundred bytes and skip the probe. */
#define CIMP_PROBE_BYTES 4096

/* libclang's parse of path as cimport asks for it: *index and *tu for the
 * caller to dispose of (*tu NULL when the parse failed). */
static enum CXErrorCode cimp_parse(const char *path, const char *const *args, int nargs,
                                   CXIndex *index, CXTranslationUnit *tu) {
  *index = clang_createIndex(0, 0);
  *tu = NULL;
  return clang_parseTranslationUnit2(*index, path, args, nargs, NULL, 0, CXTranslationUnit_None,
                                     tu);
}

static bool cimp_parse_survives(const char *path, const char *const *args, int nargs) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return true; /* cannot tell: parse as before */
  if (pid == 0) {
    CXIndex index;
    CXTranslationUnit tu;
    cimp_parse(path, args, nargs, &index, &tu);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return true;
  return WIFEXITED(status);
}

static int64_t cimp_user_bytes(const StrMap *seen) {
  int64_t n = 0;
  for (int i = 0; i < seen->cap; i++) {
    struct stat st;
    if (seen->keys[i] && !stat(seen->keys[i], &st)) n += st.st_size;
  }
  return n;
}

ScalarFn *cimp_import(const char *header, const char *base_dir, const char *name,
                      SrcLoc use_loc) {
  const char *path = cimp_resolve(header, base_dir);
  /* libclang reads whatever it is given (/dev/zero until it runs out of
   * memory): the header must be a regular file within the source limit. */
  const char *why = src_refusal(path);
  if (why) {
    diag_error(use_loc, "cannot open header '%s': %s", header, why);
    return NULL;
  }
  StrMap seen = {0};
  if (cimp_check_includes(path, &seen, 0)) {
    diag_note(use_loc, "while importing '%s' from '%s'", name, header);
    return NULL;
  }

  /* _DEFAULT_SOURCE: strict C11 would hide M_PI and friends in <math.h>,
   * which activation code uses all the time. */
  const char *args[6] = {"-x", "c", "-std=c11", "-D_DEFAULT_SOURCE"};
  int nargs = 4;
  if (SHARDC_CLANG_RESOURCE_DIR[0]) {
    /* Without it libclang may not find its builtin headers (stddef.h). */
    args[nargs++] = "-resource-dir";
    args[nargs++] = SHARDC_CLANG_RESOURCE_DIR;
  }
  if (cimp_user_bytes(&seen) > CIMP_PROBE_BYTES && !cimp_parse_survives(path, args, nargs)) {
    diag_error(use_loc, "cannot import '%s' from '%s': libclang crashed parsing it (an "
               "expression nested too deeply for its parser, such as thousands of unary "
               "operators or casts in a row?)", name, header);
    return NULL;
  }
  CXIndex index;
  CXTranslationUnit tu;
  enum CXErrorCode err = cimp_parse(path, args, nargs, &index, &tu);
  ScalarFn *fn = NULL;
  if (err != CXError_Success || !tu)
    diag_error(use_loc, "cannot parse header '%s' (libclang error %d)", header, (int)err);
  else
    fn = cimp_import_tu(tu, header, path, name, use_loc);
  if (tu) clang_disposeTranslationUnit(tu);
  clang_disposeIndex(index);
  return fn;
}
