#!/usr/bin/env python3
"""Compile every kernels/*.cu with NVRTC 13.0, as the stages will at run time; no GPU needed.

For each kernel file and each architecture (sm_80, sm_90) this compiles the source to PTX and
CUBIN through libnvrtc (ctypes, from the PyPI package nvidia-cuda-nvrtc==13.0.88), then checks
that the entry points the file's header comment documents, written as
`extern "C" __global__ void NAME(TYPE NAME, ...)`, are exactly the `.entry`s of the PTX, with
the documented number and sizes of parameters: the Rust launchers are written from that
comment, so it must not drift from the code. ptxas runs verbose; a kernel that spills
registers or uses local memory (stack frame) is an error too, since these kernels are meant
to be memory-bound streaming code.

Prints one line per kernel and architecture; on a problem prints the file name, the
architecture and the NVRTC log, goes on with the rest, and exits 1 at the end. Exits 0 when
everything compiled and checked.

The library directory is found from --nvrtc-lib-dir, else $NVRTC_LIB_DIR, else the installed
wheel: nvidia-cuda-nvrtc 13.x puts libnvrtc.so.13 and libnvrtc-builtins.so.13.0 in
site-packages/nvidia/cu13/lib (a namespace package `nvidia.cu13`; 12.x used
nvidia/cuda_nvrtc/lib, searched too). libnvrtc dlopen()s the builtins library by its soname
when it compiles, so it is loaded first with RTLD_GLOBAL and the dlopen finds it already
loaded: no LD_LIBRARY_PATH or re-exec needed.
"""

import argparse
import ctypes
import glob
import importlib.util
import os
import re
import site
import sys
import sysconfig

ARCHES = ("sm_80", "sm_90")
# The options the stages' NVRTC cache uses too, plus the architecture.
OPTIONS = ("--std=c++17",)
# Only for this check: the resource report, and refuse spills.
CHECK_OPTIONS = ("--ptxas-options=--verbose", "--ptxas-options=--warn-on-spills")

NVRTC_SUCCESS = 0


def fail(message):
    print(f"compile-kernels: {message}", file=sys.stderr)
    sys.exit(1)


def candidate_lib_dirs():
    """Where the nvidia-cuda-nvrtc wheel may have put its libraries, best guess first."""
    for package in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
        try:
            spec = importlib.util.find_spec(package)
        except ImportError:  # no `nvidia` namespace at all
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            yield os.path.join(location, "lib")
    roots = list(site.getsitepackages()) + [site.getusersitepackages()]
    roots += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    for root in roots:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            yield os.path.join(root, sub)


def find_lib_dir(explicit):
    if explicit:
        return explicit
    if os.environ.get("NVRTC_LIB_DIR"):
        return os.environ["NVRTC_LIB_DIR"]
    for d in candidate_lib_dirs():
        if os.path.isfile(os.path.join(d, "libnvrtc.so.13")):
            return d
    fail(
        "libnvrtc.so.13 not found; install it with "
        "`python3 -m pip install nvidia-cuda-nvrtc==13.0.88` or pass --nvrtc-lib-dir"
    )


