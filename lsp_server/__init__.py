"""quickdraft's language server: protocol, documents, scheduling, telemetry — no tensors.

server.py      pygls handlers, a few lines each, calling the service
service.py     one completion request end to end, plus the editor's events (testable in-process)
context.py     an LSP document and cursor → the engine's CompletionRequest
scheduler.py   the single engine worker; newer requests supersede older ones
warming.py     warming the KV cache before the user asks (open, cursor moves, idle)
telemetry.py   per-request figures, user vs draft acceptance, the drafter retune rule
settings.py    machine defaults < command-line flags < the client's settings
plain_data.py  pygls/lsprotocol objects → plain dicts
client.py      a headless LSP client driving `quickdraft serve` (demo, benchmarks, tests)
cli/           the `quickdraft` command, one module per subcommand
bench/         server benchmarks: a simulated typist, the first completion after opening a file
"""
