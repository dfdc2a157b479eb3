"""Names a kernel or dispatch may not have, as data; `gemmgen.names` decides.

A kernel's name becomes a Python function and module, a C++ `extern "C"`
kernel entry point (a link symbol shared with every library a program links),
C++ launcher functions and file names. Each set below is one reason a name
cannot be used; the sets are static, so validation gives the same answer on
every machine and never renders anything.

`GENERATED` lists what the generated code itself defines or refers to. It
is kept honest by `tests/language/test_names.py`, which renders every kind of kernel
and fails, naming the identifier, when generated code defines or uses a
name that `gemmgen.names.name_problem` accepts. The other sets come from
the languages and libraries generated code is compiled and linked with.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Python keywords and soft keywords (keyword.kwlist and keyword.softkwlist of
# Python 3.10 to 3.13). tests/language/test_names.py checks that the running Python's
# lists are included.
PYTHON_KEYWORDS = _words("""
False None True and as assert async await break class continue def del elif else
except finally for from global if import in is lambda nonlocal not or pass raise
return try while with yield
_ case match type
""")

# Python's builtins without a leading underscore (dir(builtins), Python 3.10 to
# 3.13); a generated module that defined one would shadow it for its own code.
PYTHON_BUILTINS = _words("""
ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup
BlockingIOError BrokenPipeError BufferError BytesWarning ChildProcessError
ConnectionAbortedError ConnectionError ConnectionRefusedError ConnectionResetError
DeprecationWarning EOFError Ellipsis EncodingWarning EnvironmentError Exception
ExceptionGroup False FileExistsError FileNotFoundError FloatingPointError
FutureWarning GeneratorExit IOError ImportError ImportWarning IndentationError
IndexError InterruptedError IsADirectoryError KeyError KeyboardInterrupt
LookupError MemoryError ModuleNotFoundError NameError None NotADirectoryError
NotImplemented NotImplementedError OSError OverflowError PendingDeprecationWarning
PermissionError ProcessLookupError PythonFinalizationError RecursionError
ReferenceError ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration
StopIteration SyntaxError SyntaxWarning SystemError SystemExit TabError
TimeoutError True TypeError UnboundLocalError UnicodeDecodeError
UnicodeEncodeError UnicodeError UnicodeTranslateError UnicodeWarning UserWarning
ValueError Warning ZeroDivisionError
abs aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr
classmethod compile complex copyright credits delattr dict dir divmod enumerate
eval exec exit filter float format frozenset getattr globals hasattr hash help
hex id input int isinstance issubclass iter len license list locals map max
memoryview min next object oct open ord pow print property quit range repr
reversed round set setattr slice sorted staticmethod str sum super tuple type
vars zip
""")

# C++23 keywords and alternative tokens, C23 keywords C++ lacks, identifiers
# with a special meaning, and the names C and C++ give a meaning outside any
# header (`main`, the `std` and `posix` namespaces).
# Rust keywords: strict, reserved and weak (the Reference, editions 2015 to
# 2024). A kernel or dispatcher name is a module of the generated Rust crate.
RUST_KEYWORDS = _words("""
as async await break const continue crate dyn else enum extern false fn for gen if
impl in let loop match mod move mut pub ref return self Self static struct super
trait true type unsafe use where while abstract become box do final macro override
priv try typeof unsized virtual yield macro_rules raw safe union
""")

CXX_KEYWORDS = _words("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char
char8_t char16_t char32_t class compl concept const consteval constexpr constinit
const_cast continue co_await co_return co_yield decltype default delete do double
dynamic_cast else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not not_eq nullptr operator or
or_eq private protected public register reinterpret_cast requires return short
signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual
void volatile wchar_t while xor xor_eq
restrict typeof typeof_unqual
final override import module transaction_safe transaction_safe_dynamic
main std posix
""")


def _math(names: str) -> str:
    """Each <math.h> function with its float (`f`) and long double (`l`) forms."""
    return " ".join(f"{n} {n}f {n}l" for n in names.split())


