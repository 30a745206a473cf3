"""The documents the editor has open, keyed and split the way LSP says.

Two places where pygls's workspace disagrees with LSP are fixed here, in subclasses:

- **One spelling per URI.** pygls keys documents by `unquote(uri)` while the rest of a
  server sees the URI as sent, so `file:///a/sp%20ace.py` was stored but never found.
  `canonical_uri` is the one normalisation: the protocol applies it to every incoming
  `textDocument.uri` and the workspace keys by it, so every lookup agrees.
- **Lines end only at `\\n`, `\\r\\n` and `\\r`.** pygls splits with `str.splitlines`,
  which also breaks at `\\f`, `\\v`, `\\x1c`–`\\x1e`, `\\x85`, `\\u2028` and `\\u2029`; an edit
  after a form feed then landed on the wrong line and the text drifted from the editor's.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from urllib.parse import quote, unquote_to_bytes, urlsplit, urlunsplit

from pygls.workspace import TextDocument as PyglsTextDocument
from pygls.workspace import Workspace as PyglsWorkspace

_LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
RECENT_EDITS = 16  # documents remembered as recently edited, for cross-file context (engine/text/crossfile.py)
CLOSED_KEPT = 8  # recently edited documents whose text is kept after they are closed
CLOSED_MAX_CHARS = 200_000  # a larger closed document is not kept


def canonical_uri(uri: str) -> str:
    """One spelling of a URI: the path percent-decoded to bytes and re-encoded the way VS Code
    does (`sp ace` and `sp%20ace` become `sp%20ace`); scheme lower-case; the rest as sent."""
    try:
        parts = urlsplit(uri)
    except ValueError:  # not a URI at all (e.g. a bad IPv6 host): keep it as it is
        return uri
    # Bytes, not text: %FF and %FE stay distinct, and a lone surrogate cannot stop the encoder.
    raw_path = unquote_to_bytes(parts.path.encode("utf-8", "surrogatepass"))
    return urlunsplit((parts.scheme.lower(), parts.netloc, quote(raw_path, safe="/"), parts.query, parts.fragment))


def lsp_lines(text: str) -> tuple[str, ...]:
    """Lines with their endings, split only where LSP ends a line."""
    lines = text.splitlines(True)  # fast, and right unless the text has other breaks
    lsp_breaks = text.count("\n") + text.count("\r") - text.count("\r\n")
    unterminated = bool(text) and not text.endswith(("\n", "\r"))
    # splitlines breaks at every LSP break and maybe more: equal counts mean equal lines.
    if len(lines) == lsp_breaks + unterminated:
        return tuple(lines)
    return tuple(_LSP_LINE.findall(text))


class TextDocument(PyglsTextDocument):
    @property
    def lines(self) -> tuple[str, ...]:  # pygls: tuple(self.source.splitlines(True))
        return lsp_lines(self.source)


class Workspace(PyglsWorkspace):
    """pygls's workspace with canonical URI keys and LSP line splitting, and a memory of recent edits:
    the documents edited last (most recent at the end), and the text of recently edited ones since closed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recent_edits: OrderedDict[str, None] = OrderedDict()
        self.closed_documents: OrderedDict[str, str] = OrderedDict()  # uri → its last text

    @classmethod
    def like(cls, workspace: PyglsWorkspace) -> "Workspace":
        return cls(workspace.root_uri, workspace._sync_kind, list(workspace.folders.values()),
                   workspace.position_encoding)

    def _create_text_document(self, doc_uri, source=None, version=None, language_id=None) -> TextDocument:
        return TextDocument(canonical_uri(doc_uri), source=source, version=version, language_id=language_id,
                            sync_kind=self._sync_kind, position_codec=self.position_codec)

    def get_text_document(self, doc_uri: str) -> TextDocument:
        return self.text_documents.get(canonical_uri(doc_uri)) or self._create_text_document(doc_uri)

    def put_text_document(self, text_document, notebook_uri=None) -> None:
        self.closed_documents.pop(canonical_uri(text_document.uri), None)  # open again: its live text counts
        self.text_documents[canonical_uri(text_document.uri)] = self._create_text_document(
            text_document.uri, source=text_document.text, version=text_document.version,
            language_id=text_document.language_id)

    def remove_text_document(self, doc_uri: str) -> None:
        uri = canonical_uri(doc_uri)
        document = self.text_documents.pop(uri, None)
        if document is not None and uri in self.recent_edits and len(document.source) <= CLOSED_MAX_CHARS:
            self.closed_documents[uri] = document.source
            self.closed_documents.move_to_end(uri)
            while len(self.closed_documents) > CLOSED_KEPT:
                self.closed_documents.popitem(last=False)

    def update_text_document(self, text_doc, change) -> None:
        uri = canonical_uri(text_doc.uri)
        document = self.text_documents[uri]
        document.apply_change(change)
        document.version = text_doc.version
        self.recent_edits[uri] = None
        self.recent_edits.move_to_end(uri)
        while len(self.recent_edits) > RECENT_EDITS:
            self.recent_edits.popitem(last=False)
