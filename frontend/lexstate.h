/* lexstate.h — state shared by the reentrant lexer and the pure parser. */
#ifndef SHARDC_LEXSTATE_H
#define SHARDC_LEXSTATE_H

#include "ast.h"

struct LexState {
  SrcFile *file;
  int line, col;
  Program *prog;
};

#endif
