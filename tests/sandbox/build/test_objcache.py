"""kevin.sandbox.build.objcache: the shim that compiles each distinct main.cpp once across build directories.

The shim is driven as torch's ninja file drives ``$CXX``, with a fake compiler that counts its calls (fast and
exact); one test uses the real compiler on a tiny unit. The end-to-end use by a real ``load_inline`` build is
in test_pch.py (``test_a_second_build_of_the_same_main_cpp_is_served_from_the_object_cache``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from kevin.sandbox.build import objcache as _objcache

FAKE = textwrap.dedent("""\
    import hashlib, os, sys, time
    argv = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(" ".join(argv) + "\\n")
    if "-c" not in argv:
        sys.exit(0)
    src, obj, dep = argv[argv.index("-c") + 1], argv[argv.index("-o") + 1], argv[argv.index("-MF") + 1]
    text = open(src).read()
    if "FAIL" in text:
        sys.exit(1)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    open(obj, "wb").write(b"OBJ " + hashlib.sha256(text.encode() + " ".join(argv[argv.index("-o") + 2:]).encode()).digest())
    extra = os.environ.get("FAKE_DEP") or (os.path.join(os.path.dirname(src), "local.h") if "LOCAL" in text
                                           else "/usr/include/stdio.h")
    open(dep, "w").write(f"{obj}: {src} \\\\\\n {extra}\\n")
""")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A shim over the fake compiler, its call log and a fresh object cache."""
    fake = tmp_path / "fake-cxx"
    fake.write_text(f"#!{sys.executable}\n" + FAKE)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    shim = _objcache.shim(str(tmp_path / "cache"))
    monkeypatch.setenv(_objcache.REAL_CXX, str(fake))
    monkeypatch.setenv(_objcache.CACHE, str(tmp_path / "cache" / "obj"))
    monkeypatch.setenv(_objcache.ROOTS, "/usr")
    monkeypatch.setenv(_objcache.SALT, "torch-x")
    monkeypatch.setenv("FAKE_LOG", str(log))
    return {"shim": shim, "log": log, "root": tmp_path}


def compile_in(env: dict, name: str, source: str, flags: tuple[str, ...] = ("-O2",)) -> subprocess.CompletedProcess:
    """Write ``<root>/<name>/main.cpp`` and compile it there as ninja would: cwd = the build directory."""
    build = env["root"] / name
    build.mkdir(exist_ok=True)
    (build / "main.cpp").write_text(source)
    argv = [env["shim"], "-MMD", "-MF", "main.o.d", *flags, "-c", str(build / "main.cpp"), "-o", "main.o", "-fPIC"]
    return subprocess.run(argv, cwd=build, capture_output=True, text=True)


def compiles(env: dict) -> int:
    return sum(" -c " in line for line in env["log"].read_text().splitlines())


def compiled_twice(env: dict, source: str, flags: tuple[str, ...] = ("-O2",)) -> bool:
    """Whether the same unit in two build directories ran the real compiler twice (was not stored)."""
    before = compiles(env)
    compile_in(env, "a", source, flags)
    compile_in(env, "b", source, flags)
    return compiles(env) - before == 2


def test_the_same_unit_in_a_second_build_directory_is_served_without_compiling(env):
    assert compile_in(env, "a", "int f();").returncode == 0
    assert compile_in(env, "b", "int f();").returncode == 0
    assert compiles(env) == 1
    a, b = env["root"] / "a", env["root"] / "b"
    assert (b / "main.o").read_bytes() == (a / "main.o").read_bytes()


def test_the_served_dependency_file_names_the_second_build_directory(env):
    compile_in(env, "a", "int f();")
    compile_in(env, "b", "int f();")
    deps = _objcache.dependencies((env["root"] / "b" / "main.o.d").read_text())
    assert deps == [str(env["root"] / "b" / "main.cpp"), "/usr/include/stdio.h"]


def test_another_flag_compiles_again(env):
    compile_in(env, "a", "int f();", ("-O2",))
    compile_in(env, "b", "int f();", ("-O3",))
    assert compiles(env) == 2


def test_another_source_compiles_again(env):
    compile_in(env, "a", "int f();")
    compile_in(env, "b", "int g();")
    assert compiles(env) == 2


def test_a_failed_compile_is_not_stored(env):
    assert compile_in(env, "a", "FAIL").returncode == 1
    assert compile_in(env, "b", "FAIL").returncode == 1
    assert compiles(env) == 2


