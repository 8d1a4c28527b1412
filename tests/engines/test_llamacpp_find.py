"""Where the llama-server binary comes from: given path > $LLM_KNEE_LLAMA_SERVER > PATH > cache > build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llm_knee.engines import llamacpp
from llm_knee.engines.errors import EngineBuildError, EngineNotFoundError
from llm_knee.engines.llamacpp import (
    BINARY_NAME,
    CMAKE_FLAGS,
    ENV_BINARY,
    build_key,
    cache_dir_for,
    cached_vocab,
    find_or_build_llama_server,
)


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $LLM_KNEE_LLAMA_SERVER and a PATH without llama-server; returns an empty cache root."""
    monkeypatch.delenv(ENV_BINARY, raising=False)
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    return tmp_path / "cache"


def test_an_explicit_path_wins_over_everything(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = _executable(tmp_path / "mine" / "llama-server")
    monkeypatch.setenv(ENV_BINARY, str(_executable(tmp_path / "env" / "llama-server")))
    _executable(cache_dir_for(clean_env) / BINARY_NAME)
    assert find_or_build_llama_server(given, cache_root=clean_env) == given.resolve()


def test_a_missing_or_non_executable_explicit_path_is_an_error_not_a_fallback(clean_env: Path, tmp_path: Path) -> None:
    _executable(cache_dir_for(clean_env) / BINARY_NAME)
    with pytest.raises(EngineNotFoundError, match="does not exist"):
        find_or_build_llama_server(tmp_path / "nope", cache_root=clean_env)
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(EngineNotFoundError, match="not an executable"):
        find_or_build_llama_server(plain, cache_root=clean_env)


def test_the_environment_variable_comes_before_path_and_cache(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = _executable(tmp_path / "env" / "llama-server")
    on_path = _executable(tmp_path / "bin" / "llama-server")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv(ENV_BINARY, str(from_env))
    assert find_or_build_llama_server(cache_root=clean_env) == from_env.resolve()
    monkeypatch.setenv(ENV_BINARY, str(tmp_path / "gone"))
    with pytest.raises(EngineNotFoundError, match=ENV_BINARY):
        find_or_build_llama_server(cache_root=clean_env)


def test_path_comes_before_the_cache(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = _executable(tmp_path / "bin" / "llama-server")
    _executable(cache_dir_for(clean_env) / BINARY_NAME)
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_or_build_llama_server(cache_root=clean_env) == on_path


def test_the_cache_is_used_when_nothing_else_is_found(clean_env: Path) -> None:
    cached = _executable(cache_dir_for(clean_env) / BINARY_NAME)
    assert find_or_build_llama_server(cache_root=clean_env, allow_build=False) == cached


def test_without_build_permission_the_error_names_the_build_command(clean_env: Path) -> None:
    with pytest.raises(EngineNotFoundError, match=r"python -m llm_knee\.engines\.llamacpp build"):
        find_or_build_llama_server(cache_root=clean_env, allow_build=False)


def test_a_build_without_cmake_says_what_to_install(clean_env: Path) -> None:
    with pytest.raises(EngineBuildError, match=r"missing cmake.*apt-get install"):
        find_or_build_llama_server(cache_root=clean_env)
    assert not (cache_dir_for(clean_env) / BINARY_NAME).exists()


def test_the_cache_key_follows_version_and_flags() -> None:
    key = build_key()
    assert key.startswith(llamacpp.VERSION + "-")
    assert build_key() == key
    assert build_key(version="1.0.0") != key
    assert build_key(flags=(*CMAKE_FLAGS, "-DGGML_AVX512=ON")) != key
    assert "-DGGML_NATIVE=OFF" in CMAKE_FLAGS
    assert "-DLLAMA_BUILD_UI=OFF" in CMAKE_FLAGS


def test_the_vocabulary_is_found_only_where_a_build_left_it(clean_env: Path) -> None:
    assert cached_vocab(clean_env) is None
    vocab = cache_dir_for(clean_env) / llamacpp.VOCAB_NAME
    vocab.parent.mkdir(parents=True)
    vocab.write_bytes(b"GGUF")
    assert cached_vocab(clean_env) == vocab


def test_the_command_line_prints_the_binary_path(
    clean_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = _executable(tmp_path / "llama-server")
    assert llamacpp.main(["build", "--binary", str(given)]) == 0
    assert capsys.readouterr().out.strip() == str(given.resolve())
    assert llamacpp.main(["build", "--no-build", "--cache-dir", str(clean_env)]) == 1
    assert "no llama-server found" in capsys.readouterr().err


def test_the_default_cache_root_honours_the_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llamacpp.ENV_CACHE_DIR, str(tmp_path))
    assert llamacpp.default_cache_root() == tmp_path / BINARY_NAME
    monkeypatch.delenv(llamacpp.ENV_CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", os.fspath(tmp_path / "xdg"))
    assert llamacpp.default_cache_root() == tmp_path / "xdg" / "llm-knee" / BINARY_NAME
