// Plain helpers of the extension (settings, status text, stats formatting, debounce).
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');

const lib = path.resolve(__dirname, '..', 'out', 'lib');
const settings = require(path.join(lib, 'settings.js'));
const stats = require(path.join(lib, 'stats.js'));
const { Debouncer } = require(path.join(lib, 'debounce.js'));
const cursor = require(path.join(lib, 'cursor.js'));
const ready = require(path.join(lib, 'ready.js'));

/** A configuration where `values` are what the user set (globally), `scoped` what a workspace set. */
function config(values, scoped = {}) {
  return {
    get: (key, fallback) => (key in scoped ? scoped[key] : key in values ? values[key] : fallback),
    inspect: (key) => ({ key, globalValue: values[key], workspaceValue: scoped[key] }),
  };
}

test('only what the user set is sent to the server, by the server\'s names', () => {
  assert.deepEqual(settings.serverOptionsFrom(config({})), {}, 'nothing set: the server\'s defaults, as in any editor');
  const s = settings.readSettings(config({ verifier: '', draft: 'none', drafter: 'lookup', disabledLanguages: ['markdown'] }));
  assert.deepEqual(s.serverOptions, { verifier: '', draft: 'none', drafter: 'lookup', disabledLanguages: ['markdown'] });
  assert.equal(s.enable, true, 'the extension itself falls back to the server\'s defaults');
  assert.equal(s.warm, true);
  assert.deepEqual(settings.serverOptionsFrom(config({ enable: false, minConfidence: 0 })), { enabled: false, minConfidence: 0 });
  assert.deepEqual(settings.serverOptionsFrom(config({ minConfidence: null, budgetMs: undefined })), {}, 'null is not a choice');
  assert.deepEqual(settings.serverOptionsFrom(config({ budgetMs: 300 }, { budgetMs: 100 })), { budgetMs: 100 }, 'the workspace wins');
  assert.deepEqual(settings.serverOptionsFrom(config({ debounceMs: 10, 'server.args': ['serve'] })), {}, 'the extension\'s own');
  assert.equal(settings.isLanguageDisabled(s, 'markdown'), true);
  assert.equal(settings.isLanguageDisabled(s, 'python'), false);
});

test('a setting the user took back is noticed (the server forgets it only by starting again)', () => {
  assert.deepEqual(settings.droppedSettings({ drafter: 'draft', budgetMs: 100 }, { budgetMs: 300 }), ['drafter']);
  assert.deepEqual(settings.droppedSettings({ budgetMs: 100 }, { budgetMs: 300, drafter: 'draft' }), []);
});

test('server command: configured, else PATH, else a .venv next to the code', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qd-resolve-'));
  const ws = path.join(root, 'ws');
  const bin = path.join(root, 'bin');
  fs.mkdirSync(path.join(ws, '.venv', 'bin'), { recursive: true });
  fs.mkdirSync(bin);
  const venvExe = path.join(ws, '.venv', 'bin', 'quickdraft');
  fs.writeFileSync(venvExe, '#!/bin/sh\n', { mode: 0o755 });
  assert.equal(settings.resolveServerCommand('/opt/qd', [ws], '/nowhere', bin), '/opt/qd');
  assert.equal(settings.resolveServerCommand('${workspaceFolder}/x', [ws], '/nowhere', bin), `${ws}/x`);
  assert.equal(settings.resolveServerCommand('', [ws], '/nowhere', bin), venvExe);
  const pathExe = path.join(bin, 'quickdraft');
  fs.writeFileSync(pathExe, '#!/bin/sh\n', { mode: 0o755 });
  assert.equal(settings.resolveServerCommand('', [ws], '/nowhere', bin), pathExe);
  // The checkout the extension lives in: editor-clients/vscode -> ../../.venv
  const ext = path.join(root, 'repo', 'editor-clients', 'vscode');
  fs.mkdirSync(path.join(root, 'repo', '.venv', 'bin'), { recursive: true });
  fs.writeFileSync(path.join(root, 'repo', '.venv', 'bin', 'quickdraft'), '#!/bin/sh\n', { mode: 0o755 });
  assert.equal(settings.resolveServerCommand('', [], ext, '/nonexistent'), path.join(root, 'repo', '.venv', 'bin', 'quickdraft'));
  assert.equal(settings.resolveServerCommand('', [], '/nowhere', '/nonexistent'), 'quickdraft');
  // An installed .vsix (~/.vscode/extensions/...) finds the checkout it was built in.
  const installed = path.join(root, 'extensions', 'quickdraft.quickdraft-0.1.0');
  fs.mkdirSync(path.join(installed, 'out'), { recursive: true });
  assert.deepEqual(settings.builtFromCheckout(installed), []);
  fs.writeFileSync(path.join(installed, 'out', 'checkout.json'), JSON.stringify({ root: path.join(root, 'repo') }));
  assert.deepEqual(settings.builtFromCheckout(installed), [path.join(root, 'repo')]);
  assert.equal(settings.resolveServerCommand('', [], installed, '/nonexistent'), path.join(root, 'repo', '.venv', 'bin', 'quickdraft'));
  assert.equal(settings.resolveServerCommand('', [], installed, bin), pathExe, 'PATH comes first');
  fs.writeFileSync(path.join(installed, 'out', 'checkout.json'), '{not json');
  assert.deepEqual(settings.builtFromCheckout(installed), []);
  fs.rmSync(root, { recursive: true, force: true });
});

