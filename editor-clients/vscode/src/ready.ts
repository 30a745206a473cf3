// `quickdraft/completionReady`: the server answered a request late (empty, at its deadline),
// kept working, and now has the answer for (uri, version, position). If the user is still
// there — same document, same version, one cursor at that position — the extension asks VS
// Code to ask again (`editor.action.inlineSuggest.trigger`), and the server serves the kept
// answer without a model pass. Anything else, including malformed params, is ignored.
// No `vscode` import: tested directly.

export const READY_NOTIFICATION = 'quickdraft/completionReady';
export const TRIGGER_COMMAND = 'editor.action.inlineSuggest.trigger';

export interface ReadyParams {
  uri: string;
  version: number;
  line: number;
  character: number;
}

/** Where the user is now: the active editor's document and its selections. */
export interface EditorState {
  uri: string; // as the language client sends it (code2ProtocolConverter.asUri)
  version: number;
  selections: Array<{ line: number; character: number; empty: boolean }>; // active ends
}

function isIndex(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/** The notification's params, or undefined when they are not what the protocol says. */
export function parseReadyParams(params: unknown): ReadyParams | undefined {
  if (!params || typeof params !== 'object') return undefined;
  const { textDocument, position } = params as { textDocument?: unknown; position?: unknown };
  if (!textDocument || typeof textDocument !== 'object' || !position || typeof position !== 'object') return undefined;
  const { uri, version } = textDocument as { uri?: unknown; version?: unknown };
  const { line, character } = position as { line?: unknown; character?: unknown };
  if (typeof uri !== 'string' || uri === '' || typeof version !== 'number' || !Number.isInteger(version)) return undefined;
  if (!isIndex(line) || !isIndex(character)) return undefined;
  return { uri, version, line, character };
}

/** One spelling of a URI for comparison: scheme lower-case, the rest percent-decoded. */
export function comparableUri(uri: string): string {
  const match = /^([a-zA-Z][\w+.-]*):(.*)$/s.exec(uri);
  const scheme = match ? match[1].toLowerCase() : '';
  let rest = match ? match[2] : uri;
  try {
    rest = decodeURIComponent(rest);
  } catch {
    // A malformed escape: compare as sent.
  }
  return `${scheme}:${rest}`;
}

/** True when the ready answer is for where the user is now, so asking again shows it. */
export function readyMatches(params: unknown, editor: EditorState | undefined): boolean {
  const ready = parseReadyParams(params);
  if (!ready || !editor) return false;
  if (editor.version !== ready.version) return false;
  if (editor.selections.length !== 1) return false;
  const [cursor] = editor.selections;
  if (!cursor.empty || cursor.line !== ready.line || cursor.character !== ready.character) return false;
  return editor.uri === ready.uri || comparableUri(editor.uri) === comparableUri(ready.uri);
}
