/* parser.y — grammar of the shardc DSL (docs/language.md has it in EBNF). */
%define api.pure full
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {void *scanner}
%parse-param {struct LexState *ls}

%code requires {
#include "ast.h"
#include "lexstate.h"
}

%code {
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lexer.h"

/* Expressions nested deeper than this are refused: every later pass walks
 * them recursively. */
enum { MAX_EXPR_DEPTH = 256 };

static SrcLoc L(struct LexState *ls, YYLTYPE l) {
  SrcLoc s = {ls->file, l.first_line, l.first_column,
              l.last_line == l.first_line ? l.last_column - l.first_column : 1};
  if (s.len < 1) s.len = 1;
  return s;
}

static void yyerror(YYLTYPE *loc, void *scanner, struct LexState *ls, const char *msg);

/* The scanner, plus what syntax errors need: the lookahead's text, where the
 * token before it ends, and the open brackets. */
static int next_token(YYSTYPE *lval, YYLTYPE *lloc, void *scanner, struct LexState *ls) {
  if (ls->fatal) return YYEOF;
  int t = yylex(lval, lloc, scanner);
  if (t == YYerror) return t;
  if (t == YYEOF) {
    /* End of file sits just past the last token. */
    int line = ls->ntoks ? ls->last_line : 1, col = ls->ntoks ? ls->last_end : 1;
    *lloc = (YYLTYPE){line, col, line, col + 1};
  }
  ls->prev_line = ls->last_line;
  ls->prev_end = ls->last_end;
  ls->last_line = lloc->last_line;
  ls->last_end = lloc->last_column;
  ls->ntoks++;
  if (t == YYEOF) {
    ls->tok[0] = 0;
  } else {
    const char *text = yyget_text(scanner);
    int n = yyget_leng(scanner);
    snprintf(ls->tok, sizeof ls->tok, "%.*s%s", n > 40 ? 40 : n, text, n > 40 ? "..." : "");
  }
  if (t == '(' || t == '[' || t == '{') {
    if (ls->nopen == LEX_MAX_NEST) {
      diag_error(L(ls, *lloc), "brackets nested too deeply (limit is %d)", LEX_MAX_NEST);
      ls->fatal = true;
      return YYEOF;
    }
    ls->open[ls->nopen].c = (char)t;
    ls->open[ls->nopen].line = lloc->first_line;
    ls->open[ls->nopen].col = lloc->first_column;
    ls->nopen++;
  } else if (t == ')' || t == ']' || t == '}') {
    char want = t == ')' ? '(' : t == ']' ? '[' : '{';
    if (ls->nopen && ls->open[ls->nopen - 1].c == want) ls->nopen--;
  }
  return t;
}
#define yylex(lval, lloc, scanner) next_token(lval, lloc, scanner, ls)

static Expr *mk(ExprKind k, SrcLoc loc) {
  Expr *e = arena_alloc(sizeof *e);
  e->kind = k;
  e->loc = loc;
  return e;
}

/* Sets e's depth from its children's and reports the first level that goes
 * past the limit (once per chain: the parents are deeper still). */
static Expr *deep(Expr *e, int child_depth) {
  e->depth = child_depth + 1;
  if (e->depth == MAX_EXPR_DEPTH + 1)
    diag_error(e->loc, "expression nested too deeply (limit is %d levels)", MAX_EXPR_DEPTH);
  return e;
}

static int max_depth(int a, int b) { return a > b ? a : b; }

static Expr *mkbin(int op, Expr *a, Expr *b, SrcLoc all, SrcLoc oploc) {
  Expr *e = mk(E_BIN, all);
  e->op = op;
  e->lhs = a;
  e->rhs = b;
  e->oploc = oploc;
  return deep(e, max_depth(a->depth, b->depth));
}

static Decl *mkdecl(DeclKind k, SrcLoc loc) {
  Decl *d = arena_alloc(sizeof *d);
  d->kind = k;
  d->loc = loc;
  return d;
}

static Arg *mkarg(const char *name, SrcLoc loc, Expr *v) {
  Arg *a = arena_alloc(sizeof *a);
  a->name = name;
  a->loc = loc;
  a->value = v;
  return a;
}

static Stmt *mkstmt(StmtKind k, SrcLoc loc) {
  Stmt *s = arena_alloc(sizeof *s);
  s->kind = k;
  s->loc = loc;
  return s;
}

/* Integers that do not fit in 63 bits are an error, not a wraparound. */
static long long parse_int(SrcLoc loc, const char *s) {
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE) {
    diag_error(loc, "integer literal '%s' is too large (limit is 2^63 - 1)", s);
    return 0;
  }
  return v;
}

