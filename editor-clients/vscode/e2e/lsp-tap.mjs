// A wire tap for the end-to-end test: runs the language server given on the command line and
// passes stdin/stdout through unchanged, writing every LSP message to LOG as a JSON line
// { t (ms since the epoch), dir: "in" (client → server) | "out" (server → client), msg }.
//
//   node lsp-tap.mjs LOG COMMAND [ARGS...]
import { spawn } from 'node:child_process';
import fs from 'node:fs';

const [logFile, command, ...args] = process.argv.slice(2);
if (!logFile || !command) {
  console.error('usage: node lsp-tap.mjs LOG COMMAND [ARGS...]');
  process.exit(2);
}
const log = fs.openSync(logFile, 'a');
const server = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });

/** Splits one direction's bytes into LSP messages (Content-Length framing) and logs each. */
function framer(dir) {
  let buffer = Buffer.alloc(0);
  return (chunk) => {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
      const end = buffer.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length:\s*(\d+)/i.exec(buffer.subarray(0, end).toString('ascii'))?.[1]);
      if (!Number.isFinite(length) || buffer.length < end + 4 + length) return;
      const body = buffer.subarray(end + 4, end + 4 + length).toString('utf8');
      buffer = buffer.subarray(end + 4 + length);
      let msg;
      try {
        msg = JSON.parse(body);
      } catch {
        msg = { unparsed: body };
      }
      fs.writeSync(log, `${JSON.stringify({ t: Date.now(), dir, msg })}\n`);
    }
  };
}

const fromClient = framer('in');
const fromServer = framer('out');
process.stdin.on('data', (chunk) => {
  fromClient(chunk);
  server.stdin.write(chunk);
});
process.stdin.on('end', () => server.stdin.end());
server.stdout.on('data', (chunk) => {
  fromServer(chunk);
  process.stdout.write(chunk);
});
server.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.kill(signal));
