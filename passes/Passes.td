#ifndef FUYOU_PASSES
#define FUYOU_PASSES

include "mlir/Pass/PassBase.td"

def Recompose : Pass<"fy-recompose", "mlir::ModuleOp"> {
  let summary = "Forms fused ops (gelu, silu, rms_norm, layer_norm) from exporter decompositions";
  let description = [{
    PyTorch exports GELU, SiLU and RMSNorm as chains of elementwise ops.
    Fused ops halve the saved activations and have one gradient rule each.
    A transpose of the last two dims feeding a matmul becomes its trans_a or
    trans_b flag (every exported Linear). Attention's masked softmax is
    formed from both exporters' patterns: torch 1.x's masked_fill with -inf,
    and torch 2.x's constant additive mask (0 or the float's lowest) with its
    NaN guard, where no row is all masked. With `attention`, the product of
    that softmax with v, its scores' product of q and k and a constant
    causal or sliding-window mask become one fygraph.attention, which writes
    no T x T tensor in either pass, for head dims up to `attention-max-head-dim`
    (0: any; the CUDA kernel's tiles take 128). It reads grouped-query k and
    v unrepeated (Hugging Face's repeat_kv goes), and, where q, k and v are
    swapped into heads from the Linears' [B, T, heads, D] and the result
    swapped back, reads and writes that layout ({seq_major}); a swap before
    RoPE's rotation (neg, slices, concat, products with cos and sin) moves
    below it first. Where q, k and v are slices of one fused qkv Linear's
    output (GPT-2's c_attn), fygraph.attention_qkv reads them there. With `cross-entropy`, a
    softmax_cross_entropy_loss of a Linear's logits (x w^T) becomes one
    fygraph.linear_cross_entropy, which never forms the [N, V] logits and
    keeps no log-probabilities for backward. With `swiglu`, silu(gate) * up
    becomes one fygraph.swiglu, whose backward does not keep the silu. With
    `rope`, RoPE's rotation of q or k (x cos + rotate_half(x) sin, seven
    ops) becomes one fygraph.rope.
  }];
  let options = [
    Option<"attention", "attention", "bool", /*default=*/"false",
           "form fygraph.attention from causal attention's products and masked softmax">,
    Option<"crossEntropy", "cross-entropy", "bool", /*default=*/"false",
           "form fygraph.linear_cross_entropy from a loss of a Linear's logits">,
    Option<"attentionMaxHeadDim", "attention-max-head-dim", "int64_t", /*default=*/"0",
           "the largest head dim the target's attention kernel takes (0: any)">,
    Option<"swiglu", "swiglu", "bool", /*default=*/"false",
           "form fygraph.swiglu from silu(gate) * up">,
    Option<"rope", "rope", "bool", /*default=*/"false",
           "form fygraph.rope from RoPE's rotation of the halves">
  ];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def ConcatSliceGrads : Pass<"fy-concat-slice-grads", "mlir::ModuleOp"> {
  let summary = "A sliced value's gradient as one concat of its slices' gradients";
  let description = [{
    Where slices cut a value along one axis into pieces that tile it
    (GPT-2's q, k and v of one product, RoPE's halves), autodiff's gradient
    of the value is a sum of slice_grads, each a zero tensor of the value's
    shape with one piece written. That sum becomes one concat of the pieces'
    gradients, which writes the value's gradient once instead of zeroing it
    and adding into it once per piece. Each element is its piece's value
    either way (x + 0 is x), but for the sign of a zero: -0 + 0 is +0.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def FuseBias : Pass<"fy-fuse-bias", "mlir::ModuleOp"> {
  let summary = "Adds a Linear's bias in its product's kernel (fygraph.matmul_bias)";
  let description = [{
    add(matmul(a, b), bias), with bias 1-D along the product's last dim and
    the product read by the add alone, becomes one fygraph.matmul_bias: the
    product is never stored without its bias. cuBLASLt adds it in its
    epilogue; the CPU adds it to the fp32 product before any rounding to 16
    bits, so there its bits are those of the two kernels. It runs after
    fy-autodiff: the bias's gradient is the sum of dy either way, so the op
    needs no gradient rule of its own.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def PackSwiGLU : Pass<"fy-pack-swiglu", "mlir::ModuleOp"> {
  let summary = "Makes a SwiGLU's gate and up projections one product whose halves it reads";
  let description = [{
    swiglu(x @ Wg^T, x @ Wu^T), each product read by the SwiGLU alone and
    Wg, Wu parameters of one shape, becomes swiglu_packed(x @ concat(Wg,
    Wu)^T), before fy-autodiff: one product of twice the width instead of
    two, read where it lies. In backward x's gradient is one product over
    the packed gradient (swiglu_packed_grad writes both halves) instead of
    two and their add, and the weights' gradient one product whose halves
    they are. The cost: the weights' concat each step (a 16-bit copy at
    16-bit activations, which both products read) and the slices of their
    gradient. The bits change: the products sum in other orders, and x's
    gradient is summed inside one product.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def FuseNormGradAdd : Pass<"fy-fuse-norm-grad-add", "mlir::ModuleOp"> {
  let summary = "Sums a norm's input gradient into the residual's gradient in the norm's gradient kernel";
  let description = [{
    In a pre-norm block the residual stream's gradient is the sum of what
    comes down the stream and the norm's input gradient:
    add(layer_norm_grad(...).dinput, g) (or rms_norm_grad), with dinput read
    by the add alone and g made before the norm's gradient, becomes the
    norm's gradient with `addend` g, where the norm's gradient stood. The
    kernel adds g to each element of the gradient it has rounded to fp32,
    as the add did to the fp32 buffer it read (one that goes straight from
    the norm's gradient to the add stays fp32 in fy-half-activations), so
    the bits are the add's; the gradient is never stored alone, and one
    launch and one tensor's write and read go. It runs after fy-autodiff,
    which makes these adds.
  }];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def ProgramAttrs : Pass<"fy-program-attrs", "mlir::ModuleOp"> {
  let summary = "Records on the module what the compile's flags decide for the program";
  let description = [{
    The arithmetic (`fy.precision`), the optimizer (`fy.optimizer`), dynamic
    loss scaling (`fy.loss_scale`) and the device budget the program defaults
    to (`fy.budget.gpu_mem`), which later passes and the EmitC conversion
    read; on the CUDA target the device memory its runtime keeps outside the
    plan's arena (`fysched.reserved_device_bytes`: the matrix products'
    workspace, their 16-bit operand copies at bf16 and fp16, and the step's
    token ids, targets and loss, for the token count of @forward's first
    argument). With `activations` other than auto the placement is given,
    not planned, and is recorded as the plan (`fysched.plan`) for `--emit=plan`
    and the placement passes. The step's schedule rules a compile turns off
    are recorded too (`fy.schedule.*` = false), for fy-rows-first,
    fy-param-waits and fy-early-offload, the planner's trial runs included.
    Run first, on the imported module.
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "bf16, fp16, tf32 or fp32: the matrix products' operands">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"", "adamw or adamw8bit">,
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false", "dynamic loss scaling">,
    Option<"gpuMem", "gpu-mem", "int64_t", /*default=*/"0", "the program's default device budget (0: none)">,
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu or cuda">,
    Option<"activations", "activations", "std::string", /*default=*/"\"auto\"",
           "the given placement (keep, host, ssd, recompute, selective, or one per segment), or auto">,
    Option<"params", "params", "std::string", /*default=*/"\"keep\"", "keep or stream, with a given placement">,
    Option<"earlyRows", "early-rows", "std::string", /*default=*/"\"auto\"", "yes, no or auto">,
    Option<"earlyChunks", "early-chunks", "std::string", /*default=*/"\"auto\"", "paced, all or auto">,
    Option<"gradLanding", "grad-landing", "int64_t", /*default=*/"0", "fy-grad-landed's distance (0: auto)">,
    Option<"rowsFirst", "rows-first", "bool", /*default=*/"true", "false: no fy-rows-first (a table's update whole)">,
    Option<"paramWaits", "param-waits", "bool", /*default=*/"true", "false: no fy-param-waits (each group waited for whole)">,
    Option<"earlyHold", "early-hold", "bool", /*default=*/"true",
           "false: fy-early-offload hands a tied table's rows over after its last read">,
  ];  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def Autodiff : Pass<"fy-autodiff", "mlir::ModuleOp"> {
  let summary = "Appends the backward pass: @forward becomes @train_step returning gradients";
  let description = [{
    Reverse-mode differentiation of `@forward` through a registry of gradient
    rules, one per op. The result `@train_step` returns the loss and then the
    gradient of each trainable parameter, named by `fygraph.grads`. A
    parameter read twice (a tied embedding and head) accumulates both
    gradients; frozen parameters get none. With `loss-scale`, backward starts
    from `fygraph.loss_scale` (the run's dynamic loss scale) instead of 1.
  }];
  let options = [
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "start backward from the run's loss scale (fygraph.loss_scale)">,
  ];
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def InsertAdamW : Pass<"fy-insert-adamw", "mlir::ModuleOp"> {
  let summary = "One fygraph.adamw per trainable parameter, consuming its gradient";
  let dependentDialects = ["fuyou::fygraph::FyGraphDialect"];
}

def LowerToFySched : Pass<"fy-lower-to-fysched", "mlir::ModuleOp"> {
  let summary = "fygraph tensors become fysched buffers; ops become kernel launches";
  let description = [{
    Every tensor value becomes a buffer in device memory (all resident, one
    stream): the form that placement, swapping and stream passes rewrite.
    Reshapes become views, parameters their storage, `fygraph.adamw` a
    `fysched.cpu_adamw`.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect", "mlir::func::FuncDialect"];
}

def InsertDealloc : Pass<"fy-insert-dealloc", "mlir::ModuleOp"> {
  let summary = "Ends each buffer's lifetime right after its last use";
  let description = [{
    A buffer read through views lives until the last use of any view.
    Returned buffers are left to the caller.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def HalfActivations : Pass<"fy-half-activations", "mlir::ModuleOp"> {
  let summary = "Stores the step's activations and their gradients in 16 bits";
  let description = [{
    At `--precision bf16|fp16`, as autocast does: every float buffer a
    kernel writes, only kernels read, and that lives while other launches
    run becomes bf16 (or fp16), halving the bytes the memory plan places,
    the copies that swap them and the traffic the cost model prices. The
    kernels compute in fp32: each launch reads fp32 copies of its 16-bit
    operands and writes an fp32 result narrowed after it (`cast` launches;
    kernels that only move elements, and those listed in `native`, take 16
    bits as they are), so a buffer
    handed straight from one launch to the next stays fp32. Also stay
    fp32: parameter gradients and the parts they are summed from (a tied
    weight's two gradients, a table's rows added onto its other gradient),
    the loss, statistics a backward reads (norms' mean and inverse
    deviation, attention's log-sum-exp), cross-entropy's log-probabilities
    (autocast runs it in fp32), a kernel's scratch, and scalars; but where
    `native` lists linear_cross_entropy, its block of logits is 16-bit, as
    autocast's logits are (then their gradient in their place), with as
    many rows as the same bytes hold.
    With `product-copies`, a buffer kept fp32 only because it goes
    straight from its kernel to the next launches, and read by two or more
    products (an activation's gradient, by the input's and the weight's
    products), gets one 16-bit copy that the products read: the values each
    would round its fp32 operand to, made once (for a target whose products
    read 16 bits from memory as they are, and would otherwise round each
    fp32 operand themselves). A `cast` before the first product makes it,
    or, where a reduce_sum of the buffer (a bias's gradient) runs before
    them, that sum as it reads the buffer (`reduce_sum_cast`).
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"", "bf16 or fp16">,
    Option<"productCopies", "product-copies", "bool", /*default=*/"false",
           "one 16-bit copy of an fp32 buffer that two or more products read">,
    ListOption<"native", "native", "std::string",
               "kernels of the target that take 16-bit operands themselves (no casts around them)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def FuseBiasGradSum : Pass<"fy-fuse-bias-grad-sum", "mlir::ModuleOp"> {
  let summary = "Sums a bias's gradient and makes the products' 16-bit copy as the GELU's gradient is computed";
  let description = [{
    After fy-half-activations' product copies: a bias_gelu_grad (or
    bias_gelu_tanh_grad) whose fp32 result is read by nothing but a
    reduce_sum_cast (its bias's gradient, and the 16-bit copy the next
    products read) becomes one `*_grad_sum` launch where the gradient
    stood, writing the sum and the copy (allocated there); the fp32
    gradient is never stored. The kernel computes each element as the
    gradient kernel does and sums and narrows it as reduce_sum_cast does,
    so the bits are the two launches': on a GPU that holds where
    reduce_sum_cast sums columns, over 32 rows of two or more, the only
    shapes fused. Per element, 8 of the 16 bytes the pair moved at 16-bit
    activations go.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def PartitionGroups : Pass<"fy-partition-groups", "mlir::ModuleOp"> {
  let summary = "Partitions the trainable parameters into layer groups";
  let description = [{
    A transformer block per group (parameters named `<prefix>.<N>.…`), the
    embedding, the head and other parameters outside blocks each apart, and
    no group above `max-bytes` of parameters. Groups are declared in the
    order backward completes them (the position of their last update), and
    each fysched.cpu_adamw names its group.
  }];
  let options = [
    Option<"maxBytes", "max-bytes", "int64_t", /*default=*/"0",
           "Split groups above this many bytes of parameters (0: no bound)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def DeviceOptimizer : Pass<"fy-device-optimizer", "mlir::ModuleOp"> {
  let summary = "Runs the AdamW of the groups at the step's boundary on the device";
  let description = [{
    The last `last` groups backward completes are the first the next
    forward reads: their updates, on the CPU, can only start once backward
    ends and must end before the forward gets far, so the device idles
    between the two. This marks them `on_device`: their fysched.cpu_adamw
    ops stay where backward makes each gradient final and run on the
    device (fy::cuda::adamw, bit for bit the CPU's AdamW), their moments in
    device memory; fy-async-optimizer leaves them alone. Run after
    fy-partition-groups. Not with dynamic loss scaling or 8-bit moments.
  }];
  let options = [
    Option<"last", "last", "int64_t", /*default=*/"0",
           "How many of the groups backward completes last (0: none)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def ChooseDeviceOptimizer : Pass<"fy-choose-device-optimizer", "mlir::ModuleOp"> {
  let summary = "How many layer groups' AdamW runs on the GPU: the fastest tried that fits";
  let description = [{
    `fuyou-compile --device-optimizer auto`. For each number N of the layer
    groups at the step's boundary tried (0 to 4, then 8, 16, ..., then all
    but one and all the groups, none past `most`: an in-core model is often
    fastest with every group's AdamW on the GPU, which 0 to 4 miss at
    depth; past 4 a number that does not fit ends the search),
    a copy of the module goes through fy-device-optimizer with `last` N and
    then the `rest` of the pipeline (the optimizer's and the placement's
    passes, the planner among them), and is priced by the cost model with
    the profile. The fastest that fits the budgets replaces the module, with
    the plan's `device_groups` (its N), `device_step_s` (its predicted
    step) and `device_none_step_s` (N = 0's, when that fits). When
    none fits, the module goes through N = 0 and the rest, whose error says
    why. A trial that fails is no error of the compilation.
  }];
  let options = [
    ListOption<"rest", "rest", "mlir::OpPassManager",
               "the passes after fy-device-optimizer, run on each trial (one pipeline)">,
    Option<"most", "most", "int64_t", /*default=*/"-1", "the most groups tried (-1: all)">,
    Option<"gpuMem", "gpu-mem", "int64_t", /*default=*/"0", "device budget in bytes (0: none)">,
    Option<"cpuMem", "cpu-mem", "int64_t", /*default=*/"0", "host budget in bytes (0: none)">,
    Option<"profile", "profile", "std::string", /*default=*/"\"\"", "profile file (empty: built-in figures)">,
    Option<"kernelTimes", "kernel-times", "std::string", /*default=*/"\"\"", "a program's trace for kernel times">,
    Option<"target", "target", "std::string", /*default=*/"\"cuda\"", "which built-in figures">,
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def AsyncOptimizer : Pass<"fy-async-optimizer", "mlir::ModuleOp"> {
  let summary = "Runs each layer group's AdamW in the background, overlapped with backward";
  let description = [{
    The updates of a group become, where its last update was (backward has
    produced all its gradients), grad_offload, state_read, group_adamw and
    state_write, chained by tokens; a fysched.group_wait goes before the
    first read of any of its parameters:
    the next step's forward waits for exactly that group's update, so the
    result equals a synchronous AdamW (Fuyou's first technique). Run after
    fy-partition-groups and before fy-insert-dealloc.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def RowsFirst : Pass<"fy-rows-first", "mlir::ModuleOp"> {
  let summary = "Waits only for the rows a gather of the step's tokens reads from a group's table";
  let description = [{
    Where the first read of a group's parameters after its
    fysched.group_wait is a gather of @train_step's token ids (its first
    argument) from a 2-D table on the device, a fysched.group_wait_rows of
    that table and those ids takes the group_wait's place, and the
    group_wait moves before the group's next read (the logits product of a
    tied embedding), or goes if there is none: the runtime updates the rows
    the next batch gathers first, so the forward starts while the rest of
    the table is updated. Run after fy-stream-params: for a streamed table
    the gather becomes "gather_up", which reads the step's rows from the host
    master; the table's copy up goes, or (a tied table, whose copy the logits
    product reads too) moves down with the group_wait to `ahead` launches
    before that product (the group_wait no lower than the group's next read
    of another parameter). Not where the compile turned it off
    (fy.schedule.rows_first = false).
  }];
  let options = [
    Option<"ahead", "ahead", "int64_t", /*default=*/"0",
           "launches before a streamed tied table's later read that its copy is issued (fy-stream-params' ahead)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def ParamWaits : Pass<"fy-param-waits", "mlir::ModuleOp"> {
  let summary = "Waits for each parameter's update before its first read, not for its whole group's";
  let description = [{
    Each fysched.group_wait of @train_step becomes one group_wait of the
    group and a parameter per parameter read after it, right before that
    parameter's first read, and the group's parameters are put in the order
    of those reads (the group's grad_offload ops follow): the runtime
    updates a group's parameters in that order, so the next forward starts
    on a group's first parameter while the rest is updated. Without it a
    group's gradient lands last at the end of backward and its whole update
    stands between backward and the next forward. Parameters not read after
    the wait keep their order, last. Not where the compile turned it off
    (fy.schedule.param_waits = false). Run after fy-rows-first.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def EarlyOffload : Pass<"fy-early-offload", "mlir::ModuleOp"> {
  let summary = "Hands a tied table's gradient to the optimizer as soon as its logits part is done";
  let description = [{
    A table's gradient made by gather_grad_add(base, dy, ids) of the step's
    token ids is final in `base` for every row the ids do not name, long
    before backward reaches the gather: for a tied embedding, right after
    the logits product's backward. A fysched.grad_offload_early of `base`
    goes right after base is written, so that the optimizer updates those
    rows (most of the table) while backward runs, and the group's update at the end of backward is
    left only the batch's rows: the table's update is off the step's
    boundary, where the next forward waited for it. Only for a table read
    rows first (a group_wait_rows of it in the step), and not where
    fy-choose-placement predicted the step faster without
    (the plan's early_rows = "no"). Where it predicted the step faster with
    the rows sent down all at once (the plan's early_chunks = "all"), the op
    says so (`all_chunks`). Where the step reads the table after base is
    written (the input gradient's product), the op is `held` and a
    fysched.early_release follows that last read: the rows go down at once,
    their update writes the table only after the read; where the compile
    turned that off (fy.schedule.early_hold = false, or `hold` false) the op
    goes after the read instead. Run after fy-param-waits.
  }];
  let options = [
    Option<"hold", "hold", "bool", /*default=*/"true",
           "hand the gradient over as soon as it is written, holding only the table's writes for its last read (false: hand it over after that read)">,
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def GradLanded : Pass<"fy-grad-landed", "mlir::ModuleOp"> {
  let summary = "Where each group's gradients, handed to grad_offload, are freed: the device waits there for their copy";
  let description = [{
    After each fysched.grad_offload, a fysched.grad_landed of its token goes
    right after the grad_offload `distance` groups later (before the step's
    return for the last ones): the gradients stay allocated up to it, and
    on a GPU the kernels after it wait for their copy to the host. With 1,
    kernels wait at the next group's grad_offload; where a large gradient
    (an untied head's) is followed closely by a small group's, that wait is
    most of its copy, and 2 lets the next block's backward run meanwhile,
    for the memory of the gradient held that much longer.
    fy-choose-placement weighs the two (the plan's grad_landing). Run before
    fy-insert-dealloc.
  }];
  let options = [
    Option<"distance", "distance", "int64_t", /*default=*/"0",
           "how many grad_offloads later a group's gradients are freed (0: the plan's grad_landing, else 1)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def PrefetchState : Pass<"fy-prefetch-state", "mlir::ModuleOp"> {
  let summary = "Issues each group's optimizer-state read ahead of its update";
  let description = [{
    Groups are updated in the order of their group_adamw ops. The
    state_read of the k-th moves to just after the group_adamw of the
    (k - distance)-th, and the first `distance` reads to the start of
    @train_step, so reading a group's state from the SSD overlaps the
    backward and the updates before it. The runtime issues a read when a
    staging buffer is free (--cpu-mem bounds them), so a distance larger
    than the buffers allow only queues reads earlier. Run after
    fy-async-optimizer.
  }];
  let options = [
    Option<"distance", "distance", "int64_t", /*default=*/"3",
           "How many updates ahead a group's state is read (0: right before its update)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def ChoosePlacement : Pass<"fy-choose-placement", "mlir::ModuleOp"> {
  let summary = "Chooses each forward segment's activation policy and the parameters' placement by predicted step time under the memory budgets";
  let description = [{
    For a candidate plan (one fy-place-activations policy per forward
    segment, and a fy-stream-params policy) the pass runs the placement and
    memory-planning passes on a copy of the module, and the cost model
    (Analysis/CostModel.h) replays the planned step on the streams the
    runtime uses, with the rates of `profile` (a `fuyou-compile --calibrate`
    file; the target's built-in figures when empty), the optimizer's moments
    read and written through the SSD every step or not (`state`). A plan fits when the
    resident parameters plus the device arena are at most `gpu-mem` bytes and
    the host arena (with, on a GPU, the page-locked buffer of `gather_up`'s
    rows) at most `cpu-mem` (0: no bound). With `kernel-times` (a
    trace a program of this target wrote with --trace), each launch of a
    kernel and operand bytes found there costs its measured median time.
    search=classes (the default) prices each kind of segment once, so that
    its cost hardly grows with the number of layers. Segments whose launches
    are the same kernels on the same shapes (a model's repeated blocks) form
    a class. For each placement of the parameters: every uniform plan (one
    policy for all segments) is carried out; each class's policies are
    priced against keeping everything, by a plan with the class's middle
    segment changed and, for a class of several, one with all of them
    changed (the change per segment, and what it costs once: a recomputed
    segment's working memory); a descent on those prices, from each uniform
    plan, moves 1, 2, 4, ... segments of a class from one policy to another
    while that brings the priced memory within the budgets or, within them,
    shortens the priced step, taken as the larger of the changes' sum and
    the busiest stream (so a shared link fills up); the plans it ends at
    are carried out, data sent away from a class's first segments, kept in
    its last. Then, for each placement of the parameters, up to three
    rounds from its best plan carried out: with the prices corrected by
    that plan's own figures, the descent again and the eight moves of one
    or two segments priced faster, nearest the budgets first, carried out
    while one of them is faster. Where all the counts are at most 64 plans
    they are all carried out instead. The fastest plan carried out that fits
    is chosen, so it is never slower than a uniform plan. Segments of a class are interchangeable
    to the prices, so the descent works on counts, not on plans: a handful
    of plans carried out per class and policy, whatever the depth. (Dynamic
    programming over segments would need the step to be a sum; the overlap
    of streams makes it a maximum.)
    search=exhaustive tries every combination (for checking the classes one).
    The choice is recorded on the module as its plan (`fysched.plan`, a
    #fysched.plan attribute): the activations and the parameters'
    placement, which fy-place-activations and fy-stream-params read under
    policy=auto, with the predicted step and the plans tried. A budget that no plan fits is an
    error naming the least memory found.
  }];
  let options = [
    Option<"gpuMem", "gpu-mem", "int64_t", /*default=*/"0", "device budget in bytes (0: none)">,
    Option<"cpuMem", "cpu-mem", "int64_t", /*default=*/"0", "host budget for the host arena and staging in bytes (0: none)">,
    Option<"profile", "profile", "std::string", /*default=*/"\"\"", "profile file (empty: built-in figures)">,
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu or cuda: which built-in figures">,
    Option<"readAhead", "read-ahead", "int64_t", /*default=*/"4", "fy-place-activations' read-ahead for the plans it tries">,
    Option<"paramPrefetch", "param-prefetch", "int64_t", /*default=*/"0", "fy-stream-params' ahead for the plans it tries">,
    Option<"copyWindow", "copy-window", "int64_t", /*default=*/"4", "fy-async-copies' window for the plans it tries">,
    Option<"writeBehind", "write-behind", "int64_t", /*default=*/"4",
           "fy-async-copies' write-behind for the plans it tries (0: a plan with activations on SSD is carried out with 1, 2, 4, 8 and 16 in turn, up to the first that no longer fits or shortens the step, and the fastest that fits stands for it, the plan's write_behind; still one plan in the plan's evaluated count)">,
    Option<"activationPrefetch", "activation-prefetch", "int64_t", /*default=*/"0",
           "fy-place-activations' ahead for the plans it tries">,
    Option<"kernelTimes", "kernel-times", "std::string", /*default=*/"\"\"",
           "a program's --trace: its kernels' measured times replace the profile's rates for the same kernels and bytes">,
    Option<"search", "search", "std::string", /*default=*/"\"classes\"", "classes or exhaustive">,
    Option<"params", "params", "std::string", /*default=*/"\"auto\"", "keep, stream, or auto (the planner chooses)">,
    Option<"activations", "activations", "std::string", /*default=*/"\"auto\"",
           "auto (the planner chooses each segment's policy), or fy-place-activations' policy as given (the plan's given): then only the parameters' placement (params=auto), the SSD writes in flight (write-behind=0, with SSD rates in the profile) and a tied table's early rows (early-rows=auto) are chosen; a plan that fits no budget is left for the memory check to refuse, one the passes cannot carry out is an error with their reason">,
    Option<"earlyRows", "early-rows", "std::string", /*default=*/"\"auto\"",
           "a tied table's rows handed over early (fy-early-offload): yes, no, or auto (the faster of the two)">,
    Option<"earlyChunks", "early-chunks", "std::string", /*default=*/"\"auto\"",
           "on a GPU, how those rows go down: paced (a chunk behind each other group's gradient), all (at once), or auto (the faster of the two)">,
    Option<"gradLanding", "grad-landing", "int64_t", /*default=*/"0",
           "fy-grad-landed's distance: N >= 1 as given, or 0 (auto: on a GPU 2 where the step is faster and a plan fits with it, else 1)">,
    Option<"state", "state", "std::string", /*default=*/"\"auto\"",
           "where AdamW's moments live when the program runs: ssd (run with --ssd), memory, or auto (ssd when the profile has SSD rates)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def PlaceActivations : Pass<"fy-place-activations", "mlir::ModuleOp"> {
  let summary = "Where the values backward needs wait: on the device, in host memory, on SSD, or nowhere (recomputed, all or the cheap ones)";
  let description = [{
    A device buffer of @train_step allocated before the loss is written and
    read after it is an activation saved for backward. Forward is cut into
    segments, one per layer group, each starting at the first launch that
    reads one of the group's parameters; a buffer belongs to the segment of
    its first writer. `policy` is one policy for every segment, or a comma-
    separated list with one per segment in forward order:
      keep: the activation stays on the device;
      host: it is copied to a host buffer right after its last forward use
        and into a fresh device buffer `ahead` launches before its first
        backward use (no earlier than backward's start or the copies back
        placed before it), which then reads that copy (views made in
        forward are made again);
      ssd: the same, on through a host buffer to an `ssd` buffer and back
        through another; the read back starts `read-ahead` SSD values ahead:
        at the first backward use of the value read from SSD that many
        before it (the first ones at the first backward use of any value
        moved out), so it overlaps compute and the reads between;
      recompute: before its first backward use, the forward launches that
        made it, and the unsaved buffers they read, run again into fresh
        buffers from the buffers that were kept, the parameters and the
        inputs. A segment's checkpoints (buffers a later segment reads) stay
        on the device, so recomputation never reaches past one segment. A
        buffer that cannot be made again so (several writers, a parameter
        already updated) stays on the device;
      selective: the outputs of the segment's weight products (matrix
        products reading a parameter, or a buffer made from parameters and
        constants alone) stay on the device, with what only such a product
        can remake; the rest (normalisations, activation
        functions, attention's scores, softmax and product with the values)
        is recomputed as above from them: most of recompute's memory for a
        small part of its time, the FLOPs being in the weight products.
    The saved bytes made again, per segment, go to the module's
    `fysched.recomputed_bytes` (for --emit=plan).
    fy-insert-dealloc then ends each device buffer after its last use, so
    the device holds only the ops at hand's buffers. Every policy gives the
    same bits: only where values wait, or that the same kernels run twice on
    the same inputs, changes. Run before fy-insert-dealloc.
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"keep\"",
           "keep, host, ssd, recompute or selective; or one of them per forward segment, comma-separated; or auto (the plan's activations)">,
    Option<"readAhead", "read-ahead", "int64_t", /*default=*/"4",
           "how many values read from SSD ahead of the one needed (at least 1)">,
    Option<"ahead", "ahead", "int64_t", /*default=*/"0",
           "launches before its first backward use that an activation's copy back to the device is issued">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def StreamParams : Pass<"fy-stream-params", "mlir::ModuleOp"> {
  let summary = "Where the parameters' working copies live: resident on the device or streamed";
  let description = [{
    With policy=stream, every fysched.get_param of @train_step reads the
    host master instead, and each phase that uses the parameter (forward,
    backward: before and after the loss is written) gets its own device
    buffer, filled by a copy right before the phase's first use (views are
    made again on it). fy-insert-dealloc then ends it after the phase's last
    use, so the device holds the weights of the ops at hand only; the module
    is marked fysched.streamed_params and the program declares it, so no
    resident copy is made. policy=keep (the default) changes nothing. Run
    before fy-insert-dealloc.

    The copy is issued `ahead` launches before the phase's first use, so it
    runs while they compute (0: right before the use), and the master is
    read where the first copy is issued. A forward copy does not move before
    the group_wait of the parameter's group (the master is final only once
    the step before's update is done); a backward copy does not move before
    the parameter's last forward use, so one phase's buffer is dead before
    the next one's is filled.
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"keep\"",
           "keep (resident on the device), stream (copied in per phase), or auto (the plan's params)">,
    Option<"ahead", "ahead", "int64_t", /*default=*/"0",
           "launches before a phase's first use that a parameter's copy is issued">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def AsyncCopies : Pass<"fy-async-copies", "mlir::ModuleOp"> {
  let summary = "Copies between host and device run on copy streams, and SSD writes in the SSD's queue, while kernels go on";
  let description = [{
    Each fysched.copy of @train_step between host and device, or from host
    memory to SSD, gets a token, and a fysched.wait on it goes where the
    program next needs the copy done: before the first op after it that
    touches its target, writes or frees its source (an update of the
    parameter whose master it reads included), or returns. A deallocation
    of the source on the way moves after the wait, which then comes at most
    `window` launches after the copy, so that a copy whose target is needed
    only much later (an activation waiting for backward) holds its source
    for a bounded time; a copy from a buffer that lives on (a weight's
    master) waits at its first conflict however far. window=0 puts every
    wait for a copy between host and device right after it. An SSD write's
    freed source is held instead until `write-behind` more SSD writes have
    started (forward's last ones: until backward starts): the wait goes
    before the write-behind-th, so as many writes may be in flight, each
    from its own host buffer (without it every write's host buffer is the
    same one, and the next activation's way out waits for the write
    before); write-behind=0 takes the planner's choice
    (the plan's write_behind), else 4. fy-plan-memory counts both buffers as
    used up to the wait, so no other buffer is placed over them while the
    copy runs. Values do not change, only
    when the ops after a copy may start. Run after fy-insert-dealloc,
    before fy-plan-memory.
  }];
  let options = [
    Option<"window", "window", "int64_t", /*default=*/"4",
           "launches that may run while a copy is in flight before the program waits for it (0: wait right after it)">,
    Option<"writeBehind", "write-behind", "int64_t", /*default=*/"4",
           "SSD writes started before the program waits for the one this many before (0: the plan's write_behind, else 4)">
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def PlanMemory : Pass<"fy-plan-memory", "mlir::ModuleOp"> {
  let summary = "The static memory plan: every temporary's offset in its space's arena";
  let description = [{
    Each fysched.alloc and fysched.constant in device memory lives from its
    definition to its dealloc (to the end of @train_step without one), in
    the runtime's 64-byte granules. Buffers are placed largest first, each
    at the lowest offset that overlaps no placed buffer alive at the same
    time; the result is the op's `offset`. The function records
    `fysched.param_bytes`, `fysched.peak_temp_bytes` (most bytes alive at
    once, the lower bound) and `fysched.arena_bytes` (the arena's size, at
    least the peak). Host buffers (activations waiting for backward) are
    placed the same way in a host arena, `fysched.host_arena_bytes`, and
    buffers on SSD in an SSD arena, `fysched.ssd_arena_bytes` (a region of
    the activation store), both in whole 4096-byte pages when there are SSD
    buffers, as O_DIRECT transfers need. The
    executable checks --gpu-mem against the parameters plus the arena, and
    --cpu-mem against the host arena with the optimizer's buffers, at
    start-up; its arenas refuse any placement that overlaps a live buffer.
    Run after fy-insert-dealloc.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def OutlineEval : Pass<"fy-outline-eval", "mlir::ModuleOp"> {
  let summary = "@eval_step: the loss of a batch without training on it (validation)";
  let description = [{
    A copy of the planned @train_step cut after the launch that writes the
    loss: forward's kernels in forward's order, so evaluating a batch gives
    the bits a training step's forward gives. The optimizer's state reads,
    transfers of values saved for backward and launches and copies whose
    results nothing left reads are dropped; dropout becomes a copy
    (evaluation mode); a group_wait_rows becomes a group_wait (the batch is
    not the one the optimizer updated rows first for). Copies still in
    flight are waited for and buffers still alive freed before the return.
    Buffers keep train_step's offsets over part of their lifetimes, so the
    memory plan needs no change. Run after fy-plan-memory.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def TestPrintBufferLiveness : Pass<"test-print-buffer-liveness", "mlir::ModuleOp"> {
  let summary = "Test pass: a remark per buffer with its size and live range";
  let description = [{
    For lit tests of the buffer liveness analysis (passes/Analysis): each
    fysched.alloc and fysched.constant gets a remark
    `<bytes> bytes live [start, end]` (positions in its block), and
    `, escapes` when the function returns it.
  }];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def TestPrintStepPrediction : Pass<"test-print-step-prediction", "mlir::ModuleOp"> {
  let summary = "Test pass: prints the cost model's prediction of a planned module";
  let description = [{
    For lit tests of the cost model (passes/Analysis/CostModel): prints to
    stdout what `fuyou-compile --emit=plan` prints (the predicted step, each
    stream's busy time, the waits for updates) for a module already planned,
    so that hand-written schedules can be priced with a test profile. With
    `timeline`, then every slice of the replayed step (what
    `fuyou-compile --plan-trace` writes), one a line, in microseconds: the
    worked examples in the tests' comments are read off it.
  }];
  let options = [
    Option<"profile", "profile", "std::string", /*default=*/"\"\"", "profile file (empty: built-in figures)">,
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu or cuda: which built-in figures">,
    Option<"stateOnSsd", "state-on-ssd", "bool", /*default=*/"false", "the moments go through the SSD each step">,
    Option<"timeline", "timeline", "bool", /*default=*/"false", "also print the replayed step's slices">,
  ];
  let dependentDialects = ["fuyou::fysched::FySchedDialect"];
}

def ConvertFySchedToEmitC : Pass<"fy-convert-fysched-to-emitc", "mlir::ModuleOp"> {
  let summary = "fysched program → EmitC calls into the runtime (libfuyou_rt)";
  let description = [{
    Buffers become `fy::View` values, each fysched op a call of `fy::rt::`;
    parameters become `fy_declare`, the step `fy_train_step` (and
    `@eval_step`, when there is one, `fy_eval_step`), and `main` hands them
    to `fy::program_main`.
  }];
  let dependentDialects = ["mlir::emitc::EmitCDialect"];
}

#endif
