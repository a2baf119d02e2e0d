"""gpu_layers.nvcc: the sandboxed CUDA -> PTX compiler."""
import re
import tempfile

import pytest

from gpu_layers.errors import CompileError
from gpu_layers.nvcc import (
    ALLOWED_HEADERS,
    check_source,
    compile_cuda,
    find_nvcc,
    ptx_version_for_driver,
)

SIMPLE = """
extern "C" __global__ void add_one(int n, int *a)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] += 1;
}
"""


def _refused(source):
    with pytest.raises(CompileError) as ei:
        compile_cuda(source)
    e = ei.value
    assert "refused" in e.summary
    return "\n".join(e.messages)


def test_nvcc_comes_from_the_pip_package():
    p = find_nvcc()
    assert "site-packages" in str(p) or "dist-packages" in str(p)
    assert p.name == "nvcc"


def test_compiles_a_simple_kernel():
    ptx = compile_cuda(SIMPLE)
    assert re.search(r"^\.version \d+\.\d+", ptx, re.M)
    assert ".target sm_75" in ptx
    assert ".entry add_one(" in ptx
    assert tempfile.gettempdir() + "/qwengpu" not in ptx


def test_allowed_includes_compile():
    src = "#include <cuda_runtime.h>\n#include <stdint.h>\n#  include \"climits\"\n" + SIMPLE
    assert ".entry add_one(" in compile_cuda(src)


def test_arch_is_passed_and_validated():
    assert ".target sm_80" in compile_cuda(SIMPLE, arch="sm_80")
    with pytest.raises(CompileError, match="invalid arch"):
        compile_cuda(SIMPLE, arch="sm_75 -I/etc")


def test_syntax_error_is_readable_and_scrubbed():
    src = 'extern "C" __global__ void k(int *a)\n{\n    a[0] = undefined_name;\n}\n'
    with pytest.raises(CompileError) as ei:
        compile_cuda(src)
    e = ei.value
    text = str(e)
    assert "1 error" in e.summary
    assert any(m.startswith('kernel.cu(3): error: identifier "undefined_name" is undefined') for m in e.messages)
    assert "qwengpu-nvcc" not in text and "/tmp" not in text and "site-packages" not in text


def test_missing_semicolon_message():
    with pytest.raises(CompileError) as ei:
        compile_cuda('__global__ void k(int *a) { int x = 1 a[0] = x; }\n')
    assert any(re.match(r"kernel\.cu\(1\): error: ", m) for m in ei.value.messages)


INCLUDE_VARIANTS = [  # (source, what the refusal must name)
    ('#include "/etc/passwd"\n', "'/etc/passwd'"),
    ("#include </etc/passwd>\n", "'/etc/passwd'"),
    ("  #   include   \"/etc/passwd\"\n", "'/etc/passwd'"),
    ("\t#\tinclude\t</etc/passwd>\n", "'/etc/passwd'"),
    ('#/* comment */include "/etc/passwd"\n', "'/etc/passwd'"),
    ('/* lead */ #include "/etc/passwd"\n', "'/etc/passwd'"),
    ('/* a\n b */ #include "/etc/passwd"\n', "line 2: #include of '/etc/passwd'"),
    ('#incl\\\nude "/etc/passwd"\n', "line 1: #include of '/etc/passwd'"),
    ('#include \\\n "/etc/passwd"\n', "'/etc/passwd'"),
    ('#\\\ninclude "/etc/passwd"\n', "'/etc/passwd'"),
    ('#include \\  \n"/etc/passwd"\n', "'/etc/passwd'"),  # backslash-space-newline continues for gcc
    ('%:include "/etc/passwd"\n', "'/etc/passwd'"),
    ("%: include </etc/passwd>\n", "'/etc/passwd'"),
    ('#include "/etc/passwd"\r\n', "'/etc/passwd'"),
    ('int x;\r#include "/etc/passwd"\r', "line 2: #include of '/etc/passwd'"),
    ('#define F "/etc/passwd"\n#include F\n', "line 2: #include F is not allowed"),
    ("#define F(x) #x\n#include F(/etc/passwd)\n", "#include F(/etc/passwd) is not allowed"),
    ('#include "../../../../etc/passwd"\n', "'../../../../etc/passwd'"),
    ('#include "kernel.cu"\n', "'kernel.cu'"),
    ("#include <stdlib.h>\n", "'stdlib.h'"),
    ('#include_next "/etc/passwd"\n', "#include_next is not allowed"),
    ('#import "/etc/passwd"\n', "#import is not allowed"),
    ('#embed "/etc/passwd"\n', "#embed is not allowed"),
    ('#if __has_include("/etc/passwd")\n#endif\n', "__has_include is not allowed"),
    ("#if __has_include(</etc/passwd>)\nint y;\n#endif\n", "__has_include is not allowed"),
    ("#if defined(__has_include_next)\n#endif\n", "__has_include_next is not allowed"),
    ("int a = 1'0 + '/*';\n#include \"/etc/passwd\"\n// */\n", "line 2: #include of '/etc/passwd'"),
    ('const char *s = R"( " /* )";\n#include "/etc/passwd"\n// */\n', "raw string literals are not allowed"),
    ('#if 0\n#include "/etc/passwd"\n#endif\n', "'/etc/passwd'"),
    ('??=include "/etc/passwd"\n', "trigraphs"),
    ("// comment ??/\n#include \"/etc/passwd\"\n", "trigraphs"),
    ("#define A 1 \\\n  + 2\n#include </etc/hostname>\n", "line 3: #include of '/etc/hostname'"),
]


