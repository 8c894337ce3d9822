// A plain C++ view of an ONNX model, read with the ONNX library.
//
// This layer is compiled with exceptions (ONNX throws) and hides every
// protobuf type, so the MLIR side, built without exceptions, never sees them.
#ifndef FUYOU_COMPILER_IMPORTER_ONNXMODEL_H
#define FUYOU_COMPILER_IMPORTER_ONNXMODEL_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fuyou::onnx_in {

// The types the compiler computes in. A tensor of another ONNX type is widened
// as it is read: every integer type to I64 (exactly), FLOAT16, BFLOAT16 and
// DOUBLE to F32; `onnxType` keeps what the file said.
enum class DType { F32, I64, Bool, Unsupported };  // Unsupported: kept by name, no data
const char *dtypeName(DType t);
std::string onnxTypeName(int onnxType);  // e.g. "DOUBLE"
// The DType an ONNX element type is read as (Unsupported for strings,
// complex, 8-bit and 4-bit floats).
DType dtypeOf(int onnxType);
// Wraps an integer to the range of ONNX integer type `onnxType` (as a
// C cast to that type does); other types pass through.
int64_t wrapToType(int64_t v, int onnxType);
// The initializers whose values the compile reads: integer and bool ones
// (shape arithmetic, index tables) and the buffers torch.export records
// (masks, RoPE frequencies) up to this many elements, and float scalars
// (exponents, ratios) up to kMaxReadScalars. Parameters are never read.
constexpr int64_t kMaxReadElements = int64_t(1) << 24;
constexpr int64_t kMaxReadScalars = 16;
// The newest ONNX IR version and default-domain opset read.
constexpr int64_t kMaxIrVersion = 10;
constexpr int64_t kMaxOpset = 28;

// Where an initializer's bytes lie in a file: the ONNX file's raw_data or its
// external data. The program reads parameters from there when it starts; the
// compiler never does.
struct Source {
  std::string path;            // absolute; empty: no file holds them as stored
  uint64_t offset = 0, length = 0;
};

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  int onnxType = 0;            // the TensorProto data type, for messages
  std::vector<int64_t> shape;
  // Read only for the initializers a compile may fold (kMaxReadElements):
  // otherwise empty, and `source` says where the values are.
  bool loaded = false;
  std::vector<char> bytes;     // little-endian, row-major
  Source source;
  int64_t numel() const;
  std::vector<int64_t> asInts() const;     // I64 or Bool contents
  std::vector<double> asDoubles() const;   // any supported dtype
};

struct Attr {
  enum Kind { Int, Float, String, Ints, Floats, TensorValue, Other } kind = Other;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  Tensor t;
};

struct Node {
  std::string name, opType, domain;
  std::vector<std::string> inputs, outputs;  // "" marks an omitted optional
  std::map<std::string, Attr> attrs;
  const Attr *attr(const std::string &key) const;
  int64_t intAttr(const std::string &key, int64_t dflt) const;
  float floatAttr(const std::string &key, float dflt) const;
  std::string strAttr(const std::string &key, const std::string &dflt) const;
  std::string describe() const;  // "node 'name' (OpType)"
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::F32;
  int onnxType = 0;
  bool hasShape = false;
  std::vector<int64_t> shape;   // -1 for a dim without a fixed size
};

struct Model {
  std::string path;
  int64_t opset = 0;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<Node> nodes;
  std::vector<Tensor> initializers;
  std::map<std::string, std::string> metadata;
  // The model's buffers (masks, positions, RoPE tables), values of the
  // graph rather than weights: the initializers torch.export records as
  // buffers or constants (not parameters) in the dynamo exporter's
  // value_info, and those the exporting script's metadata "fuyou.frozen"
  // lists (torch 1.x exports). Frozen; read and folded up to a size.
  std::vector<std::string> torchBuffers;
  // The ones it records as parameters (a trained initializer that is not
  // one is a graph optimizer's rewrite of a weight).
  std::vector<std::string> torchParams;
  // Names of one tensor (a tied head and embedding), from the exporting
  // script's metadata "fuyou.aliases" ("a=b;c=d"): a checkpoint may hold
  // either name.
  std::vector<std::pair<std::string, std::string>> aliases;
  bool isTorchBuffer(const std::string &name) const;
};

struct LoadOptions {
  int64_t batch = 0;  // 0: keep the model's own size
  int64_t seq = 0;
};

// Reads a binary ModelProto, or ONNX text syntax when the path ends in
// ".onnxtext"; checks it and fixes the input dims.
// Returns "" on success, else one line saying what is wrong.
std::string loadModel(const std::string &path, const LoadOptions &opts, Model &out);

} // namespace fuyou::onnx_in

namespace fuyou::onnx_in {
// --freeze patterns: ECMAScript regexes matched against whole initializer names.
class NameFilter {
public:
  // Returns "" or a message naming the pattern that does not compile.
  std::string add(const std::string &pattern);
  bool matches(const std::string &name) const;
  // The patterns no name matches has matched (a typo, not a choice).
  std::vector<std::string> unused() const;
  ~NameFilter();
private:
  std::vector<void *> regexes_;  // std::regex*, kept opaque to exception-free code
  std::vector<std::string> patterns_;
  mutable std::vector<bool> used_;
};
} // namespace fuyou::onnx_in

#endif
