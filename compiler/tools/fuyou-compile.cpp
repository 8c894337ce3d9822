// fuyou-compile MODEL.onnx -o OUT: ONNX training graph → native training program.
#include "compiler/importer/Importer.h"
#include "compiler/importer/OnnxModel.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string model, out, target = "cpu", emit;
  int64_t batch = 0, seq = 0;
  std::vector<std::string> freeze;
};

[[noreturn]] void die(const std::string &msg) {
  llvm::errs() << "fuyou-compile: error: " << msg << "\n";
  std::exit(1);
}

const char *kUsage =
    "usage: fuyou-compile MODEL.onnx -o OUT [--target cpu] [--batch B] [--seq T]\n"
    "                     [--freeze REGEX]... [--emit=fygraph|fysched|cpp]\n";

int64_t parseCount(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x <= 0)
    die("--" + flag + " needs a positive integer, got '" + v + "'");
  return x;
}

Options parse(int argc, char **argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], val;
    bool hasVal = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      val = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      hasVal = true;
    }
    auto next = [&]() -> std::string {
      if (hasVal)
        return val;
      if (i + 1 >= args.size())
        die("flag '" + a + "' needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      llvm::outs() << kUsage;
      std::exit(0);
    } else if (a == "-o") o.out = next();
    else if (a == "--target") o.target = next();
    else if (a == "--batch") o.batch = parseCount("batch", next());
    else if (a == "--seq") o.seq = parseCount("seq", next());
    else if (a == "--freeze") o.freeze.push_back(next());
    else if (a == "--emit") o.emit = next();
    else if (!a.empty() && a[0] == '-') die("unknown flag '" + a + "' (see --help)");
    else if (o.model.empty()) o.model = a;
    else die("unexpected argument '" + a + "': one model at a time");
  }
  if (o.model.empty())
    die("no model given\n" + std::string(kUsage));
  if (o.target != "cpu")
    die("--target '" + o.target + "' is not supported yet (cpu)");
  if (!o.emit.empty() && o.emit != "fygraph" && o.emit != "fysched" && o.emit != "cpp")
    die("--emit must be fygraph, fysched or cpp, got '" + o.emit + "'");
  if (o.emit.empty() && o.out.empty())
    die("no output given: -o OUT, or --emit=... to print");
  return o;
}

} // namespace

int main(int argc, char **argv) {
  Options opts = parse(argc, argv);

  fuyou::onnx_in::NameFilter freeze;
  for (const auto &f : opts.freeze)
    if (std::string err = freeze.add(f); !err.empty())
      die(err);

  fuyou::onnx_in::Model model;
  fuyou::onnx_in::LoadOptions lo;
  lo.batch = opts.batch;
  lo.seq = opts.seq;
  if (std::string err = fuyou::onnx_in::loadModel(opts.model, lo, model); !err.empty())
    die(err);

  mlir::MLIRContext ctx;
  fuyou::ImportStats stats;
  std::string err;
  auto module = fuyou::importModel(ctx, model, freeze, stats, err);
  if (!module)
    die(opts.model + ": " + err);
  if (failed(mlir::verify(*module)))
    die(opts.model + ": the imported graph does not verify (a compiler bug)");
  llvm::errs() << "fuyou-compile: " << stats.trainableParams << " trainable parameters in "
               << stats.trainableTensors << " tensors, " << stats.frozenTensors
               << " frozen tensors\n";

  if (opts.emit == "fygraph") {
    module->print(llvm::outs());
    return 0;
  }
  die("--emit=" + (opts.emit.empty() ? std::string("executable") : opts.emit) +
      ": this stage of the pipeline is not built yet");
}
