"""Server settings: machine defaults < command-line flags < the client's settings.

Every setting is described once, in its field below (`setting(...)`): default, limits or choices,
help, its `quickdraft serve` flag. The client's name is the field's name in camelCase. The
validation of what clients send and the `serve` flags are built from these fields; docs/server.md's
settings table and the VS Code extension's settings are written from them
(`python -m lsp_server.workspace.settings_docs`), and tests/test_settings_table.py fails when any
copy drifts.
"""

from __future__ import annotations

import argparse
import logging
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.modes import DRAFTER_MODES, MULTILINE_POLICIES, needs_draft_model

log = logging.getLogger(__name__)

# A default the server picks for the machine it runs on (GPU or CPU): editors must not send one.
MACHINE_DEFAULT = "machine default"


def setting(default: Any, help: str, *, low: float | None = None, high: float | None = None,
            choices: tuple[str, ...] | None = None, flag: str | None = None, metavar: str | None = None,
            default_is: str | None = None, see: str | None = None, vscode: str | None = None):
    """A Settings field with its description.

    default_is: what the default is where the machine or the model decides it (the field's own
        default then means "not chosen yet", or is what `Settings()` gives in-process).
    see: a page or anchor (relative to docs/) that says more.
    vscode: the VS Code setting's name where it is not the client name.
    """
    return field(default=default, metadata={
        "help": help, "low": low, "high": high, "choices": choices, "flag": flag, "metavar": metavar,
        "default_is": default_is, "see": see, "vscode": vscode})


@dataclass(frozen=True)
class Settings:
    verifier: str | None = setting(
        None, "the model whose output is shown: a preset name, model directory or `.gguf` file",
        flag="--verifier", metavar="SPEC", default_is=MACHINE_DEFAULT, see="models.md")
    draft: str | None = setting(
        None, "the draft model (a preset, directory or `.gguf`), or `none` for no draft model",
        flag="--draft", metavar="SPEC", default_is=MACHINE_DEFAULT)
    drafter: str = setting(
        "hybrid", "what proposes the tokens the verifier checks: prompt lookup, the draft model, both (hybrid), "
        "trained heads, token trees of them, or none (plain decoding)",
        choices=DRAFTER_MODES, flag="--drafter", default_is=MACHINE_DEFAULT, see="medusa.md")
    dtype: str | None = setting(
        None, "precision: `int8` or `int4` (those weights, CPU only), `bf16`, `fp16`, `fp32` or `auto`",
        flag="--dtype", metavar="DTYPE", default_is=MACHINE_DEFAULT)
    device: str | None = setting(
        None, "`cpu`, `cuda` or `cuda:N`", flag="--device", metavar="DEVICE", default_is=MACHINE_DEFAULT)
    budget_ms: float = setting(
        200.0, "answer with the text verified so far when this many milliseconds have passed since the request "
        "arrived (time waiting for the worker counts); no pass starts that would end past it",
        low=1, high=60_000, flag="--budget-ms", metavar="MS", see="#ready-notifications")
    max_new_tokens: int = setting(
        64, "the longest completion, in tokens", low=1, high=1024, flag="--max-new-tokens", metavar="N")
    multiline: str = setting(
        "auto", "multi-line completions: `auto` (tree-sitter decides at the cursor), `always` or `never`",
        choices=tuple(MULTILINE_POLICIES))
    enabled: bool = setting(True, "show completions; `false` switches them off everywhere", vscode="enable")
    disabled_languages: tuple[str, ...] = setting((), "LSP languageIds that get no completions")
    prefix_tokens: int | None = setting(
        None, "the prompt's token budget before the cursor", low=16, high=32_768, default_is=MACHINE_DEFAULT)
    suffix_tokens: int | None = setting(
        None, "the prompt's token budget after the cursor (it ends at a line end, never on the header of a block "
        "whose body it would cut off)", low=0, high=32_768, default_is=MACHINE_DEFAULT)
    other_documents_tokens: int | None = setting(
        None, "the prompt's token budget for snippets of other documents chosen for the cursor; 0 turns them off",
        low=0, high=32_768, default_is=MACHINE_DEFAULT, see="architecture.md#cross-file-context")
    cold_prefix_tokens: int | None = setting(
        None, "the prefix budget of a prompt no cache holds yet (after a jump, in a file just opened), short enough "
        "to prefill while the user looks; it grows with typing up to `prefixTokens`; 0 uses `prefixTokens` at once",
        low=0, high=32_768, default_is=MACHINE_DEFAULT, see="#ready-notifications")
    show_draft_first: bool = setting(
        False, "show the draft model's own answer inside the budget, then the verifier's where it differs (the ready "
        "notification): for a verifier too slow for the budget on this machine; needs a draft model",
        flag="--show-draft-first", see="models.md#the-draft-shown-before-the-verdict")
    compiled_step: bool = setting(
        False, "run the verifier's and the draft model's passes through the compiled decode step (torch.compile; CUDA "
        "graphs on a GPU), compiled in the background at load while the usual caches serve; off until a GPU run measures it",
        flag="--compiled-step", see="architecture.md#the-compiled-decode-step")
    adaptive_drafting: bool = setting(True, "switch to prompt lookup when draft acceptance stays under 50 %")
    warm: bool = setting(
        True, "prefill the prompt window at the cursor in the background before a completion is asked for",
        flag="--no-warm", see="#warming-the-cache")
    anticipate: bool = setting(
        True, "once the client has asked automatically, start the model at each small edit instead of at the "
        "request a debounce later", flag="--no-anticipate", see="#starting-at-the-edit")
    answer_before_next_key: bool = setting(
        True, "while the user types, end a request's budget before their next key is due; what is verified by "
        "then is shown, the rest follows as ghost text", see="#starting-at-the-edit")
    min_confidence: float | None = setting(
        None, "withhold an answer when the verifier's confidence in it (the geometric mean of its tokens' "
        "probabilities) is below this; 0 shows every answer; a withheld answer shows once its unsure start is typed",
        low=0, high=1, flag="--min-confidence", metavar="P",
        default_is="0.5 for the 0.5B, off for other models", see="benchmarks.md#confidence-gate")
    backend: str | None = setting(
        None, "complete from a shared OpenAI-compatible server (vLLM, SGLang, llama.cpp) at this URL instead of "
        "local models: http://127.0.0.1:PORT, or https:// for one on another machine",
        flag="--backend", metavar="URL", see="teams.md")
    backend_model: str | None = setting(
        None, "the model name the backend serves", flag="--backend-model", metavar="NAME",
        default_is="the first the backend lists")
    backend_tokenizer: str | None = setting(
        None, "the backend model's tokenizer here (preset, directory, `.gguf`), to send exact token ids; `none` "
        "sends text", flag="--backend-tokenizer", metavar="SPEC", default_is="`backendModel`, if it is found here")
    api_key_env: str | None = setting(
        None, "the environment variable holding the backend's bearer token", flag="--api-key-env", metavar="VAR")

    def model_key(self) -> tuple:
        """Settings whose change means loading models (or connecting to the backend) again."""
        if self.backend:
            return ("remote", self.backend, self.backend_model, self.backend_tokenizer, self.api_key_env)
        return (self.verifier, self.draft if needs_draft_model(self.drafter) else "none", self.dtype, self.device,
                self.show_draft_first, self.compiled_step)

    def language_enabled(self, language_id: str | None) -> bool:
        return self.enabled and (language_id or "") not in self.disabled_languages