def _stdint() -> str:
    out = []
    for bits in (8, 16, 32, 64):
        for kind in ("", "_least", "_fast"):
            out += [f"int{kind}{bits}_t", f"uint{kind}{bits}_t"]
            up = kind.upper()
            out += [f"INT{up}{bits}_MIN", f"INT{up}{bits}_MAX", f"UINT{up}{bits}_MAX"]
        out += [f"INT{bits}_C", f"UINT{bits}_C"]
        for conv in "diouxX":
            for kind in ("", "LEAST", "FAST"):
                out.append(f"PRI{conv}{kind}{bits}")
                if conv != "X":
                    out.append(f"SCN{conv}{kind}{bits}")
    for conv in "diouxX":
        out += [f"PRI{conv}MAX", f"PRI{conv}PTR"]
        if conv != "X":
            out += [f"SCN{conv}MAX", f"SCN{conv}PTR"]
    return " ".join(out)


# The C standard library's external identifiers, types and macros (C17, by
# header, with C23's additions where they are plain names). A kernel entry
# point is an `extern "C"` symbol, so one named `exit` or `memcpy` would
# replace or clash with the C library's function at link time.
C_LIBRARY = _words(f"""
assert static_assert NDEBUG
cabs cacos cacosh carg casin casinh catan catanh ccos ccosh cexp cimag clog conj
cpow cproj creal csin csinh csqrt ctan ctanh
{_math("cabs cacos cacosh carg casin casinh catan catanh ccos ccosh cexp cimag clog conj")}
{_math("cpow cproj creal csin csinh csqrt ctan ctanh")}
complex imaginary I CMPLX CMPLXF CMPLXL
isalnum isalpha isblank iscntrl isdigit isgraph islower isprint ispunct isspace
isupper isxdigit tolower toupper
errno EDOM EILSEQ ERANGE
fenv_t fexcept_t feclearexcept fegetexceptflag feraiseexcept fesetexceptflag
fetestexcept fegetround fesetround fegetenv feholdexcept fesetenv feupdateenv
FE_DIVBYZERO FE_INEXACT FE_INVALID FE_OVERFLOW FE_UNDERFLOW FE_ALL_EXCEPT
FE_DOWNWARD FE_TONEAREST FE_TOWARDZERO FE_UPWARD FE_DFL_ENV
FLT_ROUNDS FLT_EVAL_METHOD FLT_HAS_SUBNORM DBL_HAS_SUBNORM LDBL_HAS_SUBNORM
FLT_RADIX FLT_MANT_DIG DBL_MANT_DIG LDBL_MANT_DIG FLT_DECIMAL_DIG DBL_DECIMAL_DIG
LDBL_DECIMAL_DIG DECIMAL_DIG FLT_DIG DBL_DIG LDBL_DIG FLT_MIN_EXP DBL_MIN_EXP
LDBL_MIN_EXP FLT_MIN_10_EXP DBL_MIN_10_EXP LDBL_MIN_10_EXP FLT_MAX_EXP DBL_MAX_EXP
LDBL_MAX_EXP FLT_MAX_10_EXP DBL_MAX_10_EXP LDBL_MAX_10_EXP FLT_MAX DBL_MAX
LDBL_MAX FLT_EPSILON DBL_EPSILON LDBL_EPSILON FLT_MIN DBL_MIN LDBL_MIN
FLT_TRUE_MIN DBL_TRUE_MIN LDBL_TRUE_MIN
imaxdiv_t imaxabs imaxdiv strtoimax strtoumax wcstoimax wcstoumax
CHAR_BIT SCHAR_MIN SCHAR_MAX UCHAR_MAX CHAR_MIN CHAR_MAX MB_LEN_MAX SHRT_MIN
SHRT_MAX USHRT_MAX INT_MIN INT_MAX UINT_MAX LONG_MIN LONG_MAX ULONG_MAX LLONG_MIN
LLONG_MAX ULLONG_MAX
lconv setlocale localeconv LC_ALL LC_COLLATE LC_CTYPE LC_MONETARY LC_NUMERIC
LC_TIME
float_t double_t HUGE_VAL HUGE_VALF HUGE_VALL INFINITY NAN FP_INFINITE FP_NAN
FP_NORMAL FP_SUBNORMAL FP_ZERO FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMAL FP_ILOGB0
FP_ILOGBNAN MATH_ERRNO MATH_ERREXCEPT math_errhandling fpclassify isfinite isinf
isnan isnormal signbit isgreater isgreaterequal isless islessequal islessgreater
isunordered
{_math("acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2")}
{_math("expm1 frexp ilogb ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt")}
{_math("fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor nearbyint rint lrint")}
{_math("llrint round lround llround trunc fmod remainder remquo copysign nan")}
{_math("nextafter nexttoward fdim fmax fmin fma")}
jmp_buf setjmp longjmp
sig_atomic_t SIG_DFL SIG_ERR SIG_IGN SIGABRT SIGFPE SIGILL SIGINT SIGSEGV SIGTERM
signal raise
va_list va_arg va_copy va_end va_start
memory_order kill_dependency ATOMIC_FLAG_INIT ATOMIC_VAR_INIT
ATOMIC_BOOL_LOCK_FREE ATOMIC_CHAR_LOCK_FREE ATOMIC_CHAR16_T_LOCK_FREE
ATOMIC_CHAR32_T_LOCK_FREE ATOMIC_WCHAR_T_LOCK_FREE ATOMIC_SHORT_LOCK_FREE
ATOMIC_INT_LOCK_FREE ATOMIC_LONG_LOCK_FREE ATOMIC_LLONG_LOCK_FREE
ATOMIC_POINTER_LOCK_FREE
bool true false
ptrdiff_t size_t max_align_t wchar_t nullptr_t NULL offsetof unreachable
{_stdint()}
intptr_t uintptr_t intmax_t uintmax_t INTPTR_MIN INTPTR_MAX UINTPTR_MAX INTMAX_MIN
INTMAX_MAX UINTMAX_MAX PTRDIFF_MIN PTRDIFF_MAX SIG_ATOMIC_MIN SIG_ATOMIC_MAX
SIZE_MAX WCHAR_MIN WCHAR_MAX WINT_MIN WINT_MAX INTMAX_C UINTMAX_C
FILE fpos_t BUFSIZ EOF FOPEN_MAX FILENAME_MAX L_tmpnam SEEK_CUR SEEK_END SEEK_SET
TMP_MAX stderr stdin stdout remove rename tmpfile tmpnam fclose fflush fopen
freopen setbuf setvbuf fprintf fscanf printf scanf snprintf sprintf sscanf
vfprintf vfscanf vprintf vscanf vsnprintf vsprintf vsscanf fgetc fgets fputc fputs
getc getchar gets putc putchar puts ungetc fread fwrite fgetpos fseek fsetpos ftell
rewind clearerr feof ferror perror
tmpfile_s tmpnam_s fopen_s freopen_s fprintf_s fscanf_s printf_s scanf_s
snprintf_s sprintf_s sscanf_s vfprintf_s vfscanf_s vprintf_s vscanf_s vsnprintf_s
vsprintf_s vsscanf_s gets_s
div_t ldiv_t lldiv_t EXIT_FAILURE EXIT_SUCCESS RAND_MAX MB_CUR_MAX atof atoi atol
atoll strtod strtof strtold strtol strtoll strtoul strtoull rand srand
aligned_alloc calloc free malloc realloc free_sized free_aligned_sized abort
atexit at_quick_exit exit quick_exit getenv system bsearch qsort abs labs llabs
div ldiv lldiv mblen mbtowc wctomb mbstowcs wcstombs memalignment
getenv_s bsearch_s qsort_s wctomb_s mbstowcs_s wcstombs_s constraint_handler_t
set_constraint_handler_s abort_handler_s ignore_handler_s errno_t rsize_t
RSIZE_MAX
noreturn
memcpy memccpy memmove strcpy strncpy strcat strncat memcmp strcmp strcoll strncmp
strxfrm memchr strchr strcspn strpbrk strrchr strspn strstr strtok memset
memset_explicit strerror strlen strdup strndup
memcpy_s memmove_s strcpy_s strncpy_s strcat_s strncat_s strtok_s memset_s
strerror_s strerrorlen_s strnlen_s
thread_local ONCE_FLAG_INIT TSS_DTOR_ITERATIONS cnd_t thrd_t tss_t mtx_t
tss_dtor_t thrd_start_t once_flag mtx_plain mtx_recursive mtx_timed
thrd_timedout thrd_success thrd_busy thrd_error thrd_nomem call_once
cnd_broadcast cnd_destroy cnd_init cnd_signal cnd_timedwait cnd_wait mtx_destroy
mtx_init mtx_lock mtx_timedlock mtx_trylock mtx_unlock thrd_create thrd_current
thrd_detach thrd_equal thrd_exit thrd_join thrd_sleep thrd_yield tss_create
tss_delete tss_get tss_set
CLOCKS_PER_SEC TIME_UTC clock_t time_t timespec tm clock difftime mktime time
timespec_get timespec_getres asctime ctime gmtime localtime strftime gmtime_r
localtime_r asctime_s ctime_s gmtime_s localtime_s timegm
mbstate_t char8_t char16_t char32_t mbrtoc8 c8rtomb mbrtoc16 c16rtomb mbrtoc32
c32rtomb
wint_t WEOF fwprintf fwscanf swprintf swscanf vfwprintf vfwscanf vswprintf
vswscanf vwprintf vwscanf wprintf wscanf fgetwc fgetws fputwc fputws fwide getwc
getwchar putwc putwchar ungetwc wcstod wcstof wcstold wcstol wcstoll wcstoul
wcstoull wcscpy wcsncpy wmemcpy wmemmove wcscat wcsncat wcscmp wcscoll wcsncmp
wcsxfrm wmemcmp wcschr wcscspn wcspbrk wcsrchr wcsspn wcsstr wcstok wmemchr wcslen
wmemset wcsftime btowc wctob mbsinit mbrlen mbrtowc wcrtomb mbsrtowcs wcsrtombs
wctrans_t wctype_t iswalnum iswalpha iswblank iswcntrl iswdigit iswgraph iswlower
iswprint iswpunct iswspace iswupper iswxdigit iswctype wctype towlower towupper
towctrans wctrans
""")

