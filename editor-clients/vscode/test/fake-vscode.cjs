// A stand-in for the `vscode` module: just enough of VS Code's extension API for
// vscode-languageclient 10 and our extension to run in plain Node, with hooks for the tests
// (open/edit documents, read the status bar, call the registered inline-completion provider).
// Anything not implemented throws a clear error instead of returning undefined.
'use strict';
const path = require('path');
const { pathToFileURL, fileURLToPath } = require('url');

class Disposable {
  constructor(fn) { this._fn = fn; }
  static from(...items) { return new Disposable(() => items.forEach((d) => d && d.dispose && d.dispose())); }
  dispose() { if (this._fn) { const fn = this._fn; this._fn = undefined; fn(); } }
}

class EventEmitter {
  constructor() {
    this._listeners = new Set();
    this.event = (listener, thisArg, disposables) => {
      const entry = thisArg ? listener.bind(thisArg) : listener;
      this._listeners.add(entry);
      const d = new Disposable(() => this._listeners.delete(entry));
      if (Array.isArray(disposables)) disposables.push(d);
      return d;
    };
  }
  fire(value) { for (const l of [...this._listeners]) l(value); }
  dispose() { this._listeners.clear(); }
}

class CancellationError extends Error { constructor() { super('Canceled'); this.name = 'Canceled'; } }

class CancellationTokenSource {
  constructor() {
    const emitter = new EventEmitter();
    this._emitter = emitter;
    this.token = { isCancellationRequested: false, onCancellationRequested: emitter.event };
  }
  cancel() {
    if (!this.token.isCancellationRequested) { this.token.isCancellationRequested = true; this._emitter.fire(); }
  }
  dispose() { this._emitter.dispose(); }
}

class Uri {
  constructor(scheme, p) { this.scheme = scheme; this.path = p; this.authority = ''; this.query = ''; this.fragment = ''; }
  static file(p) { return new Uri('file', path.resolve(p)); }
  static parse(value) {
    if (value.startsWith('file:')) return Uri.file(fileURLToPath(value));
    const m = /^([a-zA-Z][\w+.-]*):(.*)$/.exec(value);
    return new Uri(m ? m[1] : 'file', m ? m[2] : value);
  }
  get fsPath() { return this.path; }
  with(change) { return new Uri(change.scheme ?? this.scheme, change.path ?? this.path); }
  toString() { return this.scheme === 'file' ? pathToFileURL(this.path).href : `${this.scheme}:${this.path}`; }
  toJSON() { return { scheme: this.scheme, path: this.path }; }
}

class Position {
  constructor(line, character) { this.line = line; this.character = character; }
  isEqual(o) { return this.line === o.line && this.character === o.character; }
  isBefore(o) { return this.line < o.line || (this.line === o.line && this.character < o.character); }
  translate(dl = 0, dc = 0) { return new Position(this.line + dl, this.character + dc); }
}

class Range {
  constructor(a, b, c, d) {
    if (typeof a === 'number') { this.start = new Position(a, b); this.end = new Position(c, d); }
    else { this.start = a; this.end = b; }
  }
  get isEmpty() { return this.start.isEqual(this.end); }
  get isSingleLine() { return this.start.line === this.end.line; }
}

class Selection extends Range {
  constructor(anchor, active) { super(anchor, active); this.anchor = anchor; this.active = active; }
}
class Location { constructor(uri, range) { this.uri = uri; this.range = range; } }

class InlineCompletionItem {
  constructor(insertText, range, command) { this.insertText = insertText; this.range = range; this.command = command; }
}
class InlineCompletionList { constructor(items) { this.items = items; } }
const InlineCompletionTriggerKind = { Invoke: 0, Automatic: 1 };