# What `quickdraft serve` runs where nothing else is chosen (docs/server.md: "What runs by default where"):
# on a GPU a verifier with the 0.5B draft, the verifier chosen by the card's memory (below; the 1.5B
# where no card can be asked, as when "gpu" is named on a machine without one); on a CPU the 0.5B
# alone with prompt lookup, which answers a typical automatic request near the 200 ms budget.
MACHINE_DEFAULTS = {
    "gpu": {"verifier": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "drafter": "hybrid"},
    "cpu": {"verifier": "qwen2.5-coder-0.5b", "draft": "none", "drafter": "lookup"},
}


def machine_defaults(machine: str | None = None, *, gpu_memory: int | None = None) -> Settings:
    """The settings `quickdraft serve` starts from on this machine (or on `machine`: "gpu", "cpu").

    gpu_memory: the card's total memory in bytes (default: CUDA's card 0, where there is one).
    """
    if machine is None:
        from engine.models.loading import default_device

        machine = "gpu" if default_device().type == "cuda" else "cpu"
    defaults = dict(MACHINE_DEFAULTS[machine])
    if machine == "cpu":
        from engine.bench.calibration import load

        calibrated = load()  # `quickdraft doctor --calibrate`: the verifier this CPU affords
        if calibrated is not None:
            defaults["verifier"] = calibrated["verifier"]
    if machine == "gpu":
        choice = gpu_choice(gpu_memory)
        if choice is not None:
            defaults.update(verifier=choice.verifier, draft=choice.draft)
    return Settings(**defaults)


