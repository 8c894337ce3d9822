// The executable runtime end to end: a hand-written program in the shape the
// code generator emits (embedding -> linear head -> mean cross-entropy, with
// its backward and AdamW), trained through fy::train_main and checked against
// an independent double-precision computation; plus the buffer pool, the
// wrappers whose argument order differs from fy::cpu, and the error lines.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "abi/api.h"
#include "device/device.h"
#include "exec/runtime.h"
#include "trace/trace.h"
#include "kernels/cpu/kernels.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace fyt {
namespace {

constexpr int64_t kV = 32, kD = 8, kB = 4, kT = 8, kN = kB * kT;

// ---- the program, as generated code would write it ----------------------------
void toy_declare(fy::Runtime* rt) {
  fy::rt::declare_param(rt, "wte.weight", fy::Shape{kV, kD}, fy::DType::F32, true);
  fy::rt::declare_param(rt, "lm_head.weight", fy::Shape{kD, kV}, fy::DType::F32, true);
  fy::rt::declare_param(rt, "lm_head.bias", fy::Shape{kV}, fy::DType::F32, false);
  fy::rt::declare_param(rt, "pos", fy::Shape{kT}, fy::DType::I64, false);
  fy::rt::declare_inputs(rt, fy::Shape{kB, kT}, kV);
}

void toy_step(fy::Runtime* rt, fy::View v0, fy::View v1, fy::View out0) {
  fy::View v2 = fy::rt::param(rt, 0);
  fy::View v3 = fy::rt::param(rt, 1);
  fy::View v4 = fy::rt::param(rt, 2);
  fy::View v5 = fy::rt::alloc(rt, fy::Shape{kB, kT, kD}, fy::DType::F32);
  fy::rt::gather(rt, v2, v0, v5);
  fy::View v6 = fy::rt::view(rt, v5, fy::Shape{kN, kD});
  fy::View v7 = fy::rt::alloc(rt, fy::Shape{kN, kV}, fy::DType::F32);
  fy::rt::matmul(rt, v6, v3, v7, false, false);
  fy::View v8 = fy::rt::alloc(rt, fy::Shape{kN, kV}, fy::DType::F32);
  fy::rt::add(rt, v7, v4, v8);
  fy::View v9 = fy::rt::view(rt, v1, fy::Shape{kN});
  fy::View v10 = fy::rt::alloc(rt, fy::Shape{}, fy::DType::F32);
  fy::View v11 = fy::rt::alloc(rt, fy::Shape{kN, kV}, fy::DType::F32);
  fy::rt::softmax_cross_entropy(rt, v8, v9, v10, v11, INT64_MIN, true);
  fy::rt::copy(rt, v10, out0);
  fy::View v12 = fy::rt::constant_splat(rt, fy::Shape{}, fy::DType::F32, 1.0);
  fy::View v13 = fy::rt::alloc(rt, fy::Shape{kN, kV}, fy::DType::F32);
  fy::rt::softmax_cross_entropy_grad(rt, v12, v11, v9, v13, INT64_MIN, true);
  fy::View v14 = fy::rt::alloc(rt, fy::Shape{kD, kV}, fy::DType::F32);
  fy::rt::matmul(rt, v6, v13, v14, true, false);
  fy::View v15 = fy::rt::alloc(rt, fy::Shape{kN, kD}, fy::DType::F32);
  fy::rt::matmul(rt, v13, v3, v15, false, true);
  fy::View v16 = fy::rt::view(rt, v15, fy::Shape{kB, kT, kD});
  fy::View v17 = fy::rt::alloc(rt, fy::Shape{kV, kD}, fy::DType::F32);
  fy::rt::gather_grad(rt, v16, v0, v17);
  fy::rt::cpu_adamw(rt, 0, v17);
  fy::rt::cpu_adamw(rt, 1, v14);
  fy::rt::dealloc(rt, v5);
  fy::rt::dealloc(rt, v7);
  fy::rt::dealloc(rt, v8);
  fy::rt::dealloc(rt, v10);
  fy::rt::dealloc(rt, v11);
  fy::rt::dealloc(rt, v12);
  fy::rt::dealloc(rt, v13);
  fy::rt::dealloc(rt, v14);
  fy::rt::dealloc(rt, v15);
  fy::rt::dealloc(rt, v17);
}

// Forgets a dealloc: train_main must refuse it rather than leak every step.
void leaky_step(fy::Runtime* rt, fy::View, fy::View, fy::View out0) {
  fy::View t = fy::rt::constant_splat(rt, fy::Shape{}, fy::DType::F32, 2.0);
  fy::rt::copy(rt, t, out0);
}

// ---- files -------------------------------------------------------------------------
struct Weights {
  std::vector<float> wte, head, bias;
  std::vector<int64_t> pos;
};

Weights make_weights() {
  Rng rng(11);
  Weights w;
  for (int64_t i = 0; i < kV * kD; ++i) w.wte.push_back(float(rng.uniform(-1, 1)));
  for (int64_t i = 0; i < kD * kV; ++i) w.head.push_back(float(rng.uniform(-0.5, 0.5)));
  for (int64_t i = 0; i < kV; ++i) w.bias.push_back(float(rng.uniform(-0.1, 0.1)));
  for (int64_t i = 0; i < kT; ++i) w.pos.push_back(i);
  return w;
}

void write_weights(const std::string& path, const Weights& w, bool skip_bias = false, int64_t wte_rows = kV,
                   bool extra = false) {
  std::vector<fy::SafetensorsEntry> e = {
      {"wte.weight", DType::F32, {wte_rows, kD}, w.wte.data()},
      {"lm_head.weight", DType::F32, {kD, kV}, w.head.data()},
      {"pos", DType::I64, {kT}, w.pos.data()},
  };
  if (extra) e.push_back({"unused.extra", DType::F32, {kV}, w.bias.data()});
  if (!skip_bias) e.push_back({"lm_head.bias", DType::F32, {kV}, w.bias.data()});
  fy::write_safetensors(path, e);
}

// A mostly deterministic bigram stream, so the model has something to learn.
std::vector<uint16_t> make_tokens(int64_t n) {
  Rng rng(5);
  std::vector<uint16_t> t = {3};
  while (int64_t(t.size()) < n)
    t.push_back(uint16_t(rng.uniform(0, 1) < 0.9 ? (t.back() * 7 + 1) % kV : rng.integer(0, kV - 1)));
  return t;
}

void write_tokens(const std::string& path, const std::vector<uint16_t>& t) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 2));
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

