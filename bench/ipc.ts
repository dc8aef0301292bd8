/**
 * IPC micro-benchmark for the multi-process design (issue 9, docs/workers.md): what it costs to move the per-tick
 * token batches from the routing process to a front (and a submit back), over each candidate channel on this machine:
 * - node IPC (`child_process.fork` / `node:cluster`'s channel), JSON serialization (the default) of a columnar
 *   object `{ h: handles[], t: token ids[], f: finish codes[] }`;
 * - node IPC with `serialization: 'advanced'` (V8 structured clone) of one `Int32Array` of (handle, token, finish)
 *   triples;
 * - ZeroMQ PUSH/PULL over `ipc://` (zeromq.js), one binary frame of the same Int32 triples;
 * - a unix-domain socket (`node:net`) with 4-byte length-prefixed frames of the same bytes;
 * - `worker_threads` MessagePort, the Int32Array cloned, or its buffer transferred (fronts as threads, one process).
 * Every batch size (rows per message: 1, 16, 128, 512) runs `count` messages one way as fast as the channel takes
 * them; CPU is taken on both sides (each process's CPU, or a thread's run time for a worker and its sender) and
 * reported per message and per row (= per token with one token per row). A ping-pong of one 16-row message gives the
 * round-trip latency. A submit (prompt token ids) is a one-way message of ~prompt/3 rows.
 *
 * Usage: `npm run bench:ipc -- [--quick] [--repeats N] [--write]` (bench/results/ipc.json). Progress on stderr.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { Pull, Push } from 'zeromq';
import { markdownTable, spread, type Spread } from './throughput/figures.js';
import type { PeerConfig, PeerReport } from './ipc/peer.js';

const PEER_PATH = fileURLToPath(new URL('./ipc/peer.ts', import.meta.url));
const CHANNELS: PeerConfig['channel'][] = [
  'node-json',
  'node-advanced',
  'zeromq',
  'unix',
  'port-clone',
  'port-transfer',
];
const CHANNEL_LABELS: Record<PeerConfig['channel'], string> = {
  'node-json': 'node IPC, JSON',
  'node-advanced': 'node IPC, advanced (structured clone)',
  zeromq: 'ZeroMQ ipc:// PUSH/PULL',
  unix: 'unix socket, length-prefixed',
  'port-clone': 'worker_threads MessagePort, clone',
  'port-transfer': 'worker_threads MessagePort, transfer',
};
const BATCH_ROWS = [1, 16, 128, 512];

/**
 * CPU µs of the sending side: the calling thread's run time from /proc/thread-self/schedstat (ns) when the peer is
 * a worker of this process (whose CPU process.cpuUsage would include), else this process's (with its GC threads).
 */
