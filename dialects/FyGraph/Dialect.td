#ifndef FYGRAPH_DIALECT
#define FYGRAPH_DIALECT

include "mlir/IR/OpBase.td"

def FyGraph_Dialect : Dialect {
  let name = "fygraph";
  let cppNamespace = "::fuyou::fygraph";
  let summary = "Training graphs on static tensors";
  let description = [{
    Value semantics on ranked, statically shaped tensors. Forward ops mirror
    ONNX; gradient ops mirror ONNX Runtime's training ops, so forward ops
    return what backward needs (saved statistics, log-probabilities, masks) as
    extra results. Parameters are symbols naming external storage: weights are
    never dense attributes.
  }];
  let hasConstantMaterializer = 0;
}

class FyGraph_Op<string mnemonic, list<Trait> traits = []>
    : Op<FyGraph_Dialect, mnemonic, traits>;

#endif
