// quickdraft for VS Code: starts `quickdraft serve` and lets vscode-languageclient's native
// inline-completion feature turn the server's `textDocument/inlineCompletion` answers into
// ghost text. This file adds what the feature does not: settings, debounce and
// enable/disable (client middleware), commands and a status-bar item.
import * as vscode from 'vscode';
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { CURSOR_NOTIFICATION, CursorReporter, cursorParams } from './cursor';
import { Debouncer } from './debounce';
import { READY_NOTIFICATION, readyMatches, TRIGGER_COMMAND } from './ready';
import { droppedSettings, isLanguageDisabled, readSettings, resolveServerCommand, Settings } from './settings';
import { ServerStatus, statsReport, statsSummary, statusText } from './stats';

const SECTION = 'quickdraft';
// Settings that only take effect when the server process is started again.
const RESTART_SETTINGS = ['server.command', 'server.args'];

let client: LanguageClient | undefined;
let statusItem: vscode.StatusBarItem;
let lastStatus: ServerStatus | undefined;
let settings: Settings;
let extensionPath = '';
const debouncer = new Debouncer();
const cursorReporter = new CursorReporter((position) => {
  if (currentClientRunning()) client!.sendNotification(CURSOR_NOTIFICATION, cursorParams(position)).catch(() => undefined);
});

function workspaceDirs(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).map((folder) => folder.uri.fsPath);
}

let inFlight = 0; // completion requests sent and not answered yet
let lastStatsRefresh = 0;

function renderStatus(): void {
  // The spinner while a completion is on its way, whether or not the server reports `busy`.
  const shown = inFlight > 0 && lastStatus?.state === 'ready' ? { ...lastStatus, state: 'busy' } : lastStatus;
  const view = statusText(shown, settings.enable);
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.backgroundColor = view.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  statusItem.show();
}

function setStatus(status: ServerStatus): void {
  lastStatus = status;
  renderStatus();
}

function buildClient(): LanguageClient {
  const command = resolveServerCommand(settings.serverCommand, workspaceDirs(), extensionPath);
  const serverOptions: ServerOptions = {
    command,
    args: settings.serverArgs,
    // No `transport`: with TransportKind.stdio the client appends `--stdio` to the arguments,
    // which `quickdraft serve` does not take; stdio is the default anyway.
    options: { cwd: workspaceDirs()[0] },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    initializationOptions: settings.serverOptions,
    middleware: {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        if (!settings.enable || isLanguageDisabled(settings, document.languageId)) return null;
        // An explicit "trigger inline suggestion" is answered at once; typing is debounced.
        const delay = context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke ? 0 : settings.debounceMs;
        if (!(await debouncer.wait(delay, token))) return null;
        inFlight += 1;
        renderStatus();
        let result;
        try {
          result = await next(document, position, context, token);
        } finally {
          inFlight -= 1;
          renderStatus();
        }
        refreshAcceptance();
        if (token.isCancellationRequested) return null;
        const items = Array.isArray(result) ? result : result?.items ?? [];
        // VS Code's stable API has no "shown" event for extensions; an item handed to it here
        // is what it displays when the text still matches, so this is reported as shown.
        const id = (items[0]?.command?.arguments?.[0] as { id?: string } | undefined)?.id;
        if (id !== undefined && currentClientRunning()) {
          client!.sendNotification('quickdraft/didShowCompletion', { id }).catch(() => undefined);
        }
        return result;
      },
    },
  };
  const created = new LanguageClient(SECTION, 'quickdraft', serverOptions, clientOptions);
  created.onDidChangeState((event) => {
    if (event.newState === State.Starting) setStatus({ state: 'starting', message: `${command} ${settings.serverArgs.join(' ')}` });
    if (event.newState === State.Stopped && client === created) setStatus({ state: 'stopped', message: 'Run "quickdraft: Restart server".' });
  });
  created.onNotification('quickdraft/status', (status: ServerStatus) => {
    if (client === created) setStatus(status);
  });
  created.onNotification(READY_NOTIFICATION, (params: unknown) => onCompletionReady(created, params));
  return created;
}

/** Live draft acceptance in the status bar: re-read the server's figures after completions,
 *  at most every 2 s (a completion inside the window is picked up at its end). */
let refreshTimer: NodeJS.Timeout | undefined;
function refreshAcceptance(): void {
  if (refreshTimer) return;
  const wait = Math.max(0, lastStatsRefresh + 2000 - Date.now());
  refreshTimer = setTimeout(() => {
    refreshTimer = undefined;
    lastStatsRefresh = Date.now();
    if (!currentClientRunning()) return;
    const asked = client!;
    asked.sendRequest<Record<string, any>>('quickdraft/stats', {}).then((stats) => {
      if (client === asked && lastStatus && typeof stats?.draftAcceptance === 'number') {
        lastStatus = { ...lastStatus, draftAcceptance: stats.draftAcceptance };
        renderStatus();
      }
    }, () => undefined);
  }, wait);
}

let readyTriggers = 0; // inline suggestions re-triggered by quickdraft/completionReady (for tests)

/** The server has the answer for (uri, version, position) now: if the user is still there, ask
 *  again (VS Code then calls our provider with an Invoke trigger, which is not debounced). */
