// The _hodu extension module: the C++ side of the hodu Python package.
#include "bindings.h"

PYBIND11_MODULE(_hodu, m) {
  m.doc() = "hodu's C++ core (use the hodu package, not this module directly)";
  m.attr("__version__") = HODU_VERSION;
  hodu::python::bind_errors(m);
  hodu::python::bind_tensor(m);
  hodu::python::bind_models(m);
  hodu::python::bind_session(m);
  hodu::python::bind_runtime(m);
  hodu::python::bind_compiler(m);
  hodu::python::bind_package(m);
  hodu::python::bind_training(m);
}
