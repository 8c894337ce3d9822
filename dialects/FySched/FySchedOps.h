#ifndef FUYOU_DIALECTS_FYSCHED_FYSCHEDOPS_H
#define FUYOU_DIALECTS_FYSCHED_FYSCHEDOPS_H

#include "dialects/FySched/FySchedDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/FySched/FySchedOps.h.inc"

#endif
