/* lexstate.h — state shared by the reentrant lexer and the pure parser. */
#ifndef SHARDC_LEXSTATE_H
#define SHARDC_LEXSTATE_H

#include <stdbool.h>

#include "ast.h"

/* Brackets nested deeper than this are refused (the parser's stack and the
 * recursive passes over the tree stay small). */
enum { LEX_MAX_NEST = 256 };

struct LexState {
  SrcFile *file;
  int line, col;
  Program *prog;
  /* For syntax errors: the text of the lookahead token and where the token
   * before it ends (1-based line, column just past its last byte). */
  char tok[64];
  int ntoks;
  int last_line, last_end;   /* the lookahead */
  int prev_line, prev_end;   /* the token before it */
  /* Open brackets, innermost last. */
  int nopen;
  struct { char c; int line, col; } open[LEX_MAX_NEST];
  bool fatal;                /* stop quietly: the error is already reported */
};

#endif
