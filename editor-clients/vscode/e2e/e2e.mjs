// End-to-end test in a real VS Code: code-server (VS Code 1.100 in the browser) with the
// packaged quickdraft.vsix installed, the real `quickdraft serve` on a tiny random model,
// driven through Debian's chromium by playwright-core. Types in a Python file, waits for the
// ghost text, takes a screenshot, accepts with Tab, saves with Ctrl+S and checks the file.
// Before typing, it clicks a line and checks the server warmed its cache there (the cursor
// notification).
//
// QD_E2E_SCENARIO=ready: the same with a 1 ms budget. Every model answer then comes empty at
// the deadline; the server decodes on and sends `quickdraft/completionReady`, the extension
// re-triggers inline suggestions, and the ghost text appears with no further keystroke (the
// test checks the LSP trace: the empty answer, the notification, the kept answer after it).
//
//   node e2e/e2e.mjs            (env: QUICKDRAFT_BIN, QUICKDRAFT_TINY_MODEL, QD_E2E_OUT, CHROMIUM, QD_E2E_SCENARIO)
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const here = path.dirname(fileURLToPath(import.meta.url));
const extensionDir = path.resolve(here, '..');
const repo = path.resolve(extensionDir, '..', '..');
const quickdraft = process.env.QUICKDRAFT_BIN || path.join(repo, '.venv', 'bin', 'quickdraft');
const vsix = path.join(extensionDir, 'quickdraft.vsix');
const codeServer = path.join(here, 'node_modules', 'code-server', 'out', 'node', 'entry.js');
const outDir = process.env.QD_E2E_OUT || path.join(repo, 'test-output');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const started = Date.now();
const scenario = process.env.QD_E2E_SCENARIO || 'type';
if (!['type', 'ready'].includes(scenario)) {
  console.error(`e2e: unknown QD_E2E_SCENARIO=${scenario} (type | ready)`);
  process.exit(2);
}
const shotName = (name) => (scenario === 'type' ? `vscode-${name}.png` : `vscode-${scenario}-${name}.png`);

