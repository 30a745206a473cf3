// Reading the `quickdraft.*` settings and turning them into what the server understands.
// No `vscode` import here: plain functions, tested directly by test/settings.test.mjs.
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export interface Settings {
  enable: boolean;
  serverCommand: string;
  serverArgs: string[];
  verifier: string;
  draft: string;
  drafter: string;
  budgetMs: number;
  maxNewTokens: number;
  minConfidence: number | null; // null: the model's measured default
  multiline: string;
  disabledLanguages: string[];
  debounceMs: number;
  warm: boolean;
}

/** The subset of vscode.WorkspaceConfiguration this module needs. */
export interface ConfigLike {
  get<T>(section: string, defaultValue: T): T;
}

export function readSettings(config: ConfigLike): Settings {
  return {
    enable: config.get<boolean>('enable', true),
    serverCommand: config.get<string>('server.command', ''),
    serverArgs: config.get<string[]>('server.args', ['serve']),
    verifier: config.get<string>('verifier', ''),
    draft: config.get<string>('draft', ''),
    drafter: config.get<string>('drafter', 'hybrid'),
    budgetMs: config.get<number>('budgetMs', 200),
    maxNewTokens: config.get<number>('maxNewTokens', 64),
    minConfidence: config.get<number | null>('minConfidence', null),
    multiline: config.get<string>('multiline', 'auto'),
    disabledLanguages: config.get<string[]>('disabledLanguages', []),
    debounceMs: config.get<number>('debounceMs', 150),
    warm: config.get<boolean>('warm', true),
  };
}

/** `initializationOptions` and the `quickdraft` section of `workspace/didChangeConfiguration`. */
export function serverOptionsFrom(s: Settings): Record<string, unknown> {
  const options: Record<string, unknown> = {
    enabled: s.enable,
    drafter: s.drafter,
    budgetMs: s.budgetMs,
    maxNewTokens: s.maxNewTokens,
    multiline: s.multiline,
    disabledLanguages: s.disabledLanguages,
    warm: s.warm,
  };
  // Empty model settings mean "the server's default": leave them out.
  if (s.verifier) options.verifier = s.verifier;
  if (s.draft) options.draft = s.draft;
  if (typeof s.minConfidence === 'number') options.minConfidence = s.minConfidence;
  return options;
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