class ThemeColor { constructor(id) { this.id = id; } }
class MarkdownString { constructor(value = '') { this.value = value; } appendText(t) { this.value += t; return this; } appendMarkdown(t) { this.value += t; return this; } }
class SnippetString { constructor(value = '') { this.value = value; } }
// Base classes vscode-languageclient extends when it loads (their behaviour is not needed).
class CallHierarchyItem {} class CodeLens {} class CompletionItem {} class DocumentLink {} class InlayHint {}
class SymbolInformation {} class TypeHierarchyItem {} class CodeAction {} class Diagnostic {}
class CodeActionKind {
  constructor(value) { this.value = value; }
  append(part) { return new CodeActionKind(this.value ? `${this.value}.${part}` : part); }
}
for (const [name, value] of Object.entries({ Empty: '', QuickFix: 'quickfix', Refactor: 'refactor',
  RefactorExtract: 'refactor.extract', RefactorInline: 'refactor.inline', RefactorRewrite: 'refactor.rewrite',
  Source: 'source', SourceOrganizeImports: 'source.organizeImports', SourceFixAll: 'source.fixAll' })) {
  CodeActionKind[name] = new CodeActionKind(value);
}
class TabInputText {} class TabInputTextDiff {} class TabInputNotebook {} class TabInputCustom {} class TabInputNotebookDiff {}

/** A text document whose content the test edits through `editDocument`. */
class TextDocument {
  constructor(uri, languageId, text) {
    this.uri = uri; this.languageId = languageId; this.version = 1; this._text = text;
    this.isClosed = false; this.isDirty = false; this.isUntitled = false; this.eol = 1; this.encoding = 'utf8';
  }
  get fileName() { return this.uri.fsPath; }
  get lineCount() { return this._lines().length; }
  _lines() { return this._text.split('\n'); }
  getText(range) {
    if (!range) return this._text;
    return this._text.slice(this.offsetAt(range.start), this.offsetAt(range.end));
  }
  lineAt(lineOrPos) {
    const line = typeof lineOrPos === 'number' ? lineOrPos : lineOrPos.line;
    const text = this._lines()[line];
    return { lineNumber: line, text, range: new Range(line, 0, line, text.length), isEmptyOrWhitespace: !text.trim() };
  }
  offsetAt(pos) {
    const lines = this._lines();
    let offset = 0;
    for (let i = 0; i < pos.line && i < lines.length; i++) offset += lines[i].length + 1;
    return offset + Math.min(pos.character, (lines[pos.line] ?? '').length);
  }
  positionAt(offset) {
    const before = this._text.slice(0, offset).split('\n');
    return new Position(before.length - 1, before[before.length - 1].length);
  }
  save() { return Promise.resolve(true); }
}

// ---------------------------------------------------------------- state the tests look at
const state = {
  settings: {}, // flat: 'quickdraft.enable' -> value
  commands: new Map(),
  inlineProviders: [], // { selector, provider }
  statusItems: [],
  messages: [], // { kind, text }
  outputChannels: [],
  textDocuments: [],
  activeEditor: undefined, // set by showEditor
};

const events = {
  didOpen: new EventEmitter(), didClose: new EventEmitter(), didChange: new EventEmitter(),
  willSave: new EventEmitter(), didSave: new EventEmitter(), didChangeConfiguration: new EventEmitter(),
  didChangeWorkspaceFolders: new EventEmitter(), didChangeActiveEditor: new EventEmitter(),
  didChangeVisibleEditors: new EventEmitter(), didChangeTabs: new EventEmitter(),
  didChangeSelection: new EventEmitter(),
  didChangeLogLevel: new EventEmitter(),
};

function getConfiguration(section) {
  const prefix = section ? `${section}.` : '';
  return {
    get(key, defaultValue) {
      const full = prefix + key;
      if (full in state.settings) return state.settings[full];
      // A nested section read (e.g. get('server') of 'quickdraft').
      const nested = {};
      let found = false;
      for (const [k, v] of Object.entries(state.settings)) {
        if (k.startsWith(full + '.')) { nested[k.slice(full.length + 1)] = v; found = true; }
      }
      return found ? nested : defaultValue;
    },
    has(key) { return (prefix + key) in state.settings; },
    inspect(key) { return { key: prefix + key, globalValue: state.settings[prefix + key] }; },
    update(key, value) { setSettings({ [prefix + key]: value }); return Promise.resolve(); },
  };
}