# POSIX and common C library extensions declared by the headers the CPU
# emulation compiles kernels with (<unistd.h>, <signal.h>, <pthread.h>,
# <sys/mman.h>, <ucontext.h>, <dlfcn.h>, <link.h>, <strings.h>) and exported by
# the C library every program links: the same link-symbol clash as C_LIBRARY.
POSIX = _words("""
access alarm brk chdir chown chroot close confstr creat crypt dup dup2 dup3
environ execl execle execlp execv execve execvp execvpe _exit faccessat fchdir
fchown fdatasync fexecve fork fpathconf fsync ftruncate getcwd getdomainname
getegid geteuid getgid getgroups gethostid gethostname getlogin getlogin_r getopt
getpagesize getpgid getpgrp getpid getppid getsid getuid isatty lchown link linkat
lockf lseek nice optarg opterr optind optopt pathconf pause pipe pipe2 pread
pwrite read readlink readlinkat rmdir sbrk setegid seteuid setgid setpgid setpgrp
setregid setreuid setsid setuid sleep swab symlink symlinkat sync sysconf tcgetpgrp
tcsetpgrp truncate ttyname ttyname_r ualarm unlink unlinkat usleep vfork write
kill killpg psignal raise sigaction sigaddset sigaltstack sigdelset sigemptyset
sigfillset sighold sigignore siginterrupt sigismember siglongjmp sigpause
sigpending sigprocmask sigqueue sigrelse sigset sigsetjmp sigsuspend sigtimedwait
sigwait sigwaitinfo siginfo_t sigset_t sigval stack_t sighandler_t
SIGALRM SIGBUS SIGCHLD SIGCONT SIGHUP SIGKILL SIGPIPE SIGPROF SIGQUIT SIGSTOP
SIGSYS SIGTRAP SIGTSTP SIGTTIN SIGTTOU SIGURG SIGUSR1 SIGUSR2 SIGVTALRM SIGXCPU
SIGXFSZ SIGWINCH SA_SIGINFO SA_RESTART SA_ONSTACK SA_NODEFER SA_RESETHAND
mmap munmap mprotect msync madvise mlock munlock mlockall munlockall mremap
mincore posix_madvise shm_open shm_unlink MAP_FAILED MAP_SHARED MAP_PRIVATE
MAP_FIXED MAP_ANONYMOUS MAP_ANON PROT_NONE PROT_READ PROT_WRITE PROT_EXEC
getcontext setcontext makecontext swapcontext ucontext_t mcontext_t
dlopen dlsym dlvsym dlclose dlerror dladdr dladdr1 dlinfo dlmopen Dl_info
RTLD_LAZY RTLD_NOW RTLD_GLOBAL RTLD_LOCAL RTLD_DEFAULT RTLD_NEXT RTLD_NODELETE
dl_iterate_phdr dl_phdr_info link_map r_debug
bcmp bcopy bzero ffs ffsl ffsll index rindex strcasecmp strncasecmp
stpcpy stpncpy strnlen strsignal strtok_r strerror_r strsep strlcpy strlcat
memmem mempcpy memrchr rawmemchr strchrnul
posix_memalign memalign valloc pvalloc reallocarray setenv unsetenv putenv
clearenv mkstemp mkdtemp mktemp realpath random srandom initstate setstate
drand48 erand48 lrand48 nrand48 mrand48 jrand48 srand48 seed48 lcong48 rand_r
arc4random getline getdelim fdopen fileno popen pclose open openat fcntl ioctl
select pselect poll ppoll epoll_create epoll_ctl epoll_wait stat fstat lstat
fstatat chmod fchmod umask mkdir mkdirat mkfifo mknod opendir readdir closedir
rewinddir wait waitpid waitid wait3 wait4 nanosleep clock_gettime clock_settime
clock_getres gettimeofday settimeofday times uname socket bind listen accept
connect send recv sendto recvfrom sendmsg recvmsg shutdown getsockopt setsockopt
sched_yield sched_getaffinity sched_setaffinity syscall prctl backtrace
backtrace_symbols
""")

