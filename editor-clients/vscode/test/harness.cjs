// Loads the built extension (out/extension.js: our code + the real vscode-languageclient)
// against the stand-in `vscode` module, configured to start the real `quickdraft serve` on a
// tiny random model.
'use strict';
const Module = require('module');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const fakePath = require.resolve('./fake-vscode.cjs');
const originalResolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'vscode') return fakePath;
  return originalResolve.call(this, request, ...rest);
};

const vscode = require('vscode');
const T = vscode.__testing;
const extensionDir = path.resolve(__dirname, '..');
const repo = path.resolve(extensionDir, '..', '..');
const quickdraft = process.env.QUICKDRAFT_BIN || path.join(repo, '.venv', 'bin', 'quickdraft');

/** A tiny random model directory: $QUICKDRAFT_TINY_MODEL, or written now by `quickdraft models tiny`. */
function tinyModel() {
  if (process.env.QUICKDRAFT_TINY_MODEL) return process.env.QUICKDRAFT_TINY_MODEL;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qd-tiny-'));
  try {
    execFileSync(quickdraft, ['models', 'tiny', dir], { stdio: ['ignore', 'ignore', 'ignore'] });
  } catch {
    // Older servers have no `models tiny`: the same model through the engine's own function.
    const python = path.join(path.dirname(quickdraft), 'python');
    execFileSync(python, ['-c', 'import sys; from engine.models.tiny import write_tiny_model; write_tiny_model(sys.argv[1], seed=0)', dir],
      { stdio: ['ignore', 'ignore', 'inherit'], cwd: repo });
  }
  return dir;
}

/** The settings `quickdraft serve` starts from on this machine, by client name: $QUICKDRAFT_MACHINE_DEFAULTS
 *  (JSON, as tests/editors/test_editor_vscode.py passes it), or asked of the server's own Python. */
function machineDefaults() {
  if (process.env.QUICKDRAFT_MACHINE_DEFAULTS) return JSON.parse(process.env.QUICKDRAFT_MACHINE_DEFAULTS);
  const python = path.join(path.dirname(quickdraft), 'python');
  const code = 'import json; from lsp_server.workspace.settings import client_settings, machine_defaults; '
    + 'print(json.dumps(client_settings(machine_defaults())))';
  return JSON.parse(execFileSync(python, ['-c', code], { cwd: repo, encoding: 'utf8' }));
}

async function waitFor(predicate, what, timeoutMs = 60000, stepMs = 50) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** Activate the extension once; returns what the tests need. */
async function activate(settings, workspace) {
  T.setWorkspaceFolders([workspace]);
  T.setSettings(settings);
  const extension = require(path.join(extensionDir, 'out', 'extension.js'));
  const context = { subscriptions: [], extensionPath: extensionDir, extensionUri: vscode.Uri.file(extensionDir) };
  const api = await extension.activate(context);
  const statusItem = T.state.statusItems.find((item) => item.id === 'quickdraft.status');
  return { extension, context, api, statusItem };
}

function token() {
  return new vscode.CancellationTokenSource();
}

module.exports = { vscode, T, extensionDir, repo, quickdraft, tinyModel, machineDefaults, waitFor, activate, token };
