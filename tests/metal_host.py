"""algoswap_metal's Metal kernels run on the host, without a Mac: the unchanged kernels/*.metal sources compiled as
C++14 (MSL is based on it) with the host's compiler against tests/metal_shim/ (its ``metal_stdlib`` header and its
runtime), and called exactly as torch.mps.compile_shader's library is: ``library.NAME(*tensors, threads=...,
group_size=...)``, each tensor bound as ``[[buffer(i)]]`` in argument order (here CPU tensors: torch's CPU device
stands in for mps).

For each kernel an entry point is generated that passes each parameter what its attribute names (a buffer, or the
thread's ``thread_position_in_grid`` ...). A kernel that synchronises (threadgroup_barrier, simd_sum) runs each
threadgroup's threads on threads of their own; any other runs thread by thread. Builds:

- ``plain``: a shared library loaded here (-O1, no FMA contraction: each a*b+c rounds twice unless a kernel asks
  for fma);
- ``asan`` / ``tsan``: a program under AddressSanitizer or ThreadSanitizer, one run per kernel call, its buffers in
  allocations of exactly their size (read from files and written back);
- ``strict_errors``: a syntax check rejecting C++ that MSL does not have (no standard library header can be
  included; the keywords MSL leaves out are poisoned).

Builds are cached by the hash of what they are made of, in a folder of the temporary directory (one per user), so
that a session compiles each at most once and the next one not at all.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

SHIM = Path(__file__).resolve().parent / "metal_shim"
COMPILER = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
CACHE = Path(tempfile.gettempdir()) / f"algoswap-metal-host-{os.getuid()}"
KERNEL_FLAGS = ["-std=c++14", "-nostdinc", f"-I{SHIM}", "-Wall", "-Wno-attributes", "-Wno-unused-function",
                "-ffp-contract=off", "-fno-exceptions", "-fno-rtti"]
MODES = {"plain": ["-O1"], "asan": ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address"],
         "tsan": ["-O1", "-g", "-fsanitize=thread"]}
# The C++14 that MSL leaves out (MSL specification, "Metal and C++14"), poisoned by the strict check: the standard
# library, double, new and delete, exceptions, goto, virtual functions, RTTI, register and thread_local storage.
# (Lambdas, recursion and derived classes are not words: the shim does not catch them.)
NOT_MSL = ("std", "double", "new", "delete", "throw", "try", "catch", "noexcept", "goto", "virtual", "typeid",
           "dynamic_cast", "register", "thread_local")
# attribute -> what msl_host::Thread gives it: positions (Dim) and counts
POSITIONS = {"thread_position_in_grid": "position_in_grid", "thread_position_in_threadgroup": "position_in_threadgroup",
             "threadgroup_position_in_grid": "threadgroup_position_in_grid",
             "threads_per_threadgroup": "threads_per_threadgroup", "threads_per_grid": "threads_per_grid",
             "threadgroups_per_grid": "threadgroups_per_grid"}
INDICES = {"thread_index_in_threadgroup": "index_in_threadgroup", "thread_index_in_simdgroup": "index_in_simdgroup",
           "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
           "threads_per_simdgroup": "threads_per_simdgroup", "thread_execution_width": "threads_per_simdgroup"}
SYNCHRONISES = re.compile(r"\b(threadgroup_barrier|simd_\w+)\s*\(")


@dataclass(frozen=True)
class Parameter:
    type: str
    name: str
    attribute: str  # "buffer(0)", "thread_position_in_grid", ...

    @property
    def buffer(self) -> int | None:
        found = re.fullmatch(r"buffer\((\d+)\)", self.attribute)
        return None if found is None else int(found.group(1))

    def argument(self) -> str:
        """The C++ expression the generated entry point passes for it."""
        if self.buffer is not None:
            if self.type.endswith("&"):
                return f"*({self.type[:-1].strip()}*)args[{self.buffer}]"
            if "*" not in self.type:
                raise ValueError(f"buffer parameter {self.name!r} is neither a pointer nor a reference: {self.type!r}")
            return f"({self.type})args[{self.buffer}]"
        if self.attribute in POSITIONS:
            return f"msl_host_value<{self.type}>(t.{POSITIONS[self.attribute]})"
        if self.attribute in INDICES:
            return f"({self.type})t.{INDICES[self.attribute]}"
        raise ValueError(f"parameter {self.name!r}: attribute [[{self.attribute}]] is not covered by the shim")


@dataclass(frozen=True)
class Signature:
    name: str
    parameters: tuple[Parameter, ...]
    cooperative: bool  # synchronises its threads: run each threadgroup on threads of its own

    @property
    def buffers(self) -> int:
        """How many buffers it takes: its [[buffer(i)]] must be 0, 1, ... (torch binds argument i to buffer i)."""
        indices = sorted(p.buffer for p in self.parameters if p.buffer is not None)
        if indices != list(range(len(indices))):
            raise ValueError(f"kernel {self.name}: buffer indices {indices}, expected 0..{len(indices) - 1}")
        return len(indices)


def _closing(text: str, start: int, pair: str) -> int:
    """The index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {pair[0]: 1, pair[1]: -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced {pair!r} from offset {start}")


def _split(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _parameter(text: str) -> Parameter:
    found = re.fullmatch(r"\s*(.*?)\s*\b(\w+)\s*\[\[\s*([\w()]+)\s*\]\]\s*", " ".join(text.split()))
    if found is None:
        raise ValueError(f"kernel parameter {text.strip()!r} has no [[attribute]]")
    return Parameter(*found.groups())


def signatures(source: str) -> list[Signature]:
    """Every ``kernel void NAME(...)`` of ``source``."""
    found = []
    for match in re.finditer(r"\bkernel\s+void\s+(\w+)\s*\(", source):
        close = _closing(source, match.end() - 1, "()")
        body_open = source.index("{", close)
        body = source[body_open : _closing(source, body_open, "{}") + 1]
        parameters = tuple(_parameter(p) for p in _split(source[match.end() : close]))
        found.append(Signature(match.group(1), parameters, SYNCHRONISES.search(body) is not None))
    return found


def entry_points(kernels: Sequence[Signature]) -> str:
    """For each kernel, ``extern "C" msl_host_NAME(launch, args)``, and the table of them all."""
    code = ["\nnamespace {"]
    for k in kernels:
        arguments = ", ".join(p.argument() for p in k.parameters)
        code.append(f"void msl_host_thread_{k.name}(void* const* args, const msl_host::Thread& t) {{ {k.name}({arguments}); }}")
    code.append("}  // namespace")
    for k in kernels:
        code.append(f'extern "C" void msl_host_{k.name}(const msl_host::Launch* launch, void* const* args) '
                    f"{{ msl_host::run(*launch, {str(k.cooperative).lower()}, &msl_host_thread_{k.name}, args); }}")
    table = ", ".join(f'{{"{k.name}", &msl_host_{k.name}}}' for k in kernels)
    code.append(f'extern "C" const msl_host::Entry msl_host_entries[] = {{{table}, {{nullptr, nullptr}}}};')
    return "\n".join(code) + "\n"


def _compile(arguments: list[str]) -> None:
    done = subprocess.run([str(COMPILER), *arguments], capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise AssertionError(f"the host compiler refused: {' '.join(arguments)}\n{done.stderr[:6000]}")


def _shim_text() -> str:
    return "".join(path.read_text() for path in sorted(SHIM.iterdir()))


def build(source: str, mode: str = "plain") -> Path:
    """The kernels of ``source`` built in ``mode``: a shared library (plain) or a program (asan, tsan); cached."""
    key = hashlib.sha1("\0".join([str(COMPILER), mode, *KERNEL_FLAGS, *MODES[mode], _shim_text(), source]).encode())
    folder = CACHE / key.hexdigest()[:24]
    built = folder / ("kernels.so" if mode == "plain" else "driver")
    if built.exists():
        return built
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=_cache_root()))
    flags = [*MODES[mode], "-fPIC"]
    (scratch / "kernels.cpp").write_text(source + entry_points(signatures(source)))
    driver = [] if mode == "plain" else ["-DMSL_HOST_DRIVER"]
    _compile(["-std=c++17", *flags, *driver, "-c", str(SHIM / "msl_host_runtime.cpp"), "-o", str(scratch / "runtime.o")])
    _compile([*KERNEL_FLAGS, *flags, "-c", str(scratch / "kernels.cpp"), "-o", str(scratch / "kernels.o")])
    link = ["-shared"] if mode == "plain" else []
    _compile([*flags, *link, "-pthread", str(scratch / "runtime.o"), str(scratch / "kernels.o"), "-o", str(scratch / built.name)])
    try:
        scratch.rename(folder)
    except OSError:  # another process built it first
        shutil.rmtree(scratch, ignore_errors=True)
    return built


def _cache_root() -> Path:
    CACHE.mkdir(mode=0o700, exist_ok=True)
    return CACHE


def strict_errors(source: str) -> str:
    """The compiler's complaints about ``source`` as MSL ("" if none): C++14 with only the shim's header, the
    keywords MSL lacks poisoned, every warning an error."""
    text = "#include <metal_stdlib>\n#pragma GCC poison " + " ".join(NOT_MSL) + "\n#line 1\n" + source
    done = subprocess.run([str(COMPILER), *KERNEL_FLAGS, "-Werror", "-Wextra", "-fsyntax-only", "-x", "c++", "-"],
                          input=text, capture_output=True, text=True, timeout=600)
    return done.stderr if done.returncode else ""


class Launch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_ulonglong * 3), ("group", ctypes.c_ulonglong * 3)]


