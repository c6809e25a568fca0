"""kevin.sandbox.static.forbidden: one table of forbidden native APIs, read by the source scan and the symbol check.

For every name of every family: the source scan rejects C++ that uses it (in the forms the table says the scan
looks for), and the symbol check rejects a built library that imports it (as the table spells the import), each
with the family's reason. Where the table says a check does not judge a name, the test does not ask it to. Then the
names the two checks forbade before they shared the table, written out by hand, and the honest code both must let
through.
"""

import re

import pytest

from kevin.sandbox.static import forbidden
from kevin.sandbox.static import symbols as _symbols
from kevin.sandbox.static.source import check_format
from test_static import CPU_CANDIDATE, cuda_candidate, has


def _cpu(extra: str) -> list[str]:
    """The honest CPU ReLU candidate with ``extra`` C++ inserted in its host function."""
    return check_format(CPU_CANDIDATE.replace("    return out;\n}", f"    {extra}\n    return out;\n}}", 1), backend="cpu")


def _imports(monkeypatch, symbols: list[str], backend: str) -> list[str]:
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: list(symbols))
    found, checked = _symbols.violations(["/x/ext.so"], backend=backend)
    assert checked
    return found


def _spellings(name: str) -> list[str]:
    """Concrete names a table spelling stands for: each ``*`` empty and filled, ``**::`` empty and one namespace."""
    return sorted({name.replace("**::", ns).replace("*", fill) for ns in ("", "detail::") for fill in ("", "Ab")})


_USING_STD = "}\nusing namespace std;\nvoid spawn() { "


def _scan_cases():
    for family in forbidden.FAMILIES:
        for api in family.apis:
            for ex in _spellings(api.name):
                if api.scan == forbidden.WORD:
                    yield family, f"auto r = {ex}(0);", ex
                elif api.scan == forbidden.CALL:
                    yield family, f"auto r = {ex}(0);", f"{ex}("
                    yield family, f"auto f = &{ex};", f"&{ex}"
                elif api.scan == forbidden.QUALIFIED:
                    last = ex.rsplit("::", 1)[-1]
                    for ns in ("at::", "torch::", "aten::", "at::internal::", "at :: internal :: "):
                        yield family, f"{ns}{last}([] {{}});", re.sub(r"\s+", " ", f"{ns}{last}")
                elif api.scan == forbidden.PRAGMA:
                    yield family, f"\n#pragma omp {ex}\n    {{ po[0] = 0.0f; }}", f"#pragma omp {ex}"
                    yield family, f'_Pragma("omp {ex}") {{ po[0] = 0.0f; }}', "_Pragma"
                if api.unqualified:
                    bare = ex.rsplit("::", 1)[-1]
                    form = {forbidden.CONSTRUCT: f"{bare} t([] {{}});", forbidden.CALL: f"auto f = {bare}([] {{}});",
                            forbidden.WORD: f"{bare}<void()> job;"}[api.unqualified]
                    yield family, _USING_STD + form, bare
        for header in family.headers:
            yield family, f"\n#include <{header}>\n", header
            if family.in_strings:
                yield family, f'\n#include "{header}"\n', header


SCAN_CASES = list(_scan_cases())


@pytest.mark.parametrize("family, extra, token", SCAN_CASES,
                         ids=[f"{f.key}:{t}:{i}" for i, (f, _, t) in enumerate(SCAN_CASES)])
def test_the_source_scan_rejects_every_name_of_the_table(family, extra, token):
    assert has(_cpu(extra), token, family.reason)


def _symbol_cases():
    for family in forbidden.FAMILIES:
        for api in family.apis:
            for imp in api.symbols:
                for ex in _spellings(imp):
                    symbol = f"{ex}(int)" if "::" in ex else ex
                    yield family, api, symbol, ex
                    if family.anywhere:
                        yield family, api, f"c10::{symbol}", f"c10::{ex}"
                    elif "::" in ex:
                        yield family, api, f"vtable for {ex}", f"vtable for {ex}"


SYMBOL_CASES = list(_symbol_cases())


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("family, api, symbol, bare", SYMBOL_CASES,
                         ids=[f"{f.key}:{s}" for f, _, s, _ in SYMBOL_CASES])
