#ifndef FYSCHED_OPS
#define FYSCHED_OPS

include "dialects/FySched/Dialect.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def FySched_Buffer : Type<CPred<"::llvm::isa<::fuyou::fysched::BufferType>($_self)">,
                          "fysched buffer", "::fuyou::fysched::BufferType">;

def FySched_AllocOp : FySched_Op<"alloc", [MemoryEffects<[MemAlloc]>]> {
  let summary = "A new buffer; its contents are undefined";
  let description = [{
    `offset`, set by fy-plan-memory, is the buffer's place in the arena of
    its memory space: no two buffers alive at once overlap there.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs FySched_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def FySched_DeallocOp : FySched_Op<"dealloc", [MemoryEffects<[MemFree]>]> {
  let summary = "Ends a buffer's lifetime";
  let arguments = (ins FySched_Buffer:$buffer);
  let assemblyFormat = "$buffer attr-dict `:` type($buffer)";
}

def FySched_GetParamOp : FySched_Op<"get_param", [Pure]> {
  let summary = "The working copy of a parameter declared by fygraph.param";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs FySched_Buffer:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def FySched_ConstantOp : FySched_Op<"constant", [Pure]> {
  let summary = "A buffer holding a small constant of the graph";
  let description = [{
    Like fysched.alloc, placed in the arena at `offset` once planned.
  }];
  let arguments = (ins ElementsAttr:$value, OptionalAttr<I64Attr>:$offset);
  let results = (outs FySched_Buffer:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def FySched_ViewOp : FySched_Op<"view", [Pure]> {
  let summary = "The same storage under another shape (no copy)";
  let arguments = (ins FySched_Buffer:$source);
  let results = (outs FySched_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def FySched_LaunchOp : FySched_Op<"launch", [AttrSizedOperandSegments]> {
  let summary = "Runs a runtime kernel that reads `ins` and writes `outs`";
  let description = [{
    `kernel` names a kernel of the runtime (kernels are never generated);
    `args` are its static arguments in order (axes, flags, epsilons).
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<FySched_Buffer>:$ins,
                       Variadic<FySched_Buffer>:$outs,
                       DefaultValuedAttr<ArrayAttr, "{}">:$args);
  let assemblyFormat = [{
    $kernel (`ins` `(` $ins^ `:` type($ins) `)`)? `outs` `(` $outs `:` type($outs) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def FySched_CopyOp : FySched_Op<"copy"> {
  let summary = "Copies one buffer into another of the same element count";
  let description = [{
    Without a result the copy is done before the next op starts. With a
    token (fy-async-copies; host to device, device to host, or host to SSD)
    it runs on its direction's copy stream (an SSD write: the SSD's queue)
    once every op before it is done, while the ops after it go on:
    fysched.wait on the token is where the program needs it done, before
    anything reads or frees the target or writes or frees the source.
  }];
  let arguments = (ins FySched_Buffer:$source, FySched_Buffer:$target);
  let results = (outs Optional<FySched_TokenType>:$token);
  let assemblyFormat = [{
    $source `,` $target attr-dict `:` type($source) `,` type($target) (`->` type($token)^)?
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$source, "::mlir::Value":$target), [{
      build($_builder, $_state, ::mlir::Type(), source, target);
    }]>
  ];
  let hasVerifier = 1;
}

def FySched_WaitOp : FySched_Op<"wait"> {
  let summary = "The ops after this one run after the copy that made the token";
  let description = [{
    On a GPU the compute stream waits for the copy stream's event; the
    program's thread does not block.
  }];
  let arguments = (ins FySched_TokenType:$token);
  let assemblyFormat = "$token attr-dict";
}

def FySched_CpuAdamWOp : FySched_Op<"cpu_adamw"> {
  let summary = "AdamW update of a parameter on the CPU from its gradient";
  let description = [{
    `group` names the fysched.group the parameter belongs to, once
    fy-partition-groups has run; `on_device` (fy-device-optimizer): on a
    device the update runs there, in stream order, its moments in device
    memory.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FySched_Buffer:$grad,
                       OptionalAttr<FlatSymbolRefAttr>:$group, UnitAttr:$on_device);
  let assemblyFormat = "$param `,` $grad (`group` $group^)? (`on_device` $on_device^)? attr-dict `:` type($grad)";
}

def FySched_GroupOp : FySched_Op<"group", [Symbol]> {
  let summary = "A layer group: the unit of parameter swapping and of the CPU optimizer";
  let description = [{
    Groups are declared in the order backward completes them: the first
    group's gradients are all ready first, so its update can start while
    backward still runs for the others.

    `on_device` (fy-device-optimizer): the group's AdamW runs on the device,
    in stream order, each parameter's as soon as its gradient is final
    (its fysched.cpu_adamw ops stay; fy-async-optimizer leaves the group
    alone), its moments in device memory: no gradient goes down, no weight
    comes up, and the next forward waits for nothing.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ArrayAttr:$params, I64Attr:$bytes, UnitAttr:$on_device);
  let assemblyFormat = "$sym_name $params `bytes` $bytes (`on_device` $on_device^)? attr-dict";
  let hasVerifier = 1;
}

// A group's update is a pipeline of four ops whose tokens are their
// dependencies. The CPU optimizer runs them in the background, in the order
// the program issues them as far as the dependencies allow.

def FySched_GradOffloadOp : FySched_Op<"grad_offload"> {
  let summary = "Moves a group's gradients off the device into a host slot";
  let description = [{
    One gradient per parameter of the group, in its order, copied to a host
    slot; it waits for a free slot when every slot is taken. The copy may
    still be running when the op returns (on a GPU it overlaps the next
    group's backward): the gradients stay allocated up to the
    fysched.grad_landed of its token, where a device makes later work wait
    for it, or without one to the step's end (BufferLiveness counts them as
    used until then).
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, Variadic<FySched_Buffer>:$grads);
  let results = (outs FySched_TokenType:$token);
  let assemblyFormat = "$group `(` $grads `:` type($grads) `)` attr-dict";
}

def FySched_GradLandedOp : FySched_Op<"grad_landed"> {
  let summary = "Where the memory of a group's gradients handed to grad_offload may be used again";
  let description = [{
    Follows the grad_offload whose token it takes. On a device that copy
    may still be crossing the link when grad_offload returns: the kernels
    after this op wait for it to have landed, and the gradients stay
    allocated up to here (BufferLiveness). fy-grad-landed places it: as
    late as the next group's grad_offload, or further where the planner
    predicts that the wait there (for a large gradient followed closely by
    a small group's) costs more than the memory held longer.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, FySched_TokenType:$token);
  let assemblyFormat = "$group `(` $token `)` attr-dict";
  let hasVerifier = 1;
}

def FySched_GradOffloadEarlyOp : FySched_Op<"grad_offload_early", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Hands the optimizer a table's gradient in every row the step's ids do not name";
  let description = [{
    `grad` holds the final gradient of 2-D table `param` of `group` in every
    row that `ids` (the step's token ids) does not name: a tied embedding's
    logits part, before the gather's rows are scatter-added into it
    (gather_grad_add leaves the other rows as they are). The optimizer may
    copy those rows off the device and update them while backward goes on,
    so that only the named rows are left for the group's grad_offload; it
    may also decline (clipping, loss scaling, accumulation, state on SSD,
    an 8-bit table), and the group's grad_offload then brings everything.
    Nothing reads the table after it in the step unless it is `held`
    (fy-early-offload); like grad_offload's, `grad` stays allocated until
    the group's grad_offload.
    On a device the rows go down in chunks: one at once, then one behind
    each other group's gradient and the rest behind the table's own, so
    that they do not hold up the blocks' gradients on the link; with
    `all_chunks`, all of them at once (the planner's choice where the
    optimizer, not the link, is what the step waits for). With `held`, the
    step still reads the table after it (the input gradient's product):
    the rows go down now, but their update writes the table only after the
    fysched.early_release of the table that follows in the step.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, FlatSymbolRefAttr:$param, FySched_Buffer:$grad,
                       FySched_Buffer:$ids, UnitAttr:$all_chunks, UnitAttr:$held);
  let assemblyFormat = "$group `,` $param `(` $grad `:` type($grad) `)` `except` `(` $ids `:` type($ids) `)` (`all_chunks` $all_chunks^)? (`held` $held^)? attr-dict";
  let hasVerifier = 1;
}

def FySched_EarlyReleaseOp : FySched_Op<"early_release", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The step's last read of a table handed over early is behind: its update may write it";
  let description = [{
    Follows a `held` fysched.grad_offload_early of the same table, after the
    table's last read in the step. Until here the optimizer may bring the
    early rows down, but neither writes the table nor (on a device) copies
    updated rows of it up. On a device the program's thread passes here
    long before the kernels before it have run: the uploads then wait for
    those kernels on the device, not the optimizer for the thread.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, FlatSymbolRefAttr:$param);
  let assemblyFormat = "$group `,` $param attr-dict";
  let hasVerifier = 1;
}

def FySched_StateReadOp : FySched_Op<"state_read"> {
  let summary = "Starts reading a group's optimizer state from the store into host memory";
  let description = [{
    Issued ahead of the group's update (fy-prefetch-state decides how far),
    so the read overlaps the backward of the groups before it. When the
    state is in memory (no --ssd) there is nothing to read.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group);
  let results = (outs FySched_TokenType:$token);
  let assemblyFormat = "$group attr-dict";
}

def FySched_GroupAdamWOp : FySched_Op<"group_adamw"> {
  let summary = "AdamW over a group's parameters on the CPU, in the background";
  let description = [{
    Depends on the group's grad_offload and state_read. It updates the fp32
    master weights and the state in host memory; fysched.group_wait is
    where the program next waits for it.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, Variadic<FySched_TokenType>:$deps);
  let results = (outs FySched_TokenType:$token);
  let assemblyFormat = "$group `after` `(` $deps `)` attr-dict";
  let hasVerifier = 1;
}

def FySched_StateWriteOp : FySched_Op<"state_write"> {
  let summary = "Writes a group's updated optimizer state back to the store";
  let arguments = (ins FlatSymbolRefAttr:$group, FySched_TokenType:$update);
  let assemblyFormat = "$group `after` `(` $update `)` attr-dict";
  let hasVerifier = 1;
}

def FySched_GroupWaitOp : FySched_Op<"group_wait", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Waits for a group's group_adamw (from the previous step) to finish";
  let description = [{
    With a parameter, waits only until that parameter of the group is
    updated (fy-param-waits): the runtime updates a group's parameters in
    the order the group names them, so the forward may start on the first
    while the update of the rest goes on.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, OptionalAttr<FlatSymbolRefAttr>:$param);
  let assemblyFormat = "$group (`,` $param^)? attr-dict";
}

def FySched_GroupWaitRowsOp : FySched_Op<"group_wait_rows", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Waits for the rows of a group's table that the step's tokens gather";
  let description = [{
    Goes before a gather of the step's token ids from a 2-D table of the
    group (fy-rows-first). The runtime, which knows the next batch, updates
    those rows first and the rest of the group afterwards, while the
    forward goes on; a fysched.group_wait of the same group goes before the
    table's next read. AdamW is elementwise, so the values read are those
    of the whole update.
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, FlatSymbolRefAttr:$param, FySched_Buffer:$ids);
  let assemblyFormat = "$group `,` $param `[` $ids `:` type($ids) `]` attr-dict";
  let hasVerifier = 1;
}

#endif