def _three(value: int | Sequence[int]) -> list[int]:
    values = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    if not 1 <= len(values) <= 3:
        raise ValueError(f"threads and group_size take 1 to 3 sizes, got {values}")
    return values + [1] * (3 - len(values))


class HostLibrary:
    """What torch.mps.compile_shader returns, on the host: its kernels as attributes."""

    def __init__(self, source: str, mode: str = "plain") -> None:
        self.mode = mode
        self.kernels = {k.name: k for k in signatures(source)}
        self.path = build(source, mode)
        self.library = ctypes.CDLL(str(self.path)) if mode == "plain" else None

    def __getattr__(self, name: str) -> "HostKernel":
        if name not in self.__dict__.get("kernels", {}):
            raise AttributeError(f"no kernel {name!r} in the library")
        return HostKernel(self, self.kernels[name])

    def __dir__(self) -> list[str]:
        return list(self.kernels)


class HostKernel:
    """One kernel, called as torch's are: ``kernel(*tensors, threads=..., group_size=...)``."""

    def __init__(self, library: HostLibrary, signature: Signature) -> None:
        self.owner, self.signature = library, signature

    def __call__(self, *args: torch.Tensor, threads: int | Sequence[int], group_size: int | Sequence[int] | None = None) -> None:
        name = self.signature.name
        if len(args) != self.signature.buffers:
            raise TypeError(f"kernel {name} takes {self.signature.buffers} buffers, got {len(args)}")
        for i, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor) or arg.device.type != "cpu" or not arg.is_contiguous():
                raise TypeError(f"kernel {name}: argument {i} must be a contiguous CPU tensor, got {arg!r:.80}")
        grid = _three(threads)
        group = _three(group_size if group_size is not None else min(grid[0], 256))
        if self.owner.mode == "plain":
            pointers = (ctypes.c_void_p * max(len(args), 1))(*[a.data_ptr() for a in args])
            getattr(self.owner.library, f"msl_host_{name}")(ctypes.byref(Launch((ctypes.c_ulonglong * 3)(*grid),
                                                                                (ctypes.c_ulonglong * 3)(*group))), pointers)
        else:
            self._run_program(args, grid, group)

    def _run_program(self, args: Sequence[torch.Tensor], grid: list[int], group: list[int]) -> None:
        """One run of the sanitizer build: the buffers to files, the program, the buffers back; a report fails."""
        with tempfile.TemporaryDirectory(prefix="metal-call-") as folder:
            for i, arg in enumerate(args):
                (Path(folder) / f"arg{i}.bin").write_bytes(arg.numpy().tobytes())
            command = [str(self.owner.path), self.signature.name, *map(str, grid), *map(str, group), folder, str(len(args))]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "TSAN_OPTIONS": "halt_on_error=1"})
            if done.returncode:
                raise SanitizerReport(f"{self.owner.mode}: kernel {self.signature.name} (grid {grid}, groups of {group}) "
                                      f"exited with {done.returncode}:\n{done.stderr[:6000]}")
            for i, arg in enumerate(args):
                data = np.frombuffer((Path(folder) / f"arg{i}.bin").read_bytes(), dtype=arg.numpy().dtype)
                arg.copy_(torch.from_numpy(data.copy()).reshape(arg.shape))


class SanitizerReport(AssertionError):
    """A sanitizer build of a kernel reported an error (its report is the message)."""
