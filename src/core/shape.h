// Shapes of values in the IR. A dim is a known size, a symbol ("batch"), or
// unknown. A shape may also have unknown rank. Concrete runtime shapes are plain
// std::vector<int64_t> (see Tensor).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hodu {

struct Dim {
  int64_t value = -1;   // >= 0 when known
  std::string symbol;   // non-empty for a symbolic dim (value is then -1)

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit on purpose, Shape{1, 3}
  static Dim sym(std::string name) { Dim d; d.symbol = std::move(name); return d; }
  static Dim unknown() { return Dim(); }

  bool is_known() const { return value >= 0; }
  bool is_symbolic() const { return value < 0 && !symbol.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string to_string() const;  // "3", "batch", "?"
};

class Shape {
 public:
  Shape() : rank_known_(false) {}  // unknown rank
  Shape(std::initializer_list<Dim> dims) : dims_(dims), rank_known_(true) {}
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)), rank_known_(true) {}
  static Shape from(const std::vector<int64_t>& dims);
  static Shape unknown_rank() { return Shape(); }
  static Shape scalar() { return Shape(std::vector<Dim>{}); }

  bool rank_known() const { return rank_known_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }  // 0 when unknown; check rank_known()
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& dims() { return dims_; }
  const Dim& operator[](size_t i) const { return dims_[i]; }
  Dim& operator[](size_t i) { return dims_[i]; }

  bool is_static() const;                       // rank and every dim known
  std::optional<std::vector<int64_t>> to_static() const;
  std::optional<int64_t> numel() const;        // when static
  bool operator==(const Shape& o) const { return rank_known_ == o.rank_known_ && dims_ == o.dims_; }
  std::string to_string() const;               // "[batch, 3, 224, 224]", "[?]" ..., "<unknown rank>"

 private:
  std::vector<Dim> dims_;
  bool rank_known_;
};

// "[2, 3]" for concrete shapes.
std::string shape_to_string(const std::vector<int64_t>& dims);
int64_t shape_numel(const std::vector<int64_t>& dims);
// Row-major strides (in elements) for a shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

}  // namespace hodu
