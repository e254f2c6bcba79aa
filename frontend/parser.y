/* parser.y — grammar of the shardc DSL (docs/language.md has it in EBNF). */
%define api.pure full
%define parse.error detailed
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
#include <stdlib.h>
#include <string.h>

#include "lexer.h"

static SrcLoc L(struct LexState *ls, YYLTYPE l) {
  SrcLoc s = {ls->file, l.first_line, l.first_column,
              l.last_line == l.first_line ? l.last_column - l.first_column : 1};
  if (s.len < 1) s.len = 1;
  return s;
}

static void yyerror(YYLTYPE *loc, void *scanner, struct LexState *ls, const char *msg) {
  (void)scanner;
  diag_error(L(ls, *loc), "%s", msg);
}

static Expr *mk(ExprKind k, SrcLoc loc) {
  Expr *e = arena_alloc(sizeof *e);
  e->kind = k;
  e->loc = loc;
  return e;
}

static Expr *mkbin(int op, Expr *a, Expr *b, SrcLoc oploc) {
  Expr *e = mk(E_BIN, a->loc);
  e->op = op;
  e->lhs = a;
  e->rhs = b;
  (void)oploc;
  return e;
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
static long long parse_int(struct LexState *ls, YYLTYPE loc, const char *s) {
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE) {
    diag_error(L(ls, loc), "integer literal '%s' is too large", s);
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
  | expr '+' expr                { $$ = mkbin('+', $1, $3, L(ls, @2)); }
  | expr '-' expr                { $$ = mkbin('-', $1, $3, L(ls, @2)); }
  | expr '*' expr                { $$ = mkbin('*', $1, $3, L(ls, @2)); }
  | expr '/' expr                { $$ = mkbin('/', $1, $3, L(ls, @2)); }
  | expr '%' expr                { $$ = mkbin('%', $1, $3, L(ls, @2)); }
  | '-' expr %prec NEG           { $$ = mk(E_NEG, L(ls, @1)); $$->lhs = $2; }
  | expr UNIT                    { $$ = mk(E_UNIT, $1->loc); $$->lhs = $1; $$->str = $2; }
;

primary:
    INT                          { $$ = mk(E_INT, L(ls, @1)); $$->ival = parse_int(ls, @1, $1); }
  | FLOAT                        { $$ = mk(E_FLOAT, L(ls, @1)); $$->fval = strtod($1, NULL); }
  | BOOL                         { $$ = mk(E_BOOL, L(ls, @1)); $$->ival = $1; }
  | STRING                       { $$ = mk(E_STRING, L(ls, @1)); $$->str = unquote($1); }
  | GRID                         { $$ = mk(E_GRID, L(ls, @1)); char *x = strchr($1, 'x');
                                   $$->ival = parse_int(ls, @1, arena_strndup($1, (size_t)(x - $1)));
                                   $$->ival2 = parse_int(ls, @1, x + 1); $$->str = $1; }
  | IDENT                        { $$ = mk(E_IDENT, L(ls, @1)); $$->str = $1; }
  | IDENT '(' args_opt ')'       { $$ = mk(E_CALL, L(ls, @1)); $$->str = $1; $$->args = $3; }
  | '(' expr ')'                 { $$ = $2; }
  | '(' expr ',' exprs_opt ')'   { $$ = mk(E_TUPLE, L(ls, @1)); vec_push(&$$->args, $2);
                                   for (int i = 0; i < $4.len; i++) vec_push(&$$->args, $4.data[i]); }
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

Program *ast_parse(SrcFile *file) {
  struct LexState st = {file, 1, 1, NULL};
  st.prog = arena_alloc(sizeof *st.prog);
  st.prog->file = file;
  yyscan_t scanner;
  if (yylex_init_extra(&st, &scanner)) return NULL;
  YY_BUFFER_STATE buf = yy_scan_bytes(file->text, (int)file->len, scanner);
  int rc = yyparse(scanner, &st);
  yy_delete_buffer(buf, scanner);
  yylex_destroy(scanner);
  if (rc == 2) {
    diag_fatal_noloc("parser ran out of memory");
    return NULL;
  }
  return st.prog;
}
