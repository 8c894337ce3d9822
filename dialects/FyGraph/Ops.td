#ifndef FYGRAPH_OPS
#define FYGRAPH_OPS

include "dialects/FyGraph/Dialect.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def FyTensor : StaticShapeTensorOf<[F32, I64, I1]>;
def FyFloatTensor : StaticShapeTensorOf<[F32]>;
def FyIndexTensor : StaticShapeTensorOf<[I64]>;
def FyBoolTensor : StaticShapeTensorOf<[I1]>;

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

def FyGraph_ParamOp : FyGraph_Op<"param", [Symbol]> {
  let summary = "A tensor held in external weight storage";
  let description = [{
    Declares an initializer of the model by its ONNX name. `trainable` marks
    the ones that receive a gradient and an optimizer update.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       UnitAttr:$trainable);
  let assemblyFormat = "$sym_name (`trainable` $trainable^)? `:` $type attr-dict";
  let hasVerifier = 1;
}

def FyGraph_GetParamOp : FyGraph_Op<"get_param",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The current value of a parameter";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def FyGraph_ConstantOp : FyGraph_Op<"constant",
    [Pure, ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "A small constant from the graph itself (never a weight)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def FyGraph_LossScaleOp : FyGraph_Op<"loss_scale", [Pure]> {
  let summary = "The run's loss scale for this step: where backward starts";
  let description = [{
    The gradient of the loss that backward starts from under dynamic loss
    scaling (fy-autodiff loss-scale=true): a scalar the run sets each step
    (fy::rt::loss_scale), so fp16 products of small gradients neither
    underflow nor, once the scale has backed off, overflow.
  }];
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class FyGraph_BinaryOp<string mnemonic, list<Trait> traits = []>
    : FyGraph_Op<mnemonic, !listconcat(traits, [Pure, ResultsBroadcastableShape])> {
  let arguments = (ins FyTensor:$lhs, FyTensor:$rhs);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_AddOp : FyGraph_BinaryOp<"add", [Commutative]> {
  let summary = "Broadcasting a + b";
  // add(t, gather_grad(dy, ids)) becomes gather_grad_add(t, dy, ids).
  let hasCanonicalizer = 1;
}
def FyGraph_SubOp : FyGraph_BinaryOp<"sub"> { let summary = "Broadcasting a - b"; }
def FyGraph_MulOp : FyGraph_BinaryOp<"mul", [Commutative]> { let summary = "Broadcasting a * b"; }
def FyGraph_DivOp : FyGraph_BinaryOp<"div"> { let summary = "Broadcasting a / b"; }
def FyGraph_PowOp : FyGraph_BinaryOp<"pow"> { let summary = "Broadcasting a ^ b"; }
def FyGraph_EqualOp : FyGraph_BinaryOp<"equal", [Commutative]> {
  let summary = "Broadcasting a == b, an i1 tensor";
}

class FyGraph_UnaryOp<string mnemonic, list<Trait> traits = []>
    : FyGraph_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let arguments = (ins FyFloatTensor:$input);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def FyGraph_NegOp : FyGraph_UnaryOp<"neg"> { let summary = "-x"; }
def FyGraph_SqrtOp : FyGraph_UnaryOp<"sqrt"> { let summary = "sqrt(x)"; }
def FyGraph_ReciprocalOp : FyGraph_UnaryOp<"reciprocal"> { let summary = "1/x"; }
def FyGraph_ExpOp : FyGraph_UnaryOp<"exp"> { let summary = "exp(x)"; }
def FyGraph_TanhOp : FyGraph_UnaryOp<"tanh"> { let summary = "tanh(x)"; }
def FyGraph_ErfOp : FyGraph_UnaryOp<"erf"> { let summary = "erf(x)"; }
def FyGraph_SigmoidOp : FyGraph_UnaryOp<"sigmoid"> { let summary = "1/(1+exp(-x))"; }
def FyGraph_SiluOp : FyGraph_UnaryOp<"silu"> { let summary = "x*sigmoid(x), fused"; }
def FyGraph_GeluOp : FyGraph_Op<"gelu", [Pure, SameOperandsAndResultType]> {
  let summary = "GELU, fused; `approximate` is \"none\" (erf) or \"tanh\"";
  let arguments = (ins FyFloatTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def FyGraph_SwiGLUOp : FyGraph_Op<"swiglu", [Pure, AllTypesMatch<["gate", "up", "result"]>]> {
  let summary = "silu(gate) * up, fused: a SwiGLU MLP's product";
  let description = [{
    fy-recompose forms it from mul(silu(gate), up). The silu is rounded to
    f32 before the product, so the bits are those of the two ops. Its
    backward computes silu(gate) again instead of keeping it, so the MLP
    keeps two of its three hidden-width tensors for backward.
  }];
  let arguments = (ins FyFloatTensor:$gate, FyFloatTensor:$up);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
}

def FyGraph_SwiGLUGradOp : FyGraph_Op<"swiglu_grad",
    [Pure, AllTypesMatch<["gate", "up", "dy", "dgate", "dup"]>]> {
  let summary = "swiglu's gradients: dup = dy * silu(gate), dgate = silu'(gate) * (dy * up)";
  let arguments = (ins FyFloatTensor:$gate, FyFloatTensor:$up, FyFloatTensor:$dy);
  let results = (outs FyFloatTensor:$dgate, FyFloatTensor:$dup);
  let assemblyFormat = "$gate `,` $up `,` $dy attr-dict `:` type($gate)";
}

def FyGraph_SwiGLUPackedOp : FyGraph_Op<"swiglu_packed", [Pure]> {
  let summary = "swiglu of the two halves of the last dim: silu(x[..., :F]) * x[..., F:]";
  let description = [{
    fy-pack-swiglu forms it where the gate and up projections of one input
    are made one product of their concatenated weights: the SwiGLU reads
    that product's halves where they lie. The bits are swiglu's on the
    halves.
  }];
  let arguments = (ins FyFloatTensor:$input);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def FyGraph_SwiGLUPackedGradOp : FyGraph_Op<"swiglu_packed_grad",
    [Pure, AllTypesMatch<["input", "dinput"]>]> {
  let summary = "swiglu_packed's gradient: swiglu_grad's dgate and dup, in the halves of dinput";
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$dy);
  let results = (outs FyFloatTensor:$dinput);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($input) `,` type($dy)";
  let hasVerifier = 1;
}

def FyGraph_RopeOp : FyGraph_Op<"rope", [Pure, AllTypesMatch<["input", "result"]>, AllTypesMatch<["cos", "sin"]>]> {
  let summary = "rotary position embedding, the halves' convention: x cos + rotate_half(x) sin";
  let description = [{
    rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]) along the last dim
    (Llama's and Hugging Face's convention). `cos` and `sin` are [T, D]:
    row t rotates x's elements at index t of dim `seq_axis`. fy-recompose
    forms it from the exported products, slices, neg and concat; each
    product is rounded to f32 before the sum, so on f32 tensors the bits are
    those of the unfused ops (16-bit ones round once, not after each op).
    With `transposed`, the rotation's transpose, which is its
    gradient: x cos + rotate_half^T(x sin), rotate_half^T(y) =
    concat(y[..., D/2:], -y[..., :D/2]). cos and sin get no gradient.
  }];
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$cos, FyFloatTensor:$sin, I64Attr:$seq_axis,
                       UnitAttr:$transposed);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input `,` $cos `,` $sin attr-dict `:` type($input) `,` type($cos)";
  let hasVerifier = 1;
}

def FyGraph_BiasGeluOp : FyGraph_Op<"bias_gelu", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "gelu(input + bias), fused; bias is 1-D along the last dim";
  let description = [{
    A linear layer's bias and its activation in one pass (fy-recompose forms
    it from gelu(add(x, b))). The sum is rounded to f32 before the GELU, so
    the bits are those of the two ops.
  }];
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$bias,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` type($input) `,` type($bias)";
  let hasVerifier = 1;
}

def FyGraph_BiasGeluGradOp : FyGraph_Op<"bias_gelu_grad",
    [Pure, AllTypesMatch<["input", "y", "dy", "dx"]>]> {
  let summary = "dx = dy * gelu'(input + bias); y is bias_gelu's result";
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$bias, FyFloatTensor:$y,
                       FyFloatTensor:$dy, DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs FyFloatTensor:$dx);
  let assemblyFormat = "$input `,` $bias `,` $y `,` $dy attr-dict `:` type($input) `,` type($bias)";
  let hasVerifier = 1;
}

def FyGraph_UnaryGradOp : FyGraph_Op<"unary_grad",
    [Pure, AllTypesMatch<["x", "y", "dy", "dx"]>]> {
  let summary = "dx = dy * f'(x) for an elementwise f";
  let description = [{
    `fn` names f (neg, sqrt, reciprocal, exp, tanh, erf, sigmoid, silu, gelu,
    gelu_tanh). `y` is f(x), which some derivatives reuse.
  }];
  let arguments = (ins StrAttr:$fn, FyFloatTensor:$x, FyFloatTensor:$y,
                       FyFloatTensor:$dy);
  let results = (outs FyFloatTensor:$dx);
  let assemblyFormat = "$fn $x `,` $y `,` $dy attr-dict `:` type($dx)";
  let hasVerifier = 1;
}

def FyGraph_WhereOp : FyGraph_Op<"where", [Pure, ResultsBroadcastableShape]> {
  let summary = "Broadcasting select";
  let arguments = (ins FyBoolTensor:$condition, FyTensor:$lhs, FyTensor:$rhs);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$condition `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def FyGraph_CastOp : FyGraph_Op<"cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "Element type conversion";
  let arguments = (ins FyTensor:$input);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
}