function setSettings(values) {
  Object.assign(state.settings, values);
  const keys = Object.keys(values);
  events.didChangeConfiguration.fire({
    affectsConfiguration: (section) => keys.some((k) => k === section || k.startsWith(section + '.')),
  });
}

function matchScore(selector, document) {
  const selectors = Array.isArray(selector) ? selector : [selector];
  let best = 0;
  for (const s of selectors) {
    if (typeof s === 'string') { if (s === document.languageId || s === '*') best = Math.max(best, 10); continue; }
    if (s.language && s.language !== '*' && s.language !== document.languageId) continue;
    if (s.scheme && s.scheme !== '*' && s.scheme !== document.uri.scheme) continue;
    if (s.pattern) continue; // patterns are not needed by these tests
    best = Math.max(best, s.language === document.languageId ? 10 : 5);
  }
  return best;
}

function outputChannel(name) {
  const lines = [];
  const channel = {
    name, lines, logLevel: 1 /* Trace: the client traces LSP messages at this level */, onDidChangeLogLevel: events.didChangeLogLevel.event,
    append: (t) => lines.push(t), appendLine: (t) => lines.push(t), replace: (t) => { lines.length = 0; lines.push(t); },
    clear: () => { lines.length = 0; }, show() {}, hide() {}, dispose() {},
  };
  for (const level of ['trace', 'debug', 'info', 'warn', 'error']) channel[level] = (t) => lines.push(`[${level}] ${t}`);
  state.outputChannels.push(channel);
  return channel;
}

function message(kind) {
  return (text, ...rest) => {
    state.messages.push({ kind, text });
    return Promise.resolve(undefined);
  };
}

const registerNothing = () => new Disposable(() => undefined);

