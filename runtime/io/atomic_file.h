// Small files written whole or not at all: a manifest, an index.
#pragma once

#include <string>

namespace fy {

// Writes `text` to `path` durably and atomically: a temporary beside it is
// written and fsync'ed, renamed over `path`, and the directory fsync'ed, so a
// crash leaves the old file or the new one, never a part. Fails naming the
// file (its temporary removed).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace fy