function log(message) {
  console.log(`[e2e ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

async function waitForHttp(url, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(url, { redirect: 'manual' });
      if (response.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`code-server did not answer at ${url} within ${timeoutMs} ms`);
}

for (const [what, file] of [['the packaged extension', vsix], ['code-server', codeServer], ['quickdraft', quickdraft], ['chromium', chromiumPath]]) {
  if (!fs.existsSync(file)) {
    console.error(`e2e: ${what} not found at ${file}; run bash editor-clients/setup.sh first`);
    process.exit(2);
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'qd-e2e-'));
const home = path.join(tmp, 'home');
const userData = path.join(tmp, 'user-data');
const extensions = path.join(tmp, 'extensions');
const workspace = path.join(tmp, 'workspace');
for (const dir of [home, path.join(userData, 'User'), extensions, workspace, outDir]) fs.mkdirSync(dir, { recursive: true });

let modelDir = process.env.QUICKDRAFT_TINY_MODEL;
if (!modelDir) {
  modelDir = path.join(tmp, 'tiny');
  log('writing a tiny model');
  execFileSync(quickdraft, ['models', 'tiny', modelDir], { stdio: 'inherit' });
}

const ORIGINAL = 'import os\n\n\ndef read_file(path):\n    with open(path) as f:\n        return f.read()\n\n\n';
// Typed up to a comment: the tiny random model's tokens are shown there, where they cannot break
// the file (the server withholds finished completions that would).
const TYPED = 'def write_file(path, text):\n    with open(path, "w") as f:\n        f.write(text)  # ';
const file = path.join(workspace, 'main.py');
const serverLogFile = path.join(tmp, 'quickdraft-serve.log');
fs.writeFileSync(file, ORIGINAL);

const serveArgs = ['serve', '--dtype', 'float32', '--log-file', serverLogFile];
// ready: the server runs behind a wire tap (e2e/lsp-tap.mjs), so the test can see the messages in order.
const wireLog = path.join(tmp, 'lsp-wire.jsonl');
const tap = path.join(here, 'lsp-tap.mjs');
// type: as a user's fresh install from a checkout, no server command is configured: the packaged
// extension finds the `.venv/bin/quickdraft` of the checkout it was built in (out/checkout.json);
// set only when the test runs another quickdraft ($QUICKDRAFT_BIN).
const checkoutBin = path.join(repo, '.venv', 'bin', 'quickdraft');
const serverCommand = scenario === 'ready' ? process.execPath : (path.resolve(quickdraft) === checkoutBin ? undefined : quickdraft);
// The server's settings in settings.json: the tiny model, a generous budget and few tokens, so that
// completions do not depend on how busy the machine is (ready: a 1 ms budget, so that every model
// answer comes late and the notification brings it).
const serverSettings = {
  budgetMs: scenario === 'ready' ? 1 : 20000, maxNewTokens: 12, verifier: modelDir, draft: 'none', drafter: 'lookup',
};
fs.writeFileSync(path.join(userData, 'User', 'settings.json'), JSON.stringify({
  ...(serverCommand ? { 'quickdraft.server.command': serverCommand } : {}),
  // float32: the tiny model's own dtype. ready: every answer late, the run starts at the request,
  // not at the edit (which could finish it first).
  'quickdraft.server.args': scenario === 'ready' ? [tap, wireLog, quickdraft, ...serveArgs, '--no-anticipate'] : serveArgs,
  ...Object.fromEntries(Object.entries(serverSettings).map(([name, value]) => [`quickdraft.${name}`, value])),
  'quickdraft.trace.server': 'verbose',
  // A quiet editor: nothing but the inline suggestion may claim Tab.
  'editor.inlineSuggest.enabled': true,
  'editor.quickSuggestions': { other: 'off', comments: 'off', strings: 'off' },
  'editor.suggestOnTriggerCharacters': false,
  'editor.wordBasedSuggestions': 'off',
  'editor.autoClosingBrackets': 'never',
  'editor.autoClosingQuotes': 'never',
  'editor.autoIndent': 'none',
  'editor.acceptSuggestionOnEnter': 'off',
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.enableExperiments': false,
  'security.workspace.trust.enabled': false,
  'telemetry.telemetryLevel': 'off',
  'extensions.autoUpdate': false,
  'extensions.autoCheckUpdates': false,
  'extensions.ignoreRecommendations': true,
  'files.autoSave': 'off',
  'files.insertFinalNewline': false,
  'files.trimTrailingWhitespace': false,
  'window.restoreWindows': 'none',
}, null, 2));

const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), XDG_DATA_HOME: path.join(home, '.local', 'share') };
const common = ['--user-data-dir', userData, '--extensions-dir', extensions];

// As a user installs it: the packaged .vsix into a fresh profile (no development path).
log(`installing the .vsix: code-server --install-extension ${path.relative(repo, vsix)} (fresh --extensions-dir and --user-data-dir)`);
execFileSync(process.execPath, [codeServer, ...common, '--install-extension', vsix], { env, stdio: 'inherit' });
const installed = fs.readdirSync(extensions).filter((name) => name.startsWith('quickdraft.quickdraft-'));
if (installed.length !== 1 || !fs.existsSync(path.join(extensions, installed[0], 'out', 'extension.js'))) {
  console.error(`e2e: the .vsix did not install one quickdraft extension into ${extensions}: ${fs.readdirSync(extensions)}`);
  process.exit(1);
}
log(`installed ${installed[0]}; ${serverCommand ? `quickdraft.server.command: ${serverCommand}` : 'no quickdraft.server.command: the extension finds the checkout\'s .venv/bin/quickdraft'}`);

const port = await freePort();
const serverLog = fs.createWriteStream(path.join(tmp, 'code-server.log'));
const server = spawn(process.execPath, [codeServer, ...common, '--auth', 'none', '--bind-addr', `127.0.0.1:${port}`,
  '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust', '--disable-getting-started-override', workspace],
{ env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
server.stdout.pipe(serverLog);
server.stderr.pipe(serverLog);

function readServerLog() {
  return fs.existsSync(serverLogFile) ? fs.readFileSync(serverLogFile, 'utf8') : '';
}

async function waitForLog(pattern, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (pattern.test(readServerLog())) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

/** The LSP messages on the wire so far (ready scenario): [{ t, dir: 'in' | 'out', msg }]. */
function readWire() {
  if (!fs.existsSync(wireLog)) return [];
  return fs.readFileSync(wireLog, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

/** The ghost text came through the ready notification: the client's request at the cursor was
 *  answered empty, the server sent quickdraft/completionReady for that spot, and the client asked
 *  again by itself (no document change in between) and got the kept answer. */
function checkReadyWire(typedAt) {
  const wire = readWire();
  const show = (entries) => entries.map((e) => `${e.dir} ${JSON.stringify(e.msg).slice(0, 300)}`).join('\n');
  const readyAt = wire.findLastIndex((e) => e.dir === 'out' && e.msg.method === 'quickdraft/completionReady');
  if (readyAt < 0) throw new Error(`the server sent no quickdraft/completionReady:\n${show(wire.slice(-30))}`);
  const ready = wire[readyAt].msg.params;
  const at = (e) => e.msg.method === 'textDocument/inlineCompletion' && e.msg.params.textDocument.uri === ready.textDocument.uri
    && e.msg.params.position.line === ready.position.line && e.msg.params.position.character === ready.position.character;
  const answerTo = (request) => wire.find((e) => e.dir === 'out' && e.msg.id === request.msg.id && !e.msg.method);
  const before = wire.slice(0, readyAt).filter((e) => e.dir === 'in' && at(e));
  const late = before[before.length - 1];
  const lateAnswer = late && answerTo(late);
  if (!lateAnswer || (lateAnswer.msg.result?.items ?? []).length !== 0) {
    throw new Error(`no empty answer at the deadline for the notification's spot:\n${show(wire.slice(-30))}`);
  }
  const after = wire.slice(readyAt + 1);
  const again = after.find((e) => e.dir === 'in' && at(e));
  const keptAnswer = again && answerTo(again);
  if (!keptAnswer || !(keptAnswer.msg.result?.items?.[0]?.insertText)) {
    throw new Error(`the client did not ask again after the notification and get the ghost text:\n${show(after.slice(0, 30))}`);
  }
  const between = wire.slice(wire.indexOf(lateAnswer), wire.indexOf(again));
  if (between.some((e) => e.dir === 'in' && e.msg.method === 'textDocument/didChange')) {
    throw new Error(`the document changed between the empty answer and the new request:\n${show(between)}`);
  }
  log(`wire: empty answer at ${lateAnswer.t - late.t} ms -> completionReady after ${wire[readyAt].t - late.t} ms -> `
    + `asked again ${again.t - wire[readyAt].t} ms later -> ${JSON.stringify(keptAnswer.msg.result.items[0].insertText)} `
    + `(${((Date.now() - typedAt) / 1000).toFixed(1)} s after the last keystroke)`);
  return keptAnswer.msg.result.items[0].insertText;
}

