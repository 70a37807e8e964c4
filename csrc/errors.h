// Exception types of the core. bindings.cpp maps each to one Python exception, so the core can say
// precisely what went wrong without knowing about Python.
#pragma once

#include <stdexcept>
#include <string>

namespace poincare {

// Bad user input (shape, value, parameter): becomes ValueError.
struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// An id that is not in the index: becomes KeyError.
struct KeyNotFound : std::out_of_range {
  using std::out_of_range::out_of_range;
};

// A file that is not a valid saved index (foreign, truncated, corrupted, wrong version): becomes
// poincare_index.IndexFormatError (a ValueError).
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The operating system refused a read or write: becomes OSError.
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace poincare
