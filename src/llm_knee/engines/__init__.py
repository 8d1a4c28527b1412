"""Real inference engines for tests, CI and demos: llama.cpp's ``llama-server`` and a tiny random model.

Import from the modules (this package imports nothing, so ``python -m`` runs its modules cleanly):

- :mod:`.llamacpp`: ``find_or_build_llama_server`` finds or builds (and caches) the binary;
- :mod:`.tiny_gguf`: ``write_tiny_llama_gguf`` writes a small random-weight LLaMA GGUF that streams one
  chunk per token;
- :mod:`.server`: ``LlamaServer`` runs one server on a free 127.0.0.1 port;
- :mod:`.process`: ``ServerProcess`` runs any server command line with a bounded health wait and a
  clean stop; ``free_port``, ``port_is_free``;
- :mod:`.errors`: ``EngineError`` and its subclasses.
"""