test('status bar text follows the server status', () => {
  assert.match(stats.statusText({ state: 'loading' }, true).text, /loading models/);
  assert.match(stats.statusText({ state: 'busy', draftAcceptance: 0.5 }, true).text, /spin.*50%/);
  assert.equal(stats.statusText({ state: 'ready', draftAcceptance: 0.734 }, true).text, '$(sparkle) quickdraft 73%');
  assert.equal(stats.statusText({ state: 'ready', draftAcceptance: null }, true).text, '$(sparkle) quickdraft');
  assert.equal(stats.statusText({ state: 'error', message: 'boom' }, true).error, true);
  assert.match(stats.statusText({ state: 'ready' }, false).text, /circle-slash/);
});

test('stats are summarised for people', () => {
  const s = { requests: 12, draftAcceptance: 0.71, tau: 3.2, latencyMs: { p50: 84, p90: 150, p99: 200 }, userAcceptance: 0.4,
    drafter: 'hybrid', drafters: { lookup: { acceptance: 0.8 } } };
  assert.equal(stats.statsSummary(s), '12 requests · draft acceptance 71% · τ 3.20 tokens/step · latency p50 84 ms, p90 150 ms · accepted by you 40%');
  assert.match(stats.statsReport(s), /drafter lookup: \{"acceptance":0.8\}/);
  assert.match(stats.statsSummary({}), /0 requests · draft acceptance –/);
});

test('debouncer lets only the newest call through', async () => {
  const d = new Debouncer();
  const never = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
  const results = await Promise.all([d.wait(30, never), d.wait(30, never), d.wait(30, never)]);
  assert.deepEqual(results, [false, false, true]);
  let fire;
  const cancelled = { isCancellationRequested: false, onCancellationRequested: (l) => { fire = l; return { dispose() {} }; } };
  const started = Date.now();
  const p = d.wait(10000, cancelled);
  cancelled.isCancellationRequested = true;
  fire();
  assert.equal(await p, false);
  assert.ok(Date.now() - started < 1000, 'a cancelled wait ends at once');
});

test('cursor reports: debounced, once per position, dropped on cancel', async () => {
  const sent = [];
  const reporter = new cursor.CursorReporter((p) => sent.push(p), 30);
  const at = (line, character = 0, uri = 'file:///a.py') => ({ uri, line, character });
  reporter.moved(at(1));
  reporter.moved(at(2));
  reporter.moved(at(3, 4));
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(sent, [at(3, 4)], 'only where the cursor rested');
  reporter.moved(at(3, 4));
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(sent.length, 1, 'the same position is not sent again');
  reporter.moved(at(3, 4, 'file:///b.py'));
  reporter.moved(at(5));
  reporter.cancel();
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(sent.length, 1, 'a cancelled report is never sent');
  reporter.cancel(true);
  reporter.moved(at(3, 4));
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(sent.length, 2, 'after forgetting (a new server), the position is sent again');
  assert.deepEqual(cursor.cursorParams(at(7, 2)), { textDocument: { uri: 'file:///a.py' }, position: { line: 7, character: 2 } });
});

