"""The languages quickdraft knows, and what differs between them: one table per question.

LSP languageIds and file extensions name a language; a tree-sitter grammar wheel from PyPI
(they work offline) parses it; its block node types bound a multi-line completion; its
string and comment node types keep a completion on one line. Python's blocks are
indentation, every other language here delimits them with braces. A language without a
grammar is still named (the prompt and the indentation heuristics use the name).
"""

from __future__ import annotations

# LSP languageId → our language name. Names with a grammar are listed in GRAMMARS.
LANGUAGE_IDS = {
    "python": "python",
    "javascript": "javascript",
    "javascriptreact": "javascript",  # the JS grammar parses JSX
    "typescript": "typescript",
    "typescriptreact": "tsx",
    "tsx": "tsx",
    "go": "go",
    "rust": "rust",
    "java": "java",
    "c": "c",
    "cpp": "cpp",
    "c++": "cpp",
    "cuda-cpp": "cpp",
    "csharp": "csharp",
    "cs": "csharp",  # Neovim's filetype, which its LSP client sends as the languageId
    "c#": "csharp",
}
EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".h++": "cpp", ".ipp": "cpp", ".tcc": "cpp", ".inl": "cpp", ".cu": "cpp",
    ".cs": "csharp", ".csx": "csharp",
    ".kt": "kotlin", ".rb": "ruby", ".lua": "lua", ".sh": "shellscript",
    ".swift": "swift", ".scala": "scala", ".php": "php",
}
# language → (module of its grammar wheel, function returning the grammar's language pointer)
GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "csharp": ("tree_sitter_c_sharp", "language"),
}
# Languages whose blocks are delimited by indentation rather than braces.
INDENT_LANGUAGES = {"python"}
# Languages whose declarations run over several top-level lines: a return type above the
# function's name (`static int` / `main(void)`), a brace on a line of its own (`{` below
# `namespace N` or a function): a parse starting at such a line starts mid-declaration.
SPLIT_DECLARATION_LANGUAGES = {"c", "cpp", "csharp", "java", "rust"}
# Languages with macros tree-sitter cannot expand (`BAD_CAST key_file`, `GLAPIENTRY f(...)`):
# an error it reports there is often no error at all.
MACRO_LANGUAGES = {"c", "cpp"}

# Node types that hold a block body: the scope a multi-line completion stays inside.
_C_BLOCKS = {"compound_statement", "field_declaration_list", "enumerator_list", "initializer_list"}
BLOCK_TYPES = {
    "python": {"block"},
    "javascript": {"statement_block", "class_body", "switch_body", "object"},
    "typescript": {"statement_block", "class_body", "switch_body", "object", "interface_body", "enum_body", "object_type"},
    "tsx": {"statement_block", "class_body", "switch_body", "object", "interface_body", "enum_body", "object_type"},
    "go": {"block", "field_declaration_list", "method_spec_list", "literal_value", "expression_switch_statement",
           "type_switch_statement", "select_statement"},
    "rust": {"block", "declaration_list", "field_declaration_list", "match_block", "enum_variant_list"},
    "java": {"block", "class_body", "interface_body", "enum_body", "switch_block", "constructor_body",
             "annotation_type_body", "array_initializer"},
    "c": _C_BLOCKS,
    "cpp": _C_BLOCKS | {"declaration_list"},
    "csharp": {"block", "declaration_list", "accessor_list", "switch_body", "enum_member_declaration_list",
               "initializer_expression"},
}

# Substrings of the node types of strings and comments (every grammar's names for them:
# string_literal, raw_string_literal, interpolated_string_expression, char_literal,
# character_literal, line_comment, block_comment, template_string, …; not C++'s template_declaration).
STRINGISH = ("string", "comment", "template_string", "template_literal", "char_literal", "character_literal", "heredoc")

# The line comment marker, for languages whose comments are not `//`.
LINE_COMMENT = {"python": "#", "ruby": "#", "shellscript": "#"}

# A line at a block header's own indentation that continues its statement rather than
# ending it: Python's `elif`/`else:`/`except`, and in brace languages an `else` or `catch`
# on a line of its own (Allman style) or a `case` label at the switch's indentation (Go, the
# Linux kernel's C), and the lone `{` of an Allman header; `} else {` is recognised by its brackets.
CONTINUATION = {
    "python": r"(elif\b.*|else|except\b.*|finally|case\b.*):$",
}
BRACE_CONTINUATION = r"(else|catch|finally)\b.*|case\b.*:.*|default\s*:.*|\{"
