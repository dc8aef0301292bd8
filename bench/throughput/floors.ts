/**
 * The floors bench:throughput compares the gateway with, measured in the same run on the same machine (issue 9):
 * - ZeroMQ receive + decode per batch row: zeromq.js `Pull.receive()` and the TokenSpeed protocol's `decodeOutput`
 *   (what the gateway's receive loop does per output message) over batches of one decode step, pushed by another
 *   process (./zmq-sender.ts); CPU of this process per row;
 * - detokenization per token: the window detokenizer (IncrementalDetokenizer, today's per-token decode) and the
 *   table-driven one (TableDetokenizer) over the simulator's text plus CJK/emoji text, one push per token; CPU per token;
 * - a minimal node:http SSE writer per chunk (./sse-floor-server.ts) driven by the same load generator as the
 *   gateway; CPU of the server process per chunk (one chunk = one token).
 * The first two run in the benchmark's own process (src/ through tsx); the SSE server runs the build the gateway
 * runs (./build.ts: compiled by default).
 * The streamed-token floor is their sum (row + table detokenization + chunk); the non-streamed one leaves out the chunk.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pull } from 'zeromq';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_CORPUS } from '../../src/sim/text.js';
import { IncrementalDetokenizer } from '../../src/tokenizer/detokenizer.js';
import { TableDetokenizer } from '../../src/tokenizer/table-detokenizer.js';
import type { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import type { GatewayBuild } from './build.js';
import type { LoadProcess } from './load-process.js';
import { cpuMicros } from './proc.js';
import type { LoadResult, LoadScenario } from './protocol.js';

const SENDER_PATH = fileURLToPath(new URL('./zmq-sender.ts', import.meta.url));

/** CPU µs of this process so far (user + system). */
function ownCpu(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/**
 * ZeroMQ receive + TokenSpeed decode, µs of CPU per batch row: `messages` batches of `rows` rows over ipc; the first
 * tenth is warm-up (JIT) and not measured.
 */
export async function zmqReceiveFloor(messages: number, rows: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-zmq-'));
  const address = `ipc://${join(dir, 'out')}`;
  const sender = fork(SENDER_PATH, [address, String(messages), String(rows)], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => sender.once('exit', () => resolve()));
  try {
    await new Promise<void>((resolve, reject) => {
      sender.once('message', () => resolve());
      sender.once('exit', (code) => reject(new Error(`zmq sender exited early (code ${code})`)));
    });
    const pull = new Pull({ receiveHighWaterMark: 1000 });
    pull.connect(address);
    const warmup = Math.floor(messages / 10);
    let received = 0;
    let measuredRows = 0;
    let start = 0;
    for (;;) {
      const frames = await pull.receive();
      if (frames[0]!.length === 0) break;
      const batch = tokenspeedProtocol.decodeOutput(frames);
      received++;
      if (received === warmup) start = ownCpu();
      else if (received > warmup) measuredRows += batch.outputs.length;
    }
    const micros = ownCpu() - start;
    pull.close();
    sender.disconnect();
    return micros / measuredRows;
  } finally {
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

/** µs of CPU per token of each detokenizer. */
export interface DetokenizeFloor {
  /** IncrementalDetokenizer (a window re-decode per token through the tokenizer library). */
  window: number;
  /** TableDetokenizer (id → bytes table + streaming UTF-8). */
  table: number;
}

/** Token sequences of ~`length` tokens: the simulator's English sentences, then CJK, emoji and RTL text. */
function sampleSequences(tokenizer: GatewayTokenizer, length: number): number[][] {
  const texts = [
    DEFAULT_CORPUS.join(' '),
    '这是一个中文句子，包含标点符号。日本語の文章もあります。한국어도 있어요. '.repeat(8),
    '🤖🎉 Robots party 🎉🤖 with families 👩‍👩‍👧‍👦 and flags 🏳️‍🌈🇯🇵 עברית العربية. '.repeat(8),
  ];
  return texts.map((t) => tokenizer.encode(t).slice(0, length));
}

/**
 * Detokenization µs per token, one `push` per token over fresh detokenizers per sequence (the gateway's shape),
 * alternating the two implementations `rounds` times to share the machine's noise; the first round is warm-up.
 */
export function detokenizeFloor(tokenizer: GatewayTokenizer, rounds = 4): DetokenizeFloor {
  const table = tokenizer.tokenTextTable;
  if (table === null) throw new Error(`the tokenizer has no id → bytes table: ${tokenizer.tokenTextTableReason}`);
  const sequences = sampleSequences(tokenizer, 256);
  const validate = (ids: readonly number[]) => tokenizer.validateTokenIds(ids);
  const make = {
    window: () => new IncrementalDetokenizer(tokenizer),
    table: () => new TableDetokenizer(table, validate),
  };
  const totals = { window: { micros: 0, tokens: 0 }, table: { micros: 0, tokens: 0 } };
  let sink = 0;
  for (let round = 0; round <= rounds; round++) {
    for (const kind of ['window', 'table'] as const) {
      const repeat = kind === 'window' ? 4 : 100;
      const start = ownCpu();
      let tokens = 0;
      for (let r = 0; r < repeat; r++) {
        for (const ids of sequences) {
          const detok = make[kind]();
          for (let i = 0; i < ids.length; i++) sink += detok.push([ids[i]!]).length;
          sink += detok.finish().length;
          tokens += ids.length;
        }
      }
      if (round === 0) continue;
      totals[kind].micros += ownCpu() - start;
      totals[kind].tokens += tokens;
    }
  }
  if (sink < 0) throw new Error('unreachable');
  return { window: totals.window.micros / totals.window.tokens, table: totals.table.micros / totals.table.tokens };
}

/** The SSE floor of one scenario: server CPU per chunk (µs) and what the load generator saw. */
export interface SseFloor {
  microsPerChunk: number;
  load: LoadResult;
}

/** Runs `scenario` (its `url` is replaced) against a fresh minimal SSE server and measures the server's CPU per chunk. */
export async function sseWriterFloor(
  build: GatewayBuild,
  load: LoadProcess,
  scenario: LoadScenario,
): Promise<SseFloor> {
  const { path, execArgv } = build.benchScript('sse-floor-server');
  const server = fork(path, [], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      server.once('message', (m: { port: number }) => resolve(m.port));
      server.once('exit', (code) => reject(new Error(`SSE floor server exited early (code ${code})`)));
    });
    let before = 0;
    let micros = 0;
    const result = await load.run(
      { ...scenario, url: `http://127.0.0.1:${port}` },
      {
        onWindowStart: () => void (before = cpuMicros(server.pid!) ?? 0),
        onWindowEnd: () => void (micros = (cpuMicros(server.pid!) ?? 0) - before),
      },
    );
    return { microsPerChunk: micros / result.tokens, load: result };
  } finally {
    server.kill('SIGTERM');
  }
}
