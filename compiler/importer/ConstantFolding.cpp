#include "compiler/importer/ConstantFolding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>

namespace fuyou::onnx_in {

bool isFoldable(const std::string &op) {
  static const std::set<std::string> ops = {
      "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "CastLike",
      "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
      "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where", "ConstantOfShape", "Range", "Reshape",
      "Sqrt", "Neg", "Abs", "Cos", "Sin", "Exp", "Reciprocal", "Floor", "Ceil", "Expand", "Transpose",
      "Trilu", "CumSum", "Split", "MatMul", "Size", "GatherND"};
  return ops.count(op) > 0;
}

// ONNX element types the folder names in Cast's `to` (TensorProto values).
enum : int { kFloat = 1, kBool = 9, kInt64 = 7, kFloat16 = 10, kDouble = 11, kBFloat16 = 16 };

static size_t elemBytes(DType t) { return t == DType::F32 ? 4 : t == DType::I64 ? 8 : 1; }

static Tensor blank(DType t, std::vector<int64_t> shape) {
  Tensor out;
  out.dtype = t;
  out.onnxType = t == DType::F32 ? kFloat : t == DType::I64 ? kInt64 : kBool;
  out.shape = std::move(shape);
  out.bytes.assign(size_t(out.numel()) * elemBytes(t), 0);
  return out;
}

// Integers (I64, Bool) are read and written as int64, floats as double:
// an integer never passes through a double.
static int64_t intAt(const Tensor &t, int64_t k) {
  if (t.dtype == DType::Bool)
    return t.bytes[k] != 0;
  if (t.dtype == DType::I64) {
    int64_t x;
    std::memcpy(&x, t.bytes.data() + 8 * k, 8);
    return x;
  }
  float f;
  std::memcpy(&f, t.bytes.data() + 4 * k, 4);
  return int64_t(f);
}
static double floatAt(const Tensor &t, int64_t k) {
  if (t.dtype == DType::F32) {
    float f;
    std::memcpy(&f, t.bytes.data() + 4 * k, 4);
    return f;
  }
  return double(intAt(t, k));
}
static void putInt(Tensor &t, int64_t k, int64_t v) {
  if (t.dtype == DType::Bool) t.bytes[k] = v != 0;
  else std::memcpy(t.bytes.data() + 8 * k, &v, 8);
}
static void putFloat(Tensor &t, int64_t k, double v) {
  float f = float(v);
  std::memcpy(t.bytes.data() + 4 * k, &f, 4);
}

Tensor makeInts(const std::vector<int64_t> &values, std::vector<int64_t> shape) {
  Tensor t = blank(DType::I64, std::move(shape));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

static Tensor makeFloats(const std::vector<double> &values, std::vector<int64_t> shape) {
  Tensor t = blank(DType::F32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) putFloat(t, i, values[i]);
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

// Elementwise over numpy-broadcast inputs: out = blank(outType, the
// broadcast shape), then f(k, offsets) for each output element k, with each
// input's element offset.
template <typename F>
static std::string broadcastN(const std::vector<const Tensor *> &ins, DType outType, Tensor &out, F f) {
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
  const int64_t n = checkedNumel(shape);
  if (n < 0)
    return "a result of more than 2^28 elements";
  out = blank(outType, shape);
  auto os = strides(shape);
  std::vector<std::vector<int64_t>> ist;  // each input's strides, once
  for (auto *t : ins) ist.push_back(strides(t->shape));
  std::vector<int64_t> offs(ins.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < ins.size(); ++k) {
      const auto &s = ins[k]->shape;
      int64_t off = 0;
      for (size_t d = 0; d < s.size(); ++d) {
        int64_t coord = (i / os[rank - s.size() + d]) % shape[rank - s.size() + d];
        off += (s[d] == 1 ? 0 : coord) * ist[k][d];
      }
      offs[k] = off;
    }
    f(i, offs);
  }
  return "";
}

static int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// Copies element `from` of `src` to element `to` of `dst` (same dtype).
static void copyElem(const Tensor &src, int64_t from, Tensor &dst, int64_t to) {
  const size_t es = elemBytes(src.dtype);
  std::memcpy(dst.bytes.data() + to * es, src.bytes.data() + from * es, es);
}

// Integer arithmetic wraps as two's complement (as the C++ kernels of ONNX
// runtimes do) instead of overflowing.
static int64_t wrapAdd(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
static int64_t wrapSub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
static int64_t wrapMul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

// Cast of one element to ONNX type `to` (already known to be read as
// dtypeOf(to)): integers to integers exactly (wrapped to the type's range),
// floats to integers by truncation, and to FLOAT16/BFLOAT16 rounded as the
// type rounds (then held as float).
static std::string castInto(const Tensor &x, int64_t k, int to, Tensor &out, int64_t at) {
  if (out.dtype == DType::Bool) {
    putInt(out, at, x.dtype == DType::F32 ? floatAt(x, k) != 0 : intAt(x, k) != 0);
  } else if (out.dtype == DType::I64) {
    int64_t v;
    if (x.dtype == DType::F32) {
      double f = std::trunc(floatAt(x, k));
      if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        return "Cast of " + std::to_string(floatAt(x, k)) + " to an integer type";
      v = int64_t(f);
    } else {
      v = intAt(x, k);
    }
    putInt(out, at, wrapToType(v, to));
  } else {
    float f = x.dtype == DType::F32 ? float(floatAt(x, k)) : float(intAt(x, k));  // int64 -> float directly
    if (to == kBFloat16 || to == kFloat16) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (to == kBFloat16 && !std::isnan(f)) {  // round to nearest even on the dropped 16 bits
        bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
        std::memcpy(&f, &bits, 4);
      } else if (to == kFloat16 && std::isfinite(f)) {
        int e;
        std::frexp(f, &e);
        // 11 significant bits, subnormals below 2^-14 at a fixed 2^-24 step.
        int quantum = std::max(e - 11, -24);
        double q = std::nearbyint(std::ldexp(double(f), -quantum));
        double r = std::ldexp(q, quantum);
        f = std::fabs(r) > 65504.0 ? std::copysign(HUGE_VALF, f) : float(r);
      }
    }
    std::memcpy(out.bytes.data() + 4 * at, &f, 4);
  }
  return "";
}

static std::string castTensor(const Tensor &x, int to, Tensor &out) {
  DType t = dtypeOf(to);
  if (t == DType::Unsupported)
    return "Cast to an unsupported type";
  out = blank(t, x.shape);
  out.onnxType = to;  // a CastLike of it wraps to the same type
  for (int64_t k = 0; k < x.numel(); ++k)
    if (std::string why = castInto(x, k, to, out, k); !why.empty())
      return why;
  return "";
}

static std::string foldBinary(const std::string &op, bool fmod, const Tensor &a, const Tensor &b, Tensor &out) {
  if (a.dtype != b.dtype)
    return op + " of inputs whose element types differ";
  const bool isInt = a.dtype != DType::F32;
  static const std::set<std::string> compare = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
  static const std::set<std::string> logic = {"And", "Or", "Xor"};
  std::string why;
  if (compare.count(op)) {
    return broadcastN({&a, &b}, DType::Bool, out, [&](int64_t i, const std::vector<int64_t> &o) {
      int c;
      if (isInt) {
        int64_t x = intAt(a, o[0]), y = intAt(b, o[1]);
        c = x < y ? -1 : x > y ? 1 : 0;
      } else {
        double x = floatAt(a, o[0]), y = floatAt(b, o[1]);
        if (std::isnan(x) || std::isnan(y)) return putInt(out, i, 0);
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      bool r = op == "Equal" ? c == 0 : op == "Less" ? c < 0 : op == "LessOrEqual" ? c <= 0
               : op == "Greater" ? c > 0 : c >= 0;
      putInt(out, i, r);
    });
  }
  if (logic.count(op)) {
    if (a.dtype != DType::Bool)
      return op + " of non-bool inputs";
    return broadcastN({&a, &b}, DType::Bool, out, [&](int64_t i, const std::vector<int64_t> &o) {
      bool x = intAt(a, o[0]), y = intAt(b, o[1]);
      putInt(out, i, op == "And" ? x && y : op == "Or" ? x || y : x != y);
    });
  }
  std::string err = broadcastN({&a, &b}, a.dtype, out, [&](int64_t i, const std::vector<int64_t> &o) {
    if (isInt) {
      int64_t x = intAt(a, o[0]), y = intAt(b, o[1]), r = 0;
      if (op == "Add") r = wrapAdd(x, y);
      else if (op == "Sub") r = wrapSub(x, y);
      else if (op == "Mul") r = wrapMul(x, y);
      else if (op == "Max") r = std::max(x, y);
      else if (op == "Min") r = std::min(x, y);
      else if (op == "Pow") {
        if (y < 0) { why = "integer Pow with a negative exponent"; return; }
        r = 1;
        for (int64_t e = 0; e < y && e < 64; ++e) r = wrapMul(r, x);
      } else {  // Div truncates toward zero, Mod (fmod 0) takes the divisor's sign
        if (y == 0) { why = op + " by zero"; return; }
        if (x == std::numeric_limits<int64_t>::min() && y == -1) r = op == "Div" ? x : 0;
        else if (op == "Div") r = x / y;
        else {
          r = x % y;
          if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
        }
      }
      putInt(out, i, r);
    } else {
      double x = floatAt(a, o[0]), y = floatAt(b, o[1]), r;
      if (op == "Add") r = x + y;
      else if (op == "Sub") r = x - y;
      else if (op == "Mul") r = x * y;
      else if (op == "Div") r = x / y;
      else if (op == "Max") r = std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
      else if (op == "Min") r = std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
      else if (op == "Pow") r = std::pow(float(x), float(y));
      else if (fmod) r = std::fmod(x, y);
      else { why = "float Mod needs fmod = 1"; return; }
      putFloat(out, i, r);
    }
  });
  return err.empty() ? why : err;
}

// Moves elements: out[k] = x[index(k)] for an output of `shape`.
static Tensor gatherElems(const Tensor &x, std::vector<int64_t> shape, const std::function<int64_t(int64_t)> &index) {
  Tensor out = blank(x.dtype, std::move(shape));
  for (int64_t k = 0; k < out.numel(); ++k) copyElem(x, index(k), out, k);
  return out;
}

std::string foldNode(const Node &node, const std::vector<const Tensor *> &ins,
                     std::vector<Tensor> &outs) {
  const std::string &op = node.opType;
  outs.assign(node.outputs.size(), Tensor());
  if (outs.empty())
    return op + " without outputs";
  Tensor &out = outs[0];
  auto in = [&](size_t i) -> const Tensor * { return i < ins.size() ? ins[i] : nullptr; };
  // Every input an op reads must be there; the checker does not know which
  // of them our folder takes.
  static const std::map<std::string, size_t> required = {
      {"Identity", 1}, {"Cast", 1}, {"CastLike", 2}, {"Sqrt", 1}, {"Neg", 1}, {"Abs", 1}, {"Cos", 1},
      {"Sin", 1}, {"Exp", 1}, {"Reciprocal", 1}, {"Floor", 1}, {"Ceil", 1}, {"Not", 1}, {"Where", 3},
      {"Expand", 2}, {"ConstantOfShape", 1}, {"Range", 3}, {"Reshape", 2}, {"Unsqueeze", 1},
      {"Squeeze", 1}, {"Concat", 1}, {"Gather", 2}, {"Slice", 3}, {"Transpose", 1}, {"Trilu", 1},
      {"CumSum", 2}, {"Split", 1}, {"MatMul", 2}, {"Size", 1}, {"GatherND", 2}};
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min",
                                               "Equal", "Less", "LessOrEqual", "Greater",
                                               "GreaterOrEqual", "And", "Or", "Xor"};
  if (auto r = required.find(op); r != required.end())
    for (size_t i = 0; i < r->second; ++i)
      if (!in(i))
        return op + " without its input " + std::to_string(i);
  const bool variadic = op == "Max" || op == "Min";  // one input or more
  if (binary.count(op) && !variadic && (!in(0) || !in(1)))
    return op + " without its two inputs";
  if (op == "Concat" || variadic) {
    if (ins.empty())
      return op + " without inputs";
    for (auto *t : ins)
      if (!t)
        return op + " with an omitted input";
  }

  if (op == "Constant") {
    if (const Attr *a = node.attr("value"); a && a->kind == Attr::TensorValue) out = a->t;
    else if (const Attr *a = node.attr("value_int")) out = makeInts({a->i}, {});
    else if (const Attr *a = node.attr("value_ints")) out = makeInts(a->ints, {(int64_t)a->ints.size()});
    else if (const Attr *a = node.attr("value_float")) out = makeFloats({a->f}, {});
    else if (const Attr *a = node.attr("value_floats")) {
      std::vector<double> v(a->floats.begin(), a->floats.end());
      out = makeFloats(v, {(int64_t)v.size()});
    } else return "unsupported Constant form";
  } else if (op == "Identity") {
    out = *in(0);
  } else if (op == "Cast") {
    if (std::string why = castTensor(*in(0), int(node.intAttr("to", kFloat)), out); !why.empty())
      return why;
  } else if (op == "CastLike") {
    if (std::string why = castTensor(*in(0), in(1)->onnxType ? in(1)->onnxType : kFloat, out); !why.empty())
      return why;
  } else if ((op == "Max" || op == "Min") && ins.size() != 2) {
    if (ins.size() == 1) { out = *in(0); }
    else {
      Tensor acc = *in(0);
      for (size_t i = 1; i < ins.size(); ++i) {
        Tensor next;
        if (std::string why = foldBinary(op, false, acc, *in(i), next); !why.empty())
          return why;
        acc = std::move(next);
      }
      out = std::move(acc);
    }
  } else if (binary.count(op)) {
    if (std::string why = foldBinary(op, node.intAttr("fmod", 0) != 0, *in(0), *in(1), out); !why.empty())
      return why;
  } else if (op == "Not") {
    if (in(0)->dtype != DType::Bool) return "Not of a non-bool input";
    out = blank(DType::Bool, in(0)->shape);
    for (int64_t k = 0; k < out.numel(); ++k) putInt(out, k, !intAt(*in(0), k));
  } else if (op == "Sqrt" || op == "Neg" || op == "Abs" || op == "Cos" || op == "Sin" || op == "Exp" ||
             op == "Reciprocal" || op == "Floor" || op == "Ceil") {
    const Tensor &x = *in(0);
    if (x.dtype == DType::Bool) return op + " of a bool input";
    out = blank(x.dtype, x.shape);
    for (int64_t k = 0; k < x.numel(); ++k) {
      if (x.dtype == DType::I64) {
        int64_t v = intAt(x, k);
        if (op == "Neg") putInt(out, k, wrapSub(0, v));
        else if (op == "Abs") putInt(out, k, v < 0 ? wrapSub(0, v) : v);
        else if (op == "Floor" || op == "Ceil") putInt(out, k, v);
        else return op + " of an integer input";
        continue;
      }
      // float32 math as the runtime's libm computes it.
      float v = float(floatAt(x, k)), r;
      if (op == "Sqrt") r = std::sqrt(v);
      else if (op == "Neg") r = -v;
      else if (op == "Abs") r = std::fabs(v);
      else if (op == "Cos") r = std::cos(v);
      else if (op == "Sin") r = std::sin(v);
      else if (op == "Exp") r = std::exp(v);
      else if (op == "Reciprocal") r = 1.0f / v;
      else if (op == "Floor") r = std::floor(v);
      else r = std::ceil(v);
      putFloat(out, k, r);
    }
  } else if (op == "Where") {
    if (in(1)->dtype != in(2)->dtype) return "Where of inputs whose element types differ";
    return broadcastN({in(0), in(1), in(2)}, in(1)->dtype, out, [&](int64_t i, const std::vector<int64_t> &o) {
      if (intAt(*in(0), o[0])) copyElem(*in(1), o[1], out, i);
      else copyElem(*in(2), o[2], out, i);
    });
  } else if (op == "Expand") {
    // Bidirectional: broadcast against the target shape.
    std::vector<int64_t> shape = in(1)->asInts();
    if (checkedNumel(shape) < 0)
      return "Expand to a negative or too large shape";
    Tensor z = blank(DType::Bool, shape);
    std::string why = broadcastN({in(0), &z}, in(0)->dtype, out,
                                 [&](int64_t i, const std::vector<int64_t> &o) { copyElem(*in(0), o[0], out, i); });
    out.onnxType = in(0)->onnxType;
    return why;
  } else if (op == "ConstantOfShape") {
    std::vector<int64_t> shape = in(0)->asInts();
    if (checkedNumel(shape) < 0)
      return "ConstantOfShape of a negative or too large shape";
    Tensor value = makeFloats({0.0}, {1});
    if (const Attr *a = node.attr("value"); a && a->kind == Attr::TensorValue) {
      if (a->t.numel() < 1)
        return "ConstantOfShape with an empty value";
      value = a->t;
    }
    out = gatherElems(value, shape, [](int64_t) { return 0; });
    out.onnxType = value.onnxType;
  } else if (op == "Range") {
    if (in(0)->numel() != 1 || in(1)->numel() != 1 || in(2)->numel() != 1)
      return "Range of non-scalar inputs";
    const DType t = in(0)->dtype;
    if (t == DType::Bool || in(1)->dtype != t || in(2)->dtype != t)
      return "Range of inputs whose element types differ or are bool";
    if (t == DType::I64) {
      // Exact: ceil((limit - start) / delta) elements, computed in integers.
      int64_t start = intAt(*in(0), 0), limit = intAt(*in(1), 0), delta = intAt(*in(2), 0);
      if (delta == 0)
        return "Range with delta 0";
      __int128 span = __int128(limit) - start, n = span / delta;
      if (n * delta != span) n += 1;  // span and delta share a sign here
      if (n < 0) n = 0;
      if (n > 10000000)
        return "Range of more than 1e7 elements";
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(start + __int128(delta) * int64_t(i));
      out = makeInts(v, {(int64_t)v.size()});
    } else {
      double start = floatAt(*in(0), 0), limit = floatAt(*in(1), 0), delta = floatAt(*in(2), 0);
      if (delta == 0)
        return "Range with delta 0";
      double n = std::ceil((limit - start) / delta);
      if (!(n <= 1e7))
        return "Range of more than 1e7 elements";
      std::vector<double> v;
      for (int64_t i = 0; i < int64_t(std::max(n, 0.0)); ++i) v.push_back(float(start + i * delta));
      out = makeFloats(v, {(int64_t)v.size()});
    }
  } else if (op == "Size") {
    out = makeInts({in(0)->numel()}, {});
  } else if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    out = *in(0);
    std::vector<int64_t> shape = in(0)->shape;
    if (op == "Reshape") {
      std::vector<int64_t> want = in(1)->asInts();
      const bool allowZero = node.intAttr("allowzero", 0) != 0;
      int64_t known = 1, infer = -1;
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] == 0 && !allowZero && i < shape.size()) want[i] = shape[i];
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
    const int64_t axis = normAxis(a, rank);
    std::vector<int64_t> shape = in(0)->shape;
    shape[axis] = 0;
    for (auto *t : ins) {
      for (int64_t d = 0; d < rank; ++d)
        if (t->shape.size() != size_t(rank) || t->dtype != in(0)->dtype || (d != axis && t->shape[d] != shape[d]))
          return "Concat of inputs whose types or other dims differ";
      shape[axis] += t->shape[axis];
    }
    if (checkedNumel(shape) < 0)
      return "a result of more than 2^28 elements";
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
    out = blank(in(0)->dtype, shape);
    out.onnxType = in(0)->onnxType;
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (auto *t : ins) {
        const int64_t inner = outer ? t->numel() / outer : 0;
        for (int64_t j = 0; j < inner; ++j) copyElem(*t, o * inner + j, out, k++);
      }
  } else if (op == "Gather") {
    const int64_t rank = in(0)->shape.size(), a = node.intAttr("axis", 0);
    if (a < -rank || a >= rank)
      return "Gather axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank);
    const int64_t axis = normAxis(a, rank);
    std::vector<int64_t> idx = in(1)->asInts();
    const int64_t dim = in(0)->shape[axis];
    for (int64_t &k : idx) {
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) return "Gather index out of range";
    }
    int64_t inner = 1;
    for (int64_t i = axis + 1; i < rank; ++i) inner *= in(0)->shape[i];
    std::vector<int64_t> shape(in(0)->shape.begin(), in(0)->shape.begin() + axis);
    shape.insert(shape.end(), in(1)->shape.begin(), in(1)->shape.end());
    shape.insert(shape.end(), in(0)->shape.begin() + axis + 1, in(0)->shape.end());
    if (checkedNumel(shape) < 0)
      return "a result of more than 2^28 elements";
    const int64_t n = idx.size();
    out = gatherElems(*in(0), shape, [&](int64_t k) {
      int64_t j = k % inner, rest = k / inner, i = rest % std::max<int64_t>(n, 1), o = rest / std::max<int64_t>(n, 1);
      return (o * dim + idx[i]) * inner + j;
    });
  } else if (op == "GatherND") {
    const Tensor &x = *in(0), &ind = *in(1);
    const int64_t r = x.shape.size(), q = ind.shape.size(), bd = node.intAttr("batch_dims", 0);
    if (q < 1 || bd < 0 || bd >= std::min(r, q))
      return "GatherND with batch_dims out of range";
    const int64_t k = ind.shape.back();
    if (k < 1 || k > r - bd)
      return "GatherND whose index tuples are longer than the data's rank";
    for (int64_t d = 0; d < bd; ++d)
      if (x.shape[d] != ind.shape[d]) return "GatherND whose batch dims differ";
    std::vector<int64_t> shape(ind.shape.begin(), ind.shape.end() - 1);
    shape.insert(shape.end(), x.shape.begin() + bd + k, x.shape.end());
    if (checkedNumel(shape) < 0)
      return "a result of more than 2^28 elements";
    const auto xs = strides(x.shape);
    int64_t inner = 1, perBatch = 1, tuplesPerBatch = 1;
    for (int64_t d = bd + k; d < r; ++d) inner *= x.shape[d];
    for (int64_t d = bd; d < r; ++d) perBatch *= x.shape[d];
    for (int64_t d = bd; d < q - 1; ++d) tuplesPerBatch *= ind.shape[d];
    const std::vector<int64_t> idx = ind.asInts();
    std::vector<int64_t> base(idx.size() / k);
    for (size_t t = 0; t < base.size(); ++t) {
      int64_t off = int64_t(t) / std::max<int64_t>(tuplesPerBatch, 1) * perBatch;
      for (int64_t j = 0; j < k; ++j) {
        int64_t i = idx[t * k + j], dim = x.shape[bd + j];
        if (i < 0) i += dim;
        if (i < 0 || i >= dim) return "GatherND index out of range";
        off += i * xs[bd + j];
      }
      base[t] = off;
    }
    out = gatherElems(x, shape, [&](int64_t e) { return base[e / inner] + e % inner; });
  } else if (op == "Slice") {
    const Tensor &x = *in(0);
    const int64_t rank = x.shape.size();
    std::vector<int64_t> starts = in(1)->asInts(), ends = in(2)->asInts();
    std::vector<int64_t> axes = in(3) ? in(3)->asInts() : std::vector<int64_t>();
    std::vector<int64_t> steps = in(4) ? in(4)->asInts() : std::vector<int64_t>();
    if (ends.size() != starts.size() || (in(3) && axes.size() != starts.size()) ||
        (in(4) && steps.size() != starts.size()))
      return "constant Slice whose starts, ends, axes and steps differ in length";
    std::vector<int64_t> lo(rank, 0), step(rank, 1), shape = x.shape;
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t a = axes.empty() ? int64_t(k) : axes[k];
      if (a < -rank || a >= rank) return "constant Slice axis out of range";
      a = normAxis(a, rank);
      const int64_t st = steps.empty() ? 1 : steps[k], dim = x.shape[a];
      if (st == 0) return "constant Slice with step 0";
      int64_t b = starts[k], e = ends[k];
      if (b < 0) b = b < -dim ? (st > 0 ? 0 : -1) : b + dim;
      if (e < 0) e = e < -dim ? -1 : e + dim;
      if (st > 0) { b = std::clamp<int64_t>(b, 0, dim); e = std::clamp<int64_t>(e, 0, dim); }
      else { b = std::clamp<int64_t>(b, -1, dim - 1); e = std::clamp<int64_t>(e, -1, dim - 1); }
      int64_t n = st > 0 ? (e > b ? (e - b + st - 1) / st : 0) : (b > e ? (b - e - st - 1) / -st : 0);
      lo[a] = b;
      step[a] = st;
      shape[a] = n;
    }
    auto xs = strides(x.shape), os = strides(shape);
    out = gatherElems(x, shape, [&](int64_t k) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d) off += (lo[d] + (k / os[d]) % shape[d] * step[d]) * xs[d];
      return off;
    });
  } else if (op == "Transpose") {
    const Tensor &x = *in(0);
    const int64_t rank = x.shape.size();
    std::vector<int64_t> perm;
    if (const Attr *a = node.attr("perm")) perm = a->ints;
    else for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    std::vector<int64_t> seen(rank, 0), shape;
    if ((int64_t)perm.size() != rank) return "Transpose perm of the wrong length";
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p]++) return "Transpose perm is not a permutation";
      shape.push_back(x.shape[p]);
    }
    auto xs = strides(x.shape), os = strides(shape);
    out = gatherElems(x, shape, [&](int64_t k) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d) off += (k / os[d]) % shape[d] * xs[perm[d]];
      return off;
    });
  } else if (op == "Trilu") {
    const Tensor &x = *in(0);
    if (x.shape.size() < 2) return "Trilu of rank < 2";
    const int64_t kk = in(1) ? (in(1)->numel() == 1 ? in(1)->asInts()[0] : INT64_MIN) : 0;
    if (kk == INT64_MIN) return "Trilu with a non-scalar k";
    const bool upper = node.intAttr("upper", 1) != 0;
    const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
    out = x;
    for (int64_t k = 0; k < x.numel(); ++k) {
      const int64_t j = k % cols, i = (k / cols) % rows;
      const bool keep = upper ? j - i >= kk : j - i <= kk;
      if (!keep) std::memset(out.bytes.data() + k * elemBytes(x.dtype), 0, elemBytes(x.dtype));
    }
  } else if (op == "CumSum") {
    const Tensor &x = *in(0);
    const int64_t rank = x.shape.size();
    if (in(1)->numel() != 1) return "CumSum with a non-scalar axis";
    int64_t a = in(1)->asInts()[0];
    if (a < -rank || a >= rank) return "CumSum axis out of range";
    a = normAxis(a, rank);
    if (x.dtype == DType::Bool) return "CumSum of a bool input";
    const bool exclusive = node.intAttr("exclusive", 0), reverse = node.intAttr("reverse", 0);
    int64_t inner = 1;
    for (int64_t d = a + 1; d < rank; ++d) inner *= x.shape[d];
    const int64_t dim = x.shape[a], outer = dim ? x.numel() / (dim * inner) : 0;
    out = blank(x.dtype, x.shape);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t isum = 0;
        float fsum = 0;  // float32 accumulation, as a float kernel adds
        auto put = [&](int64_t k) { x.dtype == DType::I64 ? putInt(out, k, isum) : putFloat(out, k, fsum); };
        for (int64_t t = 0; t < dim; ++t) {
          const int64_t i = reverse ? dim - 1 - t : t, k = (o * dim + i) * inner + j;
          if (exclusive) put(k);
          if (x.dtype == DType::I64) isum = wrapAdd(isum, intAt(x, k));
          else fsum += float(floatAt(x, k));
          if (!exclusive) put(k);
        }
      }
  } else if (op == "Split") {
    const Tensor &x = *in(0);
    const int64_t rank = x.shape.size(), a0 = node.intAttr("axis", 0);
    if (a0 < -rank || a0 >= rank) return "Split axis out of range";
    const int64_t axis = normAxis(a0, rank), dim = x.shape[axis], k = outs.size();
    std::vector<int64_t> sizes;
    if (in(1)) sizes = in(1)->asInts();
    else if (const Attr *s = node.attr("split")) sizes = s->ints;
    else {  // num_outputs (opset 18): ceil(dim / k) each, the last one smaller
      const int64_t each = (dim + k - 1) / k;
      for (int64_t i = 0; i < k; ++i) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
    }
    int64_t total = 0;
    for (int64_t s : sizes) { if (s < 0) return "Split with a negative size"; total += s; }
    if ((int64_t)sizes.size() != k || total != dim) return "Split sizes do not match the outputs and the dim";
    auto xs = strides(x.shape);
    int64_t start = 0;
    for (int64_t i = 0; i < k; ++i) {
      std::vector<int64_t> shape = x.shape;
      shape[axis] = sizes[i];
      auto os = strides(shape);
      outs[i] = gatherElems(x, shape, [&](int64_t e) {
        int64_t off = 0;
        for (int64_t d = 0; d < rank; ++d) off += ((e / os[d]) % shape[d] + (d == axis ? start : 0)) * xs[d];
        return off;
      });
      outs[i].name = node.outputs[i];
      start += sizes[i];
    }
  } else if (op == "MatMul") {
    const Tensor &a = *in(0), &b = *in(1);
    if (a.dtype != DType::F32 || b.dtype != DType::F32 || a.shape.size() != 2 || b.shape.size() != 2 ||
        a.shape[1] != b.shape[0])
      return "constant MatMul other than float [M,K] x [K,N]";
    const int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
    if (checkedNumel({M, N}) < 0 || M * N * std::max<int64_t>(K, 1) > (int64_t(1) << 32))
      return "a constant MatMul too large to fold";
    out = blank(DType::F32, {M, N});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0;  // float32 in order, as a float kernel of this size adds
        for (int64_t p = 0; p < K; ++p) acc += float(floatAt(a, i * K + p)) * float(floatAt(b, p * N + j));
        putFloat(out, i * N + j, acc);
      }
  } else {
    return "cannot fold " + op;
  }
  for (size_t i = 0; i < outs.size() && i < node.outputs.size(); ++i)
    outs[i].name = node.outputs[i];
  return "";
}

} // namespace fuyou::onnx_in
