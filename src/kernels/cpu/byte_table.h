// y[i] = table[x[i]]: a byte's 256 values mapped at once (hodu's LookupTable, the float ops
// between a DequantizeLinear and a QuantizeLinear folded into one table).
#pragma once
#include <cstdint>

namespace hodu::byte_table {

// n bytes of x through the table into y (x and y may be the same buffer). The vector forms
// (AVX2, AVX-512BW, under HODU_MAX_ISA) split the table into 16 rows of 16 bytes and look each
// row up with one byte shuffle.
void look_up(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table);

}  // namespace hodu::byte_table
