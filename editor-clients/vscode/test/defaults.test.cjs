// Fast tier, a user who set nothing but the model: the extension sends no drafter and no budget,
// so the server runs its own machine defaults, the same as for Neovim or any other editor.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const os = require('os');
const path = require('path');
const h = require('./harness.cjs');

const { vscode, T, waitFor } = h;
const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'qd-vscode-defaults-'));
let ext;

before(async () => {
  ext = await h.activate({
    'quickdraft.server.command': h.quickdraft,
    'quickdraft.server.args': ['serve', '--dtype', 'float32'], // the tiny model's own dtype
    'quickdraft.verifier': h.tinyModel(),
    'quickdraft.draft': 'none',
  }, workspace);
  await waitFor(() => ext.api.client()?.isRunning(), 'the language client to run');
  T.openDocument(path.join(workspace, 'main.py'), 'python', 'import os\n');
  await waitFor(() => /\$\(sparkle\)/.test(ext.statusItem.text), 'the status bar to show the models ready', 120000);
});

after(async () => {
  await ext?.extension.deactivate();
  for (const d of ext?.context.subscriptions ?? []) d.dispose?.();
  fs.rmSync(workspace, { recursive: true, force: true });
});

test('with no drafter or budget set, the server runs its machine defaults', async () => {
  const expected = h.machineDefaults();
  const stats = await vscode.commands.executeCommand('quickdraft.showStats');
  const { drafter, budgetMs } = stats.settings;
  console.log(`server settings with nothing set: drafter ${drafter}, budgetMs ${budgetMs}`);
  assert.equal(drafter, expected.drafter);
  assert.equal(budgetMs, expected.budgetMs);
});
