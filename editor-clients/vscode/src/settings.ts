// Reading the `quickdraft.*` settings and turning them into what the server understands.
// No `vscode` import here: plain functions, tested directly by test/units.test.cjs.
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/** The server's settings by the names it knows, in the order of its table
 *  (lsp_server/workspace/settings.py; tests/test_settings_table.py checks this list against it). */
export const SERVER_SETTINGS = [
  'verifier', 'draft', 'drafter', 'dtype', 'device', 'budgetMs', 'maxNewTokens', 'multiline', 'enabled',
  'disabledLanguages', 'prefixTokens', 'suffixTokens', 'otherDocumentsTokens', 'coldPrefixTokens',
  'showDraftFirst', 'compiledStep', 'adaptiveDrafting', 'warm', 'anticipate', 'answerBeforeNextKey', 'minConfidence',
  'backend', 'backendModel', 'backendTokenizer', 'apiKeyEnv',
];
/** Where the VS Code setting has another name: `quickdraft.enable` is also the status-bar toggle. */
export const VSCODE_NAMES: Record<string, string> = { enabled: 'enable' };

export interface Settings {
  enable: boolean;
  serverCommand: string;
  serverArgs: string[];
  disabledLanguages: string[];
  debounceMs: number;
  warm: boolean;
  /** What the user set of the server's settings, by the server's names: all the server is sent. */
  serverOptions: Record<string, unknown>;
}

/** What a setting holds in each scope (vscode.WorkspaceConfiguration.inspect). */
export interface Inspected {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** The subset of vscode.WorkspaceConfiguration this module needs. */
export interface ConfigLike {
  get<T>(section: string, defaultValue: T): T;
  inspect(section: string): Inspected | undefined;
}

export function readSettings(config: ConfigLike): Settings {
  // The extension's own behaviour follows these too; their fallbacks are package.json's defaults.
  return {
    enable: config.get<boolean>('enable', true),
    serverCommand: config.get<string>('server.command', ''),
    serverArgs: config.get<string[]>('server.args', ['serve']),
    disabledLanguages: config.get<string[]>('disabledLanguages', []),
    debounceMs: config.get<number>('debounceMs', 150),
    warm: config.get<boolean>('warm', true),
    serverOptions: serverOptionsFrom(config),
  };
}

/** The value the user set in the most specific scope that has one; undefined where they set none. */
export function userValue(config: ConfigLike, key: string): unknown {
  const scopes = config.inspect(key);
  for (const value of [scopes?.workspaceFolderValue, scopes?.workspaceValue, scopes?.globalValue]) {
    if (value !== undefined && value !== null) return value;
  }
  return undefined;
}

/**
 * `initializationOptions` and the `quickdraft` section of `workspace/didChangeConfiguration`: only
 * what the user set. package.json's defaults are never sent, so the server's own defaults (the
 * machine's drafter and models among them) apply, as they do for every other editor.
 */
export function serverOptionsFrom(config: ConfigLike): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  for (const name of SERVER_SETTINGS) {
    const value = userValue(config, VSCODE_NAMES[name] ?? name);
    if (value !== undefined) options[name] = value;
  }
  return options;
}

/** Server settings the user has taken back since `before`: the server keeps the last value it was
 *  sent until it starts again (a setting left out of a change means "unchanged" to it). */
export function droppedSettings(before: Record<string, unknown>, after: Record<string, unknown>): string[] {
  return Object.keys(before).filter((name) => !(name in after));
}

export function isLanguageDisabled(s: Settings, languageId: string): boolean {
  return s.disabledLanguages.includes(languageId);
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function expand(value: string, workspaceDirs: string[]): string {
  let out = value.replace(/^~(?=$|[\\/])/, os.homedir());
  if (workspaceDirs.length > 0) out = out.split('${workspaceFolder}').join(workspaceDirs[0]);
  return out;
}

const VENV_BIN = process.platform === 'win32'
  ? path.join('.venv', 'Scripts', 'quickdraft.exe')
  : path.join('.venv', 'bin', 'quickdraft');

/** The checkout the packaged extension was built in (`out/checkout.json`, written by `npm run
 *  package`), so that an installed .vsix finds that checkout's `.venv` without settings. */
export function builtFromCheckout(extensionPath: string): string[] {
  try {
    const info = JSON.parse(fs.readFileSync(path.join(extensionPath, 'out', 'checkout.json'), 'utf8'));
    return typeof info?.root === 'string' && info.root ? [info.root] : [];
  } catch {
    return [];
  }
}

/**
 * Which executable to start: the configured one; else `quickdraft` on PATH; else the
 * `.venv/bin/quickdraft` of a workspace folder, of the quickdraft checkout the extension
 * lives in (editor-clients/vscode -> ../../.venv), or of the checkout the installed .vsix was
 * built in. (VS Code's extension host takes PATH from the user's login shell, so a venv that is
 * only activated in a terminal is not on it.) Returns `quickdraft` when nothing is found, so
 * that the error the user sees names the command that was tried.
 */
export function resolveServerCommand(
  configured: string,
  workspaceDirs: string[],
  extensionPath: string,
  envPath: string = process.env.PATH ?? '',
  checkoutDirs: string[] = builtFromCheckout(extensionPath),
): string {
  if (configured.trim()) return expand(configured.trim(), workspaceDirs);
  const exe = process.platform === 'win32' ? 'quickdraft.exe' : 'quickdraft';
  for (const dir of envPath.split(path.delimiter)) {
    if (dir && isExecutable(path.join(dir, exe))) return path.join(dir, exe);
  }
  const candidates = [
    ...workspaceDirs.map((dir) => path.join(dir, VENV_BIN)),
    path.join(extensionPath, '..', '..', VENV_BIN),
    ...checkoutDirs.map((dir) => path.join(dir, VENV_BIN)),
  ];
  for (const candidate of candidates) {
    if (isExecutable(candidate)) return path.resolve(candidate);
  }
  return 'quickdraft';
}
