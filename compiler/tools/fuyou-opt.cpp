// fuyou-opt: mlir-opt with the fuyou dialects and passes, for lit tests and
// for compiler engineers writing new passes.
#include "dialects/FyGraph/FyGraphDialect.h"
#include "dialects/FySched/FySchedDialect.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "passes/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  fuyou::registerFuyouPasses();
  fuyou::registerTrainPipeline();
  mlir::DialectRegistry registry;
  registry.insert<fuyou::fygraph::FyGraphDialect, fuyou::fysched::FySchedDialect,
                  mlir::emitc::EmitCDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "fuyou optimizer driver\n", registry));
}
