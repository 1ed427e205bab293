"""Where the CUDA pieces are, for scripts/gpu_check.py's cuda-toolkit step (stdlib only).

nvcc, cudart, cuBLASLt and NCCL are looked for in the CUDA_HOME-like variables, beside nvcc, in
/usr/local/cuda*, in the pip wheels' nvidia/ folders of every python3's site-packages, then
/usr and /opt/nvidia; toolkit_folder() joins what was found into the one toolkit folder meson
takes (-Dcudatoolkit): include/ and lib64/ as links to the pieces."""
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIBRARIES = (("cudart", "cuda_runtime_api.h", "cudart"), ("cublasLt", "cublasLt.h", "cublasLt"),
             ("nccl", "nccl.h", "nccl"))  # (key, header, lib NAME of libNAME.so*)


def site_dirs():
    dirs = []
    for py in ("python3", sys.executable):
        try:
            p = subprocess.run([py, "-c", "import site, sys; print('\\n'.join(site.getsitepackages() + sys.path))"],
                               capture_output=True, text=True, timeout=30)
            dirs += [d for d in p.stdout.splitlines() if d.endswith("-packages")]
        except (OSError, subprocess.SubprocessError):
            pass
    return list(dict.fromkeys(dirs))


def cuda_roots(nvcc):
    """The folders searched for headers and libraries, in order, each once."""
    roots = []
    for v in ("TRIDENT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH", "NCCL_HOME"):
        if os.environ.get(v):
            roots.append(os.environ[v])
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for sp in site_dirs():
        nv = os.path.join(sp, "nvidia")
        if os.path.isdir(nv):
            roots += [os.path.join(nv, d) for d in sorted(os.listdir(nv))]
    roots += ["/usr", "/opt/nvidia"]
    seen, out = set(), []
    for r in roots:
        r = os.path.realpath(r)
        if os.path.isdir(r) and r not in seen:
            seen.add(r)
            out.append(r)
    return out


def lib_in(root, name):
    """(include dir, library file) of lib NAME under root, or None."""
    libdirs = ["lib64", "lib", "targets/x86_64-linux/lib", "lib/x86_64-linux-gnu"]
    for d in libdirs:
        files = sorted(glob.glob(os.path.join(root, d, f"lib{name}.so*")), key=len)
        files = [f for f in files if re.search(rf"lib{name}\.so(\.\d+)*$", f)]
        if files:
            return os.path.join(root, d), files[0]
    return None


def header_in(root, header):
    for inc in ("include", "targets/x86_64-linux/include"):
        if os.path.isfile(os.path.join(root, inc, header)):
            return os.path.join(root, inc)
    return None


def find_nvcc():
    cands = [os.environ.get("NVCC", ""), shutil.which("nvcc") or ""]
    for v in ("TRIDENT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(v):
            cands.append(os.path.join(os.environ[v], "bin", "nvcc"))
    cands += ["/usr/local/cuda/bin/nvcc"] + sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"), reverse=True)
    for sp in site_dirs():
        cands += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "bin", "nvcc")))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def find_libraries(roots):
    """(found, missing): found[key] = {root, include, libdir, lib} from the first root holding
    both the header and the library; missing: what no root holds, as the report names it."""
    found, missing = {}, []
    for key, header, lib in LIBRARIES:
        for r in roots:
            inc, lb = header_in(r, header), lib_in(r, lib)
            if inc and lb:
                found[key] = {"root": r, "include": inc, "libdir": lb[0], "lib": lb[1]}
                break
        else:
            missing.append(f"{lib} ({header} + lib{lib}.so*)")
    return found, missing


def find_cudnn(roots):
    """(library file, include dir or None) of cuDNN (libcudnn.so.9, the pip wheel's nvidia/cudnn/
    or the toolkit's), or None: optional, for the cuDNN attention (loaded at run time; its folder
    goes on the programs' RPATH so that dlopen finds it)."""
    for r in roots:
        lb = lib_in(r, "cudnn")
        if lb:
            return lb[1], header_in(r, "cudnn.h")
    return None


def find_nvrtc(roots):
    """libnvrtc.so* (the pip wheel's nvidia/cuda_nvrtc/ or the toolkit's), or None: cuDNN compiles
    some attention engines with it at run time (attention_cudnn.cpp loads it from the RPATH)."""
    for r in roots:
        lb = lib_in(r, "nvrtc")
        if lb:
            return lb[1]
    return None


def nccl_version(include):
    """MAJOR.MINOR.PATCH from include/nccl.h, '?' when it names none."""
    nccl_h = open(os.path.join(include, "nccl.h"), errors="replace").read()
    nv = {k: re.search(rf"#define NCCL_{k}\s+(\d+)", nccl_h) for k in ("MAJOR", "MINOR", "PATCH")}
    return ".".join(m.group(1) for m in nv.values() if m) or "?"


def toolkit_folder(build, found):
    """One toolkit folder for meson (-Dcudatoolkit) of the build folder `build`: include/ and
    lib64/ as links to the pieces of found; nvcc itself is found on PATH (meson falls back to
    it when bin/ has none). Outside the source tree: meson refuses include directories inside
    it by absolute path."""
    tag = hashlib.sha1(os.path.abspath(build).encode()).hexdigest()[:10]  # one per build folder
    tk = os.path.join(tempfile.gettempdir(), f"trident-cuda-{os.getuid()}-{tag}")
    shutil.rmtree(tk, ignore_errors=True)
    os.makedirs(os.path.join(tk, "include"))
    os.makedirs(os.path.join(tk, "lib64"))
    for key in ("nccl", "cublasLt", "cudart"):  # each library's own headers win a clash
        inc = found[key]["include"]
        for e in sorted(os.listdir(inc)):
            dst = os.path.join(tk, "include", e)
            if not os.path.lexists(dst):
                os.symlink(os.path.join(inc, e), dst)
        real = os.path.realpath(found[key]["lib"])
        base = f"lib{key}.so"
        name = soname(real) or os.path.basename(real)
        for n in {base, name}:
            dst = os.path.join(tk, "lib64", n)
            if not os.path.lexists(dst):
                os.symlink(real, dst)
    return tk


def soname(path):
    try:
        p = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, timeout=30)
        m = re.search(r"\(SONAME\).*\[(.*)\]", p.stdout)
        return m.group(1) if m else None
    except (OSError, subprocess.SubprocessError):
        return None
