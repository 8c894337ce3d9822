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
  let useDefaultAttributePrinterParser = 1;
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

def FySched_PlanAttr : AttrDef<FySched_Dialect, "Plan"> {
  let mnemonic = "plan";
  let summary = "The step's placement plan, and what the planner found for it";
  let description = [{
    On the module as `fysched.plan`: what is placed where, given by the
    compile's flags (fy-program-attrs) or chosen by the planner
    (fy-choose-placement, fy-choose-device-optimizer), which the placement
    passes carry out; and the planner's figures, which `--emit=plan` prints.

    ```mlir
    fysched.plan = #fysched.plan<activations = "keep,recompute", params = "stream", early_rows = "yes",
                                 early_chunks = "all", grad_landing = 2, evaluated = 32,
                                 predicted_step_s = 2.5E-5 : f64, state = "memory">
    ```

    Decisions: each forward segment's activations (one policy, or one per
    segment), the parameters kept on the device or streamed, a tied
    table's rows handed over early ("yes", "no"; empty: no tied table, or
    not decided) and sent down "all" at once or "paced", fy-grad-landed's
    distance (0: 1), the activations' SSD writes in flight (0:
    fy-async-copies' own), and whether the placement was given rather than
    searched. Figures (0, empty or absent where the planner did not run):
    plans evaluated, the predicted step, the fastest uniform plan that fits
    ("policy/params") and its step, the lower bound, the profile and where
    the moments were taken to be; with --device-optimizer auto, the groups
    chosen, their step and the step with none.
  }];
  let parameters = (ins
    StringRefParameter<"each forward segment's activations, comma-separated">:$activations,
    StringRefParameter<"keep or stream", "\"keep\"">:$params,
    StringRefParameter<"yes, no, or empty", "\"\"">:$early_rows,
    StringRefParameter<"all, paced, or empty", "\"\"">:$early_chunks,
    DefaultValuedParameter<"int64_t", "0">:$grad_landing,
    DefaultValuedParameter<"int64_t", "0">:$write_behind,
    DefaultValuedParameter<"bool", "false">:$given,
    DefaultValuedParameter<"int64_t", "0">:$evaluated,
    OptionalParameter<"::mlir::FloatAttr">:$predicted_step_s,
    StringRefParameter<"policy/params", "\"\"">:$uniform,
    OptionalParameter<"::mlir::FloatAttr">:$uniform_step_s,
    OptionalParameter<"::mlir::FloatAttr">:$lower_bound_s,
    StringRefParameter<"the profile planned with", "\"\"">:$profile,
    StringRefParameter<"ssd or memory", "\"\"">:$state,
    DefaultValuedParameter<"int64_t", "-1">:$device_groups,
    OptionalParameter<"::mlir::FloatAttr">:$device_step_s,
    OptionalParameter<"::mlir::FloatAttr">:$device_none_step_s
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    // A plan of these decisions, with no figures yet.
    static PlanAttr decided(::mlir::MLIRContext *ctx, ::llvm::StringRef activations, ::llvm::StringRef params,
                            ::llvm::StringRef earlyRows, ::llvm::StringRef earlyChunks, int64_t gradLanding,
                            int64_t writeBehind, bool given);
    // This plan with the planner's figures (NaN: none).
    PlanAttr withFigures(int64_t evaluated, double predictedStepS, ::llvm::StringRef uniform, double uniformStepS,
                         double lowerBoundS, ::llvm::StringRef profile, ::llvm::StringRef state) const;
    // ... with --device-optimizer auto's choice (NaN: none).
    PlanAttr withDevice(int64_t groups, double stepS, double noneStepS) const;
    // ... with a tied table's rows decided otherwise.
    PlanAttr withEarly(::llvm::StringRef earlyRows, ::llvm::StringRef earlyChunks) const;
    // The module's plan, or null.
    static PlanAttr of(::mlir::Operation *module);
    void setOn(::mlir::Operation *module) const;
    static void removeFrom(::mlir::Operation *module);
  }];
}

#endif