//===----------------------------------------------------------------------===//
// Reductions, products, normalisations
//===----------------------------------------------------------------------===//

class FyGraph_ReduceOp<string mnemonic> : FyGraph_Op<mnemonic, [Pure]> {
  let arguments = (ins FyFloatTensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}
def FyGraph_ReduceSumOp : FyGraph_ReduceOp<"reduce_sum"> { let summary = "Sum over axes"; }
def FyGraph_ReduceMeanOp : FyGraph_ReduceOp<"reduce_mean"> { let summary = "Mean over axes"; }

def FyGraph_ReduceToOp : FyGraph_Op<"reduce_to", [Pure]> {
  let summary = "Sums a tensor over the dims its result was broadcast along";
  let description = [{
    The adjoint of implicit broadcasting: the result shape, right-aligned, is
    broadcast-compatible with the input.
  }];
  let arguments = (ins FyFloatTensor:$input);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def FyGraph_MatMulOp : FyGraph_Op<"matmul", [Pure]> {
  let summary = "numpy matmul with batch broadcasting; optional transposes";
  let description = [{
    `trans_a`/`trans_b` transpose the last two dims of an operand first, so
    that gradients need no explicit transposes.
  }];
  let arguments = (ins FyFloatTensor:$lhs, FyFloatTensor:$rhs,
                       UnitAttr:$trans_a, UnitAttr:$trans_b);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_MatMulBiasOp : FyGraph_Op<"matmul_bias", [Pure]> {
  let summary = "matmul(lhs, rhs) + bias, bias 1-D along the result's last dim";
  let description = [{
    A Linear's product and its bias in one kernel (fy-fuse-bias forms it
    from add(matmul, bias) after autodiff). The bias is added to the
    product's fp32 result, so a 16-bit result is rounded once.
  }];
  let arguments = (ins FyFloatTensor:$lhs, FyFloatTensor:$rhs, FyFloatTensor:$bias,
                       UnitAttr:$trans_a, UnitAttr:$trans_b);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `,` $bias attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_LayerNormOp : FyGraph_Op<"layer_norm", [Pure]> {
  let summary = "Layer normalisation over dims [axis, rank)";
  let description = [{
    Also returns the mean and inverse standard deviation (shape of the input
    with the normalised dims set to 1) that layer_norm_grad consumes.
  }];
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$scale,
                       Optional<FyFloatTensor>:$bias, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs FyFloatTensor:$result, FyFloatTensor:$mean,
                      FyFloatTensor:$inv_std_dev);
  let assemblyFormat = "$input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_LayerNormGradOp : FyGraph_Op<"layer_norm_grad", [Pure]> {
  let summary = "Gradients of layer_norm for input, scale and bias";
  let description = [{
    With `addend` (of the input's shape), `dinput` is addend plus the
    input's gradient, one fp32 add after it: a residual stream's gradient
    summed where it is made (fy-fuse-norm-grad-add).
  }];
  let arguments = (ins FyFloatTensor:$dy, FyFloatTensor:$input, FyFloatTensor:$scale,
                       FyFloatTensor:$mean, FyFloatTensor:$inv_std_dev, Optional<FyFloatTensor>:$addend,
                       I64Attr:$axis);
  let results = (outs FyFloatTensor:$dinput, FyFloatTensor:$dscale, FyFloatTensor:$dbias);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def FyGraph_RMSNormOp : FyGraph_Op<"rms_norm", [Pure]> {
  let summary = "x * rsqrt(mean(x^2) + eps) * scale over dims [axis, rank)";
  let arguments = (ins FyFloatTensor:$input, FyFloatTensor:$scale, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs FyFloatTensor:$result, FyFloatTensor:$inv_rms);
  let assemblyFormat = "$input `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_RMSNormGradOp : FyGraph_Op<"rms_norm_grad", [Pure]> {
  let summary = "Gradients of rms_norm for input and scale";
  let description = [{
    With `addend`, `dinput` is addend plus the input's gradient, as
    layer_norm_grad's.
  }];
  let arguments = (ins FyFloatTensor:$dy, FyFloatTensor:$input, FyFloatTensor:$scale,
                       FyFloatTensor:$inv_rms, Optional<FyFloatTensor>:$addend, I64Attr:$axis);
  let results = (outs FyFloatTensor:$dinput, FyFloatTensor:$dscale);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def FyGraph_SoftmaxOp : FyGraph_Op<"softmax", [Pure, SameOperandsAndResultType]> {
  let summary = "Softmax along one axis (ONNX opset 13+)";
  let arguments = (ins FyFloatTensor:$input, I64Attr:$axis);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def FyGraph_MaskedSoftmaxOp : FyGraph_Op<"masked_softmax", [Pure]> {
  let summary = "softmax(where(mask, -inf, x * scale)) along the last axis";
  let description = [{
    Attention's scores, scaled, masked and normalised in one pass. `mask` is
    true where a score is dropped; its shape is [1.., R, D] with D the last dim
    of `input` and R 1 or the dim before it, so row r of `input` (counting over
    all leading dims) takes mask row r mod R. Bit for bit the same as the mul,
    where and softmax it replaces; its gradient (softmax_grad with the
    scale) equals theirs up to the sign of zeros at masked entries.
  }];
  let arguments = (ins FyFloatTensor:$input, FyBoolTensor:$mask, F32Attr:$scale);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$input `,` $mask attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_AttentionOp : FyGraph_Op<"attention", [Pure]> {
  let summary = "Causal attention, fused: softmax(q k^T * scale, causal mask) v, without the T x T scores";
  let description = [{
    `q` [B, H, T, D]; `k` and `v` [B, Hkv, T, D] with H a multiple of Hkv
    (grouped-query heads: q head h reads k/v head h / (H / Hkv)). Row i sees
    keys j <= i, and with `window` > 0 only j > i - window. `result` is
    [B, H, T, D]; `lse` [B, H, T] each row's log-sum-exp of its scaled
    scores, which attention_grad reads instead of the probabilities, so no
    T x T tensor exists in either pass. With `seq_major`, q, k, v and
    `result` are [B, T, H, D] and [B, T, Hkv, D] instead (a Linear's output
    split into heads, read without transposing it; lse stays [B, H, T]).
  }];
  let arguments = (ins FyFloatTensor:$q, FyFloatTensor:$k, FyFloatTensor:$v, F32Attr:$scale,
                       DefaultValuedAttr<I64Attr, "0">:$window, UnitAttr:$seq_major);
  let results = (outs FyFloatTensor:$result, FyFloatTensor:$lse);
  let assemblyFormat = "$q `,` $k `,` $v attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_AttentionGradOp : FyGraph_Op<"attention_grad", [Pure]> {
  let summary = "Gradients of attention for q, k and v, from its result and log-sum-exps";
  let arguments = (ins FyFloatTensor:$q, FyFloatTensor:$k, FyFloatTensor:$v, FyFloatTensor:$result,
                       FyFloatTensor:$lse, FyFloatTensor:$dy, F32Attr:$scale,
                       DefaultValuedAttr<I64Attr, "0">:$window, UnitAttr:$seq_major);
  let results = (outs FyFloatTensor:$dq, FyFloatTensor:$dk, FyFloatTensor:$dv);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_AttentionQKVOp : FyGraph_Op<"attention_qkv", [Pure]> {
  let summary = "attention of q, k and v packed in one tensor: a fused qkv Linear's output";
  let description = [{
    `qkv` [B, T, H + 2 Hkv, D]: q's H heads, then k's and v's `kv_heads`
    each, as a fused qkv Linear (GPT-2's c_attn) writes them. The same
    attention as fygraph.attention {seq_major} on the three slices, read
    where they are: no slice is copied out, and the gradient
    (attention_qkv_grad) is one tensor of qkv's shape, no concat of three.
    `result` [B, T, H, D], `lse` [B, H, T]. fy-recompose forms it.
  }];
  let arguments = (ins FyFloatTensor:$qkv, I64Attr:$kv_heads, F32Attr:$scale,
                       DefaultValuedAttr<I64Attr, "0">:$window);
  let results = (outs FyFloatTensor:$result, FyFloatTensor:$lse);
  let assemblyFormat = "$qkv attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_AttentionQKVGradOp : FyGraph_Op<"attention_qkv_grad", [Pure]> {
  let summary = "attention_qkv's gradient for its qkv, from its result and log-sum-exps";
  let arguments = (ins FyFloatTensor:$qkv, FyFloatTensor:$result, FyFloatTensor:$lse, FyFloatTensor:$dy,
                       I64Attr:$kv_heads, F32Attr:$scale, DefaultValuedAttr<I64Attr, "0">:$window);
  let results = (outs FyFloatTensor:$dqkv);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_SoftmaxGradOp : FyGraph_Op<"softmax_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "dx = (y * (dy - sum(dy * y))) * scale along axis";
  let description = [{
    `scale` folds in the gradient of a scaling before the softmax (that of
    masked_softmax); 1 for a plain softmax.
  }];
  let arguments = (ins FyFloatTensor:$dy, FyFloatTensor:$y, I64Attr:$axis,
                       DefaultValuedAttr<F32Attr, "1.0f">:$scale);
  let results = (outs FyFloatTensor:$dx);
  let assemblyFormat = "$dy `,` $y attr-dict `:` type($dx)";
}

def FyGraph_SoftmaxCrossEntropyLossOp
    : FyGraph_Op<"softmax_cross_entropy_loss", [Pure]> {
  let summary = "ONNX SoftmaxCrossEntropyLoss, also returning log-probabilities";
  let arguments = (ins FyFloatTensor:$scores, FyIndexTensor:$labels,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs FyFloatTensor:$loss, FyFloatTensor:$log_prob);
  let assemblyFormat = "$scores `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_SoftmaxCrossEntropyLossGradOp
    : FyGraph_Op<"softmax_cross_entropy_loss_grad", [Pure]> {
  let summary = "Gradient of the loss for the scores, from the log-probabilities";
  let arguments = (ins FyFloatTensor:$dloss, FyFloatTensor:$log_prob,
                       FyIndexTensor:$labels,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs FyFloatTensor:$dscores);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def FyGraph_LinearCrossEntropyOp : FyGraph_Op<"linear_cross_entropy", [Pure]> {
  let summary = "Cross-entropy of the logits x w^T, with its gradients, never forming the logits whole";
  let description = [{
    `x` [..., D] (N rows), `w` [V, D], `labels` [N]: `loss` is the
    softmax_cross_entropy_loss (`reduction` mean or sum, `ignore_index`) of
    the logits x w^T [N, V]. The kernel forms them a block of rows at a time,
    and turns each block at once into its part of `dx` (x's shape) and `dw`
    (w's), the loss's gradients for a gradient of 1 on it, which the
    gradient rule scales: no [N, V] tensor exists in either pass, and the
    products are the three the unfused graph makes. fy-recompose forms it
    from a loss's logits product.
  }];
  let arguments = (ins FyFloatTensor:$x, FyFloatTensor:$w, FyIndexTensor:$labels,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs FyFloatTensor:$loss, FyFloatTensor:$dx, FyFloatTensor:$dw);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def FyGraph_ReshapeOp : FyGraph_Op<"reshape", [Pure]> {
  let summary = "Reshape, Squeeze, Unsqueeze and Flatten: same elements, new static shape";
  let arguments = (ins FyTensor:$input);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def FyGraph_TransposeOp : FyGraph_Op<"transpose", [Pure]> {
  let summary = "Permutes dims";
  let description = [{
    Dim i of the result is dim perm[i] of the input (ONNX Transpose). A
    transpose of a transpose folds into one, and the identity into its input,
    so the patterns that read a layout see one permutation (torch's k.T of a
    k already moved to [B, H, T, D] exports as two).
  }];
  let arguments = (ins FyTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def FyGraph_ExpandOp : FyGraph_Op<"expand", [Pure]> {
  let summary = "Broadcasts to the result shape (ONNX Expand)";
  let arguments = (ins FyTensor:$input);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def FyGraph_ConcatOp : FyGraph_Op<"concat", [Pure]> {
  let summary = "Concatenation along an axis";
  let arguments = (ins Variadic<FyTensor>:$inputs, I64Attr:$axis);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_SliceOp : FyGraph_Op<"slice", [Pure]> {
  let summary = "Strided static slice (ONNX Slice and each result of Split)";
  let description = [{
    Per dim a start and a positive step; the result shape gives the count.
  }];
  let arguments = (ins FyTensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs FyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def FyGraph_SliceGradOp : FyGraph_Op<"slice_grad", [Pure]> {
  let summary = "Scatters a slice's gradient into zeros of the input's shape";
  let arguments = (ins FyFloatTensor:$dy, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs FyFloatTensor:$dx);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($dx)";
  let hasVerifier = 1;
}

def FyGraph_GatherOp : FyGraph_Op<"gather", [Pure]> {
  let summary = "Rows of a table along axis 0 (embedding lookup)";
  let arguments = (ins FyFloatTensor:$table, FyIndexTensor:$indices);
  let results = (outs FyFloatTensor:$result);
  let assemblyFormat = "$table `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_GatherGradOp : FyGraph_Op<"gather_grad", [Pure]> {
  let summary = "Scatter-adds row gradients into a zero table";
  let arguments = (ins FyFloatTensor:$dy, FyIndexTensor:$indices);
  let results = (outs FyFloatTensor:$dtable);
  let assemblyFormat = "$dy `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_GatherGradAddOp : FyGraph_Op<"gather_grad_add", [Pure]> {
  let summary = "A table plus row gradients scattered into it: base + gather_grad(dy, indices)";
  let description = [{
    A tied embedding's gradient: the logits product's part (`base`, every row)
    plus the gather's rows. Each row the indices name is base's row plus the
    sum of its dy rows in index order, as add(base, gather_grad(dy, indices))
    gives; every other row is base's row, bit for bit (no + 0.0), so that an
    optimizer may take those rows as soon as `base` is computed.
  }];
  let arguments = (ins FyFloatTensor:$base, FyFloatTensor:$dy, FyIndexTensor:$indices);
  let results = (outs FyFloatTensor:$dtable);
  let assemblyFormat = "$base `,` $dy `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_DropoutOp : FyGraph_Op<"dropout", [Pure]> {
  let summary = "Inverted dropout in training mode; the mask is kept for backward";
  let arguments = (ins FyFloatTensor:$input, F32Attr:$ratio, I64Attr:$seed);
  let results = (outs FyFloatTensor:$result, FyBoolTensor:$mask);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FyGraph_DropoutGradOp : FyGraph_Op<"dropout_grad", [Pure]> {
  let summary = "dx = dy * mask / (1 - ratio)";
  let arguments = (ins FyFloatTensor:$dy, FyBoolTensor:$mask, F32Attr:$ratio);
  let results = (outs FyFloatTensor:$dx);
  let assemblyFormat = "$dy `,` $mask attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

def FyGraph_AdamWOp : FyGraph_Op<"adamw",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>,
     MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "One AdamW update of a trainable parameter from its gradient";
  let description = [{
    Hyper-parameters are the executable's flags; the op fixes only which
    parameter is updated from which gradient, so later passes can move it.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FyFloatTensor:$grad);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($grad)";
}

#endif
