/* ast.h — the syntax tree the parser builds from a .shard file.
 *
 * Newlines are insignificant in the DSL; commas between items are optional.
 * Every node carries the SrcLoc of its first token for diagnostics.
 */
#ifndef SHARDC_AST_H
#define SHARDC_AST_H

#include "diag.h"

typedef enum {
  E_INT,     /* ival */
  E_FLOAT,   /* fval */
  E_BOOL,    /* ival 0/1 */
  E_STRING,  /* str */
  E_IDENT,   /* str (also words such as `1f1b`) */
  E_GRID,    /* ival x ival2, e.g. `2x2` */
  E_BIN,     /* op: '+', '-', '*', '/', '%' */
  E_NEG,     /* -lhs */
  E_CALL,    /* str(args) */
  E_TUPLE,   /* (elems...) */
  E_UNIT,    /* lhs scaled by fval: `450 GB/s`, unit text in str */
} ExprKind;

typedef struct Expr {
  ExprKind kind;
  SrcLoc loc;         /* the whole expression (its first line); E_CALL: the name */
  SrcLoc oploc;       /* E_BIN: the operator */
  int depth;          /* height of the tree, bounded by the parser */
  long long ival, ival2;
  double fval;
  const char *str;
  int op;
  struct Expr *lhs, *rhs;
  PtrVec args;   /* E_CALL: Arg*; E_TUPLE: Expr* */
  const char *pname;  /* E_CALL: parameter-path component, set by lowering */
} Expr;

/* `name = value` (keyword argument, block item) or a positional argument
 * (name == NULL). */
typedef struct Arg {
  const char *name;
  SrcLoc loc;
  Expr *value;
} Arg;

/* dtype[d0, d1, ...] on model inputs. */
typedef struct TypeAnn {
  const char *dtype;
  SrcLoc loc;
  PtrVec dims;   /* Expr*: E_IDENT (symbolic) or constant expressions */
} TypeAnn;

typedef enum { S_ASSIGN, S_REPEAT, S_RETURN } StmtKind;

typedef struct Stmt {
  StmtKind kind;
  SrcLoc loc;
  const char *name;   /* S_ASSIGN target; S_REPEAT optional `as NAME` */
  SrcLoc name_loc;
  Expr *value;        /* S_ASSIGN, S_RETURN value; S_REPEAT count */
  PtrVec body;        /* S_REPEAT: Stmt* */
} Stmt;

typedef struct Param {
  const char *name;
  SrcLoc loc;
  Expr *deflt;        /* layer parameters: optional default */
  TypeAnn *type;      /* model inputs: required type */
} Param;

typedef enum { D_CONST, D_USE, D_LAYER, D_MODEL, D_MESH, D_TRAIN } DeclKind;

typedef struct Decl {
  DeclKind kind;
  SrcLoc loc;         /* the keyword */
  const char *name;   /* NULL for an anonymous train block */
  SrcLoc name_loc;
  Expr *value;        /* D_CONST */
  const char *header; /* D_USE */
  SrcLoc header_loc;
  PtrVec params;      /* D_LAYER, D_MODEL: Param* */
  PtrVec body;        /* D_LAYER, D_MODEL: Stmt* */
  PtrVec items;       /* D_MESH, D_TRAIN: Arg* */
  SrcLoc end_loc;     /* closing brace */
} Decl;

typedef struct Program {
  SrcFile *file;
  PtrVec decls;       /* Decl* in source order */
} Program;

/* Parse a whole file; NULL only on internal failure.  Syntax errors are
 * reported through diag and recovered from, so check diag_error_count(). */
Program *ast_parse(SrcFile *file);
void ast_print_expr(char *buf, int cap, const Expr *e);   /* for messages */

#endif
