// The small matchers fy-recompose's patterns share (Recompose.cpp,
// RecomposeAttention.cpp).
#pragma once

#include "dialects/FyGraph/FyGraphOps.h"

#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <optional>
#include <utility>

namespace fuyou::recompose {

namespace fg = fuyou::fygraph;
using mlir::DenseElementsAttr;
using mlir::Value;
using mlir::dyn_cast;

// The value of a splat float constant, if `v` is one.
inline std::optional<float> splatValue(Value v) {
  auto c = v.getDefiningOp<fg::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto d = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!d || !d.isSplat() || !d.getElementType().isF32())
    return std::nullopt;
  return d.getSplatValue<float>();
}
inline bool isConst(Value v, float want, float tol = 1e-6f) {
  auto x = splatValue(v);
  return x && std::fabs(*x - want) <= tol * std::max(1.f, std::fabs(want));
}

// For a commutative binary op, the operand that is not `known` (or null).
template <typename OpT> Value other(OpT op, Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return nullptr;
}

// Returns (a, b) of a commutative op so that pred(a) holds, if either does.
template <typename OpT, typename Pred>
std::optional<std::pair<Value, Value>> split(OpT op, Pred pred) {
  if (pred(op.getLhs()))
    return std::make_pair(op.getLhs(), op.getRhs());
  if (pred(op.getRhs()))
    return std::make_pair(op.getRhs(), op.getLhs());
  return std::nullopt;
}

// map[key], computed by fn(key) the first time the key is seen (a pattern's
// answers about a uniqued attribute, which every layer shares).
template <typename Map, typename Key, typename Fn> auto &memoized(Map &map, Key key, Fn fn) {
  auto [it, fresh] = map.try_emplace(key);
  if (fresh)
    it->second = fn(key);
  return it->second;
}

template <typename OpT> OpT def(Value v) { return v ? v.getDefiningOp<OpT>() : OpT(); }

// Patterns of attention and its rotary embedding (RecomposeAttention.cpp).
// maxHeadDim: the largest head dim the target's fused attention takes.
void addAttentionPatterns(mlir::RewritePatternSet &patterns, int64_t maxHeadDim);
// waitForSwaps: attention is formed too, so a rotation waits for the head
// swaps that pattern set sinks first.
void addRopePatterns(mlir::RewritePatternSet &patterns, bool waitForSwaps);

} // namespace fuyou::recompose