def test_a_unit_that_includes_a_header_beside_it_is_compiled_every_time(env):
    # the fake compiler lists <build>/local.h as a dependency: not under a stable root, so never stored
    assert compiled_twice(env, "LOCAL")


def test_a_file_of_another_build_in_the_sandbox_cache_is_never_a_stable_dependency(env, monkeypatch):
    # the cache may sit under a stable root (here the whole tmp dir is one); its files still do not count
    monkeypatch.setenv(_objcache.ROOTS, str(env["root"]))
    monkeypatch.setenv(_objcache.FORBID, str(env["root"] / "cache"))
    monkeypatch.setenv("FAKE_DEP", str(env["root"] / "cache" / "ext" / "other" / "cuda.cu"))
    assert compiled_twice(env, "int f();")


def test_a_relative_include_directory_is_not_stored(env):
    # "-isystem ." is the build directory (ninja's working directory): its files never reach the dependency file
    assert compiled_twice(env, "int f();", ("-isystem", "."))


def test_a_source_with_inline_assembly_is_not_stored(env):
    # an assembler .incbin reads a file that no dependency file names
    assert compiled_twice(env, 'asm(".incbin \\"cuda.cu\\"");')


def test_another_include_search_path_in_the_environment_compiles_again(env, monkeypatch):
    compile_in(env, "a", "int f();")
    monkeypatch.setenv("CPATH", "/usr/include/python3.0")
    compile_in(env, "b", "int f();")
    assert compiles(env) == 2


def test_an_unusable_cache_directory_still_compiles(env, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv(_objcache.CACHE, str(blocker / "obj"))
    assert compile_in(env, "a", "int f();").returncode == 0
    assert compiles(env) == 1


def test_a_call_that_is_not_a_compile_goes_to_the_real_compiler_unchanged(env):
    argv = ["main.o", "cuda.o", "-shared", "-o", "x.so"]
    assert subprocess.run([env["shim"], *argv], cwd=env["root"]).returncode == 0
    assert env["log"].read_text().splitlines() == [" ".join(argv)]


def test_concurrent_identical_compiles_run_the_compiler_once(env, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    procs = []
    for name in "abcd":
        build = env["root"] / name
        build.mkdir()
        (build / "main.cpp").write_text("int f();")
        argv = [env["shim"], "-MMD", "-MF", "main.o.d", "-c", str(build / "main.cpp"), "-o", "main.o"]
        procs.append(subprocess.Popen(argv, cwd=build))
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    assert compiles(env) == 1


def test_without_a_cache_directory_every_call_is_passed_through(env, monkeypatch):
    monkeypatch.delenv(_objcache.CACHE)
    assert compiled_twice(env, "int f();")


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_the_real_compiler_through_the_shim_gives_the_same_object(tmp_path, monkeypatch):
    monkeypatch.setenv(_objcache.REAL_CXX, os.path.realpath(shutil.which("c++")))
    monkeypatch.setenv(_objcache.CACHE, str(tmp_path / "obj"))
    monkeypatch.setenv(_objcache.ROOTS, "/usr")
    shim = _objcache.shim(str(tmp_path))
    objects = []
    for name in ("plain", "a", "b"):
        build = tmp_path / name
        build.mkdir()
        (build / "main.cpp").write_text("#include <vector>\nint f(int n) { return (int)std::vector<int>(n).size(); }\n")
        cxx = os.environ[_objcache.REAL_CXX] if name == "plain" else shim
        argv = [cxx, "-MMD", "-MF", "main.o.d", "-O2", "-c", str(build / "main.cpp"), "-o", "main.o"]
        subprocess.run(argv, cwd=build, check=True)
        objects.append((build / "main.o").read_bytes())
    assert objects[0] == objects[1] == objects[2]
    assert len([f for f in os.listdir(tmp_path / "obj") if f.endswith(".o")]) == 1


def test_preprocessor_and_long_option_spellings_of_a_system_include_directory_are_not_stored(env):
    # each makes "." a system directory, whose headers -MMD leaves out of the dependency file
    for flags in (("--include-directory-after=.",), ("-Wp,-isystem,.",), ("-imultilib", "x")):
        assert compiled_twice(env, "int f();", flags), flags


def test_a_host_dependent_flag_is_not_stored(env):
    assert compiled_twice(env, "int f();", ("-march=native",))