def test_the_symbol_check_rejects_every_import_of_the_table(monkeypatch, backend, family, api, symbol, bare):
    found = _imports(monkeypatch, [symbol, "memcpy"], backend)
    if backend == "cuda" and not api.cuda:
        assert found == []  # honest CUDA builds import it
        return
    assert has(found, f"imports {bare} ", family.reason), found
    if re.match(r"cuda[A-Z]", bare):
        assert has(found, f"imports {bare} from the CUDA runtime")
    elif re.match(r"cu[A-Z]", bare):
        assert has(found, f"imports {bare} from the CUDA driver")


def test_every_name_has_a_check_and_every_difference_a_note():
    for family in forbidden.FAMILIES:
        assert family.reason and "\n" not in family.reason and family.apis
        for api in family.apis:
            assert api.scan or api.symbol, api.name
            if api.scan is None or not api.symbol or not api.cuda or api.import_allows:
                assert api.note, f"{api.name}: the checks differ and the table does not say why"


def test_every_message_of_a_family_is_one_short_line():
    longest = max(len(f.reason) for f in forbidden.FAMILIES)
    v = check_format(cuda_candidate(cuda_extra="cudaStreamCreateWithFlags(&s, 0); cudaDeviceSetLimit(l, 0);"))
    assert longest <= 150 and v and all("\n" not in m and len(m) <= 220 for m in v)


# --- what the checks forbade before they read one table, written out by hand ---------------------------------

# Each was rejected by the source scan in this spelling.
SCANNED_BEFORE = """
cudaStreamCreate(&s) cudaStreamCreateWithPriority(&s,0,0) getStreamFromPool() getStreamFromExternal(s,0)
cudaStreamBeginCapture(s,0) cudaGraphLaunch(g,s) cudaGraphicsMapResources(1,&r,s) cudaEventDisableTiming
cudaLaunchHostFunc(s,f,0) cudaStreamAddCallback(s,f,0,0) cudaExecutionCtxGetDevice(c) cuStreamCreate(&s,0)
cuStreamBeginCapture_v2(s,0) cuGraphLaunch(g,s) cuLaunchHostFunc_ptsz(s,f,0) cuStreamAddCallback(s,f,0,0)
cuCtxCreate_v4(&c,0,0,d) cuGreenCtxCreate(&c,r,d,0) cuGetProcAddress_v2("x",&p,0,0,0) cudaGetDriverEntryPoint("x",&p,0)
cudaStreamAttributeAccessPolicyWindow attr.accessPolicyWindow cudaAccessPropertyPersisting
cudaLimitPersistingL2CacheSize cudaCtxResetPersistingL2Cache() cudaDeviceSetLimit(l,0) cudaStreamSetAttribute(s,a,&v)
cudaAccessPolicyWindow std::thread(f) std::jthread(f) std::async(f) std::packaged_task<void()>
pthread_create(&t,0,f,0) thrd_create(&t,f,0) vfork() dlopen("x",1) dlsym(h,"x") fork() system("x") popen("x","r")
execl("x",0) execlp("x",0) execle("x",0) execv("x",a) execvp("x",a) execve("x",a,e)
c10::ThreadPool c10::TaskThreadPool at::PTThreadPool at::intraop_launch(f) at::internal::launch_no_thread_state(f)
at::set_num_threads(1) at::set_num_interop_threads(1) omp_set_num_threads(1) omp_set_dynamic(0)
at::internal::_get_intraop_pool() at::get_thread_pool() at::launch(f) torch::launch(f) aten::launch(f)
mmap(0,1,0,0,-1,0) mmap64(0,1,0,0,-1,0) munmap(p,1) mprotect(p,1,0) mremap(p,1,2,0) madvise(p,1,0)
userfaultfd(0) sigaction(11,&a,0) sigset(11,h) sigsetjmp(b,1) siglongjmp(b,1) torch::from_blob(p,{1}) shm_open("x",0,0)
memfd_create("x",0) syscall(39) SYS_getpid __NR_getpid signal(11,h) &signal
fopen("x","r") fopen64("x","r") freopen("x","r",f) fdopen(1,"r") openat(0,"x",0) creat("x",0) unlink("x")
opendir("x") readlink("x",b,1) open("x",0) &open rename("x","y") &rename std::ifstream std::ofstream std::fstream
std::filesystem::remove("x") ifstream ofstream fstream
TORCH_LIBRARY_IMPL(aten,CPU,m) c10::Storage StorageImpl c10::SetAllocator(a) c10::GetAllocator(d) DataPtr
t.unsafeGetTensorImpl()->set_data_ptr_noswap(p) at::RecordFunction at::addGlobalCallback(c)
at::addThreadLocalCallback(c) c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(t)
AllocatorTraceTracker OutOfMemoryObserver recordHistory(true) c10::ThreadLocalDebugInfo c10::DebugInfoGuard
c10::MemoryReportingInfoBase reportMemoryUsage CUDAAllocator
""".split()
INCLUDED_BEFORE = ["fstream", "filesystem", "fcntl.h", "sys/mman.h", "signal.h", "csignal", "dirent.h", "unistd.h",
                   "c10/cuda/CUDACachingAllocator.h", "torch/library.h"]