test('completionReady: asks again only where the user still is', () => {
  const uri = 'file:///work/sp%20ace/main.py';
  const params = (over = {}) => ({ textDocument: { uri, version: 7 }, position: { line: 3, character: 5 }, ...over });
  const editor = (over = {}) => ({ uri, version: 7, selections: [{ line: 3, character: 5, empty: true }], ...over });
  assert.equal(ready.READY_NOTIFICATION, 'quickdraft/completionReady');
  assert.equal(ready.TRIGGER_COMMAND, 'editor.action.inlineSuggest.trigger');
  assert.equal(ready.readyMatches(params(), editor()), true);
  // The same document spelled another way (percent-encoding, scheme case) is the same document.
  assert.equal(ready.readyMatches(params({ textDocument: { uri: 'FILE:///work/sp ace/main.py', version: 7 } }), editor()), true);
  assert.equal(ready.readyMatches(params(), editor({ version: 8 })), false, 'the document changed since');
  assert.equal(ready.readyMatches(params({ textDocument: { uri, version: 6 } }), editor()), false, 'an older version');
  assert.equal(ready.readyMatches(params(), editor({ selections: [{ line: 3, character: 6, empty: true }] })), false, 'the cursor moved');
  assert.equal(ready.readyMatches(params(), editor({ selections: [{ line: 4, character: 5, empty: true }] })), false, 'another line');
  assert.equal(ready.readyMatches(params(), editor({ selections: [{ line: 3, character: 5, empty: false }] })), false, 'a selection');
  assert.equal(ready.readyMatches(params(), editor({ selections: [{ line: 3, character: 5, empty: true }, { line: 9, character: 0, empty: true }] })),
    false, 'several cursors');
  assert.equal(ready.readyMatches(params(), editor({ selections: [] })), false);
  assert.equal(ready.readyMatches(params(), editor({ uri: 'file:///work/other.py' })), false, 'another document');
  assert.equal(ready.readyMatches(params(), undefined), false, 'no active editor');
});

test('completionReady: malformed params are ignored, never thrown', () => {
  const uri = 'file:///a.py';
  const editor = { uri, version: 1, selections: [{ line: 0, character: 0, empty: true }] };
  const bad = [
    undefined, null, 0, 'x', [], {}, { textDocument: null }, { textDocument: { uri }, position: { line: 0, character: 0 } },
    { textDocument: { uri, version: '1' }, position: { line: 0, character: 0 } },
    { textDocument: { uri, version: 1.5 }, position: { line: 0, character: 0 } },
    { textDocument: { uri: 42, version: 1 }, position: { line: 0, character: 0 } },
    { textDocument: { uri: '', version: 1 }, position: { line: 0, character: 0 } },
    { textDocument: { uri, version: 1 } },
    { textDocument: { uri, version: 1 }, position: null },
    { textDocument: { uri, version: 1 }, position: { line: -1, character: 0 } },
    { textDocument: { uri, version: 1 }, position: { line: 0, character: NaN } },
    { textDocument: { uri, version: 1 }, position: { line: '0', character: 0 } },
    { textDocument: { uri: 'file:///%E0%A4%A', version: 1 }, position: { line: 0, character: 0 } }, // a broken escape
  ];
  for (const params of bad) {
    assert.doesNotThrow(() => ready.readyMatches(params, editor), JSON.stringify(params));
    assert.equal(ready.readyMatches(params, editor), false, JSON.stringify(params));
  }
  assert.equal(ready.readyMatches({ textDocument: { uri, version: 1 }, position: { line: 0, character: 0 } }, editor), true);
});
