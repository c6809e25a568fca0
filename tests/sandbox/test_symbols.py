"""kevin.sandbox._symbols: what a built extension may import (its undefined dynamic symbols)."""

from kevin.sandbox import _symbols


def _judge(monkeypatch, symbols, backend):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: list(symbols))
    return _symbols.violations(["/x/ext.so"], backend=backend)


def test_cpu_extension_importing_open_is_rejected(monkeypatch):
    found, checked = _judge(monkeypatch, ["memcpy", "open"], "cpu")
    assert checked and found == ["the built extension ext.so imports open (files, memory mapping, signals, "
                                 "processes and system calls are not allowed)"]


def test_cuda_extension_importing_mmap_is_rejected(monkeypatch):
    found, _ = _judge(monkeypatch, ["__cudaLaunchKernel", "mmap"], "cuda")
    assert len(found) == 1 and "imports mmap" in found[0]


def test_cuda_extension_importing_what_honest_h200_builds_import_passes(monkeypatch):
    # open and syscall: imported by every honest CUDA extension built on the H200 image
    found, checked = _judge(monkeypatch, ["open", "syscall", "ioctl", "__cudaLaunchKernel", "malloc"], "cuda")
    assert checked and found == []


def test_extension_calling_an_aten_compute_op_is_rejected(monkeypatch):
    found, _ = _judge(monkeypatch, ["at::_ops::addmm::call(at::Tensor const&)"], "cuda")
    assert found and "aten.addmm" in found[0]


def test_missing_nm_reports_unchecked(monkeypatch):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: None)
    assert _symbols.violations(["/x/ext.so"], backend="cpu") == ([], False)


def test_imports_the_toolchain_links_into_every_extension_are_not_held_against_it(monkeypatch):
    # a RHEL-style GCC links libstdc++_nonshared.a into every extension, and its code imports open and syscall
    monkeypatch.setattr(_symbols, "toolchain_imports", lambda: frozenset({"open", "syscall"}))
    found, checked = _judge(monkeypatch, ["memcpy", "open", "syscall", "mmap"], "cpu")
    assert checked and len(found) == 1 and "imports mmap" in found[0]


def test_a_linker_script_adds_its_static_archives_and_an_elf_library_none():
    resolve = {"libstdc++_nonshared.a": "/gcc/libstdc++_nonshared.a"}.get
    script = "/* GNU ld script */\nINPUT ( /usr/lib64/libstdc++.so.6 -lstdc++_nonshared /opt/extra.a -lmissing )"
    # -lmissing resolves to nothing and is dropped; the .so.6 is shared, not an archive
    assert _symbols.linker_script_archives(script, resolve) == ["/gcc/libstdc++_nonshared.a", "/opt/extra.a"]
    assert _symbols.linker_script_archives("\x7fELF\x02\x01", resolve) == []


def test_toolchain_imports_are_the_forbidden_functions_its_archives_call(tmp_path):
    import shutil
    import subprocess

    import pytest

    if not (shutil.which("gcc") and shutil.which("ar") and shutil.which("nm")):
        pytest.skip("needs gcc, ar and nm")
    # a fake toolchain: a "compiler" whose libstdc++.so is a linker script adding a static archive whose one
    # object calls open (forbidden) and strlen (allowed)
    (tmp_path / "x.c").write_text("#include <fcntl.h>\n#include <string.h>\n"
                                  "int f(const char* p) { return open(p, 0) + (int)strlen(p); }\n")
    subprocess.run(["gcc", "-c", str(tmp_path / "x.c"), "-o", str(tmp_path / "x.o")], check=True)
    subprocess.run(["ar", "rcs", str(tmp_path / "libfake_nonshared.a"), str(tmp_path / "x.o")], check=True)
    (tmp_path / "libstdc++.so").write_text("INPUT(libstdc++.so.6 -lfake_nonshared)\n")
    cxx = tmp_path / "c++"
    cxx.write_text(f'#!/bin/sh\nname="${{1#-print-file-name=}}"\n[ -e "{tmp_path}/$name" ] && echo "{tmp_path}/$name" '
                   '|| echo "$name"\n')
    cxx.chmod(0o755)
    assert _symbols.toolchain_imports(str(cxx)) == frozenset({"open"})
