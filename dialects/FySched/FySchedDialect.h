#ifndef FUYOU_DIALECTS_FYSCHED_FYSCHEDDIALECT_H
#define FUYOU_DIALECTS_FYSCHED_FYSCHEDDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/FySched/FySchedDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/FySched/FySchedTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/FySched/FySchedAttrs.h.inc"

#endif