const api = {
  version: '1.91.0',
  Disposable, EventEmitter, CancellationError, CancellationTokenSource, Uri, Position, Range, Selection, Location,
  InlineCompletionItem, InlineCompletionList, InlineCompletionTriggerKind, ThemeColor, MarkdownString, SnippetString,
  CallHierarchyItem, CodeLens, CompletionItem, DocumentLink, InlayHint, SymbolInformation, TypeHierarchyItem,
  CodeAction, Diagnostic, CodeActionKind,
  DiagnosticSeverity: { Error: 0, Warning: 1, Information: 2, Hint: 3 },
  DiagnosticTag: { Unnecessary: 1, Deprecated: 2 },
  SymbolKind: { Property: 6, TypeParameter: 25 },
  SymbolTag: { Deprecated: 1 },
  CompletionItemTag: { Deprecated: 1 },
  CompletionItemKind: { Text: 0 },
  CompletionTriggerKind: { Invoke: 0, TriggerCharacter: 1, TriggerForIncompleteCompletions: 2 },
  SignatureHelpTriggerKind: { Invoke: 1, TriggerCharacter: 2, ContentChange: 3 },
  CodeActionTriggerKind: { Invoke: 1, Automatic: 2 },
  DocumentHighlightKind: { Text: 0, Read: 1, Write: 2 },
  FoldingRangeKind: { Comment: 1, Imports: 2, Region: 3 },
  TabInputText, TabInputTextDiff, TabInputNotebook, TabInputCustom, TabInputNotebookDiff,
  ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
  StatusBarAlignment: { Left: 1, Right: 2 },
  ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
  LogLevel: { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 },
  EndOfLine: { LF: 1, CRLF: 2 },
  TextDocumentSaveReason: { Manual: 1, AfterDelay: 2, FocusOut: 3 },
  env: { appName: 'fake-vscode', language: 'en', machineId: 'test', sessionId: 'test', uriScheme: 'vscode', openExternal: () => Promise.resolve(true) },
  extensions: { getExtension: () => undefined, all: [] },
  commands: {
    registerCommand(id, fn) {
      if (state.commands.has(id)) throw new Error(`command '${id}' already exists`);
      state.commands.set(id, fn);
      return new Disposable(() => state.commands.delete(id));
    },
    executeCommand(id, ...args) {
      const fn = state.commands.get(id);
      if (!fn) return Promise.reject(new Error(`command '${id}' not found`));
      return Promise.resolve().then(() => fn(...args));
    },
    getCommands: () => Promise.resolve([...state.commands.keys()]),
  },
  window: {
    get activeTextEditor() { return state.activeEditor; },
    visibleTextEditors: [],
    onDidChangeActiveTextEditor: events.didChangeActiveEditor.event,
    onDidChangeTextEditorSelection: events.didChangeSelection.event,
    onDidChangeVisibleTextEditors: events.didChangeVisibleEditors.event,
    tabGroups: { all: [], onDidChangeTabs: events.didChangeTabs.event },
    createOutputChannel: outputChannel,
    createStatusBarItem(id, alignment, priority) {
      let text = '';
      const item = { id, alignment, priority, tooltip: '', command: undefined, visible: false, history: [],
        get text() { return text; },
        set text(value) { text = value; if (this.history[this.history.length - 1] !== value) this.history.push(value); },
        show() { this.visible = true; }, hide() { this.visible = false; }, dispose() { this.visible = false; } };
      state.statusItems.push(item);
      return item;
    },
    showInformationMessage: message('info'),
    showWarningMessage: message('warning'),
    showErrorMessage: message('error'),
    withProgress: (options, task) => task({ report() {} }, new CancellationTokenSource().token),
    showTextDocument: () => Promise.resolve(undefined),
  },
  workspace: {
    get workspaceFolders() { return state.workspaceFolders; },
    get textDocuments() { return state.textDocuments; },
    notebookDocuments: [],
    getConfiguration,
    onDidOpenTextDocument: events.didOpen.event,
    onDidCloseTextDocument: events.didClose.event,
    onDidChangeTextDocument: events.didChange.event,
    onWillSaveTextDocument: events.willSave.event,
    onDidSaveTextDocument: events.didSave.event,
    onDidChangeConfiguration: events.didChangeConfiguration.event,
    onDidChangeWorkspaceFolders: events.didChangeWorkspaceFolders.event,
    createFileSystemWatcher: () => ({ onDidCreate: registerNothing, onDidChange: registerNothing, onDidDelete: registerNothing, dispose() {} }),
    applyEdit: () => Promise.resolve(true),
    getWorkspaceFolder: (uri) => (state.workspaceFolders ?? []).find((f) => uri.fsPath.startsWith(f.uri.fsPath)),
    registerTextDocumentContentProvider: registerNothing,
    // Events these tests never fire.
    onDidCreateFiles: registerNothing, onDidDeleteFiles: registerNothing, onDidRenameFiles: registerNothing,
    onWillCreateFiles: registerNothing, onWillDeleteFiles: registerNothing, onWillRenameFiles: registerNothing,
    onDidOpenNotebookDocument: registerNothing, onDidChangeNotebookDocument: registerNothing,
    onDidSaveNotebookDocument: registerNothing, onDidCloseNotebookDocument: registerNothing,
  },
  languages: {
    match: matchScore,
    registerInlineCompletionItemProvider(selector, provider) {
      const entry = { selector, provider };
      state.inlineProviders.push(entry);
      return new Disposable(() => state.inlineProviders.splice(state.inlineProviders.indexOf(entry), 1));
    },
    createDiagnosticCollection: (name) => ({ name, set() {}, delete() {}, clear() {}, forEach() {}, get() { return []; }, has() { return false; }, dispose() {} }),
  },
};

