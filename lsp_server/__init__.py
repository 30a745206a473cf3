"""quickdraft's language server: protocol, documents, scheduling, telemetry — no tensors.

server.py    the pygls handlers, a few lines each, calling the completion service
client.py    a headless LSP client driving `quickdraft serve` (demo, benchmarks, tests)
wire/        LSP bytes in and out, and the protocol's rules (stdio, TCP, framing, lifecycle)
answering/   the typing path: a request, or the edit before it, to ghost text
workspace/   what is kept between requests: documents, settings, the backend, telemetry
cli/         the `quickdraft` command, one module per subcommand
bench/       server benchmarks: a simulated typist, the first completion after opening a file
"""