/** Real VS Code's inspect(): the extension sent the server what settings.json sets and none of
 *  package.json's defaults, which would override the server's own (the machine's drafter). */
function checkSentOnlyWhatWasSet() {
  const initialize = readWire().find((e) => e.dir === 'in' && e.msg.method === 'initialize');
  const sent = initialize?.msg.params.initializationOptions ?? {};
  const sorted = (options) => JSON.stringify(Object.fromEntries(Object.entries(options).sort()));
  if (sorted(sent) !== sorted(serverSettings)) {
    throw new Error(`initializationOptions ${JSON.stringify(sent)}, expected only ${JSON.stringify(serverSettings)}`);
  }
  log(`initializationOptions: only what settings.json sets (${Object.keys(sent).sort().join(', ')})`);
}

let browser;
let page;
let failed = false;
try {
  await waitForHttp(`http://127.0.0.1:${port}/healthz`, 60000);
  log(`code-server on 127.0.0.1:${port}`);
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`);
  await page.waitForSelector('.monaco-workbench', { timeout: 60000 });
  log('workbench loaded');

  // Open main.py from the explorer (Quick Open's file search needs ripgrep, which is not built here).
  const entry = page.locator('.explorer-folders-view .monaco-list-row', { hasText: 'main.py' }).first();
  await entry.waitFor({ timeout: 30000 });
  await entry.click();
  const editor = page.locator('.editor-instance .monaco-editor .view-lines').first();
  await editor.waitFor({ timeout: 15000 });
  await page.waitForFunction(() => document.querySelector('.editor-instance .view-lines')?.textContent?.includes('read_file'), null, { timeout: 15000 });
  log('main.py open');

  // The status-bar item: ready once the tiny model has loaded.
  const status = page.locator('.statusbar-item', { hasText: 'quickdraft' }).first();
  await status.waitFor({ timeout: 60000 });
  await page.waitForFunction(() => [...document.querySelectorAll('.statusbar-item')]
    .some((e) => e.textContent.includes('quickdraft') && e.querySelector('.codicon-sparkle')), null, { timeout: 120000 });
  log(`status bar: "${(await status.textContent()).trim()}" (ready)`);

  // Clicking a line moves the cursor: the extension tells the server where it rests, and the
  // server warms its cache there (its log says so).
  await page.locator('.view-line', { hasText: 'def read_file' }).first().click();
  const warmed = await waitForLog(/warm \S+main\.py:4 \(cursor\): warmed/, 60000);
  if (!warmed) throw new Error(`the server did not warm main.py:4 after the click; its log:\n${readServerLog()}`);
  log('the cursor moved to line 4: the server warmed its cache there');

  // Type at the end of the file.
  await editor.click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type(TYPED, { delay: 15 });
  const typedAt = Date.now();
  log('typed; waiting for ghost text');
  const ghost = page.locator('.ghost-text-decoration').first();
  await ghost.waitFor({ state: 'visible', timeout: 60000 });
  if (process.env.QD_E2E_DEBUG) {
    console.log(await page.evaluate(() => [...document.querySelectorAll('[class*="ghost-text"]')].map((e) => e.outerHTML).join('\n')));
  }
  // The first line is decorated into the current line; further lines sit in a view zone below.
  // VS Code draws spaces as U+00A0 and control characters (the tiny random model writes some)
  // as their U+24xx symbols: map them back to the characters they stand for.
  const unrender = (text) => text.replace(/\u00a0/g, ' ')
    .replace(/[\u2400-\u241f]/g, (c) => String.fromCharCode(c.charCodeAt(0) - 0x2400)).replace(/\u2421/g, '\x7f');
  const ghostFirstLine = unrender((await page.locator('.view-line .ghost-text-decoration').allTextContents()).join(''));
  const ghostMore = await page.evaluate(() => {
    const lines = new Map();
    for (const span of document.querySelectorAll('span.ghost-text:not(.ghost-text-decoration)')) {
      const line = span.closest('.view-line') ?? span.parentElement;
      lines.set(line, (lines.get(line) ?? '') + span.textContent);
    }
    return [...lines.values()];
  }).then((lines) => lines.map(unrender));
  const ghostText = [ghostFirstLine, ...ghostMore].join('\n');
  log(`ghost text: ${JSON.stringify(ghostText)}`);
  if (scenario === 'ready') {
    checkReadyWire(typedAt);
    checkSentOnlyWhatWasSet();
  }
  const shot = path.join(outDir, shotName('ghost-text'));
  await page.screenshot({ path: shot });
  log(`screenshot: ${shot}`);

  await page.keyboard.press('Tab');
  await page.waitForFunction(() => !document.querySelector('.ghost-text-decoration'), null, { timeout: 10000 });
  await page.keyboard.press('Control+S');
  const expected = ORIGINAL + TYPED + ghostText;
  let saved = '';
  const deadline = Date.now() + 15000;
  while (Date.now() < deadline) {
    saved = fs.readFileSync(file, 'utf8');
    if (saved !== ORIGINAL) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  if (ghostText.trim() === '') throw new Error('the ghost text was empty');
  if (saved !== expected) {
    throw new Error(`the saved file is not the typed text + the ghost text that was shown.\n---- expected:\n${expected}\n---- saved:\n${saved}`);
  }
  log(`saved file ends with: ${JSON.stringify(saved.slice(ORIGINAL.length))}`);

  // The accept reached the server through the item's command: the stats count it.
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible', timeout: 15000 });
  await page.keyboard.type('quickdraft: Show stats');
  await page.waitForSelector('.quick-input-list .monaco-list-row', { timeout: 15000 });
  await page.keyboard.press('Enter');
  const toast = page.locator('.notification-toast .notification-list-item-message', { hasText: 'requests' }).first();
  await toast.waitFor({ timeout: 20000 });
  const stats = (await toast.innerText()).trim();
  log(`stats notification: ${stats}`);
  const accepted = /accepted by you (\d+)%/.exec(stats);
  if (!accepted || Number(accepted[1]) <= 0) throw new Error(`the server did not count the accept: ${stats}`);
  if (/draft acceptance \d+%/.test(stats)) {
    // The status bar follows the server's figures: the live draft acceptance.
    await page.waitForFunction(() => [...document.querySelectorAll('.statusbar-item')]
      .some((e) => /quickdraft \d+%/.test(e.textContent)), null, { timeout: 15000 });
    log(`status bar: "${(await status.textContent()).trim()}"`);
  }
  await page.screenshot({ path: path.join(outDir, shotName('after-accept')) });
  log('PASS');
} catch (error) {
  failed = true;
  console.error(`e2e FAILED: ${error.stack || error}`);
  if (page) {
    const shot = path.join(outDir, shotName('e2e-failure'));
    await page.screenshot({ path: shot }).catch(() => undefined);
    console.error(`failure screenshot: ${shot}`);
  }
  try {
    console.error('---- code-server log (tail)');
    console.error(fs.readFileSync(path.join(tmp, 'code-server.log'), 'utf8').split('\n').slice(-40).join('\n'));
    const logs = path.join(userData, 'logs');
    for (const f of fs.existsSync(logs) ? fs.readdirSync(logs, { recursive: true }) : []) {
      if (String(f).endsWith('quickdraft.log') || /quickdraft/.test(String(f))) {
        console.error(`---- ${f}`);
        console.error(fs.readFileSync(path.join(logs, String(f)), 'utf8').split('\n').slice(-60).join('\n'));
      }
    }
  } catch {
    // logs are best effort
  }
} finally {
  await browser?.close().catch(() => undefined);
  try { process.kill(-server.pid, 'SIGTERM'); } catch { /* already gone */ }
  if (!failed && !process.env.QD_E2E_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
  else console.error(`kept ${tmp}`);
}
process.exit(failed ? 1 : 0);
