// 16-bit operands of the CPU kernels. The kernels compute in F32; a BF16 or
// F16 View (activations stored in 16 bits, core/half.h) goes in as an F32
// copy, and each copy is rounded back into its View after the call. Inputs
// come back unchanged (widening is exact); operands on the same storage
// share one copy. widened(f)(args...) calls f so, every View argument (alone
// or in a vector) looked at; other arguments pass through.
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace fy::cpu {

class Widening {
 public:
  View operator()(const View& v);
  std::vector<View> operator()(const std::vector<View>& vs);
  template <class T, class = std::enable_if_t<!std::is_same_v<std::decay_t<T>, View> &&
                                              !std::is_same_v<std::decay_t<T>, std::vector<View>>>>
  T&& operator()(T&& x) {
    return std::forward<T>(x);
  }
  // Rounds every copy back into the View it stands for.
  void narrow_back();

 private:
  struct Copy {
    View narrow;
    HostTensor wide;
  };
  std::vector<Copy> copies_;
};

template <class F> auto widened(F f) {
  return [f](auto&&... args) {
    Widening w;
    f(w(std::forward<decltype(args)>(args))...);
    w.narrow_back();
  };
}

}  // namespace fy::cpu