def gpu_choice(gpu_memory: int | None = None):
    """The pair the card affords (engine/models/gpu_pairs.py), or None where no card can be asked."""
    from engine.models import gpu_pairs

    memory = gpu_memory if gpu_memory is not None else gpu_pairs.card_memory()
    if memory is None:
        return None
    return gpu_pairs.gpu_pair_for(memory, installed=gpu_pairs.installed_pairs())


@dataclass(frozen=True)
class SettingSpec:
    """One setting as the table describes it."""

    name: str  # the field's
    client_name: str  # what clients send (camelCase)
    kind: type  # bool, int, float, str, or tuple (a list of strings)
    default: Any
    help: str
    low: float | None
    high: float | None
    choices: tuple[str, ...] | None
    flag: str | None
    metavar: str | None
    default_is: str | None
    see: str | None
    vscode: str | None

    def check(self, value: Any) -> Any:
        """A client's value as the field holds it; TypeError or ValueError say what is wrong."""
        if self.kind is tuple:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError("expected a list of strings")
            return tuple(value)
        if self.kind is bool:
            if not isinstance(value, bool):
                raise TypeError("expected true or false")
            return value
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError("expected a number")
            if not self.low <= value <= self.high:
                raise ValueError(f"expected {self.low}..{self.high}")
            if self.kind is int and value != int(value):
                raise ValueError("expected a whole number")
            return self.kind(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"expected one of {self.choices}")
        if value is not None and not isinstance(value, str):
            raise TypeError("expected a string")
        return value or None  # empty: back to the default

    def parse_flag(self, text: str) -> Any:
        """A flag's value (argparse names the flag and prints the message when it is wrong)."""
        if self.kind not in (int, float):
            return text
        expected = f"expected {'a whole number' if self.kind is int else 'a number'} from {self.low:g} to {self.high:g}"
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
        if not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"{expected}, got {text}")
        return value


def _camel_case(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _kind(annotation) -> type:
    """bool, int, float, str or tuple from `X`, `X | None` or `tuple[str, ...]`."""
    if typing.get_origin(annotation) is tuple:
        return tuple
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


_HINTS = typing.get_type_hints(Settings)
SETTINGS: tuple[SettingSpec, ...] = tuple(
    SettingSpec(name=f.name, client_name=_camel_case(f.name), kind=_kind(_HINTS[f.name]), default=f.default,
                **f.metadata)
    for f in fields(Settings))
_BY_CLIENT_NAME = {spec.client_name: spec for spec in SETTINGS} | {spec.name: spec for spec in SETTINGS}


def apply_client_settings(base: Settings, options: Any) -> Settings:
    """Overlay settings sent by the client; wrong types or values are logged and ignored."""
    if not isinstance(options, dict):
        return base
    if isinstance(options.get("quickdraft"), dict):  # workspace/didChangeConfiguration nests a section
        options = options["quickdraft"]
    changes: dict[str, Any] = {}
    for client_name, value in options.items():
        spec = _BY_CLIENT_NAME.get(client_name)
        if spec is None:
            continue
        try:
            changes[spec.name] = spec.check(value)
        except (TypeError, ValueError) as error:
            log.warning("ignoring setting %s=%r: %s", client_name, value, error)
    return replace(base, **changes)


def client_settings(settings: Settings) -> dict[str, Any]:
    """The settings by their client names, as JSON values (None: the machine's or the model's default)."""
    values = {spec.client_name: getattr(settings, spec.name) for spec in SETTINGS}
    return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}


def add_setting_flags(parser, names: typing.Collection[str] | None = None) -> None:
    """The command-line flag of each setting that has one (of `names`, field names). No defaults:
    an unset flag keeps the machine's default (`settings_from_flags`)."""
    for spec in SETTINGS:
        if spec.flag is None or (names is not None and spec.name not in names):
            continue
        help = spec.help.replace("%", "%%")  # argparse formats help with %
        if spec.kind is bool:  # a switch that turns the setting's default off (or on)
            parser.add_argument(spec.flag, dest=spec.name, action="store_const", const=not spec.default,
                                help=f"turn `{spec.client_name}` {'off' if spec.default else 'on'}: {help}")
            continue
        default = spec.default_is or (f"{spec.default:g}" if spec.kind in (int, float) else spec.default)
        parser.add_argument(spec.flag, dest=spec.name, type=spec.parse_flag, choices=spec.choices,
                            metavar=spec.metavar, help=f"{help} (default: {default or 'unset'})")


def settings_from_flags(base: Settings, args: argparse.Namespace) -> Settings:
    """`base` with the settings the command line set (flags from `add_setting_flags`)."""
    chosen = {spec.name: getattr(args, spec.name, None) for spec in SETTINGS if spec.flag}
    return replace(base, **{name: value for name, value in chosen.items() if value is not None})
