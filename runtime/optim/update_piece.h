// Elements of an fp32 update the layer-group optimizer hands its pool at a
// time and reports when done (16 MiB of each array): a GPU copies each piece
// up as it is reported. Plain C++: the compiler's cost model prices that
// upload by the same figure.
#pragma once

#include <cstdint>

namespace fy {

constexpr int64_t kUpdatePieceElems = int64_t(4) << 20;

}  // namespace fy