static double parse_float(SrcLoc loc, const char *s) {
  errno = 0;
  double v = strtod(s, NULL);
  if (errno == ERANGE && isinf(v)) {
    diag_error(loc, "number '%s' is too large for a double", s);
    return 0;
  }
  return v;
}

static char *unquote(const char *s) {
  size_t n = strlen(s);
  return arena_strndup(s + 1, n >= 2 ? n - 2 : 0);
}
}

%union {
  long long ival;
  const char *str;
  Expr *expr;
  Arg *arg;
  Stmt *stmt;
  Param *param;
  Decl *decl;
  TypeAnn *type;
  PtrVec vec;
}

%token CONST "const" USE "use" FROM "from" LAYER "layer" MODEL "model"
%token MESH "mesh" TRAIN "train" REPEAT "repeat" AS "as" RETURN "return"
%token <ival> BOOL "boolean"
%token <str> IDENT "identifier" INT "integer" FLOAT "number" STRING "string"
%token <str> UNIT "unit" GRID "grid size"

%type <expr> expr primary
%type <arg> arg item
%type <vec> args args_opt arglist items const_list decls exprs exprs_opt
%type <vec> stmts params params_opt dims
%type <stmt> stmt
%type <param> param
%type <str> key
%type <decl> decl const_item
%type <type> type_opt

%left '+' '-'
%left '*' '/' '%'
%precedence NEG
%precedence UNIT

%start program

%%

program:
    decls                        { ls->prog->decls = $1; }
;

decls:
    %empty                       { $$ = (PtrVec){0}; }
  | decls decl                   { $$ = $1; if ($2) vec_push(&$$, $2); }
  | decls const_list             { $$ = $1; for (int i = 0; i < $2.len; i++) vec_push(&$$, $2.data[i]); }
  | decls error                  { $$ = $1; }
;

/* const NAME = expr [, NAME = expr]* */
const_list:
    "const" const_item           { $$ = (PtrVec){0}; vec_push(&$$, $2); }
  | const_list ',' const_item    { $$ = $1; vec_push(&$$, $3); }
;

const_item:
    IDENT '=' expr               { $$ = mkdecl(D_CONST, L(ls, @1)); $$->name = $1;
                                   $$->name_loc = L(ls, @1); $$->value = $3; }
;

decl:
    "use" IDENT "from" STRING    { $$ = mkdecl(D_USE, L(ls, @1)); $$->name = $2;
                                   $$->name_loc = L(ls, @2); $$->header = unquote($4);
                                   $$->header_loc = L(ls, @4); }
  | "layer" IDENT '(' params_opt ')' '{' stmts '}'
                                 { $$ = mkdecl(D_LAYER, L(ls, @1)); $$->name = $2;
                                   $$->name_loc = L(ls, @2); $$->params = $4; $$->body = $7;
                                   $$->end_loc = L(ls, @8); }
  | "model" IDENT '(' params_opt ')' '{' stmts '}'
                                 { $$ = mkdecl(D_MODEL, L(ls, @1)); $$->name = $2;
                                   $$->name_loc = L(ls, @2); $$->params = $4; $$->body = $7;
                                   $$->end_loc = L(ls, @8); }
  | "mesh" IDENT '{' items '}'   { $$ = mkdecl(D_MESH, L(ls, @1)); $$->name = $2;
                                   $$->name_loc = L(ls, @2); $$->items = $4;
                                   $$->end_loc = L(ls, @5); }
  | "train" '{' items '}'        { $$ = mkdecl(D_TRAIN, L(ls, @1)); $$->items = $3;
                                   $$->end_loc = L(ls, @4); }
  | "train" IDENT '{' items '}'  { $$ = mkdecl(D_TRAIN, L(ls, @1)); $$->name = $2;
                                   $$->name_loc = L(ls, @2); $$->items = $4;
                                   $$->end_loc = L(ls, @5); }
  | "layer" error '}'            { $$ = NULL; }
  | "model" error '}'            { $$ = NULL; }
  | "mesh" error '}'             { $$ = NULL; }
  | "train" error '}'            { $$ = NULL; }
;

params_opt:
    %empty                       { $$ = (PtrVec){0}; }
  | params
  | params ','
;

params:
    param                        { $$ = (PtrVec){0}; vec_push(&$$, $1); }
  | params ',' param             { $$ = $1; vec_push(&$$, $3); }
;