function onCompletionReady(from: LanguageClient, params: unknown): void {
  try {
    if (client !== from || !settings.enable) return;
    const editor = vscode.window.activeTextEditor;
    if (!editor || isLanguageDisabled(settings, editor.document.languageId)) return;
    const state = {
      uri: from.code2ProtocolConverter.asUri(editor.document.uri),
      version: editor.document.version,
      selections: editor.selections.map((s) => ({ line: s.active.line, character: s.active.character, empty: s.isEmpty })),
    };
    if (!readyMatches(params, state)) return;
    readyTriggers += 1;
    void Promise.resolve(vscode.commands.executeCommand(TRIGGER_COMMAND)).catch(() => undefined);
  } catch {
    // A notification must never break the extension.
  }
}

function currentClientRunning(): boolean {
  return client !== undefined && client.state === State.Running;
}

/** Tell the server where the cursor rests in a document it completes, so it can warm its cache there. */
function reportCursor(editor: vscode.TextEditor | undefined): void {
  if (!editor || !currentClientRunning() || !settings.enable || !settings.warm) return;
  const document = editor.document;
  if (!['file', 'untitled'].includes(document.uri.scheme) || isLanguageDisabled(settings, document.languageId)) return;
  const { line, character } = editor.selection.active;
  cursorReporter.moved({ uri: client!.code2ProtocolConverter.asUri(document.uri), line, character });
}

async function startClient(): Promise<void> {
  const created = buildClient();
  client = created;
  cursorReporter.cancel(true);
  try {
    await created.start();
    if (lastStatus?.state === 'starting') setStatus({ state: 'loading', message: 'waiting for the server' });
    reportCursor(vscode.window.activeTextEditor);
  } catch (error) {
    const command = resolveServerCommand(settings.serverCommand, workspaceDirs(), extensionPath);
    const message = `quickdraft: could not start "${command} ${settings.serverArgs.join(' ')}" (${String(error)}). `
      + 'Install quickdraft (make setup in its checkout, or pip install it) or set "quickdraft.server.command".';
    setStatus({ state: 'error', message });
    void vscode.window.showErrorMessage(message, 'Open Settings').then((choice) => {
      if (choice) void vscode.commands.executeCommand('workbench.action.openSettings', 'quickdraft');
    });
  }
}

async function stopClient(): Promise<void> {
  cursorReporter.cancel(true);
  if (refreshTimer) clearTimeout(refreshTimer);
  refreshTimer = undefined;
  const old = client;
  client = undefined;
  if (!old) return;
  try {
    if (old.state === State.Running) await old.stop(5000);
    await old.dispose(2000);
  } catch {
    // A server that died already cannot be stopped politely; nothing left to do.
  }
}

async function restartServer(): Promise<void> {
  await stopClient();
  await startClient();
}

async function toggle(): Promise<void> {
  const config = vscode.workspace.getConfiguration(SECTION);
  await config.update('enable', !settings.enable, vscode.ConfigurationTarget.Global);
  // onDidChangeConfiguration updates `settings`, the status bar and the server.
}

async function showStats(): Promise<Record<string, unknown> | undefined> {
  if (!currentClientRunning()) {
    void vscode.window.showWarningMessage('quickdraft: the server is not running. Run "quickdraft: Restart server".');
    return undefined;
  }
  const stats = await client!.sendRequest<Record<string, any>>('quickdraft/stats', {});
  client!.outputChannel.appendLine(statsReport(stats));
  void vscode.window.showInformationMessage(`quickdraft: ${statsSummary(stats)}`, 'Details').then((choice) => {
    if (choice) client?.outputChannel.show(true);
  });
  return stats;
}

async function onConfigurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
  if (!event.affectsConfiguration(SECTION)) return;
  const before = settings;
  settings = readSettings(vscode.workspace.getConfiguration(SECTION));
  renderStatus();
  // A server goes back to its default for a setting the user took back only by starting again.
  if (RESTART_SETTINGS.some((key) => event.affectsConfiguration(`${SECTION}.${key}`))
    || droppedSettings(before.serverOptions, settings.serverOptions).length > 0) {
    await restartServer();
    return;
  }
  if (currentClientRunning()) {
    await client!.sendNotification('workspace/didChangeConfiguration', {
      settings: { quickdraft: settings.serverOptions },
    });
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<{ client: () => LanguageClient | undefined; readyTriggers: () => number }> {
  extensionPath = context.extensionPath;
  settings = readSettings(vscode.workspace.getConfiguration(SECTION));
  statusItem = vscode.window.createStatusBarItem('quickdraft.status', vscode.StatusBarAlignment.Right, 100);
  statusItem.name = 'quickdraft';
  statusItem.command = 'quickdraft.toggle';
  setStatus({ state: 'starting' });
  context.subscriptions.push(
    statusItem,
    vscode.commands.registerCommand('quickdraft.toggle', toggle),
    vscode.commands.registerCommand('quickdraft.restartServer', restartServer),
    vscode.commands.registerCommand('quickdraft.showStats', showStats),
    vscode.workspace.onDidChangeConfiguration(onConfigurationChanged),
    vscode.window.onDidChangeTextEditorSelection((event) => reportCursor(event.textEditor)),
    vscode.window.onDidChangeActiveTextEditor(reportCursor),
    { dispose: () => void stopClient() },
  );
  await startClient();
  // Returned to other extensions and to the tests.
  return { client: () => client, readyTriggers: () => readyTriggers };
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
