#ifndef FYSCHED_DIALECT
#define FYSCHED_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def FySched_Dialect : Dialect {
  let name = "fysched";
  let cppNamespace = "::fuyou::fysched";
  let summary = "The training program: buffers in memory spaces, transfers, kernel launches";
  let description = [{
    Every tensor of fygraph becomes a buffer with an explicit memory space
    (device, host, ssd) and an explicit lifetime (alloc/dealloc). Kernel
    launches read and write buffers; `cpu_adamw` updates a parameter on the
    CPU. Placement and scheduling passes rewrite this form: they move
    buffers between spaces, add transfers, streams and events.
  }];
  let useDefaultTypePrinterParser = 1;
}

class FySched_Op<string mnemonic, list<Trait> traits = []>
    : Op<FySched_Dialect, mnemonic, traits>;

def FySched_BufferType : TypeDef<FySched_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "A tensor's storage in one memory space";
  let description = [{
    `!fysched.buffer<device, tensor<4x64xf32>>`. The memory space is one of
    `device` (the compute device's memory; on the CPU target, the arena that
    stands for it), `host` (pinned CPU memory) or `ssd`.
  }];
  let parameters = (ins StringRefParameter<"memory space">:$space,
                        "::mlir::RankedTensorType":$tensorType);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    ::llvm::ArrayRef<int64_t> getShape() const { return getTensorType().getShape(); }
    ::mlir::Type getElementType() const { return getTensorType().getElementType(); }
    int64_t getNumElements() const { return getTensorType().getNumElements(); }
    int64_t getSizeInBytes() const {
      return getNumElements() * ((getTensorType().getElementTypeBitWidth() + 7) / 8);
    }
  }];
}

def FySched_TokenType : TypeDef<FySched_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "The completion of an asynchronous op (an optimizer-pipeline op, a copy), named by the ops that depend on it";
}

#endif