/* x | x = default | tokens: i32[B, T] */
param:
    IDENT type_opt               { $$ = arena_alloc(sizeof *$$); $$->name = $1;
                                   $$->loc = L(ls, @1); $$->type = $2; }
  | IDENT '=' expr               { $$ = arena_alloc(sizeof *$$); $$->name = $1;
                                   $$->loc = L(ls, @1); $$->deflt = $3; }
;

type_opt:
    %empty                       { $$ = NULL; }
  | ':' IDENT '[' dims ']'       { $$ = arena_alloc(sizeof *$$); $$->dtype = $2;
                                   $$->loc = L(ls, @2); $$->dims = $4; }
;

dims:
    expr                         { $$ = (PtrVec){0}; vec_push(&$$, $1); }
  | dims ',' expr                { $$ = $1; vec_push(&$$, $3); }
;

/* Block items: `key = value`, separated by commas or nothing. */
items:
    %empty                       { $$ = (PtrVec){0}; }
  | items item                   { $$ = $1; vec_push(&$$, $2); }
  | items ','                    { $$ = $1; }
  | items error                  { $$ = $1; }
;

item:
    key '=' expr                 { $$ = mkarg($1, L(ls, @1), $3); }
;

/* Block keys may be keywords: `model = gpt, mesh = laptop`. */
key:
    IDENT
  | "model"                      { $$ = "model"; }
  | "mesh"                       { $$ = "mesh"; }
;

stmts:
    %empty                       { $$ = (PtrVec){0}; }
  | stmts stmt                   { $$ = $1; vec_push(&$$, $2); }
  | stmts error                  { $$ = $1; }
;

stmt:
    IDENT '=' expr               { $$ = mkstmt(S_ASSIGN, L(ls, @1)); $$->name = $1;
                                   $$->name_loc = L(ls, @1); $$->value = $3; }
  | "return" expr                { $$ = mkstmt(S_RETURN, L(ls, @1)); $$->value = $2; }
  | "repeat" expr '{' stmts '}'  { $$ = mkstmt(S_REPEAT, L(ls, @1)); $$->value = $2;
                                   $$->body = $4; }
  | "repeat" expr "as" IDENT '{' stmts '}'
                                 { $$ = mkstmt(S_REPEAT, L(ls, @1)); $$->value = $2;
                                   $$->name = $4; $$->name_loc = L(ls, @4); $$->body = $6; }
;

expr:
    primary
  | expr '+' expr                { $$ = mkbin('+', $1, $3, L(ls, @$), L(ls, @2)); }
  | expr '-' expr                { $$ = mkbin('-', $1, $3, L(ls, @$), L(ls, @2)); }
  | expr '*' expr                { $$ = mkbin('*', $1, $3, L(ls, @$), L(ls, @2)); }
  | expr '/' expr                { $$ = mkbin('/', $1, $3, L(ls, @$), L(ls, @2)); }
  | expr '%' expr                { $$ = mkbin('%', $1, $3, L(ls, @$), L(ls, @2)); }
  | '-' expr %prec NEG           { $$ = mk(E_NEG, L(ls, @$)); $$->lhs = $2; deep($$, $2->depth); }
  | expr UNIT                    { $$ = mk(E_UNIT, L(ls, @$)); $$->lhs = $1; $$->str = $2;
                                   deep($$, $1->depth); }
;

primary:
    INT                          { $$ = mk(E_INT, L(ls, @1)); $$->ival = parse_int(L(ls, @1), $1); }
  | FLOAT                        { $$ = mk(E_FLOAT, L(ls, @1)); $$->fval = parse_float(L(ls, @1), $1); }
  | BOOL                         { $$ = mk(E_BOOL, L(ls, @1)); $$->ival = $1; }
  | STRING                       { $$ = mk(E_STRING, L(ls, @1)); $$->str = unquote($1); }
  | GRID                         { $$ = mk(E_GRID, L(ls, @1)); char *x = strchr($1, 'x');
                                   /* Each side of the 'x' is its own span. */
                                   SrcLoc a = L(ls, @1), b = a;
                                   a.len = (int)(x - $1);
                                   b.col += a.len + 1;
                                   b.len = (int)strlen(x + 1);
                                   $$->ival = parse_int(a, arena_strndup($1, (size_t)(x - $1)));
                                   $$->ival2 = parse_int(b, x + 1); $$->str = $1; }
  | IDENT                        { $$ = mk(E_IDENT, L(ls, @1)); $$->str = $1; }
  | IDENT '(' args_opt ')'       { $$ = mk(E_CALL, L(ls, @1)); $$->str = $1; $$->args = $3;
                                   int d = 0;
                                   for (int i = 0; i < $3.len; i++)
                                     d = max_depth(d, ((Arg *)$3.data[i])->value->depth);
                                   deep($$, d); }
  | '(' expr ')'                 { $$ = $2; }
  | '(' expr ',' exprs_opt ')'   { $$ = mk(E_TUPLE, L(ls, @$)); vec_push(&$$->args, $2);
                                   int d = $2->depth;
                                   for (int i = 0; i < $4.len; i++) {
                                     vec_push(&$$->args, $4.data[i]);
                                     d = max_depth(d, ((Expr *)$4.data[i])->depth);
                                   }
                                   deep($$, d); }