# CUDA: built-in variables and vector types, the runtime's and the math
# API's global device functions, and the half/bfloat16 headers' names that
# lack a leading `__`. Prefixes CUDA claims whole (`cuda`, `cu` + capital,
# ...) are CUDA_PREFIXES, and names starting with `__` are reserved anyway.
_VECTOR_TYPES = " ".join(
    f"{t}{n}" for t in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                        "longlong", "ulonglong", "float", "double")
    for n in (1, 2, 3, 4))
CUDA = _words(f"""
threadIdx blockIdx blockDim gridDim warpSize clusterDim clusterIdx
dim3 {_VECTOR_TYPES}
{" ".join(f"make_{t}" for t in _VECTOR_TYPES.split())}
long4_16a long4_32a ulong4_16a ulong4_32a longlong4_16a longlong4_32a
ulonglong4_16a ulonglong4_32a double4_16a double4_32a
half half2 make_half2 make_bfloat162
hsqrt hrsqrt hrcp hlog hlog2 hlog10 hexp hexp2 hexp10 hcos hsin htanh htanh_approx
hceil hfloor hrint htrunc h2sqrt h2rsqrt h2rcp h2log h2log2 h2log10 h2exp h2exp2
h2exp10 h2cos h2sin h2tanh h2tanh_approx h2ceil h2floor h2rint h2trunc
rsqrt rsqrtf rcbrt rcbrtf sinpi sinpif cospi cospif sincos sincosf sincospi
sincospif normcdf normcdff normcdfinv normcdfinvf erfinv erfinvf erfcinv erfcinvf
erfcx erfcxf norm normf norm3d norm3df norm4d norm4df rnorm rnormf rnorm3d rnorm3df
rnorm4d rnorm4df rhypot rhypotf cyl_bessel_i0 cyl_bessel_i0f cyl_bessel_i1
cyl_bessel_i1f j0 j0f j1 j1f jn jnf y0 y0f y1 y1f yn ynf exp10 exp10f fdivide
fdividef min max umin umax llmin llmax ullmin ullmax mul24 umul24 mulhi umulhi
mul64hi umul64hi float_as_int int_as_float float_as_uint uint_as_float saturate
clock clock64 printf malloc free memcpy memset assert
tex1D tex1Dfetch tex1DLod tex1DGrad tex2D tex2DLod tex2DGrad tex2Dgather tex3D
tex3DLod tex3DGrad texCubemap texCubemapLod tex1DLayered tex2DLayered
texCubemapLayered surf1Dread surf1Dwrite surf2Dread surf2Dwrite surf3Dread
surf3Dwrite surf1DLayeredread surf1DLayeredwrite surf2DLayeredread
surf2DLayeredwrite surfCubemapread surfCubemapwrite texture surface
textureReference surfaceReference
cub cute cutlass thrust nvcuda wmma cooperative_groups
""")