@pytest.mark.parametrize("src,named", INCLUDE_VARIANTS)
def test_every_include_spelling_is_refused(src, named):
    msg = _refused(src + SIMPLE)
    assert "not allowed" in msg and named in msg, msg


def test_refusal_names_the_include():
    msg = _refused('#include "/etc/passwd"\n' + SIMPLE)
    assert "/etc/passwd" in msg and "line 1" in msg
    msg = _refused("#define F </etc/hostname>\n#include F\n" + SIMPLE)
    assert "#include F" in msg and "line 2" in msg


@pytest.mark.parametrize(
    "src",
    [
        '#pragma GCC dependency "/etc/passwd"\n',
        "#pragma push_macro(\"X\")\n",
        "#pragma GCC system_header\n",
        '_Pragma("GCC dependency \\"/etc/passwd\\"")\n',
        '#define P(x) _Pra ## gma(x)\n',
        '#define P(x) x %:%: y\n',
        '#line 10 "/etc/passwd"\n',
        '# 10 "/etc/passwd"\n',
        "#ident \"x\"\n",
        "#assert machine(x)\n",
        "int a\\u0041;\n",
        "int a;\x00\n",
    ],
)
def test_other_preprocessor_escapes_are_refused(src):
    _refused(src + SIMPLE)


def test_harmless_preprocessing_is_allowed():
    src = (
        "#define N 4 // four\n#define SQ(x) ((x) * (x))\n#define STR(x) #x\n"
        "/* a block\n comment */\n"
        "extern \"C\" __global__ void k(int *a) {\n"
        "  int big = 1'000'000;\n  const char *s = \"#include \\\"x\\\" /* not a comment\";\n  char q = '\\'';\n"
        "#if N > 2\n#pragma unroll 2\n#endif\n"
        "  for (int i = 0; i < N; i++) a[i] = SQ(i) + big + q + (s[0] == '#');\n}\n"
    )
    assert check_source(src) == []
    assert ".entry k(" in compile_cuda(src)


def test_allow_list_is_small_and_documented():
    assert "cuda_runtime.h" in ALLOWED_HEADERS and "stdint.h" in ALLOWED_HEADERS
    assert "stdio.h" not in ALLOWED_HEADERS and "stdlib.h" not in ALLOWED_HEADERS
    assert len(ALLOWED_HEADERS) < 20


def test_timeout_kills_nvcc():
    with pytest.raises(CompileError, match=r"timed out after 0\.05 s"):
        compile_cuda(SIMPLE, timeout_s=0.05)


def test_output_cap():
    with pytest.raises(CompileError, match="PTX output too large"):
        compile_cuda(SIMPLE, max_output_bytes=100)


def test_source_cap():
    with pytest.raises(CompileError, match="source too large"):
        compile_cuda(SIMPLE + "//" + "x" * 300_000 + "\n")


def test_diagnostics_are_capped():
    body = "".join(f"    a[{i}] = undefined_{i};\n" for i in range(300))
    src = '__global__ void k(int *a)\n{\n' + body + "}\n"
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, max_diagnostic_bytes=2000)
    e = ei.value
    assert e.messages[-1].startswith("...")
    assert sum(len(m) for m in e.messages) < 2500


def test_ptx_version_for_driver():
    ptx = compile_cuda(SIMPLE)
    low = ptx_version_for_driver(ptx, "9.0")
    assert re.search(r"^\.version 9\.0$", low, re.M)
    assert low.replace(".version 9.0", "") == re.sub(r"\.version \d+\.\d+", "", ptx, count=1)


def test_resource_limits_fail_cleanly():
    with pytest.raises(CompileError, match="nvcc"):
        compile_cuda(SIMPLE, max_memory_bytes=30 << 20)
    with pytest.raises(CompileError, match="File size limit|size limit|File too large"):
        compile_cuda(SIMPLE, max_file_bytes=100_000)


def test_parallel_compiles_do_not_interfere():
    from concurrent.futures import ThreadPoolExecutor

    srcs = [SIMPLE.replace("add_one", f"add_one_{i}") for i in range(4)]
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(compile_cuda, srcs))
    for i, ptx in enumerate(outs):
        assert f".entry add_one_{i}(" in ptx