;

exprs_opt:
    %empty                       { $$ = (PtrVec){0}; }
  | exprs
  | exprs ','
;

exprs:
    expr                         { $$ = (PtrVec){0}; vec_push(&$$, $1); }
  | exprs ',' expr               { $$ = $1; vec_push(&$$, $3); }
;

args_opt:
    %empty                       { $$ = (PtrVec){0}; }
  | arglist
;

arglist:
    args
  | args ','
;

args:
    arg                          { $$ = (PtrVec){0}; vec_push(&$$, $1); }
  | args ',' arg                 { $$ = $1; vec_push(&$$, $3); }
;

arg:
    expr                         { $$ = mkarg(NULL, $1->loc, $1); }
  | IDENT '=' expr               { $$ = mkarg($1, L(ls, @1), $3); }
;

%%

/* Only "memory exhausted" comes here: syntax errors go through
 * yyreport_syntax_error below. */
static void yyerror(YYLTYPE *loc, void *scanner, struct LexState *ls, const char *msg) {
  (void)scanner;
  if (ls->fatal) return;
  if (!strcmp(msg, "memory exhausted"))
    diag_error(L(ls, *loc), "expression nested too deeply (the parser's limit is %d levels)",
               YYMAXDEPTH);
  else
    diag_error(L(ls, *loc), "%s", msg);
  ls->fatal = true;
}

/* ---- syntax error messages ---- */

static const char *sym_text(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_YYEOF: return "end of file";
  case YYSYMBOL_IDENT: return "a name";
  case YYSYMBOL_INT: return "an integer";
  case YYSYMBOL_FLOAT: return "a number";
  case YYSYMBOL_STRING: return "a string";
  case YYSYMBOL_UNIT: return "a unit";
  case YYSYMBOL_GRID: return "a grid size";
  case YYSYMBOL_BOOL: return "true or false";
  default: break;
  }
  return NULL;
}

/* Punctuation names are "'('"; keywords are "const". */
static void sym_quoted(yysymbol_kind_t k, char *buf, size_t cap) {
  const char *name = yysymbol_name(k);
  const char *t = sym_text(k);
  if (t) snprintf(buf, cap, "%s", t);
  else if (name[0] == '\'') snprintf(buf, cap, "%s", name);
  else if (name[0] == '"') snprintf(buf, cap, "'%.*s'", (int)strlen(name) - 2, name + 1);
  else snprintf(buf, cap, "'%s'", name);
}

static bool is_char_sym(yysymbol_kind_t k, char c) {
  const char *name = yysymbol_name(k);
  return name[0] == '\'' && name[1] == c && name[2] == '\'';
}

/* The lookahead, with its text: "name 'cpu'", "number 4", "'}'". */
static void describe_token(yysymbol_kind_t k, const char *text, char *buf, size_t cap) {
  switch (k) {
  case YYSYMBOL_IDENT: snprintf(buf, cap, "name '%s'", text); break;
  case YYSYMBOL_INT:
  case YYSYMBOL_FLOAT: snprintf(buf, cap, "number %s", text); break;
  case YYSYMBOL_STRING: snprintf(buf, cap, "string %s", text); break;
  case YYSYMBOL_UNIT:
  case YYSYMBOL_GRID:
  case YYSYMBOL_BOOL: snprintf(buf, cap, "'%s'", text); break;
  default: sym_quoted(k, buf, cap); break;
  }
}

/* "an expression", "'='", "')' or ','", "a declaration"; "" when the list
 * would be too long to help. */
