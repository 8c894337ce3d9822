// The importer's handlers of ops that move, cut, join or index data: Gather,
// GatherND, Reshape and its kin, Transpose, Concat, Slice, Split, Expand, Pad
// and the sequence ops.
#include "compiler/importer/ImporterImpl.h"

namespace fuyou::import_detail {

LogicalResult Importer::gather(const Node &n) {
  Value table = in(n, 0), idx = in(n, 1);
  if (!table || !idx)
    return failure();
  if (!elemOf(table).isF32() || !elemOf(idx).isInteger(64) || shapeOf(table).empty())
    return fail("only float tables with int64 indices are supported");
  const int64_t rank = shapeOf(table).size();
  auto ax = axis(n.intAttr("axis", 0), rank);
  if (failed(ax))
    return failure();
  if (const Tensor *c = getConst(n.inputs[1])) {
    // Constant indices: ONNX counts negative ones from the end; check them now.
    int64_t rows = shapeOf(table)[*ax];
    std::vector<int64_t> v = c->asInts();
    for (int64_t &k : v) {
      if (k < -rows || k >= rows)
        return fail("index " + std::to_string(k) + " is out of range for a dim of " + std::to_string(rows));
      if (k < 0)
        k += rows;
    }
    idx = materialize(fuyou::onnx_in::makeInts(v, c->shape));
  }
  // Another axis than 0 (an activation's): the axis moved to the front, a
  // lookup of rows, and the index dims moved back where the axis was; the
  // gradient follows from those of transpose and gather.
  SmallVector<int64_t> toFront{*ax};
  for (int64_t i = 0; i < rank; ++i)
    if (i != *ax)
      toFront.push_back(i);
  if (*ax != 0) {
    SmallVector<int64_t> shape;
    for (int64_t p : toFront)
      shape.push_back(shapeOf(table)[p]);
    table = b.create<fg::TransposeOp>(loc, tensorType(shape, elemOf(table)), table, toFront);
  }
  SmallVector<int64_t> shape(shapeOf(idx));
  llvm::append_range(shape, shapeOf(table).drop_front());
  Value r = b.create<fg::GatherOp>(loc, tensorType(shape, b.getF32Type()), table, idx);
  const int64_t q = shapeOf(idx).size();
  if (*ax != 0 && q > 0) {
    // [idx dims, dims before the axis, dims after] -> [before, idx, after]
    SmallVector<int64_t> perm, out;
    for (int64_t i = 0; i < *ax; ++i)
      perm.push_back(q + i);
    for (int64_t i = 0; i < q; ++i)
      perm.push_back(i);
    for (int64_t i = q + *ax; i < int64_t(shape.size()); ++i)
      perm.push_back(i);
    for (int64_t p : perm)
      out.push_back(shape[p]);
    r = b.create<fg::TransposeOp>(loc, tensorType(out, b.getF32Type()), r, perm);
  }
  set(n, 0, r);
  return success();
}

// GatherND with constant indices on an activation (torch 2.x writes x[:, idx]
// so, between transposes): the first k dims flattened into rows, each index
// tuple one row number, a gather of rows.
LogicalResult Importer::gatherND(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  const Tensor *ind = n.inputs.size() > 1 ? getConst(n.inputs[1]) : nullptr;
  if (!ind)
    return fail("the indices must be a constant (indices computed at run time are not supported)");
  if (n.intAttr("batch_dims", 0) != 0)
    return fail("batch_dims other than 0 is not supported");
  if (!elemOf(x).isF32())
    return fail("only float data is supported");
  ArrayRef<int64_t> s = shapeOf(x);
  if (ind->shape.empty() || ind->shape.back() < 1 || ind->shape.back() > int64_t(s.size()))
    return fail("index tuples must have 1 to rank(data) entries");
  const int64_t k = ind->shape.back();
  std::vector<int64_t> v = ind->asInts(), rows(v.size() / k);
  int64_t numRows = 1;
  for (int64_t j = 0; j < k; ++j)
    numRows *= s[j];
  for (size_t t = 0; t < rows.size(); ++t) {
    int64_t r = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = v[t * k + j];
      if (i < -s[j] || i >= s[j])
        return fail("index " + std::to_string(i) + " is out of range for a dim of " + std::to_string(s[j]));
      r = r * s[j] + (i < 0 ? i + s[j] : i);
    }
    rows[t] = r;
  }
  SmallVector<int64_t> tableShape{numRows};
  tableShape.append(s.begin() + k, s.end());
  Value table = reshape(x, tableShape);
  std::vector<int64_t> idxShape(ind->shape.begin(), ind->shape.end() - 1);
  Value idx = materialize(fuyou::onnx_in::makeInts(rows, idxShape));
  SmallVector<int64_t> outShape(idxShape.begin(), idxShape.end());
  outShape.append(s.begin() + k, s.end());
  set(n, 0, b.create<fg::GatherOp>(loc, tensorType(outShape, b.getF32Type()), table, idx));
  return success();
}

