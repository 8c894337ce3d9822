#ifndef FUYOU_PASSES
#define FUYOU_PASSES

include "mlir/Pass/PassBase.td"

def Recompose : Pass<"fy-recompose", "mlir::ModuleOp"> {
  let summary = "Forms fused ops (gelu, silu, rms_norm, layer_norm) from exporter decompositions";
  let description = [{
    PyTorch exports GELU, SiLU and RMSNorm as chains of elementwise ops.
    Fused ops halve the saved activations and have one gradient rule each.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def Autodiff : Pass<"fy-autodiff", "mlir::ModuleOp"> {
  let summary = "Appends the backward pass: @forward becomes @train_step returning gradients";
  let description = [{
    Reverse-mode differentiation of `@forward` through a registry of gradient
    rules, one per op. The result `@train_step` returns the loss and then the
    gradient of each trainable parameter, named by `fygraph.grads`. A
    parameter read twice (a tied embedding and head) accumulates both
    gradients; frozen parameters get none.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def InsertAdamW : Pass<"fy-insert-adamw", "mlir::ModuleOp"> {
  let summary = "One fygraph.adamw per trainable parameter, consuming its gradient";
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

#endif
