"""Server settings: machine defaults < command-line flags < the client's settings."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from typing import Any

from engine.modes import DRAFTER_MODES, MULTILINE_POLICIES, needs_draft_model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    verifier: str | None = None  # preset, directory or .gguf; None → machine default
    draft: str | None = None  # same, or "none"
    drafter: str = "hybrid"
    dtype: str | None = None
    device: str | None = None
    budget_ms: float = 200.0
    max_new_tokens: int = 64
    multiline: str = "auto"
    enabled: bool = True
    disabled_languages: tuple[str, ...] = ()
    prefix_tokens: int | None = None  # None: the engine's default for its device
    suffix_tokens: int | None = None
    other_documents_tokens: int | None = None
    cold_prefix_tokens: int | None = None  # the prefix of a prompt no cache holds (a jump); 0: as prefix_tokens
    adaptive_drafting: bool = True  # switch drafters when draft acceptance stays under 50 %
    warm: bool = True  # prefill the cursor's prompt window in the background (lsp_server/answering/warming.py)
    # Start the model at an edit, before the client's debounced request (lsp_server/answering/anticipation.py).
    anticipate: bool = True
    # While the user types, answer before their next key is due (it cancels the request) with what is
    # verified by then; the rest follows as ghost text (lsp_server/answering/service.py budget_s).
    answer_before_next_key: bool = True
    # Withhold answers whose verifier confidence is below this (engine/decoding/confidence.py; 0: show all;
    # None: the threshold measured for the verifier, 0.5 for the 0.5B).
    min_confidence: float | None = None
    # A shared inference server instead of local models (engine/backends/remote.py).
    backend: str | None = None  # URL of an OpenAI-compatible server; None: the local engine
    backend_model: str | None = None  # the model name it serves; None: the first it lists
    backend_tokenizer: str | None = None  # where the model's tokenizer is here; None: try backend_model
    api_key_env: str | None = None  # environment variable holding the server's bearer token

    def model_key(self) -> tuple:
        """Settings whose change means loading models (or connecting to the backend) again."""
        if self.backend:
            return ("remote", self.backend, self.backend_model, self.backend_tokenizer, self.api_key_env)
        return (self.verifier, self.draft if needs_draft_model(self.drafter) else "none", self.dtype, self.device)

    def language_enabled(self, language_id: str | None) -> bool:
        return self.enabled and (language_id or "") not in self.disabled_languages


# Client-facing names (camelCase, as in editor settings) → field names.
_CLIENT_NAMES = {
    "verifier": "verifier", "draft": "draft", "drafter": "drafter", "dtype": "dtype", "device": "device",
    "budgetMs": "budget_ms", "maxNewTokens": "max_new_tokens", "multiline": "multiline", "enabled": "enabled",
    "disabledLanguages": "disabled_languages", "prefixTokens": "prefix_tokens", "suffixTokens": "suffix_tokens",
    "otherDocumentsTokens": "other_documents_tokens", "coldPrefixTokens": "cold_prefix_tokens",
    "adaptiveDrafting": "adaptive_drafting",
    "warm": "warm", "minConfidence": "min_confidence",
    "anticipate": "anticipate", "answerBeforeNextKey": "answer_before_next_key",
    "backend": "backend", "backendModel": "backend_model", "backendTokenizer": "backend_tokenizer",
    "apiKeyEnv": "api_key_env",
}
_LIMITS = {"budget_ms": (1, 60_000), "max_new_tokens": (1, 1024), "prefix_tokens": (16, 32_768),
           "suffix_tokens": (0, 32_768), "other_documents_tokens": (0, 32_768), "cold_prefix_tokens": (0, 32_768),
           "min_confidence": (0, 1)}
_FLOATS = ("budget_ms", "min_confidence")


def machine_defaults() -> Settings:
    """On a GPU the 1.5B verifier with the 0.5B draft; on a CPU the 0.5B alone with prompt lookup,
    which answers a typical automatic request near the 200 ms budget (docs/server.md: "What runs by default where")."""
    from engine.models.loading import default_device

    if default_device().type == "cuda":
        return Settings(verifier="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", drafter="hybrid")
    return Settings(verifier="qwen2.5-coder-0.5b", draft="none", drafter="lookup")


def apply_client_settings(base: Settings, options: Any) -> Settings:
    """Overlay settings sent by the client; wrong types or values are logged and ignored."""
    if not isinstance(options, dict):
        return base
    if isinstance(options.get("quickdraft"), dict):  # workspace/didChangeConfiguration nests a section
        options = options["quickdraft"]
    changes: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Settings)}
    for client_name, value in options.items():
        name = _CLIENT_NAMES.get(client_name, client_name if client_name in types else None)
        if name is None:
            continue
        try:
            changes[name] = _coerce(name, value, types[name])
        except (TypeError, ValueError) as error:
            log.warning("ignoring setting %s=%r: %s", client_name, value, error)
    return replace(base, **changes)


def _coerce(name: str, value: Any, annotation: str) -> Any:
    if name == "disabled_languages":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError("expected a list of language ids")
        return tuple(value)
    if name == "multiline" and value not in MULTILINE_POLICIES:
        raise ValueError(f"expected one of {tuple(MULTILINE_POLICIES)}")
    if name == "drafter" and value not in DRAFTER_MODES:
        raise ValueError(f"expected one of {DRAFTER_MODES}")
    if "bool" in annotation:
        if not isinstance(value, bool):
            raise TypeError("expected true or false")
        return value
    if name in _LIMITS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("expected a number")
        low, high = _LIMITS[name]
        if not low <= value <= high:
            raise ValueError(f"expected {low}..{high}")
        return float(value) if name in _FLOATS else int(value)
    if value is not None and not isinstance(value, str):
        raise TypeError("expected a string")
    return value or None
