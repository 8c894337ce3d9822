#ifndef FUYOU_DIALECTS_FYGRAPH_FYGRAPHDIALECT_H
#define FUYOU_DIALECTS_FYGRAPH_FYGRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/FyGraph/FyGraphDialect.h.inc"

#endif