LogicalResult Importer::reshapeLike(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  SmallVector<int64_t> s(shapeOf(x));
  int64_t numel = 1;
  for (int64_t d : s)
    numel *= d;
  SmallVector<int64_t> out;
  if (n.opType == "Reshape") {
    auto want = constInts(n, 1, "the shape input");
    if (failed(want))
      return failure();
    bool allowZero = n.intAttr("allowzero", 0);
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < want->size(); ++i) {
      int64_t d = (*want)[i];
      if (d == 0 && !allowZero) {
        if (i >= s.size())
          return fail("shape entry 0 has no input dim to copy");
        d = s[i];
      }
      if (d == -1) {
        if (infer >= 0)
          return fail("more than one -1 in the shape");
        infer = i;
      } else if (d < 0) {
        return fail("shape entry " + std::to_string(d) + " is negative");
      } else {
        known *= d;
      }
      out.push_back(d);
    }
    if (infer >= 0) {
      if (known == 0 || numel % known)
        return fail("cannot infer the -1 dim");
      out[infer] = numel / known;
    }
  } else if (n.opType == "Flatten") {
    const int64_t rank = s.size(), given = n.intAttr("axis", 1);  // from -rank to rank
    if (given < -rank || given > rank)
      return fail("axis " + std::to_string(given) + " out of range for rank " + std::to_string(rank));
    int64_t a = given < 0 ? given + rank : given, outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i)
      (i < a ? outer : inner) *= s[i];
    out = {outer, inner};
  } else {
    std::vector<int64_t> axes;
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      auto c = constInts(n, 1, "the axes input");
      if (failed(c))
        return failure();
      axes = *c;
    } else if (const auto *a = n.attr("axes")) {
      axes = a->ints;
    }
    if (n.opType == "Unsqueeze") {
      int64_t r = s.size() + axes.size();
      SmallVector<bool> isNew(r, false);
      for (int64_t a : axes) {
        auto na = axis(a, r);
        if (failed(na))
          return failure();
        if (isNew[*na])
          return fail("axis " + std::to_string(a) + " is repeated");
        isNew[*na] = true;
      }
      size_t k = 0;
      for (int64_t i = 0; i < r; ++i)
        out.push_back(isNew[i] ? 1 : s[k++]);
    } else {
      SmallVector<bool> drop(s.size(), axes.empty());
      if (axes.empty())
        for (size_t i = 0; i < s.size(); ++i)
          drop[i] = s[i] == 1;
      for (int64_t a : axes) {
        auto na = axis(a, s.size());
        if (failed(na))
          return failure();
        if (s[*na] != 1)
          return fail("cannot squeeze a dim of size " + std::to_string(s[*na]));
        drop[*na] = true;
      }
      for (size_t i = 0; i < s.size(); ++i)
        if (!drop[i])
          out.push_back(s[i]);
    }
  }
  int64_t outNumel = 1;
  for (int64_t d : out)
    outNumel *= d;
  if (outNumel != numel)
    return fail("reshape changes the element count");
  set(n, 0, reshape(x, out));
  return success();
}