@pytest.mark.parametrize("code", SCANNED_BEFORE)
def test_the_source_scan_still_rejects_what_it_rejected_before(code):
    assert _cpu(f"auto r = {code};") != []


@pytest.mark.parametrize("header", INCLUDED_BEFORE)
def test_the_source_scan_still_rejects_the_headers_it_rejected_before(header):
    assert _cpu(f"\n#include <{header}>\n") != []


@pytest.mark.parametrize("pragma", ["#pragma omp task", "#pragma omp taskloop", "#pragma omp target",
                                    "#pragma omp parallel for nowait", '_Pragma("omp task")'])
def test_the_source_scan_still_rejects_the_pragmas_it_rejected_before(pragma):
    assert has(_cpu(f"\n{pragma}\n    for (int i = 0; i < 4; ++i) po[i] = 0.0f;"), forbidden.POOLS.reason)


# Each was rejected by the symbol check, on both backends unless marked: C names and demangled C++ names.
LIBC_BEFORE = """
fopen fopen64 freopen fdopen open open64 openat openat64 creat creat64 unlink unlinkat rename renameat
renameat2 opendir readlink readlinkat mmap mmap64 mremap mprotect madvise sigaction signal sigset bsd_signal
syscall pthread_create dlopen dlmopen dlsym dlvsym fork vfork clone execve execv execvp execvpe execl execlp
execle system popen posix_spawn posix_spawnp shm_open memfd_create socket connect ptrace process_vm_readv
process_vm_writev prctl setrlimit
""".split()
HONEST_CUDA = {"open", "syscall"}
IMPORTED_BEFORE = LIBC_BEFORE + """
cuStreamCreate cuStreamCreateWithPriority cuStreamBeginCapture_v2 cuGraphLaunch cuLaunchHostFunc_ptsz
cuStreamAddCallback cuCtxCreate_v4 cuGreenCtxCreate cuGetProcAddress_v2 cuCtxResetPersistingL2Cache
cuStreamSetAttribute cuCtxSetLimit cudaStreamCreateWithFlags cudaStreamBeginCapture cudaGraphLaunch_ptsz
cudaLaunchHostFunc cudaStreamAddCallback cudaExecutionCtxStreamCreate cudaGetDriverEntryPoint
cudaCtxResetPersistingL2Cache cudaStreamSetAttribute cudaDeviceSetLimit
omp_set_num_threads GOMP_task GOMP_taskloop GOMP_target_ext __kmpc_omp_task_alloc __kmpc_taskloop
__kmpc_omp_target_task_alloc thrd_create
""".split() + [
    "std::thread::_M_start_thread(std::unique_ptr<std::thread::_State>, void (*)())", "std::thread::detach()",
    "std::jthread::request_stop()", "std::__future_base::_State_baseV2::_M_do_set()",
    "at::launch(std::function<void ()>)", "at::intraop_launch(std::function<void ()>)",
    "at::intraop_launch_future(std::function<void ()>)", "at::internal::launch_no_thread_state(std::function<void ()>)",
    "c10::ThreadPool::run(std::function<void ()>)", "c10::TaskThreadPoolBase::~TaskThreadPoolBase()",
    "vtable for c10::ThreadPool", "typeinfo for c10::TaskThreadPool", "at::PTThreadPool::PTThreadPool(int, int)",
    "at::set_num_threads(int)", "at::set_num_interop_threads(int)", "at::get_thread_pool()",
    "at::internal::_get_intraop_pool()",
    "c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(std::function<void ()>)",
    "c10::cuda::CUDACachingAllocator::attachOutOfMemoryObserver(std::function<void ()>)",
    "c10::cuda::CUDACachingAllocator::recordHistory(bool)", "c10::CachingAllocator::setAllocatorSettings(int)",
    "c10::cuda::CUDACachingAllocator::CUDAAllocator::attachAllocatorTraceTracker(int)",
    "c10::SetAllocator(c10::DeviceType, c10::Allocator*, unsigned char)", "c10::SetCPUAllocator(c10::Allocator*, unsigned char)",
    "at::addGlobalCallback(at::RecordFunctionCallback)", "at::addThreadLocalCallback(at::RecordFunctionCallback)",
    "c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind, std::shared_ptr<c10::DebugInfoBase>)",
    "c10::DebugInfoGuard::DebugInfoGuard(c10::DebugInfoKind, std::shared_ptr<c10::DebugInfoBase>)",
    "c10::MemoryReportingInfoBase::MemoryReportingInfoBase()", "c10::reportMemoryUsageToProfiler(void*, long)",
    "typeinfo for c10::OutOfMemoryObserver",
]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("symbol", IMPORTED_BEFORE)
def test_the_symbol_check_still_rejects_what_it_rejected_before(monkeypatch, backend, symbol):
    found = _imports(monkeypatch, [symbol], backend)
    assert found == [] if backend == "cuda" and symbol in HONEST_CUDA else len(found) >= 1, found


