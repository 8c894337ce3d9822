#include "compiler/importer/ConstantFolding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace fuyou::onnx_in {

bool isFoldable(const std::string &op) {
  static const std::set<std::string> ops = {
      "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast",
      "Add", "Sub", "Mul", "Div", "Equal", "Where", "ConstantOfShape", "Range", "Reshape",
      "Sqrt", "Neg", "Expand", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
  return ops.count(op) > 0;
}

static Tensor fromDoubles(const std::vector<double> &v, std::vector<int64_t> shape, DType t) {
  Tensor out;
  out.dtype = t;
  out.shape = std::move(shape);
  size_t es = t == DType::F32 ? 4 : t == DType::I64 ? 8 : 1;
  out.bytes.resize(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) { float f = (float)v[i]; std::memcpy(&out.bytes[4 * i], &f, 4); }
    else if (t == DType::I64) { int64_t x = (int64_t)v[i]; std::memcpy(&out.bytes[8 * i], &x, 8); }
    else out.bytes[i] = v[i] != 0;
  }
  return out;
}

Tensor makeInts(const std::vector<int64_t> &values, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = DType::I64;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * 8);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

static std::vector<int64_t> strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = (int)shape.size() - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

// A folded tensor may be no bigger than this (a causal mask of 16k tokens):
// a value computed from a damaged model could otherwise ask for terabytes.
static constexpr int64_t kMaxFoldedElements = int64_t(1) << 28;

// The element count of `shape`, or -1 when a dim is negative or the count
// is over kMaxFoldedElements.
static int64_t checkedNumel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > kMaxFoldedElements / d))
      return -1;
    n *= d;
  }
  return n;
}

// Elementwise op over numpy-broadcast inputs, computed in double.
template <typename F>
static std::string broadcastN(const std::vector<const Tensor *> &ins, DType outType, F f,
                              Tensor &out) {
  size_t rank = 0;
  for (auto *t : ins) rank = std::max(rank, t->shape.size());
  std::vector<int64_t> shape(rank, 1);
  for (auto *t : ins)
    for (size_t i = 0; i < t->shape.size(); ++i) {
      int64_t &d = shape[rank - t->shape.size() + i];
      int64_t e = t->shape[i];
      if (d != 1 && e != 1 && d != e) return "shapes do not broadcast";
      d = d == 1 ? e : d;
    }
  int64_t n = checkedNumel(shape);
  if (n < 0)
    return "a result of more than 2^28 elements";
  std::vector<std::vector<double>> vals;
  for (auto *t : ins) vals.push_back(t->asDoubles());
  std::vector<double> res(n);
  std::vector<double> args(ins.size());
  auto os = strides(shape);
  std::vector<std::vector<int64_t>> ist;  // each input's strides, once
  for (auto *t : ins) ist.push_back(strides(t->shape));
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < ins.size(); ++k) {
      const auto &s = ins[k]->shape;
      const auto &is = ist[k];
      int64_t off = 0;
      for (size_t d = 0; d < s.size(); ++d) {
        int64_t coord = (i / os[rank - s.size() + d]) % shape[rank - s.size() + d];
        off += (s[d] == 1 ? 0 : coord) * is[d];
      }
      args[k] = vals[k][off];
    }
    res[i] = f(args);
  }
  out = fromDoubles(res, shape, outType);
  return "";
}

static int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