function senderCpuMicros(channel: PeerConfig['channel']): number {
  if (channel === 'port-clone' || channel === 'port-transfer')
    return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1000;
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** A batch of `rows` (handle, token id, finish code) triples. */
function batch(rows: number, seq: number): Int32Array {
  const out = new Int32Array(rows * 3);
  for (let i = 0; i < rows; i++) {
    out[3 * i] = i;
    out[3 * i + 1] = (seq + i) % 151_643;
    out[3 * i + 2] = 0;
  }
  return out;
}

function columns(rows: Int32Array): { h: number[]; t: number[]; f: number[] } {
  const n = rows.length / 3;
  const m = { h: new Array<number>(n), t: new Array<number>(n), f: new Array<number>(n) };
  for (let i = 0; i < n; i++) {
    m.h[i] = rows[3 * i]!;
    m.t[i] = rows[3 * i + 1]!;
    m.f[i] = rows[3 * i + 2]!;
  }
  return m;
}

/** The sender's handle on one started peer. */
interface Link {
  /** Sends one message; resolves when the channel can take the next (back-pressure). */
  send(rows: Int32Array): Promise<void> | void;
  /** The next control or echoed message from the peer. */
  next(): Promise<unknown>;
  close(): Promise<void>;
}

function queue<T>(): { push(v: T): void; next(): Promise<T> } {
  const items: T[] = [];
  const waiters: Array<(v: T) => void> = [];
  return {
    push(v) {
      const w = waiters.shift();
      if (w) w(v);
      else items.push(v);
    },
    next() {
      return items.length > 0 ? Promise.resolve(items.shift()!) : new Promise<T>((r) => waiters.push(r));
    },
  };
}

/** Starts the peer for `config` and returns the sending side once the peer is ready. */
async function openLink(config: PeerConfig): Promise<Link> {
  const inbox = queue<unknown>();
  if (config.channel === 'port-clone' || config.channel === 'port-transfer') {
    // The worker registers the tsx loader itself (a worker does not inherit the loader of `tsx bench/ipc.ts`).
    const peer = JSON.stringify(pathToFileURL(PEER_PATH).href);
    const boot = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then(({ tsImport }) => tsImport(${peer}, ${peer}))`;
    const worker = new Worker(boot, { eval: true, workerData: config });
    worker.on('message', (m) => inbox.push(m));
    await inbox.next();
    const transfer = config.channel === 'port-transfer';
    return {
      send: (rows) => (transfer ? worker.postMessage(rows, [rows.buffer as ArrayBuffer]) : worker.postMessage(rows)),
      next: () => inbox.next(),
      close: async () => void (await worker.terminate()),
    };
  }
  const serialization = config.channel === 'node-advanced' ? 'advanced' : 'json';
  const child: ChildProcess = fork(PEER_PATH, [JSON.stringify(config)], {
    execArgv: ['--import', 'tsx'],
    serialization,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  child.on('message', (m) => inbox.push(m));
  await inbox.next();
  const stop = async () => {
    child.kill();
    await new Promise((r) => child.once('exit', r));
  };
  if (config.channel === 'node-json' || config.channel === 'node-advanced') {
    const json = config.channel === 'node-json';
    return {
      send: (rows) => {
        // child.send returns false once its backlog is too large; then wait for the message to reach the channel.
        let sent: () => void = () => {};
        const done = new Promise<void>((resolve) => (sent = resolve));
        return child.send(json ? columns(rows) : { rows }, () => sent()) ? undefined : done;
      },
      next: () => inbox.next(),
      close: stop,
    };
  }
  if (config.channel === 'zeromq') {
    const push = new Push({ sendHighWaterMark: 1000 });
    push.connect(config.address!);
    let pull: Pull | null = null;
    if (config.mode === 'echo') {
      pull = new Pull();
      pull.connect(`${config.address!}-back`);
    }
    return {
      send: (rows) => push.send(new Uint8Array(rows.buffer, rows.byteOffset, rows.byteLength)),
      next: async () => (pull ? (await pull.receive())[0] : inbox.next()),
      close: async () => {
        push.close();
        pull?.close();
        await stop();
      },
    };
  }
  const socket: Socket = await new Promise((resolve, reject) => {
    const s = connect(config.address!, () => resolve(s));
    s.once('error', reject);
  });
  let echoBuffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    echoBuffer = Buffer.concat([echoBuffer, chunk]);
    while (echoBuffer.length >= 4 && echoBuffer.length - 4 >= echoBuffer.readUInt32LE(0)) {
      const len = echoBuffer.readUInt32LE(0);
      inbox.push(echoBuffer.subarray(4, 4 + len));
      echoBuffer = echoBuffer.subarray(4 + len);
    }
  });
  return {
    send: (rows) => {
      const frame = Buffer.allocUnsafe(4 + rows.byteLength);
      frame.writeUInt32LE(rows.byteLength, 0);
      Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength).copy(frame, 4);
      if (socket.write(frame)) return;
      return new Promise<void>((resolve) => socket.once('drain', () => resolve()));
    },
    next: () => inbox.next(),
    close: async () => {
      socket.destroy();
      await stop();
    },
  };
}

let socketCounter = 0;
/** A fresh socket address per run (a killed peer leaves its unix socket file behind). */
function socketAddress(channel: PeerConfig['channel'], dir: string): string {
  const name = join(dir, `s-${socketCounter++}`);
  return channel === 'zeromq' ? `ipc://${name}` : name;
}

/** One one-way run: µs of CPU per message on each side. */
interface OneWay {
  senderPerMessage: number;
  receiverPerMessage: number;
  wallMs: number;
}

async function oneWay(channel: PeerConfig['channel'], rows: number, count: number, dir: string): Promise<OneWay> {
  const address = socketAddress(channel, dir);
  const link = await openLink({ channel, mode: 'sink', count, address });
  try {
    const transfer = channel === 'port-transfer';
    const template = batch(rows, 0);
    const t0 = performance.now();
    const c0 = senderCpuMicros(channel);
    for (let i = 0; i < count; i++) {
      // A transferred buffer is gone after the send, so each message needs its own (a real sender builds one anyway).
      const b = transfer ? template.slice() : template;
      const pending = link.send(b);
      if (pending) await pending;
    }
    const senderMicros = senderCpuMicros(channel) - c0;
    const { report } = (await link.next()) as { report: PeerReport };
    if (report.messages !== count) throw new Error(`${channel}: peer saw ${report.messages} of ${count} messages`);
    return {
      senderPerMessage: senderMicros / count,
      receiverPerMessage: report.cpuMicros / count,
      wallMs: performance.now() - t0,
    };
  } finally {
    await link.close();
  }
}

/** Round-trip latency of one 16-row message, µs (median of `count`). */
async function pingPong(channel: PeerConfig['channel'], count: number, dir: string): Promise<number> {
  const address = socketAddress(channel, dir);
  const link = await openLink({ channel, mode: 'echo', count, address });
  try {
    const samples: number[] = [];
    for (let i = 0; i < count; i++) {
      const t = performance.now();
      const pending = link.send(batch(16, i));
      if (pending) await pending;
      await link.next();
      samples.push((performance.now() - t) * 1000);
    }
    return spread(samples.slice(Math.floor(count / 10))).median;
  } finally {
    await link.close();
  }
}

interface ChannelFigures {
  channel: string;
  /** Per batch size: µs per message (sender + receiver), µs per row, and the split. */
  batches: Array<{
    rows: number;
    perMessage: Spread;
    perRow: Spread;
    senderPerMessage: Spread;
    receiverPerMessage: Spread;
  }>;
  roundTripMicros: Spread;
}

const USAGE = `npm run bench:ipc -- [options]
  --quick      fewer rows per batch size (about a minute)
  --repeats N  repeats of every channel (3; 1 with --quick)
  --write      write bench/results/ipc.json
  --help       this text`;

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help')) {
    console.log(USAGE);
    return;
  }
  const quick = argv.includes('--quick');
  const write = argv.includes('--write');
  const at = argv.indexOf('--repeats');
  const repeats = at >= 0 ? Number(argv[at + 1]) : quick ? 1 : 3;
  const unknown = argv.filter(
    (a, i) => !['--quick', '--write', '--repeats'].includes(a) && argv[i - 1] !== '--repeats',
  );
  if (unknown.length > 0 || !Number.isSafeInteger(repeats) || repeats < 1) {
    process.stderr.write(`bench:ipc: unknown option or bad value in: ${argv.join(' ')}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  const rowsTarget = quick ? 200_000 : 600_000;
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-ipc-'));
  const results: ChannelFigures[] = [];
  try {
    for (const channel of CHANNELS) {
      const runs = new Map<number, OneWay[]>();
      const rtts: number[] = [];
      for (let r = 0; r < repeats; r++) {
        for (const rows of BATCH_ROWS) {
          const count = Math.max(1000, Math.min(quick ? 20_000 : 50_000, Math.ceil(rowsTarget / rows)));
          const run = await oneWay(channel, rows, count, dir);
          runs.set(rows, [...(runs.get(rows) ?? []), run]);
          process.stderr.write(
            `${CHANNEL_LABELS[channel]}, ${rows} rows: ${(run.senderPerMessage + run.receiverPerMessage).toFixed(2)} µs/message ` +
              `(${run.senderPerMessage.toFixed(2)} + ${run.receiverPerMessage.toFixed(2)}), ${count} in ${run.wallMs.toFixed(0)} ms\n`,
          );
        }
        rtts.push(await pingPong(channel, quick ? 500 : 2000, dir));
      }
      results.push({
        channel: CHANNEL_LABELS[channel],
        batches: BATCH_ROWS.map((rows) => {
          const rs = runs.get(rows)!;
          return {
            rows,
            perMessage: spread(rs.map((x) => x.senderPerMessage + x.receiverPerMessage)),
            perRow: spread(rs.map((x) => (x.senderPerMessage + x.receiverPerMessage) / rows)),
            senderPerMessage: spread(rs.map((x) => x.senderPerMessage)),
            receiverPerMessage: spread(rs.map((x) => x.receiverPerMessage)),
          };
        }),
        roundTripMicros: spread(rtts),
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const fmt = (s: Spread, d: number) => (Number.isFinite(s.median) ? s.median.toFixed(d) : '-');
  const header = [
    'channel',
    ...BATCH_ROWS.map((r) => `${r} row${r > 1 ? 's' : ''}: µs/msg (send + recv)`),
    'µs/row at 512',
    'round trip µs',
  ];
  const rows = results.map((c) => [
    c.channel,
    ...c.batches.map(
      (b) => `${fmt(b.perMessage, 1)} (${fmt(b.senderPerMessage, 1)} + ${fmt(b.receiverPerMessage, 1)})`,
    ),
    fmt(c.batches[c.batches.length - 1]!.perRow, 3),
    fmt(c.roundTripMicros, 0),
  ]);
  console.log(
    `IPC cost per message, sender + receiver CPU (median of ${repeats} repeat(s)); a row = (handle, token id, finish code), Int32.\n`,
  );
  console.log(markdownTable(header, rows));
  if (write) {
    const out = join(dirname(fileURLToPath(import.meta.url)), 'results');
    await mkdir(out, { recursive: true });
    await writeFile(
      join(out, 'ipc.json'),
      JSON.stringify(
        {
          generatedBy: 'npm run bench:ipc -- --write',
          repeats,
          units: { perMessage: 'µs of CPU', roundTrip: 'µs' },
          results,
        },
        null,
        2,
      ) + '\n',
    );
    console.log(`wrote ${join('bench', 'results', 'ipc.json')}`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:ipc failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
