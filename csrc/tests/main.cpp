// The doctest runner of the C++ unit tests (CMakeLists.txt, POINCARE_BUILD_TESTS; ctest runs each
// TEST_CASE as a test of its own).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