// Every other `languages.register*Provider` only needs to hand back a Disposable.
for (const name of ['registerCompletionItemProvider', 'registerHoverProvider', 'registerSignatureHelpProvider',
  'registerDefinitionProvider', 'registerReferenceProvider', 'registerDocumentHighlightProvider',
  'registerDocumentSymbolProvider', 'registerWorkspaceSymbolProvider', 'registerCodeActionsProvider',
  'registerCodeLensProvider', 'registerDocumentFormattingEditProvider', 'registerDocumentRangeFormattingEditProvider',
  'registerOnTypeFormattingEditProvider', 'registerRenameProvider', 'registerDocumentLinkProvider',
  'registerColorProvider', 'registerFoldingRangeProvider', 'registerDeclarationProvider',
  'registerImplementationProvider', 'registerTypeDefinitionProvider', 'registerSelectionRangeProvider',
  'registerCallHierarchyProvider', 'registerTypeHierarchyProvider', 'registerInlayHintsProvider',
  'registerInlineValuesProvider', 'registerLinkedEditingRangeProvider', 'registerDocumentSemanticTokensProvider',
  'registerDocumentRangeSemanticTokensProvider']) {
  api.languages[name] = registerNothing;
}

function strict(obj, where) {
  return new Proxy(obj, {
    get(target, prop) {
      if (prop in target || typeof prop === 'symbol' || prop === 'then' || prop === '__esModule' || prop === 'default') {
        const value = target[prop];
        return value && typeof value === 'object' && !Array.isArray(value) && Object.getPrototypeOf(value) === Object.prototype
          && ['window', 'workspace', 'languages', 'commands', 'env'].includes(prop) ? strict(value, `${where}.${String(prop)}`) : value;
      }
      throw new Error(`fake vscode: ${where}.${String(prop)} is not implemented`);
    },
  });
}

// ---------------------------------------------------------------- test hooks
const testing = {
  state,
  setSettings,
  setWorkspaceFolders(dirs) { state.workspaceFolders = dirs.map((d, index) => ({ uri: Uri.file(d), name: path.basename(d), index })); },
  openDocument(file, languageId, text) {
    const doc = new TextDocument(Uri.file(file), languageId, text);
    state.textDocuments.push(doc);
    events.didOpen.fire(doc);
    return doc;
  },
  /** Replace `range` with `text`, as typing would, and tell the listeners incrementally. */
  editDocument(doc, range, text) {
    const start = doc.offsetAt(range.start);
    const end = doc.offsetAt(range.end);
    doc._text = doc._text.slice(0, start) + text + doc._text.slice(end);
    doc.version += 1;
    events.didChange.fire({ document: doc, reason: undefined,
      contentChanges: [{ range, rangeOffset: start, rangeLength: end - start, text }] });
  },
  closeDocument(doc) {
    state.textDocuments.splice(state.textDocuments.indexOf(doc), 1);
    doc.isClosed = true;
    events.didClose.fire(doc);
  },
  /** Make `doc` the active editor with its cursor at `position`, as clicking its tab would. */
  showEditor(doc, position) {
    const selection = new Selection(position, position);
    state.activeEditor = { document: doc, selection, selections: [selection], visibleRanges: [], options: {}, viewColumn: 1 };
    events.didChangeActiveEditor.fire(state.activeEditor);
    return state.activeEditor;
  },
  /** Move the cursor of `editor`, as a click or an arrow key would. */
  moveCursor(editor, position) {
    editor.selection = new Selection(position, position);
    editor.selections = [editor.selection];
    events.didChangeSelection.fire({ textEditor: editor, selections: editor.selections, kind: 1 });
  },
  inlineProviderFor(doc) {
    const entry = state.inlineProviders.find((p) => matchScore(p.selector, doc) > 0);
    return entry && entry.provider;
  },
};

module.exports = strict(api, 'vscode');
module.exports.__testing = testing;