struct LogRecord {
  long long step = 0;
  double loss = 0, lr = 0, tps = 0, ms = 0;
};

LogRecord parse_record(const std::string& line) {
  LogRecord r;
  int n = std::sscanf(line.c_str(), "{\"step\": %lld, \"loss\": %lf, \"lr\": %lf, \"tokens_per_s\": %lf, \"ms\": %lf}",
                      &r.step, &r.loss, &r.lr, &r.tps, &r.ms);
  EXPECT_EQ(n, 5) << "unparsable log line: " << line;
  return r;
}

// ---- an independent reference in double --------------------------------------------
// Mean cross-entropy of one batch and its gradients w.r.t. wte and head.
double ref_loss(const std::vector<double>& wte, const std::vector<double>& head, const std::vector<double>& bias,
                const std::vector<int64_t>& in, const std::vector<int64_t>& tg, std::vector<double>* dwte = nullptr,
                std::vector<double>* dhead = nullptr) {
  if (dwte) dwte->assign(size_t(kV * kD), 0.0);
  if (dhead) dhead->assign(size_t(kD * kV), 0.0);
  double total = 0;
  for (int64_t n = 0; n < kN; ++n) {
    const double* h = &wte[size_t(in[n] * kD)];
    std::vector<double> z(kV);
    double zmax = -INFINITY;
    for (int64_t v = 0; v < kV; ++v) {
      z[v] = bias[v];
      for (int64_t d = 0; d < kD; ++d) z[v] += h[d] * head[size_t(d * kV + v)];
      zmax = std::max(zmax, z[v]);
    }
    double se = 0;
    for (double zv : z) se += std::exp(zv - zmax);
    const double lse = zmax + std::log(se);
    total += lse - z[tg[n]];
    if (!dwte) continue;
    for (int64_t v = 0; v < kV; ++v) {
      const double dz = (std::exp(z[v] - lse) - (v == tg[n])) / kN;
      for (int64_t d = 0; d < kD; ++d) {
        (*dhead)[size_t(d * kV + v)] += h[d] * dz;
        (*dwte)[size_t(in[n] * kD + d)] += dz * head[size_t(d * kV + v)];
      }
    }
  }
  return total / kN;
}

