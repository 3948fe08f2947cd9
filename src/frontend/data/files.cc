// Training data files: .npz archives (formats/tensor_io) and numeric CSV.
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "formats/tensor_io.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/data.h"

namespace hodu::eager::data {

std::map<std::string, Tensor> load_npz(const std::string& path) {
  HODU_CHECK(tensor_format_from_path(path) == TensorFormat::Npz, ErrorCode::InvalidArgument,
             "load_npz: {} is not a .npz file", path);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : read_tensor_file(path)) out[name] = make_tensor(t);
  return out;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  HODU_CHECK(tensor_format_from_path(path) == TensorFormat::Npz, ErrorCode::InvalidArgument,
             "save_npz: {} is not a .npz file", path);
  hodu::NamedTensors ts;
  for (const auto& [name, t] : arrays) ts.emplace_back(name, kernels::contiguous(core(t, "save_npz")));
  write_tensor_file(path, ts);
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  if (b == std::string::npos) return "";
  std::string r = s.substr(b, e - b + 1);
  if (r.size() >= 2 && r.front() == '"' && r.back() == '"') r = r.substr(1, r.size() - 2);
  return r;
}

std::vector<std::string> split(const std::string& line, char delim) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    if (c == delim && !quoted) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::pair<int64_t, std::vector<std::string>>> rows;  // (line number, fields)
};

Csv read(const std::string& path, const CsvOptions& o) {
  std::ifstream f(path);
  HODU_CHECK(f.good(), ErrorCode::Io, "read_csv: cannot open {}", path);
  Csv csv;
  std::string line;
  int64_t lineno = 0;
  bool first = true;
  while (std::getline(f, line)) {
    ++lineno;
    if (trim(line).empty()) continue;
    auto fields = split(line, o.delimiter);
    if (first && o.header) csv.header = fields;
    else csv.rows.emplace_back(lineno, std::move(fields));
    first = false;
  }
  return csv;
}

}  // namespace

std::vector<std::string> csv_columns(const std::string& path, const CsvOptions& options) {
  return read(path, options).header;
}

Tensor read_csv(const std::string& path, const CsvOptions& o) {
  Csv csv = read(path, o);
  const size_t width = o.header ? csv.header.size() : (csv.rows.empty() ? 0 : csv.rows[0].second.size());
  std::vector<size_t> cols;
  if (o.columns.empty()) {
    for (size_t i = 0; i < width; ++i) cols.push_back(i);
  } else {
    HODU_CHECK(o.header, ErrorCode::InvalidArgument, "read_csv {}: columns chosen by name need a header", path);
    for (const auto& name : o.columns) {
      auto it = std::find(csv.header.begin(), csv.header.end(), name);
      HODU_CHECK(it != csv.header.end(), ErrorCode::InvalidArgument, "read_csv {}: no column '{}' in the header", path,
                 name);
      cols.push_back(static_cast<size_t>(it - csv.header.begin()));
    }
  }
  hodu::Tensor out = kernels::empty(DType::F64, {static_cast<int64_t>(csv.rows.size()), static_cast<int64_t>(cols.size())});
  double* p = static_cast<double*>(out.raw_data());
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const auto& [lineno, fields] = csv.rows[r];
    HODU_CHECK(fields.size() == width, ErrorCode::InvalidArgument, "read_csv {}:{}: {} values, expected {}", path, lineno,
               fields.size(), width);
    for (size_t c = 0; c < cols.size(); ++c) {
      const std::string& s = fields[cols[c]];
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(s.c_str(), &end);
      HODU_CHECK(!s.empty() && end == s.c_str() + s.size(), ErrorCode::InvalidArgument,
                 "read_csv {}:{}: column {} ('{}') is not a number", path, lineno, cols[c] + 1, s);
      p[r * cols.size() + c] = v;
    }
  }
  return make_tensor(kernels::cast(out, o.dtype));
}

}  // namespace hodu::eager::data
