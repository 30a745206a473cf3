"""The wire: LSP bytes in and out, and the protocol's rules — nothing about completions.

framing.py     `Content-Length` framing that survives a hostile peer
transport.py   one client session over a byte stream; the stdio transport
tcp.py         `quickdraft serve --tcp`: loopback, a per-launch token, one client at a time
protocol.py    pygls's protocol with the LSP lifecycle enforced and its leaks closed
plain_data.py  pygls/lsprotocol objects → plain dicts, for handlers, clients and JSON
"""