// Step 0's batch by the data contract: row b uses window b.
void first_batch(const std::vector<uint16_t>& toks, std::vector<int64_t>* in, std::vector<int64_t>* tg) {
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) {
      in->push_back(toks[size_t(b * kT + t)]);
      tg->push_back(toks[size_t(b * kT + t + 1)]);
    }
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// ---- fixture ----------------------------------------------------------------------------
class Exec : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "fy_exec_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
    ::mkdir(dir_.c_str(), 0755);
    weights_ = make_weights();
    tokens_ = make_tokens(400);
    write_weights(path("w.safetensors"), weights_);
    write_tokens(path("data.bin"), tokens_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + name; }

  struct Result {
    int code;
    std::string err;
  };
  Result train(std::vector<std::string> args, fy::TrainStepFn step = toy_step) {
    args.insert(args.begin(), "toy_train");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::testing::internal::CaptureStderr();
    int code = fy::train_main(int(args.size()), argv.data(), toy_declare, step);
    return {code, ::testing::internal::GetCapturedStderr()};
  }
  // The standard arguments plus `extra`.
  Result train_ok(int steps, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"--data", path("data.bin"), "--steps", std::to_string(steps),
                                  "--weights=" + path("w.safetensors"), "--lr", "1e-2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return train(a);
  }
  // Exit code 1 and exactly one line "train: error: ...<want>...".
  void expect_error(const Result& r, const std::string& want) {
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("train: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << "want '" << want << "' in: " << r.err;
  }

  std::string dir_;
  Weights weights_;
  std::vector<uint16_t> tokens_;
};