# Prefixes of CUDA's names: the runtime and driver APIs (`cudaMalloc`,
# `CUDART_INF_F`, `cuLaunchKernel`, `CUresult`, `CU_LAUNCH_PARAM_END`), its
# libraries (`cublasCreate`, `CUBLAS_STATUS_SUCCESS`), `nv_bfloat16`,
# `NV_IF_TARGET`, and the atomics (`atomicAdd`; C11's `atomic_load`). The
# strings are prefixes in any case; the patterns (regular expression, what
# it says in words) are matched as they are.
CUDA_PREFIXES = ("cuda", "cublas", "cudnn", "cufft", "curand", "cusparse", "cusolver",
                 "nvrtc", "nv_", "atomic_", "memory_order")
CUDA_PREFIX_PATTERNS = (
    (r"cu[A-Z]", "'cu' and a capital letter"),
    (r"CU[a-z_]", "'CU' and a small letter or '_'"),
    (r"atomic[A-Z]", "'atomic' and a capital letter"),
)

# Numbered names generated code defines (`struct Tile0`, one per tile of a
# LUT, and its Hopper, sm_100a and block-scaled twins), as a regular expression.
GENERATED_PATTERN = r"(Sm90|Sm100|Sm120)?Tile\d+"

# File names Windows refuses whatever the extension (`aux.py`), compared
# without case.
WINDOWS_DEVICE_NAMES = _words("""
con prn aux nul com1 com2 com3 com4 com5 com6 com7 com8 com9 com0 lpt1 lpt2
lpt3 lpt4 lpt5 lpt6 lpt7 lpt8 lpt9 lpt0
""")

