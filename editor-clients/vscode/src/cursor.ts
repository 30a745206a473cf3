// Where the cursor rests, for the server (`quickdraft/didChangeCursor`): it prefills its cache
// for a completion there before one is asked for, so the first ghost text after a jump comes
// quickly. Debounced: holding an arrow key down sends one notification, where the cursor stops;
// a position already sent is not sent again. No `vscode` import: tested directly.

export interface CursorPosition {
  uri: string;
  line: number;
  character: number;
}

export const CURSOR_NOTIFICATION = 'quickdraft/didChangeCursor';

/** The notification's params: an LSP TextDocumentPositionParams. */
export function cursorParams(p: CursorPosition): { textDocument: { uri: string }; position: { line: number; character: number } } {
  return { textDocument: { uri: p.uri }, position: { line: p.line, character: p.character } };
}

export class CursorReporter {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private last: CursorPosition | undefined;

  constructor(private readonly send: (position: CursorPosition) => void, private readonly delayMs = 100) {}

  /** The cursor is here now; it is reported once it has stayed `delayMs`. */
  moved(position: CursorPosition): void {
    this.cancel();
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const last = this.last;
      if (last && last.uri === position.uri && last.line === position.line && last.character === position.character) return;
      this.last = position;
      this.send(position);
    }, this.delayMs);
  }

  /** Drop a pending report (and, with `forget`, what was sent: a new server knows nothing). */
  cancel(forget = false): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (forget) this.last = undefined;
  }
}
