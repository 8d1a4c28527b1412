"""Make a Hugging Face tokenizer directory from a GGUF model, offline, and check it against llama.cpp.

Runs inside the benchmark's own virtual environment (transformers, gguf and faker come with guidellm
there), never in the package's: ``run.py`` calls it as a subprocess.

guidellm builds synthetic prompts of an exact token count with a Hugging Face tokenizer. No tokenizer
can be downloaded here, so the one embedded in the tiny model's GGUF is converted by transformers'
GGUF loader and saved. Whether that conversion tokenizes exactly like llama.cpp is then *checked*, not
assumed: texts made the way guidellm makes them (faker text, encoded, cut to N tokens, decoded) are
sent to the server's ``/tokenize`` and their server-side length compared with N.

    python gguf_tokenizer.py MODEL.gguf OUT_DIR [--check-url http://127.0.0.1:PORT --prompt-tokens 65]

Prints one JSON object: the tokenizer directory and, with ``--check-url``, the agreement counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

CHECK_TEXTS = 40
SEED = 1234


def convert(model: Path, out_dir: Path) -> Any:
    """Load the tokenizer embedded in ``model`` (no network) and save it as ``out_dir/tokenizer.json``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer  # type: ignore[import-not-found]  # only in the benchmark's venv

    tokenizer = AutoTokenizer.from_pretrained(str(model.parent), gguf_file=model.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def server_tokens(url: str, text: str, add_special: bool) -> list[int]:
    body = json.dumps({"content": text, "add_special": add_special}).encode()
    request = urllib.request.Request(
        url.rstrip("/") + "/tokenize", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        tokens = json.load(response)["tokens"]
    return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]


def check(tokenizer: Any, url: str, prompt_tokens: int) -> dict[str, Any]:
    """Compare this tokenizer with the server's on faker texts and on guidellm-style cut prompts."""
    from faker import Faker  # type: ignore[import-not-found]  # a guidellm dependency, benchmark venv only

    faker = Faker()
    faker.seed_instance(SEED)
    same_ids = 0
    exact_length = 0
    lengths: list[int] = []
    first_mismatch: dict[str, Any] | None = None
    for _ in range(CHECK_TEXTS):
        text = faker.text(max_nb_chars=prompt_tokens * 8)
        ours = tokenizer.encode(text, add_special_tokens=False)
        theirs = server_tokens(url, text, add_special=False)
        if ours == theirs:
            same_ids += 1
        elif first_mismatch is None:
            first_mismatch = {"text": text[:120], "hf": ours[:20], "llama.cpp": theirs[:20]}
        # What guidellm's synthetic_text does: encode (with BOS), cut, decode without specials.
        cut = tokenizer.decode(tokenizer.encode(text)[:prompt_tokens], skip_special_tokens=True)
        n_server = len(server_tokens(url, cut, add_special=True))
        lengths.append(n_server)
        exact_length += n_server == prompt_tokens
    return {
        "texts": CHECK_TEXTS,
        "same_ids": same_ids,
        "prompt_tokens_asked": prompt_tokens,
        "prompt_tokens_server_min": min(lengths),
        "prompt_tokens_server_max": max(lengths),
        "prompts_exact": exact_length,
        "first_mismatch": first_mismatch,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--check-url", help="llama-server root URL whose /tokenize to compare with")
    parser.add_argument("--prompt-tokens", type=int, default=65, help="guidellm prompt_tokens to check")
    args = parser.parse_args(argv)
    tokenizer = convert(args.model, args.out_dir)
    result: dict[str, Any] = {"tokenizer_dir": str(args.out_dir), "vocab_size": len(tokenizer)}
    if args.check_url:
        result["check"] = check(tokenizer, args.check_url, args.prompt_tokens)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