std::string foldNode(const Node &node, const std::vector<const Tensor *> &ins,
                     std::vector<Tensor> &outs) {
  const std::string &op = node.opType;
  outs.assign(node.outputs.size(), Tensor());
  Tensor &out = outs[0];
  auto in = [&](size_t i) -> const Tensor * { return i < ins.size() ? ins[i] : nullptr; };
  // Every input an op reads must be there; the checker does not know which
  // of them our folder takes.
  static const std::map<std::string, size_t> required = {
      {"Identity", 1}, {"Cast", 1}, {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2}, {"Equal", 2},
      {"Less", 2}, {"LessOrEqual", 2}, {"Greater", 2}, {"GreaterOrEqual", 2},
      {"Sqrt", 1}, {"Neg", 1}, {"Where", 3}, {"Expand", 2}, {"ConstantOfShape", 1}, {"Range", 3},
      {"Reshape", 2}, {"Unsqueeze", 1}, {"Squeeze", 1}, {"Concat", 1}, {"Gather", 2}, {"Slice", 3}};
  if (auto r = required.find(op); r != required.end())
    for (size_t i = 0; i < r->second; ++i)
      if (!in(i))
        return op + " without its input " + std::to_string(i);
  if (op == "Concat")
    for (auto *t : ins)
      if (!t)
        return "Concat with an omitted input";

  if (op == "Constant") {
    if (const Attr *a = node.attr("value"); a && a->kind == Attr::TensorValue) out = a->t;
    else if (const Attr *a = node.attr("value_int")) out = makeInts({a->i}, {});
    else if (const Attr *a = node.attr("value_ints")) out = makeInts(a->ints, {(int64_t)a->ints.size()});
    else if (const Attr *a = node.attr("value_float")) out = fromDoubles({a->f}, {}, DType::F32);
    else if (const Attr *a = node.attr("value_floats")) {
      std::vector<double> v(a->floats.begin(), a->floats.end());
      out = fromDoubles(v, {(int64_t)v.size()}, DType::F32);
    } else return "unsupported Constant form";
  } else if (op == "Identity") {
    out = *in(0);
  } else if (op == "Cast") {
    int64_t to = node.intAttr("to", 1);
    DType t = to == 1 ? DType::F32 : to == 7 ? DType::I64 : to == 9 ? DType::Bool : DType::Unsupported;
    if (t == DType::Unsupported) return "Cast to an unsupported type";
    out = fromDoubles(in(0)->asDoubles(), in(0)->shape, t);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal") {
    bool isInt = in(0)->dtype != DType::F32;
    DType t = op == "Equal" ? DType::Bool : in(0)->dtype;
    return broadcastN({in(0), in(1)}, t, [&](const std::vector<double> &a) {
      if (op == "Add") return a[0] + a[1];
      if (op == "Sub") return a[0] - a[1];
      if (op == "Mul") return a[0] * a[1];
      if (op == "Equal") return double(a[0] == a[1]);
      return isInt ? std::floor(a[0] / a[1]) : a[0] / a[1];
    }, out);
  } else if (op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual") {
    // Causal masks built from positions (Hugging Face's Llama): constants.
    return broadcastN({in(0), in(1)}, DType::Bool, [&](const std::vector<double> &a) {
      if (op == "Less") return double(a[0] < a[1]);
      if (op == "LessOrEqual") return double(a[0] <= a[1]);
      if (op == "Greater") return double(a[0] > a[1]);
      return double(a[0] >= a[1]);
    }, out);
  } else if (op == "Sqrt" || op == "Neg") {
    return broadcastN({in(0)}, in(0)->dtype, [&](const std::vector<double> &a) {
      return op == "Sqrt" ? std::sqrt(a[0]) : -a[0];
    }, out);
  } else if (op == "Where") {
    return broadcastN({in(0), in(1), in(2)}, in(1)->dtype,
                      [](const std::vector<double> &a) { return a[0] != 0 ? a[1] : a[2]; }, out);
  } else if (op == "Expand") {
    // Broadcast against zeros of the target shape (Expand is bidirectional).
    std::vector<int64_t> shape = in(1)->asInts();
    int64_t n = checkedNumel(shape);
    if (n < 0)
      return "Expand to a negative or too large shape";
    std::vector<double> zeros(n, 0.0);
    Tensor z = fromDoubles(zeros, shape, in(0)->dtype);
    return broadcastN({in(0), &z}, in(0)->dtype,
                      [](const std::vector<double> &a) { return a[0]; }, out);
  } else if (op == "ConstantOfShape") {
    std::vector<int64_t> shape = in(0)->asInts();
    int64_t n = checkedNumel(shape);
    if (n < 0)
      return "ConstantOfShape of a negative or too large shape";
    double v = 0;
    DType t = DType::F32;
    if (const Attr *a = node.attr("value"); a && a->kind == Attr::TensorValue) {
      if (a->t.numel() < 1)
        return "ConstantOfShape with an empty value";
      v = a->t.asDoubles()[0];
      t = a->t.dtype;
    }
    out = fromDoubles(std::vector<double>(n, v), shape, t);
  } else if (op == "Range") {
    if (in(0)->numel() != 1 || in(1)->numel() != 1 || in(2)->numel() != 1)
      return "Range of non-scalar inputs";
    double start = in(0)->asDoubles()[0], limit = in(1)->asDoubles()[0], delta = in(2)->asDoubles()[0];
    if (delta == 0)
      return "Range with delta 0";
    if (std::fabs((limit - start) / delta) > 1e7)
      return "Range of more than 1e7 elements";
    std::vector<double> v;
    for (double x = start; delta > 0 ? x < limit : x > limit; x += delta) v.push_back(x);
    out = fromDoubles(v, {(int64_t)v.size()}, in(0)->dtype);
  } else if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    out = *in(0);
    std::vector<int64_t> shape = in(0)->shape;
    if (op == "Reshape") {
      std::vector<int64_t> want = in(1)->asInts();
      int64_t known = 1, infer = -1;
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] == 0 && i < shape.size()) want[i] = shape[i];
        if (want[i] == -1 && infer < 0) infer = i;
        else if (want[i] < 0) return "Reshape to a shape with a negative dim";
        else known *= want[i];
      }
      if (infer >= 0 && known > 0) want[infer] = in(0)->numel() / known;
      if (checkedNumel(want) != in(0)->numel())
        return "Reshape changes the element count";
      out.shape = want;
    } else {
      std::vector<int64_t> axes = in(1) ? in(1)->asInts() : node.attr("axes") ? node.attr("axes")->ints
                                                                                 : std::vector<int64_t>{};
      const int64_t r = op == "Unsqueeze" ? shape.size() + axes.size() : shape.size();
      for (auto &a : axes) {
        if (a < -r || a >= r)
          return op + " axis " + std::to_string(a) + " out of range for rank " + std::to_string(r);
        a = normAxis(a, r);
      }
      std::sort(axes.begin(), axes.end());
      if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
        return op + " with a repeated axis";
      if (op == "Unsqueeze") {
        for (int64_t a : axes) shape.insert(shape.begin() + a, 1);
      } else {
        std::vector<int64_t> keep;
        for (size_t i = 0; i < shape.size(); ++i) {
          bool drop = axes.empty() ? shape[i] == 1 : std::binary_search(axes.begin(), axes.end(), int64_t(i));
          if (drop && shape[i] != 1)
            return "Squeeze of a dim of size " + std::to_string(shape[i]);
          if (!drop) keep.push_back(shape[i]);
        }
        shape = keep;
      }
      out.shape = shape;
    }
  } else if (op == "Concat") {
    const int64_t rank = in(0)->shape.size(), a = node.intAttr("axis", 0);
    if (a < -rank || a >= rank)
      return "Concat axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank);
    int64_t axis = normAxis(a, rank);
    std::vector<int64_t> shape = in(0)->shape;
    shape[axis] = 0;
    for (auto *t : ins) {
      for (int64_t d = 0; d < rank; ++d)
        if (t->shape.size() != size_t(rank) || t->dtype != in(0)->dtype || (d != axis && t->shape[d] != shape[d]))
          return "Concat of inputs whose types or other dims differ";
      shape[axis] += t->shape[axis];
    }
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
    std::vector<double> res;
    for (int64_t o = 0; o < outer; ++o)
      for (auto *t : ins) {
        int64_t inner = t->numel() / outer;
        auto v = t->asDoubles();
        res.insert(res.end(), v.begin() + o * inner, v.begin() + (o + 1) * inner);
      }
    out = fromDoubles(res, shape, in(0)->dtype);
  } else if (op == "Gather") {
    int64_t rank = in(0)->shape.size(), a = node.intAttr("axis", 0);
    if (a < -rank || a >= rank)
      return "Gather axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank);
    int64_t axis = normAxis(a, rank);
    std::vector<int64_t> idx = in(1)->asInts();
    auto v = in(0)->asDoubles();
    int64_t outer = 1, inner = 1, dim = in(0)->shape[axis];
    for (int64_t i = 0; i < axis; ++i) outer *= in(0)->shape[i];
    for (int64_t i = axis + 1; i < rank; ++i) inner *= in(0)->shape[i];
    std::vector<double> res;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : idx) {
        if (k < 0) k += dim;
        if (k < 0 || k >= dim) return "Gather index out of range";
        res.insert(res.end(), v.begin() + (o * dim + k) * inner, v.begin() + (o * dim + k + 1) * inner);
      }
    std::vector<int64_t> shape(in(0)->shape.begin(), in(0)->shape.begin() + axis);
    shape.insert(shape.end(), in(1)->shape.begin(), in(1)->shape.end());
    shape.insert(shape.end(), in(0)->shape.begin() + axis + 1, in(0)->shape.end());
    out = fromDoubles(res, shape, in(0)->dtype);
  } else if (op == "Slice") {
    if (in(0)->shape.size() != 1) return "constant Slice of rank > 1";
    if (in(1)->numel() != 1 || in(2)->numel() != 1 || (in(3) && in(3)->numel() != 1) || (in(4) && in(4)->numel() != 1))
      return "constant Slice with other than one start, end, axis and step";
    int64_t dim = in(0)->shape[0];
    int64_t start = in(1)->asInts()[0], end = in(2)->asInts()[0];
    int64_t step = in(4) ? in(4)->asInts()[0] : 1;
    if (step <= 0) return "constant Slice with a non-positive step";
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    auto v = in(0)->asDoubles();
    std::vector<double> res;
    for (int64_t i = start; i < end; i += step) res.push_back(v[i]);
    out = fromDoubles(res, {(int64_t)res.size()}, in(0)->dtype);
  } else {
    return "cannot fold " + op;
  }
  out.name = node.outputs[0];
  return "";
}

} // namespace fuyou::onnx_in
