// Debounce for inline-completion requests. VS Code asks on every keystroke and cancels the
// previous request's token; we wait `ms` and only then forward, so a burst of typing costs
// the server one request instead of one per key.

export interface TokenLike {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: () => unknown): { dispose(): unknown };
}

export class Debouncer {
  private generation = 0;

  /** Resolves true when this call is still the newest one after `ms` and was not cancelled. */
  async wait(ms: number, token: TokenLike): Promise<boolean> {
    const mine = ++this.generation;
    if (ms > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        const sub = token.onCancellationRequested(done);
        function done() {
          clearTimeout(timer);
          sub.dispose();
          resolve();
        }
      });
    }
    return !token.isCancellationRequested && mine === this.generation;
  }
}
