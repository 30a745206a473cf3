"""What the server keeps for the workspace between requests, apart from any one request.

documents.py   the open documents, keyed and split the way LSP says; recently edited ones
settings.py    machine defaults < command-line flags < the client's settings
settings_docs.py  the settings table as docs/server.md and the VS Code extension's package.json show it
backends.py    which backend the settings ask for: the local engine or a remote server
telemetry.py   per-request figures, user vs draft acceptance, the drafter retune rule
gc_pauses.py   the loaded models frozen out of the garbage collector's full collections
"""
