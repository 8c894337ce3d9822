// CRC-32C (Castagnoli), the checksum our safetensors files carry per tensor:
// SSE4.2's crc32 instruction where the CPU has it (about 8 GB/s on one core,
// faster than the disks it guards), a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fy {

// The CRC-32C of `n` bytes at `data`, continuing from `crc` (0 to start).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// The table version alone, for tests that compare it with the instruction.
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t n);

}  // namespace fy