# What the generated code (and the runtime headers it includes) defines or
# refers to, beyond the sets above: module-level Python names and the globals
# its functions use, C++ file-scope names and macros, and every identifier in
# the body of a host launcher (`launch_<name>`), which calls kernel entry
# points by their bare names. tests/language/test_names.py keeps this list complete.
GENERATED = _words("""
common cuda_driver std core alloc Array Backend Error Refusal ENTRIES Args Dims
workspace_bytes launch fmt KernelArg Workspace
INCLUDE_DIR JAX_CHECKED JAX_RANGE warnings
SPEC ARCHS MIN_SM arch_error compile_options cuda_include_dir nvrtc_arch nvidia os
GgEncodeTiled TENSOR_MAP_MODES TensorMapArg ctypes cupy_backends device_sm major minor map_lhs
map_rhs num_sms sm why masked_m GROUPS
DISPATCHERS EMULATED_LIBRARY KERNELS LIBRARY NDIMS OP SYMBOL contextlib load load_all torch
ALIGN ALPHA AMAX_FLOOR E8M0_NAN_EXPONENT group_start GgUbsanLocation GgUbsanType
GgUbsanTypeMismatch MAX_GROUPS MAX_ROWS MAX_BLOCK_THREADS MAX_GRID check_launches device
device_smem_limit kGgMaxBlockThreads kGgMaxGridX kGgMaxGridYZ smem_limit GgLaunch
MAY_BE_NONE smem l
MAX_CLUSTER_BLOCKS CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION LaunchAttribute LaunchConfig cluster
config dynamicSmemBytes val x y z
annotations arm ARMS cupy dataclass dataclasses DTYPES
FP8_MAX functools gemmgen GROUP importlib itertools jax jnp Launch launches lax NAME np numpy
LHS_SCALE_BLOCK_K K_ALIGN M_ALIGN N_ALIGN N_LANES RHS_NK RHS_SCALE_BLOCK_K RHS_SCALE_BLOCK_N
ALPHA_GATE LIMIT PAIR_ALIGN
output_shapes OUTPUTS pathlib pick pick_index pick_tile pl pltpu SOURCE sys tile_for
TK TM validate VMEM_LIMIT_BYTES workspace_ints
A a acc_t B b_col b_element bias bias_t Config convert_b err existing_out g gemm_tile gemv
group_max group_offset group_sizes groups in_t k kAccCols kAChunksPerRow kAmaxFloor
kAStage kAStride kBChunksPerRow kBStage kBStride kCached kChunks kElemsPerCopy
kFp8Max kGroup kKSteps kLanes kMaxRows kMI kMmaK kNI kOutCols kOutputs kRhsBits
kScaleBlockK kSmemBytes kStages kThreads kTileK kTileN kTileRows kUnroll kVec kWarpK
kWarpN kWarps kWarpsN lhs lhs_global_scale lhs_scale lhs_scale_t lhs_scale_value lhs_t load_lhs
load_rhs load_slice load_stage m maybe_unused mma_t n n_out name nan_max num_groups
e2m1_magnitude_scaled global_scale global_scale_ref sign_of_difference ue4m3_code kLhsGlobalScale kRhsGlobalScale kLhsGlobal kRhsGlobal lhs_global_member rhs_global_member out out_scale out_t OutPair quantize rhs rhs_global_scale rhs_scale rhs_scale_t rhs_scale_value rhs_t rhs_zero
RhsSlice scale_t scaled store_q store_slice stream T weight_row widen_rhs workspace
BOUNDARIES EMAX FP4_MAX e2m1_magnitude kEmax kFp4Max mx_scale_code ue4m3_value
""")
