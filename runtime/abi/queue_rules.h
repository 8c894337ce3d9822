// The layer-group optimizer's rules for what runs next, in plain C++ with no
// threads: the runtime's worker decides by them (AsyncOptimizer::runnable)
// and the compiler's cost model predicts by them (its replay), so a change to
// a rule is made here, once. Part of the declared compiler-runtime interface.
#pragma once

#include <cstddef>

namespace fy::queue {

struct Pick {
  size_t index;  // of the update to run next
  bool landed;   // its gradient is there: it runs now (else the worker waits for it)
};

// Among `n` > 0 queued updates, in queue order (after backward: the next
// forward's order, the reverse of the order their gradients land in), the
// first whose gradient has landed; when none has, the one whose gradient
// lands first, rather than a wait on the first in the queue.
// `landed(i)`: update i's gradient is there; `lands_before(i, j)`: i's lands
// before j's (the runtime: it was offloaded first; the model: its landing
// time is earlier).
template <class Landed, class LandsBefore>
Pick next_update(size_t n, Landed landed, LandsBefore lands_before) {
  size_t earliest = 0;
  for (size_t i = 0; i < n; ++i) {
    if (landed(i)) return {i, true};
    if (lands_before(i, earliest)) earliest = i;
  }
  return {earliest, false};
}

// A table's early pieces (the rows of a tied table its batch does not read,
// updated while backward runs) are filler: the worker runs one in place of
// the update it picked only while that update's gradient has not landed
// (or none is queued) and the piece's own chunk of the gradient has. A piece
// never delays an update whose gradient is there, and once started runs
// whole. (Write-backs of moments on SSD go before everything: they only
// issue I/O and free a staging buffer; the model charges them no worker time.)
inline bool piece_first(bool picked_landed, bool piece_landed) { return !picked_landed && piece_landed; }

}  // namespace fy::queue
