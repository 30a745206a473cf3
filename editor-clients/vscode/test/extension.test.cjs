// Fast tier: our extension + the real vscode-languageclient (stand-in `vscode` module)
// driving the real `quickdraft serve` on a tiny random model.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');
const h = require('./harness.cjs');

const { vscode, T, waitFor } = h;
const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'qd-vscode-fast-'));
let ext;
let doc;

async function stats() {
  return vscode.commands.executeCommand('quickdraft.showStats');
}
const stats_ = stats;

/** Ask the way VS Code does after typing; resolves to the list (or null). */
function complete(document, position, source = h.token()) {
  const provider = T.inlineProviderFor(document);
  assert.ok(provider, 'the language client registered an inline completion provider for the document');
  return provider.provideInlineCompletionItems(document, position,
    { triggerKind: vscode.InlineCompletionTriggerKind.Automatic, selectedCompletionInfo: undefined }, source.token);
}

/** Inline-completion requests the language client has sent so far (from its message trace). */
function sentRequests() {
  return T.state.outputChannels.flatMap((c) => c.lines)
    .filter((line) => line.includes("Sending request 'textDocument/inlineCompletion")).length;
}

/** Notifications of `method` the language client has sent so far (from its message trace). */
function sentNotifications(method) {
  return T.state.outputChannels.flatMap((c) => c.lines)
    .filter((line) => line.includes(`Sending notification '${method}'`)).length;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function endOf(document) {
  return document.positionAt(document.getText().length);
}

before(async () => {
  ext = await h.activate({
    'quickdraft.server.command': h.quickdraft,
    // float32: the tiny model's own dtype; a generous budget and few tokens, so completions do
    // not depend on how busy the machine is.
    'quickdraft.server.args': ['serve', '--dtype', 'float32'],
    'quickdraft.budgetMs': 20000,
    'quickdraft.maxNewTokens': 12,
    'quickdraft.verifier': h.tinyModel(),
    'quickdraft.draft': 'none',
    'quickdraft.drafter': 'lookup',
    'quickdraft.debounceMs': 0,
    'quickdraft.enable': true,
    'quickdraft.trace.server': 'messages', // lets the tests count what the client sent
  }, workspace);
  assert.ok(ext.statusItem, 'a status bar item was created');
  await waitFor(() => ext.api.client()?.isRunning(), 'the language client to run');
  // The cursor ends a comment: the tiny random model's tokens are shown there, where they cannot
  // break the file (the server withholds finished completions that would).
  doc = T.openDocument(path.join(workspace, 'main.py'), 'python',
    'import os\n\n\ndef read_file(path):\n    with open(path) as f:\n        return f.read()  # ');
  await waitFor(() => /\$\(sparkle\)/.test(ext.statusItem.text), 'the status bar to show the models ready', 120000);
});

after(async () => {
  await ext?.extension.deactivate();
  for (const d of ext?.context.subscriptions ?? []) d.dispose?.();
  fs.rmSync(workspace, { recursive: true, force: true });
});

test('status bar went through loading to ready', () => {
  assert.equal(ext.statusItem.visible, true);
  assert.match(ext.statusItem.text, /^\$\(sparkle\) quickdraft/);
  assert.equal(ext.statusItem.command, 'quickdraft.toggle');
  const history = ext.statusItem.history;
  const loading = history.findIndex((t) => /loading models/.test(t));
  const ready = history.findIndex((t) => /^\$\(sparkle\)/.test(t));
  assert.ok(loading >= 0, `showed "loading models" (history: ${JSON.stringify(history)})`);
  assert.ok(ready > loading, 'then ready');
});

test('ghost text comes from the server through the native inline-completion feature', async () => {
  const position = endOf(doc);
  const result = await complete(doc, position);
  assert.ok(result, 'an InlineCompletionList');
  assert.ok(result instanceof vscode.InlineCompletionList, 'converted by the language client');
  assert.ok(result.items.length >= 1, 'at least one item');
  const item = result.items[0];
  assert.ok(item instanceof vscode.InlineCompletionItem);
  assert.equal(typeof item.insertText, 'string');
  assert.ok(item.insertText.length > 0, 'non-empty insert text');
  assert.ok(item.range instanceof vscode.Range, 'a range');
  assert.equal(item.range.start.line, position.line);
  assert.equal(item.range.end.line, position.line);
  assert.equal(item.command.command, 'quickdraft.accepted');
  assert.equal(typeof item.command.arguments[0].id, 'string');
});

test('status bar spins while completing, then shows the live draft acceptance', async () => {
  const mark = ext.statusItem.history.length;
  const result = await complete(doc, endOf(doc));
  assert.ok(result && result.items.length >= 1);
  const during = ext.statusItem.history.slice(mark);
  assert.ok(during.some((t) => t.startsWith('$(loading~spin) quickdraft')), `busy shown: ${JSON.stringify(during)}`);
  const stats = await stats_();
  // null until a drafter has proposed a token (prompt lookup may find nothing to copy).
  const expected = typeof stats.draftAcceptance === 'number'
    ? `$(sparkle) quickdraft ${Math.round(stats.draftAcceptance * 100)}%` : '$(sparkle) quickdraft';
  await waitFor(() => ext.statusItem.text === expected, `status bar "${expected}" (now "${ext.statusItem.text}")`, 10000);
});

test('accepting runs the item command, which the server counts', async () => {
  const before = await stats();
  const result = await complete(doc, endOf(doc));
  const item = result.items[0];
  // What VS Code does when the user presses Tab: insert, then run the item's command.
  T.editDocument(doc, item.range, item.insertText);
  await vscode.commands.executeCommand(item.command.command, ...item.command.arguments);
  const after = await waitFor(async () => {
    const s = await stats();
    return s.userAcceptance > 0 ? s : null;
  }, 'the server to count the accept', 10000, 100);
  assert.ok(after.requests > before.requests, 'the request was counted');
  assert.ok(after.userAcceptance > 0);
  assert.ok(T.state.messages.some((m) => m.kind === 'info' && /requests/.test(m.text)), 'show stats tells the user');
});

test('typing is debounced: only the last of a burst reaches the server', async () => {
  T.setSettings({ 'quickdraft.debounceMs': 200 });
  const before = (await stats()).requests;
  const sentBefore = sentRequests();
  const sources = [h.token(), h.token(), h.token()];
  const pending = [];
  for (const [i, source] of sources.entries()) {
    if (i > 0) {
      await new Promise((r) => setTimeout(r, 60)); // keystrokes 60 ms apart, inside the 200 ms debounce
      sources[i - 1].cancel(); // VS Code cancels the previous request on each keystroke
    }
    T.editDocument(doc, new vscode.Range(endOf(doc), endOf(doc)), i === 0 ? 'f' : 'x');
    pending.push(complete(doc, endOf(doc), source));
  }
  const results = await Promise.all(pending);
  assert.equal(results[0], null);
  assert.equal(results[1], null);
  assert.ok(results[2] && results[2].items.length >= 0);
  assert.equal(sentRequests() - sentBefore, 1, 'the client sent one request for three keystrokes');
  const after = (await stats()).requests;
  assert.equal(after - before, 1, 'the server answered one');
  T.setSettings({ 'quickdraft.debounceMs': 0 });
});

test('where the cursor rests is sent once per rest, and the server warms its cache there', async () => {
  const CURSOR = 'quickdraft/didChangeCursor';
  const before = sentNotifications(CURSOR);
  const editor = T.showEditor(doc, new vscode.Position(0, 0));
  for (const line of [1, 2, 3]) { // arrow keys, faster than the 100 ms debounce
    await sleep(20);
    T.moveCursor(editor, new vscode.Position(line, 2));
  }
  await waitFor(() => sentNotifications(CURSOR) > before, 'the cursor notification', 10000);
  const warmed = await waitFor(async () => (await stats()).warming.recent
    .find((r) => r.trigger === 'cursor' && r.line === 3 && r.outcome === 'warmed'), 'the server to warm line 3', 60000, 100);
  assert.equal(warmed.uri, doc.uri.toString());
  assert.ok(warmed.fed_tokens > 0);
  T.moveCursor(editor, new vscode.Position(3, 2)); // where it is already: nothing new to say
  await sleep(400);
  assert.equal(sentNotifications(CURSOR) - before, 1, 'one notification for one rest');
  T.setSettings({ 'quickdraft.disabledLanguages': ['python'] });
  T.moveCursor(editor, new vscode.Position(1, 0));
  await sleep(400);
  assert.equal(sentNotifications(CURSOR) - before, 1, 'nothing for a disabled language');
  T.setSettings({ 'quickdraft.disabledLanguages': [], 'quickdraft.warm': false });
  T.moveCursor(editor, new vscode.Position(2, 0));
  await sleep(400);
  assert.equal(sentNotifications(CURSOR) - before, 1, 'nothing with warming off');
  T.setSettings({ 'quickdraft.warm': true });
  T.moveCursor(editor, new vscode.Position(1, 0));
  await waitFor(() => sentNotifications(CURSOR) - before === 2, 'a notification once warming is on again', 10000);
});

/** Notifications of `method` the language client has received so far (from its message trace). */
function receivedNotifications(method) {
  return T.state.outputChannels.flatMap((c) => c.lines)
    .filter((line) => line.includes(`Received notification '${method}'`)).length;
}

test('completionReady: a late answer is asked for again only where the user still is', async () => {
  const READY = 'quickdraft/completionReady';
  // A 1 ms budget: every model answer comes empty at the deadline, the server decodes on and
  // then sends the ready notification.
  T.setSettings({ 'quickdraft.budgetMs': 1 });
  const text = 'import os\n\n\ndef read_file(path):\n    with open(path) as f:\n        return f.read()  # ';
  const docs = [];
  const open = (name) => { const d = T.openDocument(path.join(workspace, name), 'python', text); docs.push(d); return d; };
  // What VS Code does for editor.action.inlineSuggest.trigger: ask for the active editor's cursor (Invoke).
  const triggered = [];
  const command = vscode.commands.registerCommand('editor.action.inlineSuggest.trigger', () => {
    const editor = vscode.window.activeTextEditor;
    const result = T.inlineProviderFor(editor.document).provideInlineCompletionItems(editor.document,
      editor.selection.active, { triggerKind: vscode.InlineCompletionTriggerKind.Invoke, selectedCompletionInfo: undefined },
      h.token().token);
    triggered.push({ uri: editor.document.uri.toString(), result });
    return result;
  });
  /** Ask at the end of `doc` (the user's editor may be elsewhere) and wait for the server's ready notification. */
  async function askLate(doc, afterSend = () => undefined) {
    const received = receivedNotifications(READY);
    const pending = complete(doc, endOf(doc));
    afterSend();
    const first = await pending;
    assert.ok(!first || first.items.length === 0, 'answered at the deadline, empty');
    await waitFor(() => receivedNotifications(READY) > received, 'the ready notification', 30000);
    await sleep(200); // the client handles the notification as it arrives: a trigger, if any, has run by now
  }
  try {
    const kept = (await stats()).counts.kept ?? 0;
    const triggers = ext.api.readyTriggers();

    // The user is still there: VS Code is asked to show inline suggestions again, and the server
    // answers from the kept answer.
    const here = open('late.py');
    T.showEditor(here, endOf(here));
    await askLate(here);
    await waitFor(() => triggered.length === 1, 'editor.action.inlineSuggest.trigger', 10000);
    assert.equal(ext.api.readyTriggers(), triggers + 1);
    assert.equal(triggered[0].uri, here.uri.toString());
    const result = await triggered[0].result;
    assert.ok(result && result.items.length >= 1 && result.items[0].insertText.length > 0, 'the ghost text');
    const after = await stats();
    assert.ok((after.counts.kept ?? 0) > kept, `served from the kept answer: ${JSON.stringify(after.counts)}`);

    // The cursor moved away (the editor shows the document, the cursor is elsewhere).
    const moved = open('late-moved.py');
    T.showEditor(moved, new vscode.Position(0, 0));
    await askLate(moved);
    // Another document: the notification is for one the user is not looking at.
    const looked = open('late-looked-at.py');
    const other = open('late-other.py');
    T.showEditor(looked, endOf(looked));
    await askLate(other);
    // The document changed since (VS Code's version moved on; the server has not heard of it yet).
    const changed = open('late-changed.py');
    T.showEditor(changed, endOf(changed));
    await askLate(changed, () => { changed.version += 1; });
    // Several cursors.
    const multi = open('late-multi.py');
    const editor = T.showEditor(multi, endOf(multi));
    editor.selections = [editor.selection, new vscode.Selection(new vscode.Position(0, 0), new vscode.Position(0, 0))];
    await askLate(multi);

    assert.equal(triggered.length, 1, 'no re-trigger for a moved cursor, another document, a new version or several cursors');
    assert.equal(ext.api.readyTriggers(), triggers + 1);
  } finally {
    command.dispose();
    T.setSettings({ 'quickdraft.budgetMs': 20000 });
    T.showEditor(doc, endOf(doc));
    for (const d of docs) T.closeDocument(d);
  }
});

test('disabled languages are not sent to the server', async () => {
  T.setSettings({ 'quickdraft.disabledLanguages': ['markdown'] });
  const md = T.openDocument(path.join(workspace, 'notes.md'), 'markdown', '# Notes\n\nSome text ');
  const before = (await stats()).requests;
  const sentBefore = sentRequests();
  assert.equal(await complete(md, endOf(md)), null);
  assert.equal(sentRequests(), sentBefore, 'nothing sent');
  assert.equal((await stats()).requests, before);
  T.setSettings({ 'quickdraft.disabledLanguages': [] });
  T.closeDocument(md);
});

test('toggle turns completions and the status bar off and on', async () => {
  await vscode.commands.executeCommand('quickdraft.toggle');
  assert.equal(T.state.settings['quickdraft.enable'], false);
  assert.match(ext.statusItem.text, /circle-slash/);
  const before = (await stats()).requests;
  const sentBefore = sentRequests();
  assert.equal(await complete(doc, endOf(doc)), null);
  assert.equal(sentRequests(), sentBefore, 'nothing sent while off');
  assert.equal((await stats()).requests, before, 'nothing answered while off');
  await vscode.commands.executeCommand('quickdraft.toggle');
  assert.equal(T.state.settings['quickdraft.enable'], true);
  assert.doesNotMatch(ext.statusItem.text, /circle-slash/);
  const result = await complete(doc, endOf(doc));
  assert.ok(result && result.items.length >= 1, 'completions again after toggling back on');
});

test('restart server starts a fresh server that completes again', async () => {
  const old = ext.api.client();
  await vscode.commands.executeCommand('quickdraft.restartServer');
  const fresh = ext.api.client();
  assert.notEqual(fresh, old);
  await waitFor(() => fresh.isRunning(), 'the new client to run');
  await waitFor(() => /\$\(sparkle\)/.test(ext.statusItem.text), 'models ready again', 120000);
  const reopened = T.state.textDocuments.find((d) => d.languageId === 'python');
  const result = await complete(reopened, endOf(reopened));
  assert.ok(result && result.items.length >= 1);
  assert.equal((await stats()).requests, 1, 'the new server counts from zero');
});
