"""kevin.sandbox._extension: what the content-addressed load_inline compiles."""

from kevin.sandbox._extension import drop_extension_header

NOTE = "// kevin: <torch/extension.h> dropped (load_inline includes <torch/types.h>)"


def test_cuda_source_is_compiled_without_torch_extension_header():
    src = '#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}'
    assert drop_extension_header(src) == f"{NOTE}\n#include <cuda_runtime.h>\n__global__ void k() {{}}"


def test_quoted_and_indented_spellings_are_dropped_in_every_source_of_a_list():
    out = drop_extension_header(['  # include "torch/extension.h"', "#include <torch/extension.h> // x"])
    assert out == [NOTE, NOTE]


def test_other_headers_and_non_string_sources_are_kept():
    assert drop_extension_header("#include <torch/extension.hpp>") == "#include <torch/extension.hpp>"
    assert drop_extension_header(None) is None