static void describe_expected(const yysymbol_kind_t *exp, int n, char *buf, size_t cap) {
  bool has_expr = false, has_decl = false;
  for (int i = 0; i < n; i++) {
    if (exp[i] == YYSYMBOL_INT) has_expr = true;
    if (exp[i] == YYSYMBOL_LAYER || exp[i] == YYSYMBOL_MESH) has_decl = true;
  }
  const char *items[16];
  char quoted[16][32];
  int m = 0;
  if (has_expr) items[m++] = "an expression";
  if (has_decl) items[m++] = "a declaration";
  for (int i = 0; i < n && m < 16; i++) {
    yysymbol_kind_t k = exp[i];
    if (has_expr && (k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT || k == YYSYMBOL_STRING ||
                     k == YYSYMBOL_BOOL || k == YYSYMBOL_GRID || k == YYSYMBOL_IDENT ||
                     is_char_sym(k, '(') || is_char_sym(k, '-')))
      continue;
    if (has_decl && (k == YYSYMBOL_CONST || k == YYSYMBOL_USE || k == YYSYMBOL_LAYER ||
                     k == YYSYMBOL_MODEL || k == YYSYMBOL_MESH || k == YYSYMBOL_TRAIN))
      continue;
    /* Operators and units may always continue an expression, and the end
     * of the file may always follow a declaration: noise. */
    if ((k == YYSYMBOL_YYEOF && n > 1) || k == YYSYMBOL_UNIT || is_char_sym(k, '+') || is_char_sym(k, '-') || is_char_sym(k, '*') ||
        is_char_sym(k, '/') || is_char_sym(k, '%'))
      continue;
    sym_quoted(k, quoted[m], sizeof quoted[m]);
    items[m] = quoted[m];
    m++;
  }
  buf[0] = 0;
  if (m == 0 || m > 4) return;
  size_t o = 0;
  for (int i = 0; i < m; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%s", i == 0 ? "" : i == m - 1 ? " or " : ", ",
                          items[i]);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, struct LexState *ls) {
  (void)scanner;
  if (ls->fatal) return 0;
  yysymbol_kind_t tok = yypcontext_token(ctx);
  SrcLoc at = L(ls, *yypcontext_location(ctx));
  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
  /* The innermost bracket still open before the lookahead, and whether its
   * closer is what the parser wants. */
  int top = ls->nopen - 1;
  if (top >= 0 && (is_char_sym(tok, '(') || is_char_sym(tok, '[') || is_char_sym(tok, '{'))) top--;
  char closer = 0;
  if (top >= 0) {
    char c = ls->open[top].c == '(' ? ')' : ls->open[top].c == '[' ? ']' : '}';
    for (int i = 0; i < n; i++)
      if (is_char_sym(exp[i], c)) closer = c;
  }
  char got[96], want[192];
  describe_token(tok, ls->tok, got, sizeof got);
  describe_expected(exp, n, want, sizeof want);
  bool at_eof = tok == YYSYMBOL_YYEOF;
  bool new_line = ls->ntoks > 1 && at.line > ls->prev_line;
  if (closer && (at_eof || new_line)) {
    /* A bracket left open: say so where the construct stopped, like cc. */
    SrcLoc end = {ls->file, ls->prev_line, ls->prev_end, 1};
    diag_error(end, "expected '%c'%s", closer, at_eof ? " at end of file" : "");
    SrcLoc open = {ls->file, ls->open[top].line, ls->open[top].col, 1};
    diag_note(open, "to match this '%c'", ls->open[top].c);
  } else if (closer && (is_char_sym(tok, ')') || is_char_sym(tok, ']') || is_char_sym(tok, '}'))) {
    /* The wrong closing bracket. */
    diag_error(at, "unexpected %s; expected '%c'", got, closer);
    SrcLoc open = {ls->file, ls->open[top].line, ls->open[top].col, 1};
    diag_note(open, "to match this '%c'", ls->open[top].c);
  } else if (at_eof && want[0]) {
    diag_error(at, "expected %s at end of file", want);
  } else if (want[0]) {
    diag_error(at, "unexpected %s; expected %s", got, want);
  } else {
    diag_error(at, "unexpected %s", got);
  }
  return 0;
}

Program *ast_parse(SrcFile *file) {
  struct LexState *st = arena_alloc(sizeof *st);
  st->file = file;
  st->line = st->col = 1;
  st->prog = arena_alloc(sizeof *st->prog);
  st->prog->file = file;
  yyscan_t scanner;
  if (yylex_init_extra(st, &scanner)) return NULL;
  YY_BUFFER_STATE buf = yy_scan_bytes(file->text, (int)file->len, scanner);
  int rc = yyparse(scanner, st);
  yy_delete_buffer(buf, scanner);
  yylex_destroy(scanner);
  if (rc == 2 && !st->fatal) {
    diag_fatal_noloc("parser ran out of memory");
    return NULL;
  }
  return st->prog;
}
