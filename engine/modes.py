"""Names the engine, the server, the CLI and the benchmarks share (no torch here).

Drafter modes — how the verifier gets the tokens it checks:
    hybrid   prompt lookup first, the draft model where lookup has nothing; without a
             draft model but with trained heads: the heads' tree and lookup together
             (the feature head where it is trained, else the Medusa heads)
    lookup   n-grams of the prompt and the open documents only (no second model)
    draft    the draft model only
    medusa   the verifier's trained Medusa heads (a token tree)
    feature  the verifier's trained feature-level head (EAGLE-style: a chain and its runners-up)
    hybrid-tree, lookup-tree, draft-tree   the same as token trees: several candidates per pass
    none     no drafts: one verifier pass per token

Multiline policies — whether a completion may span lines:
    auto     decided from the syntax at the cursor
    always   / never
"""

from __future__ import annotations

from engine.errors import ConfigError

DRAFTER_MODES = ("hybrid", "lookup", "draft", "medusa", "feature", "hybrid-tree", "lookup-tree", "draft-tree", "none")
DRAFT_MODEL_MODES = ("hybrid", "draft", "hybrid-tree", "draft-tree")  # the modes that load and run a draft model

# Policy name → CompletionRequest.multiline (None: decide from the syntax).
MULTILINE_POLICIES: dict[str, bool | None] = {"auto": None, "always": True, "never": False}


def check_drafter(mode: str) -> str:
    """`mode` itself when it is a drafter mode; otherwise the one error every caller raises."""
    if mode not in DRAFTER_MODES:
        raise ConfigError(f"unknown drafter {mode!r}; choose one of {', '.join(DRAFTER_MODES)}")
    return mode


def needs_draft_model(mode: str) -> bool:
    return mode in DRAFT_MODEL_MODES


def multiline_flag(policy: str) -> bool | None:
    """The request's multiline value for a policy name."""
    try:
        return MULTILINE_POLICIES[policy]
    except KeyError:
        raise ConfigError(f"unknown multiline policy {policy!r}; choose one of {', '.join(MULTILINE_POLICIES)}") from None
