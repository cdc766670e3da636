#!/usr/bin/env python3
"""Checks that the CPU backend's sources need no CUDA, cuDNN or NCCL header.

Usage: check_cpu_includes.py <source root> [--compile-commands <build>/compile_commands.json]

1. Sources: every .cpp/.h under model/, mpi/, src/ (src/probe/ too), tests/cpu/ and tests/mpi/ except the GPU-only
   ones (*_gpu.cpp, *_gpu.h, *.cu, *.cuh, CMakeLists.txt's convention) and the GPU engine's
   factory. Their #include lines are followed transitively through the project's own headers
   ("folder/file.h" from the source root); the check fails when one reaches a header under cuda/,
   a *_gpu.h / .cuh header, or a system header of the CUDA toolkit, cuDNN or NCCL. Includes inside
   `#if VITDDP_NVTX` (NVTX3 ships with the toolkit: builds with the GPU backend only) or
   `#if defined(__CUDACC__)` blocks are skipped. Each failure prints the include chain.
2. With --compile-commands (the CPU-only build): no compile command uses an include directory
   of the toolkit, cuDNN or NCCL, and none compiles a source under cuda/ or a GPU-only file.
Exit 0 when clean, 1 otherwise (one line per problem).
"""
import json
import os
import re
import sys

CPU_FOLDERS = ["model", "mpi", "src", "tests/cpu", "tests/mpi"]
# System headers of the CUDA toolkit (runtime, driver, math types, cuBLAS(Lt), NVTX, CUB/Thrust,
# NVRTC, cuRAND, cuFFT...), cuDNN and NCCL.
GPU_SYSTEM = re.compile(
    r"^(cuda[^/]*\.h(pp)?|cuda/|cublas\w*\.h|cudnn\w*\.h|nccl\w*\.h|nvtx3/|nvToolsExt\w*\.h|nvrtc\.h|"
    r"curand\w*\.h|cufft\w*\.h|cusparse\w*\.h|cusolver\w*\.h|cub/|thrust/|crt/|nv/|"
    r"vector_types\.h|driver_types\.h|library_types\.h|device_launch_parameters\.h|cooperative_groups)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
GPU_ONLY_CONDITION = re.compile(r"VITDDP_NVTX|__CUDACC__|__CUDA_ARCH__")


def gpu_only_file(path):
    return re.search(r"(_gpu\.(cpp|h)|\.cu|\.cuh)$", path) is not None


def includes(root, rel):
    """(kind, name) of every #include of `rel` outside GPU-only preprocessor blocks."""
    out, stack = [], []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for line in f:
            s = line.strip()
            if re.match(r"#\s*if", s):
                stack.append(bool(GPU_ONLY_CONDITION.search(s)))
            elif re.match(r"#\s*endif", s):
                if stack:
                    stack.pop()
            elif re.match(r"#\s*(else|elif)", s) and stack:
                stack[-1] = False  # the other branch of a GPU-only condition is the CPU one
            m = INCLUDE.match(line)
            if m and not any(stack):
                out.append((m.group(1), m.group(2)))
    return out


def check_sources(root):
    problems = []
    starts = []
    for folder in CPU_FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if name.endswith((".cpp", ".h")) and not gpu_only_file(rel):
                    starts.append(rel)
    seen_bad = set()
    for start in starts:
        stack, visited = [(start, [start])], set()
        while stack:
            rel, chain = stack.pop()
            if rel in visited:
                continue
            visited.add(rel)
            for kind, name in includes(root, rel):
                via = " -> ".join(chain + [name])
                if kind == "<":
                    if GPU_SYSTEM.match(name) and (start, name) not in seen_bad:
                        seen_bad.add((start, name))
                        problems.append(f"{start}: includes <{name}> ({via})")
                    continue
                if name.startswith("cuda/") or gpu_only_file(name):
                    if (start, name) not in seen_bad:
                        seen_bad.add((start, name))
                        problems.append(f"{start}: includes GPU-only \"{name}\" ({via})")
                    continue
                if os.path.isfile(os.path.join(root, name)):
                    stack.append((name, chain + [name]))
                # else: a header of a CPU library (Catch2's catch2/catch.hpp, hdf5.h ...) or generated
    return problems, len(starts)


def check_compile_commands(root, path):
    problems = []
    with open(path, encoding="utf-8") as f:
        commands = json.load(f)
    flag = re.compile(r"(?:^|\s)(?:-I|-isystem\s*|-iquote\s*)(\S*(?:cuda|cudnn|nccl|nvtx)\S*)", re.I)
    for c in commands:
        src = os.path.relpath(c["file"], root)
        cmd = c.get("command") or " ".join(c.get("arguments", []))
        if src.startswith("cuda/") or gpu_only_file(src):
            problems.append(f"{src}: a GPU-only source is compiled")
        for d in flag.findall(cmd):
            problems.append(f"{src}: compiled with the include directory {d}")
    return problems, len(commands)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--compile-commands"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    problems, n = check_sources(root)
    print(f"checked {n} CPU-backend sources and the headers they include")
    if len(argv) == 4:
        more, m = check_compile_commands(root, argv[3])
        problems += more
        print(f"checked {m} compile commands of {argv[3]}")
    for p in problems:
        print("error: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