TEST_F(Exec, TrainsAndLogsEveryStep) {
  const int kSteps = 30;
  Result r = train_ok(kSteps, {"--log-json", path("log.jsonl"), "--log-every=10", "--lr=3e-2"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Progress on steps 10, 20, 30 only.
  EXPECT_NE(r.err.find("step 10/30  loss "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 30/30  loss "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("step 9/30"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" tok/s\n"), std::string::npos) << r.err;

  std::vector<std::string> lines = read_lines(path("log.jsonl"));
  ASSERT_EQ(lines.size(), size_t(kSteps));
  std::vector<double> loss;
  for (int i = 0; i < kSteps; ++i) {
    LogRecord rec = parse_record(lines[size_t(i)]);
    EXPECT_EQ(rec.step, i + 1);
    EXPECT_TRUE(std::isfinite(rec.loss)) << lines[size_t(i)];
    EXPECT_GT(rec.ms, 0);
    EXPECT_GT(rec.tps, 0);
    EXPECT_EQ(rec.lr, 3e-2);  // constant: --lr itself
    loss.push_back(rec.loss);
  }
  double last = (loss[25] + loss[26] + loss[27] + loss[28] + loss[29]) / 5;
  EXPECT_LT(last, 0.6 * loss[0]) << "loss did not fall: " << loss[0] << " -> " << last;

  // Step 1's loss is the forward loss of the initial weights on batch 0.
  std::vector<int64_t> in, tg;
  first_batch(tokens_, &in, &tg);
  double want = ref_loss(to_double(weights_.wte), to_double(weights_.head), to_double(weights_.bias), in, tg);
  EXPECT_NEAR(loss[0], want, 1e-5 * want);
}

TEST_F(Exec, RunsAreReproducible) {
  ASSERT_EQ(train_ok(5, {"--log-json", path("a.jsonl")}).code, 0);
  ASSERT_EQ(train_ok(5, {"--log-json", path("b.jsonl")}).code, 0);
  std::vector<std::string> a = read_lines(path("a.jsonl")), b = read_lines(path("b.jsonl"));
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(parse_record(a[i]).loss, parse_record(b[i]).loss) << i;
}

TEST_F(Exec, DumpedGradientsMatchReference) {
  ASSERT_EQ(train_ok(3, {"--dump-grads", path("g.safetensors")}).code, 0);
  auto g = fy::read_safetensors(path("g.safetensors"));
  ASSERT_EQ(g.size(), 2u);  // trainable parameters only
  ASSERT_TRUE(g.count("wte.weight"));
  ASSERT_TRUE(g.count("lm_head.weight"));
  EXPECT_EQ(g["wte.weight"].shape, (std::vector<int64_t>{kV, kD}));
  EXPECT_EQ(g["lm_head.weight"].shape, (std::vector<int64_t>{kD, kV}));

  std::vector<int64_t> in, tg;
  first_batch(tokens_, &in, &tg);
  std::vector<double> wte = to_double(weights_.wte), head = to_double(weights_.head), bias = to_double(weights_.bias);
  std::vector<double> dwte, dhead;
  ref_loss(wte, head, bias, in, tg, &dwte, &dhead);

  // The hand-derived reference agrees with central differences ...
  const double h = 1e-6;
  for (size_t i : {size_t(in[0] * kD), size_t(in[5] * kD + 3), size_t(7)}) {
    std::vector<double> p = wte, m = wte;
    p[i] += h;
    m[i] -= h;
    double fd = (ref_loss(p, head, bias, in, tg) - ref_loss(m, head, bias, in, tg)) / (2 * h);
    EXPECT_NEAR(dwte[i], fd, 1e-7) << "wte " << i;
  }
  for (size_t i : {size_t(0), size_t(kV + 5), size_t(kD * kV - 1)}) {
    std::vector<double> p = head, m = head;
    p[i] += h;
    m[i] -= h;
    double fd = (ref_loss(wte, p, bias, in, tg) - ref_loss(wte, m, bias, in, tg)) / (2 * h);
    EXPECT_NEAR(dhead[i], fd, 1e-7) << "head " << i;
  }
  // ... and the program's gradients agree with it everywhere.
  const float* gw = g["wte.weight"].view().as<float>();
  const float* gh = g["lm_head.weight"].view().as<float>();
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_NEAR(gw[i], dwte[i], 1e-6 + 1e-4 * std::fabs(dwte[i])) << i;
  for (size_t i = 0; i < dhead.size(); ++i) EXPECT_NEAR(gh[i], dhead[i], 1e-6 + 1e-4 * std::fabs(dhead[i])) << i;
}

TEST_F(Exec, SavesEveryParameter) {
  ASSERT_EQ(train_ok(2, {"--save", path("ckpt/nested")}).code, 0);
  auto s = fy::read_safetensors(path("ckpt/nested/model.safetensors"));
  ASSERT_EQ(s.size(), 4u);
  // Frozen tensors come back bit for bit; trained ones moved.
  EXPECT_EQ(0, std::memcmp(s["lm_head.bias"].bytes.data(), weights_.bias.data(), kV * 4));
  EXPECT_EQ(0, std::memcmp(s["pos"].bytes.data(), weights_.pos.data(), kT * 8));
  EXPECT_NE(0, std::memcmp(s["wte.weight"].bytes.data(), weights_.wte.data(), kV * kD * 4));
  EXPECT_EQ(s["lm_head.weight"].shape, (std::vector<int64_t>{kD, kV}));
  // The checkpoint is a valid --weights file for the same program.
  Result r = train({"--data", path("data.bin"), "--steps", "1", "--weights", path("ckpt/nested/model.safetensors")});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Exec, HelpPrintsUsage) {
  ::testing::internal::CaptureStdout();
  Result r = train({"--help"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(out.find("--data FILE"), std::string::npos) << out;
  EXPECT_NE(out.find("--dump-grads FILE"), std::string::npos) << out;
}

TEST_F(Exec, FlagErrors) {
  const std::string d = path("data.bin"), w = "--weights=" + path("w.safetensors");
  expect_error(train({"--data", d, "--steps", "2", w, "--bogus", "1"}), "unknown flag '--bogus' (see --help)");
  expect_error(train({"--data", d, "--steps", "2", w, "--bogus=1"}), "unknown flag '--bogus' (see --help)");
  expect_error(train({"--data", d, "--steps", "2", w, "extra"}), "unexpected argument 'extra'");
  expect_error(train({"--data", d, w}), "missing required flag --steps");
  expect_error(train({"--steps", "2", w}), "missing required flag --data");
  expect_error(train({"--data", d, w, "--steps", "0"}), "flag '--steps' must be positive, got 0");
  expect_error(train({"--data", d, w, "--steps", "2x"}), "flag '--steps' expects an integer, got '2x'");
  expect_error(train({"--data", d, w, "--steps", "2", "--lr", "abc"}), "flag '--lr' expects a finite number, got 'abc'");
  expect_error(train({"--data", d, w, "--steps", "2", "--beta2=1"}), "flag '--beta2' must be in [0, 1), got 1");
  expect_error(train({"--data", d, w, "--steps", "2", "--lr", "-1"}), "flag '--lr' must be >= 0, got -1");
  expect_error(train({"--steps", "2", w, "--data"}), "flag '--data' needs a value");
  expect_error(train({"--steps", "2", w, "--data", "--lr", "1"}), "flag '--data' needs a value");
  expect_error(train({"--steps", "2", w, "--data="}), "flag '--data' needs a value");
}

TEST_F(Exec, InputErrors) {
  const std::string w = "--weights=" + path("w.safetensors");
  expect_error(train({"--data", path("nope.bin"), "--steps", "2", w}), "token file '" + path("nope.bin") + "'");

  write_tokens(path("short.bin"), std::vector<uint16_t>(size_t(kT), 1));  // one token short of a window
  expect_error(train({"--data", path("short.bin"), "--steps", "2", w}), "too short");

  std::vector<uint16_t> bad = tokens_;
  bad[17] = uint16_t(kV);
  write_tokens(path("bad.bin"), bad);
  expect_error(train({"--data", path("bad.bin"), "--steps", "2", w}),
               "token id 32 at token offset 17 is >= vocabulary size 32");

  write_weights(path("nobias.safetensors"), weights_, /*skip_bias=*/true);
  expect_error(train({"--data", path("data.bin"), "--steps", "2", "--weights", path("nobias.safetensors")}),
               "no tensor for parameter 'lm_head.bias'");

  std::vector<float> small(size_t((kV - 1) * kD));
  Weights ws = weights_;
  ws.wte = small;
  write_weights(path("shape.safetensors"), ws, false, kV - 1);
  expect_error(train({"--data", path("data.bin"), "--steps", "2", "--weights", path("shape.safetensors")}),
               "tensor 'wte.weight' is F32 [31,8], parameter 'wte.weight' is F32 [32,8]");

  // A tensor that is no parameter of the program: a checkpoint of another model.
  write_weights(path("extra.safetensors"), weights_, false, kV, /*extra=*/true);
  expect_error(train({"--data", path("data.bin"), "--steps", "2", "--weights", path("extra.safetensors")}),
               "tensor 'unused.extra' matches no parameter of this program");

  // Without --weights, the file next to the executable is used.
  expect_error(train({"--data", path("data.bin"), "--steps", "2"}), ".weights.safetensors': cannot open");

  expect_error(train({"--data", path("data.bin"), "--steps", "2", w, "--log-json", path("no/such/dir/log")}),
               "log file '" + path("no/such/dir/log") + "'");
}

TEST_F(Exec, UnbalancedProgramIsRefused) {
  Result r = train({"--data", path("data.bin"), "--steps", "3", "--weights", path("w.safetensors"), "--log-json",
                    path("log.jsonl")},
                   leaky_step);
  expect_error(r, "step 1 left 1 buffers allocated");
  EXPECT_TRUE(read_lines(path("log.jsonl")).empty());
}

// ---- Runtime pieces -------------------------------------------------------------------------
TEST(ExecRuntime, SteadyStateStepsDoNotMalloc) {
  fy::Runtime rt;
  toy_declare(&rt);
  fy::HostTensor idx(Shape{kB, kT}, DType::I64), tgt(Shape{kB, kT}, DType::I64), loss(Shape{}, DType::F32);
  for (int64_t i = 0; i < kN; ++i) {
    idx.as<int64_t>()[i] = i % kV;
    tgt.as<int64_t>()[i] = (i + 1) % kV;
  }
  rt.set_step(1);
  toy_step(&rt, idx, tgt, loss);
  const int64_t mallocs = rt.pool_stats().mallocs;
  EXPECT_EQ(rt.pool_stats().live_buffers, 0);
  EXPECT_GT(rt.pool_stats().peak_bytes, 0);
  for (int s = 2; s <= 4; ++s) {
    rt.set_step(s);
    toy_step(&rt, idx, tgt, loss);
  }
  EXPECT_EQ(rt.pool_stats().mallocs, mallocs);
  EXPECT_EQ(rt.pool_stats().live_buffers, 0);
}

TEST(ExecRuntime, PoolBuffersAndMisuse) {
  fy::Runtime rt;
  int64_t p = rt.declare_param("w", Shape{3}, DType::F32, true);
  EXPECT_EQ(p, 0);
  EXPECT_EQ(rt.declare_param("buf", Shape{2}, DType::I64, false), 1);
  View a = rt.alloc(Shape{5, 3}, DType::F32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  rt.dealloc(a);
  View b = rt.alloc(Shape{15}, DType::F32);  // same size: the same buffer again
  EXPECT_EQ(b.data, a.data);
  View z = rt.alloc(Shape{0, 4}, DType::F32);  // empty tensors are fine
  rt.dealloc(z);

  EXPECT_NE(error_of([&] { rt.dealloc(rt.param(0).value); }).find("is a parameter"), std::string::npos);
  rt.dealloc(b);
  EXPECT_NE(error_of([&] { rt.dealloc(b); }).find("deallocated twice"), std::string::npos);
  EXPECT_NE(error_of([&] { rt.declare_param("w", Shape{1}, DType::F32, false); }).find("declared twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { rt.declare_param("i", Shape{1}, DType::I64, true); }).find("must be F32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fy::rt::param(&rt, 5); }).find("index 5 out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { fy::rt::constant_f32(&rt, Shape{3}, {1.0f, 2.0f}); }).find("2 values for shape [3]"),
            std::string::npos);
  rt.set_step(1);
  EXPECT_NE(error_of([&] { fy::rt::cpu_adamw(&rt, 1, rt.param(1).value); }).find("not trainable"),
            std::string::npos);
}

TEST(ExecRuntime, ConstantsAndViews) {
  fy::Runtime rt;
  View f = fy::rt::constant_f32(&rt, Shape{2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  View i = fy::rt::constant_i64(&rt, Shape{3}, {7, -1, 9});
  View u = fy::rt::constant_u8(&rt, Shape{2}, {1, 0});
  View s = fy::rt::constant_splat(&rt, Shape{2, 3}, DType::F32, 0.5);
  View fv = fy::rt::view(&rt, f, Shape{4});
  EXPECT_EQ(fv.data, f.data);
  EXPECT_EQ(fv.as<float>()[3], 4.0f);
  EXPECT_EQ(i.as<int64_t>()[1], -1);
  EXPECT_EQ(u.as<uint8_t>()[0], 1);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(s.as<float>()[k], 0.5f);
  for (View v : {f, i, u, s}) fy::rt::dealloc(&rt, v);
  EXPECT_EQ(rt.pool_stats().live_buffers, 0);
}

// Started copies on the CPU target: done at once, or at their wait when
// deferred (so a test run sees a read before the wait as stale data).
TEST(ExecRuntime, StartedCopiesRunAtOnceOrAtTheirWait) {
  for (bool defer : {false, true}) {
    fy::Runtime rt;
    fy::TrainOptions o;
    o.defer_copies = defer;
    rt.set_options(o);
    View src = fy::rt::constant_f32(&rt, Shape{3}, {1.0f, 2.0f, 3.0f});
    View up = fy::rt::constant_splat(&rt, Shape{3}, DType::F32, 0.0);
    View down = fy::rt::constant_splat(&rt, Shape{3}, DType::F32, 0.0);
    int64_t t1 = fy::rt::copy_to_device_start(&rt, src, up);
    int64_t t2 = fy::rt::copy_to_host_start(&rt, src, down);
    EXPECT_EQ(up.as<float>()[2], defer ? 0.0f : 3.0f);
    src.as<float>()[2] = 7.0f;  // a write before the wait: the deferred copies see it
    fy::rt::copy_wait(&rt, t2);
    EXPECT_EQ(down.as<float>()[2], defer ? 7.0f : 3.0f);
    EXPECT_EQ(up.as<float>()[2], defer ? 0.0f : 3.0f);
    fy::rt::copy_wait(&rt, t1);
    EXPECT_EQ(up.as<float>()[2], defer ? 7.0f : 3.0f);
    if (defer) {
      EXPECT_NE(error_of([&] { fy::rt::copy_wait(&rt, t1); }).find("no copy started with ticket"), std::string::npos);
    }
    for (View v : {src, up, down}) fy::rt::dealloc(&rt, v);
  }
}

// A deferred upload of a group's master that the program waits for only
// after letting the group's update go still copies the values of when it
// started: grad_offload runs it first (a compiled program never waits that
// late; the update would otherwise race the copy, as on a GPU).
TEST(ExecRuntime, AnUploadStartedBeforeItsGroupsUpdateCopiesTheOldMaster) {
  for (bool group : {true, false}) {  // the layer-group optimizer, or the synchronous cpu_adamw
    fy::Runtime rt;
    fy::TrainOptions o;
    o.defer_copies = true;
    rt.set_options(o);
    rt.declare_param("w", Shape{64}, DType::F32, true);
    float* w = rt.param(0).value.as<float>();
    for (int k = 0; k < 64; ++k) w[k] = 0.5f + 0.01f * float(k);
    const std::vector<float> before(w, w + 64);
    const int64_t g = group ? fy::rt::declare_group(&rt, {0}) : -1;
    rt.set_step(1);
    View up = fy::rt::constant_splat(&rt, Shape{64}, DType::F32, 0.0);
    View grad = fy::rt::constant_splat(&rt, Shape{64}, DType::F32, 1.0);
    const int64_t copy = fy::rt::copy_to_device_start(&rt, fy::rt::param_host(&rt, 0), up);
    if (group) {
      const int64_t out = fy::rt::grad_offload(&rt, g, grad);
      const int64_t update = fy::rt::group_adamw(&rt, g, out, fy::rt::state_read(&rt, g));
      fy::rt::state_write(&rt, g, update);
      fy::rt::group_wait(&rt, g);
    } else {
      fy::rt::cpu_adamw(&rt, 0, grad);
    }
    ASSERT_NE(w[0], before[0]) << "the update did not run";
    fy::rt::copy_wait(&rt, copy);
    EXPECT_EQ(0, std::memcmp(up.data, before.data(), 64 * sizeof(float))) << (group ? "group" : "cpu_adamw");
    for (View v : {up, grad}) fy::rt::dealloc(&rt, v);
  }
}

// The memory plan's arena: buffers at the offsets the program names, reused
// across lifetimes, every misplacement refused with one line.
TEST(ExecRuntime, ArenaPlacesAndChecksThePlan) {
  fy::Runtime rt;
  fy::rt::declare_memory_plan(&rt, 256, 320);
  EXPECT_EQ(rt.planned_device_temp_bytes(), 320);
  View a = fy::rt::alloc_at(&rt, 0, Shape{16}, DType::F32);     // [0, 64)
  View b = fy::rt::alloc_at(&rt, 64, Shape{40}, DType::F32);    // [64, 256)
  View c = fy::rt::constant_f32(&rt, 256, Shape{2}, {1.5f, -2.f});  // [256, 320)
  EXPECT_EQ(static_cast<char*>(b.data) - static_cast<char*>(a.data), 64);
  EXPECT_EQ(static_cast<char*>(c.data) - static_cast<char*>(a.data), 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  EXPECT_EQ(c.as<float>()[1], -2.f);
  EXPECT_EQ(rt.pool_stats().live_bytes, 320);
  // Overlapping a live buffer from below, from above, or past the end.
  EXPECT_NE(error_of([&] { fy::rt::alloc_at(&rt, 192, Shape{1}, DType::F32); }).find("overlaps a live buffer at 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fy::rt::alloc_at(&rt, 0, Shape{17}, DType::F32); }).find("overlaps a live buffer at 0"),
            std::string::npos);
  fy::rt::dealloc(&rt, a);
  EXPECT_NE(error_of([&] { fy::rt::alloc_at(&rt, 0, Shape{17}, DType::F32); }).find("overlaps a live buffer at 64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fy::rt::alloc_at(&rt, 320, Shape{1}, DType::F32); }).find("runs past the 320-byte arena"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fy::rt::dealloc(&rt, a); }).find("not a live buffer of the arena"), std::string::npos);
  // a's place is free again: a later buffer reuses it.
  View d = fy::rt::constant_splat(&rt, 0, Shape{4, 4}, DType::F32, 3.0);
  EXPECT_EQ(d.data, a.data);
  EXPECT_EQ(d.as<float>()[15], 3.f);
  for (View v : {b, c, d}) fy::rt::dealloc(&rt, v);
  EXPECT_EQ(rt.pool_stats().live_buffers, 0);
  EXPECT_EQ(rt.pool_stats().peak_bytes, 320);
  // A plan whose arena cannot hold its own peak is refused.
  fy::Runtime bad;
  EXPECT_NE(error_of([&] { fy::rt::declare_memory_plan(&bad, 512, 256); }).find("cannot fit an arena"),
            std::string::npos);
}

// Host-arena buffers move to SSD by O_DIRECT, so they start on pages even when
// the host allocator (cudaHostAlloc pools small blocks) returns less aligned memory.
void* off_page_alloc(size_t bytes) { return static_cast<char*>(std::aligned_alloc(4096, bytes + 4096)) + 64; }
void off_page_free(void* p) { std::free(static_cast<char*>(p) - 64); }

TEST(ExecRuntime, HostArenaStartsOnAPageWhateverTheAllocatorGives) {
  fy::Runtime rt;
  rt.set_host_allocator(off_page_alloc, off_page_free);
  fy::rt::declare_memory_plan(&rt, 0, 0, 3 * 4096);
  View a = fy::rt::alloc_host_at(&rt, 0, Shape{1024}, DType::F32), b = fy::rt::alloc_host_at(&rt, 8192, Shape{8}, DType::F32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4096, 0u);
  a.as<float>()[1023] = 1.f;  // the whole plan lies inside what was allocated
  b.as<float>()[7] = 2.f;
  fy::rt::dealloc(&rt, a);
  fy::rt::dealloc(&rt, b);
}

// The wrappers whose argument order differs from fy::cpu, against the kernels.
TEST(ExecRuntime, ReorderedWrappersMatchKernels) {
  fy::Runtime rt;
  Rng rng(3);
  {  // gather_grad(dy, idx, dtable)
    HostTensor idx = make_tensor(Shape{3}, DType::I64, {2, 0, 2});
    HostTensor dy = rand_tensor(Shape{3, 4}, DType::F32, rng);
    HostTensor got(Shape{3, 4}, DType::F32), want(Shape{3, 4}, DType::F32);
    fy::rt::gather_grad(&rt, dy, idx, got);
    fy::cpu::gather_grad(idx, dy, want);
    expect_close(got, want, 0, 0, "gather_grad");
  }
  {  // softmax_grad(dy, y, dx)
    HostTensor x = rand_tensor(Shape{2, 5}, DType::F32, rng), dy = rand_tensor(Shape{2, 5}, DType::F32, rng);
    HostTensor y(Shape{2, 5}, DType::F32), got(Shape{2, 5}, DType::F32), want(Shape{2, 5}, DType::F32);
    fy::rt::softmax(&rt, x, y, -1);
    fy::rt::softmax_grad(&rt, dy, y, got, -1, 0.5);
    fy::cpu::softmax_grad(y, dy, want, -1, 0.5f);
    expect_close(got, want, 0, 0, "softmax_grad");
  }
  {  // masked_softmax(x, mask, y, scale)
    HostTensor x = rand_tensor(Shape{2, 5}, DType::F32, rng), mask = make_tensor(Shape{5}, DType::U8, {0, 1, 0, 0, 1});
    HostTensor got(Shape{2, 5}, DType::F32), want(Shape{2, 5}, DType::F32);
    fy::rt::masked_softmax(&rt, x, mask, got, 0.25);
    fy::cpu::masked_softmax(x, mask, want, 0.25f);
    expect_close(got, want, 0, 0, "masked_softmax");
  }
  {  // concat(axis, out, ins...)
    HostTensor a = make_tensor(Shape{2, 1}, DType::F32, {1, 2}), b = make_tensor(Shape{2, 2}, DType::F32, {3, 4, 5, 6});
    HostTensor out(Shape{2, 3}, DType::F32);
    fy::rt::concat(&rt, 1, out.view(), a.view(), b.view());
    HostTensor want = make_tensor(Shape{2, 3}, DType::F32, {1, 3, 4, 2, 5, 6});
    expect_close(out, want, 0, 0, "concat");
  }
  {  // layer_norm_nobias == layer_norm with a zero bias
    HostTensor x = rand_tensor(Shape{3, 4}, DType::F32, rng), sc = rand_tensor(Shape{4}, DType::F32, rng);
    HostTensor zero(Shape{4}, DType::F32), y1(Shape{3, 4}, DType::F32), y2(Shape{3, 4}, DType::F32);
    HostTensor m(Shape{3, 1}, DType::F32), r(Shape{3, 1}, DType::F32);
    fy::rt::layer_norm_nobias(&rt, x, sc, y1, m, r, 1, 1e-5);
    fy::rt::layer_norm(&rt, x, sc, zero, y2, m, r, 1, 1e-5);
    expect_close(y1, y2, 0, 0, "layer_norm_nobias");
  }
  {  // reduce_mean into a keepdims-shaped output
    HostTensor x = make_tensor(Shape{2, 3}, DType::F32, {1, 2, 3, 4, 5, 6}), y(Shape{2, 1}, DType::F32);
    fy::rt::reduce_mean(&rt, x, y);
    expect_close(y, make_tensor(Shape{2, 1}, DType::F32, {2, 5}), 0, 0, "reduce_mean");
  }
}

TEST(ExecRuntime, DropoutMasksDependOnRunSeedStepMicroBatchAndOp) {
  fy::Runtime rt;
  HostTensor x(Shape{256}, DType::F32), y(Shape{256}, DType::F32);
  fy::cpu::fill(x, 1.0);
  auto mask = [&](uint64_t run_seed, int64_t step, int64_t op, int64_t micro = -1) {
    fy::TrainOptions o;
    o.seed = run_seed;
    rt.set_options(o);
    rt.set_step(step);  // and micro-batch 0
    if (micro >= 0) rt.set_micro_step(micro);
    HostTensor m(Shape{256}, DType::U8);
    fy::rt::dropout(&rt, x, y, m, 0.5, op);
    return std::vector<uint8_t>(m.as<uint8_t>(), m.as<uint8_t>() + 256);
  };
  EXPECT_EQ(mask(0, 1, 7), mask(0, 1, 7));
  EXPECT_NE(mask(0, 1, 7), mask(0, 2, 7));
  EXPECT_NE(mask(0, 1, 7), mask(0, 1, 8));
  EXPECT_NE(mask(0, 1, 7), mask(1, 1, 7));
  // Gradient accumulation: each micro-batch draws its own masks (the first
  // is what set_step leaves: a step without accumulation).
  EXPECT_NE(mask(0, 1, 7, 0), mask(0, 1, 7, 1));
  EXPECT_NE(mask(0, 1, 7, 1), mask(0, 1, 7, 2));
  EXPECT_NE(mask(0, 1, 7, 1), mask(0, 2, 7, 1));
}

}  // namespace
}  // namespace fyt