# --- honest code both checks let through ----------------------------------------------------------------------


@pytest.mark.parametrize("extra", [
    "unsigned n = std::thread::hardware_concurrency(); std::thread::id me; (void)n;",
    "int a1 = at::get_num_threads(); int a2 = omp_get_max_threads(); (void)a1; (void)a2;",
    "at::parallel_for(0, 4, 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) po[i] = 0.0f; });",
    "\n#pragma omp parallel for\n    for (int i = 0; i < 4; ++i) po[i] = 0.0f;",
    "auto y = x_c.clone(); (void)y;",  # clone: the symbol check's alone (the libc call); a tensor copy here
    "int get_pool_size = 4, thread_count = 2, opened = 1, renamed = 0; (void)get_pool_size; (void)thread_count; "
    "(void)opened; (void)renamed;",
    "}\nstatic void launch(float* p) { p[0] = 0.0f; }\nvoid unused(float* p) { launch(p);",  # a user's own launch
])
def test_honest_cpu_code_passes_the_scan(extra):
    assert _cpu(extra) == []


def test_honest_cuda_code_passes_the_scan():
    extra = "__syncthreads(); dim3 threads(256); dim3 grid(16, 16); int thread_count = threadIdx.x; (void)thread_count;"
    assert check_format(cuda_candidate(cuda_extra=extra)) == []


def test_a_thread_is_still_a_thread_after_using_namespace_std():
    assert has(_cpu(_USING_STD + "thread t([] {}); t.join();"), "`thread t(`", forbidden.PROCESSES.reason)


def test_honest_imports_pass_the_symbol_check(monkeypatch):
    honest = ["open", "syscall", "ioctl", "close", "malloc", "pthread_mutex_lock", "pthread_once", "__cudaLaunchKernel",
              "cudaGetLastError", "cudaGetDevice", "cudaGetDeviceProperties", "cudaFuncSetAttribute",
              "cudaGraphicsMapResources", "c10::cuda::getStreamFromPool(bool, signed char)",
              "c10::cuda::getCurrentCUDAStream(signed char)", "at::get_num_threads()", "at::internal::set_thread_num(int)",
              "GOMP_parallel", "omp_get_num_threads", "omp_get_thread_num"]
    assert _imports(monkeypatch, honest, "cuda") == []
    assert _imports(monkeypatch, [s for s in honest if s not in HONEST_CUDA], "cpu") == []


# Leaving the process group (which timings stop and kills reach), or raising the kernel's priority above the
# compilers the reference was timed beside.
GROUP_AND_PRIORITY = ["setsid", "setpgid", "setpgrp", "setpriority", "nice", "sched_setscheduler", "sched_setparam",
                      "sched_setattr", "pthread_setschedparam", "pthread_setschedprio"]


@pytest.mark.parametrize("name", GROUP_AND_PRIORITY)
def test_the_source_scan_rejects_leaving_the_group_or_raising_the_priority(name):
    assert has(_cpu(f"{name}(0, 0);"), forbidden.SOCKETS.reason)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("name", GROUP_AND_PRIORITY)
def test_the_symbol_check_rejects_leaving_the_group_or_raising_the_priority(monkeypatch, backend, name):
    assert len(_imports(monkeypatch, [name], backend)) == 1


def test_a_variable_named_nice_is_not_a_call():
    assert _cpu("float nice = 1.0f; (void)nice;") == []