LogicalResult Importer::transpose(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  SmallVector<int64_t> perm;
  if (const auto *a = n.attr("perm"))
    perm.assign(a->ints.begin(), a->ints.end());
  else
    for (int64_t i = s.size() - 1; i >= 0; --i)
      perm.push_back(i);
  if (perm.size() != s.size())
    return fail("perm has the wrong length");
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)s.size())
      return fail("perm entry out of range");
    shape.push_back(s[p]);
  }
  set(n, 0, b.create<fg::TransposeOp>(loc, tensorType(shape, elemOf(x)), x, perm));
  return success();
}

LogicalResult Importer::concat(const Node &n) {
  SmallVector<Value> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Value v = in(n, i);
    if (!v)
      return failure();
    ins.push_back(v);
  }
  auto ax = axis(n.intAttr("axis", 0), shapeOf(ins[0]).size());
  if (failed(ax))
    return failure();
  SmallVector<int64_t> shape(shapeOf(ins[0]));
  shape[*ax] = 0;
  for (Value v : ins) {
    if (shapeOf(v).size() != shape.size() || elemOf(v) != elemOf(ins[0]))
      return fail("inputs differ in rank or element type");
    shape[*ax] += shapeOf(v)[*ax];
  }
  set(n, 0, b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(ins[0])), ins, *ax));
  return success();
}

LogicalResult Importer::slice(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto starts = constInts(n, 1, "starts"), ends = constInts(n, 2, "ends");
  auto axesIn = constInts(n, 3, "axes"), stepsIn = constInts(n, 4, "steps");
  if (failed(starts) || failed(ends) || failed(axesIn) || failed(stepsIn))
    return failure();
  SmallVector<int64_t> st(s.size(), 0), sp(s.size(), 1), shape(s);
  for (size_t k = 0; k < starts->size(); ++k) {
    int64_t a = axesIn->empty() ? (int64_t)k : (*axesIn)[k];
    auto na = axis(a, s.size());
    if (failed(na))
      return failure();
    int64_t step = stepsIn->empty() ? 1 : (*stepsIn)[k];
    if (step <= 0)
      return fail("only positive Slice steps are supported");
    int64_t dim = s[*na], lo = (*starts)[k], hi = (*ends)[k];
    // ONNX clamps out-of-range bounds (torch writes INT64_MAX for "to the end").
    if (lo < 0) lo += dim;
    if (hi < 0) hi += dim;
    lo = std::clamp<int64_t>(lo, 0, dim);
    hi = std::clamp<int64_t>(hi, 0, dim);
    st[*na] = lo;
    sp[*na] = step;
    shape[*na] = hi > lo ? (hi - lo + step - 1) / step : 0;
  }
  if (ArrayRef<int64_t>(shape) == s) {
    set(n, 0, x);
    return success();
  }
  set(n, 0, b.create<fg::SliceOp>(loc, tensorType(shape, elemOf(x)), x, st, sp));
  return success();
}

LogicalResult Importer::split(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto ax = axis(n.intAttr("axis", 0), s.size());
  if (failed(ax))
    return failure();
  std::vector<int64_t> sizes;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto c = constInts(n, 1, "the split input");
    if (failed(c))
      return failure();
    sizes = *c;
  } else if (const auto *a = n.attr("split")) {
    sizes = a->ints;
  } else {
    // Before opset 18 the outputs split the dim evenly; from 18 on
    // `num_outputs` gives each ceil(dim / k), the last one what is left.
    int64_t k = n.outputs.size(), dim = s[*ax];
    if (n.attr("num_outputs") && n.intAttr("num_outputs", 0) != k)
      return fail("num_outputs differs from the number of outputs");
    if (model.opset < 18 && dim % k)
      return fail("dim does not split evenly");
    int64_t each = (dim + k - 1) / k;
    for (int64_t i = 0; i < k; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  }
  if (sizes.size() != n.outputs.size())
    return fail("split sizes and outputs differ in number");
  auto parts = pieces(x, *ax, sizes);
  if (failed(parts))
    return failure();
  for (size_t i = 0; i < parts->size(); ++i)
    set(n, i, (*parts)[i]);
  return success();
}