def load_nvrtc(lib_dir):
    builtins = sorted(
        p
        for p in glob.glob(os.path.join(lib_dir, "libnvrtc-builtins.so.13*"))
        if ".alt." not in os.path.basename(p)
    )
    if not builtins:
        fail(f"no libnvrtc-builtins.so.13* in {lib_dir}")
    try:
        ctypes.CDLL(builtins[0], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        lib = ctypes.CDLL(os.path.join(lib_dir, "libnvrtc.so.13"))
    except OSError as e:
        fail(f"cannot load NVRTC from {lib_dir}: {e}")

    prog = ctypes.c_void_p
    size_p = ctypes.POINTER(ctypes.c_size_t)
    signatures = {
        "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        "nvrtcCreateProgram": [
            ctypes.POINTER(prog),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p),
        ],
        "nvrtcCompileProgram": [prog, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcDestroyProgram": [ctypes.POINTER(prog)],
        "nvrtcGetProgramLogSize": [prog, size_p],
        "nvrtcGetProgramLog": [prog, ctypes.c_char_p],
        "nvrtcGetPTXSize": [prog, size_p],
        "nvrtcGetPTX": [prog, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [prog, size_p],
        "nvrtcGetCUBIN": [prog, ctypes.c_char_p],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib, builtins[0]


class CompileError(Exception):
    def __init__(self, what, log):
        super().__init__(what)
        self.log = log


class Program:
    """One nvrtcProgram; every call's status is checked."""

    def __init__(self, lib, source, name):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self.check(
            lib.nvrtcCreateProgram(ctypes.byref(self.handle), source, name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )

    def check(self, status, call):
        if status != NVRTC_SUCCESS:
            error = self.lib.nvrtcGetErrorString(status).decode()
            log = self.log() if self.handle else ""
            raise CompileError(f"{call}: {error} ({status})", log)

    def compile(self, options):
        opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        self.check(self.lib.nvrtcCompileProgram(self.handle, len(options), opts), "nvrtcCompileProgram")

    def _bytes(self, size_fn, get_fn, what):
        size = ctypes.c_size_t()
        self.check(size_fn(self.handle, ctypes.byref(size)), f"nvrtcGet{what}Size")
        buf = ctypes.create_string_buffer(size.value)
        self.check(get_fn(self.handle, buf), f"nvrtcGet{what}")
        return buf.raw[: size.value]

    def log(self):
        raw = self._bytes(self.lib.nvrtcGetProgramLogSize, self.lib.nvrtcGetProgramLog, "ProgramLog")
        return raw.rstrip(b"\0").decode(errors="replace")

    def ptx(self):
        return self._bytes(self.lib.nvrtcGetPTXSize, self.lib.nvrtcGetPTX, "PTX").rstrip(b"\0")

    def cubin(self):
        return self._bytes(self.lib.nvrtcGetCUBINSize, self.lib.nvrtcGetCUBIN, "CUBIN")

    def close(self):
        if self.handle:
            self.lib.nvrtcDestroyProgram(ctypes.byref(self.handle))


# Sizes in bytes of the argument types a header comment may name.
ARG_SIZES = {"u8*": 8, "u64": 8, "i64": 8, "u32": 4, "i32": 4, "f32": 4, "f64": 8, "float": 4, "double": 8}
SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')


def documented_entries(source):
    """{entry: [param sizes]} from the `//` comment lines that open the file."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:])
    entries = {}
    previous = None
    for name, args in SIGNATURE.findall(" ".join(lines)):
        args = " ".join(args.split())
        if "same" in args and previous is not None:  # "(... same ...)": as the one before
            entries[name] = entries[previous]
            previous = name
            continue
        sizes = []
        for arg in filter(None, (a.strip() for a in args.split(","))):
            type_ = arg.rsplit(None, 1)[0].replace("const ", "").replace(" ", "")
            if type_.endswith("*"):
                type_ = "u8*"
            if type_ not in ARG_SIZES:
                raise ValueError(f"entry `{name}`: unknown argument type in `{arg}`")
            sizes.append(ARG_SIZES[type_])
        entries[name] = sizes
        previous = name
    return entries


PTX_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)
PTX_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.[a-z](\d+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+\w+(?:\[(\d+)\])?")


def ptx_entries(ptx):
    """{entry: [param sizes]} of a PTX module."""
    entries = {}
    for name, params in PTX_ENTRY.findall(ptx):
        sizes = []
        for bits, count in PTX_PARAM.findall(params):
            sizes.append(int(bits) // 8 * (int(count) if count else 1))
        entries[name] = sizes
    return entries


PTXAS_FUNCTION = re.compile(r"Compiling entry function '(\w+)'")
PTXAS_REGS = re.compile(r"Used (\d+) registers")
PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_report(log):
    """{entry: (registers, stack frame bytes, spill bytes)} from ptxas' verbose output."""
    report, current = {}, None
    for line in log.splitlines():
        if m := PTXAS_FUNCTION.search(line):
            current = m.group(1)
            report[current] = [0, 0, 0]
        elif current and (m := PTXAS_FRAME.search(line)):
            report[current][1] = int(m.group(1))
            report[current][2] = int(m.group(2)) + int(m.group(3))
        elif current and (m := PTXAS_REGS.search(line)):
            report[current][0] = int(m.group(1))
    return report


def compile_one(lib, name, source, arch):
    """Compile `source` (named `name` in messages) for `arch`; returns the summary line and
    the log's warnings. Raises CompileError."""
    program = Program(lib, source, name)
    try:
        program.compile([f"--gpu-architecture={arch}", *OPTIONS, *CHECK_OPTIONS])
        log, ptx, cubin = program.log(), program.ptx().decode(), program.cubin()
    finally:
        program.close()

    problems = []
    try:
        documented = documented_entries(source.decode())
    except ValueError as e:
        documented, problems = {}, [str(e)]
    found = ptx_entries(ptx)
    if not documented and not problems:
        problems.append('the header comment documents no `extern "C" __global__ void NAME(...)` entry')
    for entry, sizes in documented.items():
        if entry not in found:
            problems.append(f"documented entry `{entry}` is not in the PTX")
        elif found[entry] != sizes:
            problems.append(
                f"entry `{entry}`: documented parameter sizes {sizes}, PTX has {found[entry]}"
            )
    for entry in found:
        if entry not in documented:
            problems.append(f"PTX entry `{entry}` is not documented in the header comment")
    resources = ptxas_report(log)
    for entry, (_, frame, spill) in resources.items():
        if frame or spill:
            problems.append(f"entry `{entry}` uses local memory: {frame} bytes stack frame, {spill} bytes spilled")
    if problems:
        raise CompileError("; ".join(problems), log)

    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    entries = ", ".join(f"{e} ({resources.get(e, ['?'])[0]} regs)" for e in found)
    line = f"ok  {name:<26} {arch}  ptx {len(ptx):>7} B  cubin {len(cubin):>7} B  {entries}"
    return line, warnings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvrtc-lib-dir", help="directory holding libnvrtc.so.13 and its builtins")
    parser.add_argument("--kernels", default=None, help="directory of .cu files (default: <repo>/kernels)")
    parser.add_argument("files", nargs="*", help="compile only these .cu files")
    args = parser.parse_args()

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kernels_dir = args.kernels or os.path.join(repo, "kernels")
    files = [os.path.abspath(f) for f in args.files] or sorted(
        glob.glob(os.path.join(kernels_dir, "*.cu"))
    )
    if not files:
        fail(f"no .cu files in {kernels_dir}")

    lib_dir = find_lib_dir(args.nvrtc_lib_dir)
    lib, builtins = load_nvrtc(lib_dir)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(f"NVRTC {major.value}.{minor.value} from {lib_dir} (builtins {os.path.basename(builtins)})")
    if (major.value, minor.value) != (13, 0):
        fail(f"expected NVRTC 13.0, got {major.value}.{minor.value}")

    failures = 0
    for path in files:
        # How NVRTC's messages and ours name the file: relative to the repository if inside.
        name = os.path.relpath(path, repo) if path.startswith(repo + os.sep) else path
        with open(path, "rb") as f:
            source = f.read()
        for arch in ARCHES:
            try:
                line, warnings = compile_one(lib, name, source, arch)
                print(line)
                for w in warnings:
                    print(f"    {w}")
            except CompileError as e:
                failures += 1
                print(f"FAIL {name} {arch}: {e}")
                if e.log.strip():
                    print(f"---- NVRTC log for {name} ({arch}) ----")
                    print(e.log.rstrip())
                    print("----")
    total = len(files) * len(ARCHES)
    if failures:
        print(f"{failures} of {total} kernel compilations failed")
        return 1
    print(f"all {total} kernel compilations ok ({len(files)} files x {', '.join(ARCHES)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
