"""Backends produce completions: the local speculative engine, or a remote inference server.

See base.py for the interface. Import the implementations from their modules
(`engine.backends.local`, `engine.backends.remote`): each pulls in what it needs.
"""

from engine.backends.base import Backend, BackendError, Health

__all__ = ["Backend", "BackendError", "Health"]
