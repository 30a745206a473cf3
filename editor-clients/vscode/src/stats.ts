// Formatting the answer of the `quickdraft/stats` request and of `quickdraft/status`.

export interface ServerStatus {
  state: 'loading' | 'ready' | 'busy' | 'error' | string;
  message?: string;
  draftAcceptance?: number | null;
}

function pct(value: unknown): string {
  return typeof value === 'number' && isFinite(value) ? `${Math.round(value * 100)}%` : '–';
}

function num(value: unknown, digits = 1): string {
  return typeof value === 'number' && isFinite(value) ? value.toFixed(digits) : '–';
}

/** One line for a notification. */
export function statsSummary(stats: Record<string, any>): string {
  const latency = stats.latencyMs ?? {};
  return [
    `${stats.requests ?? 0} requests`,
    `draft acceptance ${pct(stats.draftAcceptance)}`,
    `τ ${num(stats.tau, 2)} tokens/step`,
    `latency p50 ${num(latency.p50, 0)} ms, p90 ${num(latency.p90, 0)} ms`,
    `accepted by you ${pct(stats.userAcceptance)}`,
  ].join(' · ');
}

/** Several lines for the output channel, including per-drafter figures. */
export function statsReport(stats: Record<string, any>): string {
  const latency = stats.latencyMs ?? {};
  const lines = [
    'quickdraft stats',
    `  requests            ${stats.requests ?? 0}`,
    `  drafter             ${stats.drafter ?? '–'}`,
    `  draft acceptance    ${pct(stats.draftAcceptance)}`,
    `  tau (tokens/step)   ${num(stats.tau, 2)}`,
    `  latency ms          p50 ${num(latency.p50, 0)}  p90 ${num(latency.p90, 0)}  p99 ${num(latency.p99, 0)}`,
    `  user acceptance     ${pct(stats.userAcceptance)}`,
  ];
  const drafters = stats.drafters;
  if (drafters && typeof drafters === 'object') {
    for (const [name, figures] of Object.entries(drafters)) {
      lines.push(`  drafter ${name}: ${JSON.stringify(figures)}`);
    }
  }
  return lines.join('\n');
}

/** Status-bar text and tooltip for a server status (or a client-side state). */
export function statusText(
  status: ServerStatus | undefined,
  enabled: boolean,
): { text: string; tooltip: string; error: boolean } {
  const acceptance = status && typeof status.draftAcceptance === 'number'
    ? ` ${pct(status.draftAcceptance)}` : '';
  const message = status?.message ? `\n${status.message}` : '';
  const help = '\n\nClick to toggle. Commands: quickdraft: Show stats, quickdraft: Restart server.';
  const accTip = acceptance ? `\nDraft acceptance:${acceptance} of drafted tokens kept by the verifier` : '';
  if (!enabled) {
    return { text: '$(circle-slash) quickdraft', tooltip: `quickdraft: disabled${help}`, error: false };
  }
  switch (status?.state) {
    case 'starting':
      return { text: '$(sync~spin) quickdraft: starting', tooltip: `quickdraft: starting the server${message}${help}`, error: false };
    case 'loading':
      return { text: '$(sync~spin) quickdraft: loading models', tooltip: `quickdraft: loading models${message}${help}`, error: false };
    case 'busy':
      return { text: `$(loading~spin) quickdraft${acceptance}`, tooltip: `quickdraft: completing${message}${accTip}${help}`, error: false };
    case 'error':
      return { text: '$(error) quickdraft', tooltip: `quickdraft: error${message}${help}`, error: true };
    case 'stopped':
      return { text: '$(debug-disconnect) quickdraft', tooltip: `quickdraft: server stopped${message}${help}`, error: true };
    default:
      return { text: `$(sparkle) quickdraft${acceptance}`, tooltip: `quickdraft: ready${message}${accTip}${help}`, error: false };
  }
}
