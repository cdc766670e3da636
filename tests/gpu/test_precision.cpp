// The names of the GPU model's precisions (model/precision.h: parse_precision, precision_name,
// precision_names), the values of --precision. Host code only, in gpu_tests beside the kernels
// that take a Precision.
#include <stdexcept>
#include <string>
#include <vector>

#include "model/precision.h"
#include "tests/catch.h"

using namespace vitddp;

TEST_CASE("precision: names parse and print", "[gpu][precision]") {
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK(parse_precision("tf32") == Precision::tf32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
  CHECK(precision_names() == std::vector<std::string>{"fp32", "tf32", "bf16"});
  CHECK_THROWS_AS(parse_precision("fp16"), std::invalid_argument);
  CHECK_THROWS_AS(parse_precision("BF16"), std::invalid_argument);
}
