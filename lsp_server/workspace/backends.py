"""Which backend the settings ask for: the local engine, or a remote inference server."""

from __future__ import annotations

import os

from engine.backends.base import Backend, BackendError, HealthCallback
from lsp_server.workspace.settings import Settings


def describe_choice(settings: Settings) -> str:
    if settings.backend:
        return f"connecting to {settings.backend} (model {settings.backend_model or 'as served'})"
    return (f"loading models (verifier {settings.verifier or 'default'}, draft {settings.draft or 'default'}, "
            f"drafter {settings.drafter})")


def open_backend(settings: Settings, on_health: HealthCallback) -> Backend:
    """Load the models, or connect to the server (slow: run it on the worker, never the event loop)."""
    if settings.backend:
        from engine.backends.remote import RemoteBackend, RemoteConfig

        api_key = None
        if settings.api_key_env:
            api_key = os.environ.get(settings.api_key_env)
            if not api_key:
                raise BackendError(f"environment variable {settings.api_key_env} (apiKeyEnv) is not set: "
                                   f"put the server's API token there before starting the editor")
        config = RemoteConfig(url=settings.backend, model=settings.backend_model, api_key=api_key,
                              tokenizer=settings.backend_tokenizer)
        return RemoteBackend.connect(config, on_health=on_health)
    if settings.show_draft_first:
        from engine.backends.verdict import DraftThenVerdict

        return DraftThenVerdict.load(settings.verifier, settings.draft, drafter=settings.drafter,
                                     dtype=settings.dtype, device=settings.device, compiled_step=settings.compiled_step)
    from engine.backends.local import LocalBackend

    return LocalBackend.load(settings.verifier, settings.draft, drafter=settings.drafter, dtype=settings.dtype,
                             device=settings.device, compiled_step=settings.compiled_step)
