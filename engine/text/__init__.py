"""The text around the cursor: what goes into the prompt, and what comes out as ghost text.

Pure text and tree-sitter; only healing.py touches tensors (the healing constraint's mask).

cursor.py          one request's cursor context: language, line parts, syntax window, single or multi-line
languages.py       per-language facts: extensions, grammars, block types, comment markers
syntax.py          tree-sitter parsers, line helpers, block heuristics, a completion's scope
parse_window.py    where the parsed window around the cursor starts and ends
syntax_check.py    does a completion leave the file parsing?
fim.py             fill-in-the-middle templates per model family
prompt.py          token-budgeted prompts: prefix, suffix, other documents
document_prompts.py  per document: the anchored prompt while typing, prefix windows that stick
anchor.py          anchored fill-in-the-middle: what was typed since the anchor
healing.py         token healing at the cursor
crossfile.py       snippets from other documents: definitions and similar windows
postprocess.py     a raw completion trimmed to what the editor shows
range_correction.py  how many characters after the cursor a completion replaces
text_stream.py     the stop strings a cursor gives; output tokens → text deltas, cut at a stop string
sources.py         source files on this machine: which to read, and how
"""
