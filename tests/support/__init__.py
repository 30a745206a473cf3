"""Test support, not tests: tiny models and their tolerances (tiny_models), a tiny real GGUF
served by a local pip index (model_fixtures), toy tokenizers (toy_tokenizers), and a
synchronous LSP client over lsp_server.client (lsp_client), and the editor tests' paths and
setup checks (editors)."""