FailureOr<SmallVector<Value>> Importer::pieces(Value x, int64_t ax, ArrayRef<int64_t> sizes) {
  ArrayRef<int64_t> s = shapeOf(x);
  SmallVector<Value> parts;
  int64_t off = 0;
  for (int64_t size : sizes) {
    if (size < 0 || off + size > s[ax])
      return fail("split sizes do not add up to the dim"), failure();
    SmallVector<int64_t> st(s.size(), 0), sp(s.size(), 1), shape(s);
    st[ax] = off;
    shape[ax] = size;
    off += size;
    parts.push_back(b.create<fg::SliceOp>(loc, tensorType(shape, elemOf(x)), x, st, sp));
  }
  if (off != s[ax])
    return fail("split sizes do not add up to the dim"), failure();
  return parts;
}

LogicalResult Importer::expand(const Node &n) {
  Value x = in(n, 0);
  auto want = constInts(n, 1, "the shape input");
  if (!x || failed(want))
    return failure();
  auto shape = broadcast(shapeOf(x), *want);
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == shapeOf(x)) {
    set(n, 0, x);
    return success();
  }
  set(n, 0, b.create<fg::ExpandOp>(loc, tensorType(*shape, elemOf(x)), x));
  return success();
}

// Pad in constant mode with non-negative constant pads: the input between
// constant blocks (HF's labels= loss pads the labels with ignore_index).
LogicalResult Importer::pad(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  std::string mode = n.strAttr("mode", "constant");
  if (mode != "constant")
    return fail("mode '" + mode + "' is not supported (constant)");
  const int64_t rank = shapeOf(x).size();
  auto pads = constInts(n, 1, "the pads input");
  auto axesIn = constInts(n, 3, "the axes input");
  if (failed(pads) || failed(axesIn))
    return failure();
  std::vector<int64_t> axes = *axesIn;
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (pads->size() != 2 * axes.size())
    return fail("pads has " + std::to_string(pads->size()) + " entries, expected " +
                std::to_string(2 * axes.size()));
  double value = 0;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor *v = getConst(n.inputs[2]);
    if (!v || v->numel() != 1)
      return fail("the pad value must be a constant scalar");
    if (v->dtype == DType::I64)
      value = double(v->asInts()[0]);
    else
      value = v->asDoubles()[0];
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    auto ax = axis(axes[k], rank);
    if (failed(ax))
      return failure();
    const int64_t before = (*pads)[k], after = (*pads)[k + axes.size()];
    if (before < 0 || after < 0)
      return fail("negative pads (cropping) are not supported");
    SmallVector<Value> parts;
    for (int64_t width : {before, int64_t(-1), after}) {
      if (width == -1) {
        parts.push_back(x);
        continue;
      }
      if (width == 0)
        continue;
      SmallVector<int64_t> shape(shapeOf(x));
      shape[*ax] = width;
      auto type = tensorType(shape, elemOf(x));
      DenseElementsAttr attr =
          elemOf(x).isF32() ? DenseElementsAttr::get(type, float(value))
          : elemOf(x).isInteger(64) ? DenseElementsAttr::get(type, int64_t(value))
                                    : DenseElementsAttr::get(type, value != 0);
      parts.push_back(b.create<fg::ConstantOp>(loc, attr));
    }
    if (parts.size() > 1) {
      SmallVector<int64_t> shape(shapeOf(x));
      shape[*ax] += before + after;
      x = b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(x)), parts, *ax);
    }
  }
  set(n, 0, x);
  return success();
}

