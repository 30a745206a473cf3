"""Fixtures the text tests share."""

from __future__ import annotations

import pytest

import engine.text.syntax as syntax


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """Every text tree-sitter parses during the test, in order."""
    seen: list[str] = []
    real = syntax.parse

    def spy(language, text):
        seen.append(text)
        return real(language, text)

    monkeypatch.setattr(syntax, "parse", spy)
    return seen
