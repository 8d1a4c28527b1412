from tests.fixtures_llamacpp import llama_server, llama_server_binary, tiny_gguf_model

__all__ = ["llama_server", "llama_server_binary", "tiny_gguf_model"]