// Sequences are lists of values while importing: nothing of them reaches
// the graph but the tensors read out of them.
LogicalResult Importer::splitToSequence(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto ax = axis(n.intAttr("axis", 0), s.size());
  if (failed(ax))
    return failure();
  std::vector<int64_t> sizes;
  bool keep = n.intAttr("keepdims", 1) != 0;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor *c = getConst(n.inputs[1]);
    if (!c)
      return fail("the split input must be a constant (every shape is static)");
    std::vector<int64_t> v = c->asInts();
    if (c->shape.empty()) {  // a scalar: pieces of that size, the last one smaller
      if (v[0] <= 0)
        return fail("split size " + std::to_string(v[0]) + " is not positive");
      for (int64_t at = 0; at < s[*ax]; at += v[0])
        sizes.push_back(std::min(v[0], s[*ax] - at));
    } else {
      sizes = v;
    }
    keep = true;  // keepdims applies only without a split input
  } else {
    sizes.assign(s[*ax], 1);
  }
  auto parts = pieces(x, *ax, sizes);
  if (failed(parts))
    return failure();
  if (!keep)
    for (Value &part : *parts) {
      SmallVector<int64_t> shape(shapeOf(part));
      shape.erase(shape.begin() + *ax);
      part = reshape(part, shape);
    }
  sequences[n.outputs[0]] = std::move(*parts);
  return success();
}

LogicalResult Importer::sequenceConstruct(const Node &n) {
  SmallVector<Value> parts;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Value v = in(n, i);
    if (!v)
      return failure();
    parts.push_back(v);
  }
  sequences[n.outputs[0]] = std::move(parts);
  return success();
}

LogicalResult Importer::sequenceAt(const Node &n) {
  auto seq = sequences.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (seq == sequences.end())
    return fail("input 0 is not a sequence made by an earlier node");
  auto pos = constInts(n, 1, "the position");
  if (failed(pos))
    return failure();
  const int64_t size = seq->second.size();
  if (pos->size() != 1 || (*pos)[0] < -size || (*pos)[0] >= size)
    return fail("position out of range for a sequence of " + std::to_string(size));
  set(n, 0, seq->second[(*pos)[0] < 0 ? (*pos)[0] + size : (*pos)[0]]);
  return success();
}

LogicalResult Importer::concatFromSequence(const Node &n) {
  auto seq = sequences.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (seq == sequences.end())
    return fail("input 0 is not a sequence made by an earlier node");
  if (seq->second.empty())
    return fail("the sequence is empty");
  SmallVector<Value> parts(seq->second);
  const int64_t rank = shapeOf(parts[0]).size();
  const bool newAxis = n.intAttr("new_axis", 0) != 0;
  auto ax = axis(n.intAttr("axis", 0), rank + (newAxis ? 1 : 0));
  if (failed(ax))
    return failure();
  SmallVector<int64_t> shape(shapeOf(parts[0]));
  if (newAxis) {
    shape.insert(shape.begin() + *ax, 1);
    for (Value &p : parts) {
      if (shapeOf(p).size() != size_t(rank))
        return fail("sequence elements differ in rank");
      SmallVector<int64_t> ps(shapeOf(p));
      ps.insert(ps.begin() + *ax, 1);
      p = reshape(p, ps);
    }
  }
  shape[*ax] = 0;
  for (Value p : parts) {
    if (shapeOf(p).size() != shape.size() || elemOf(p) != elemOf(parts[0]))
      return fail("sequence elements differ in rank or element type");
    for (size_t d = 0; d < shape.size(); ++d)
      if (int64_t(d) != *ax && shapeOf(p)[d] != shapeOf(parts[0])[d])
        return fail("sequence elements differ in a dim other than the axis");
    shape[*ax] += shapeOf(p)[*ax];
  }
  set(n, 0, parts.size() == 1 ? parts[0]
                              : b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(parts[0])), parts, *ax)
                                    .getResult());
  return success();
}

} // namespace fuyou::import_detail
