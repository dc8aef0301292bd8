/**
 * The receiving side of bench:ipc (bench/ipc.ts): a process (node IPC, ZeroMQ, unix socket) or a worker thread
 * (MessagePort) that reads `count` batch messages (Int32 triples: request handle, token id, finish code), touches
 * every value (as a front would route each row), and reports its own CPU time from the first message to the last;
 * or, in `echo` mode, answers each message at once (round-trip latency). CPU: the whole process for a process peer,
 * the thread's run time (/proc/thread-self/schedstat) for a worker.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Pull, Push } from 'zeromq';

/** What the peer is told at start (argv[2] as JSON for a process, `workerData` for a worker). */
export interface PeerConfig {
  channel: 'node-json' | 'node-advanced' | 'zeromq' | 'unix' | 'port-clone' | 'port-transfer';
  mode: 'sink' | 'echo';
  count: number;
  /** ipc:// address (zeromq) or socket path (unix). */
  address?: string;
}

/** The peer's report. */
export interface PeerReport {
  cpuMicros: number;
  messages: number;
  checksum: number;
}

const config: PeerConfig =
  parentPort !== null ? (workerData as PeerConfig) : (JSON.parse(process.argv[2]!) as PeerConfig);

/** The calling thread's run time in µs (/proc/thread-self/schedstat, ns). */
function threadCpuMicros(): number {
  return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1000;
}
const cpuNow = (): number => {
  if (parentPort !== null) return threadCpuMicros();
  const u = process.cpuUsage();
  return u.user + u.system;
};

let received = 0;
let checksum = 0;
let start = 0;
/** Handles one data message; returns true after the last. */
function consume(rows: Int32Array): boolean {
  if (received === 0) start = cpuNow();
  for (let i = 0; i < rows.length; i++) checksum = (checksum + rows[i]!) | 0;
  received++;
  return received === config.count;
}
const report = (): PeerReport => ({ cpuMicros: cpuNow() - start, messages: received, checksum });

/** A message of the columnar JSON shape (node-json) as Int32 triples. */
function fromColumns(m: { h: number[]; t: number[]; f: number[] }): Int32Array {
  const out = new Int32Array(m.h.length * 3);
  for (let i = 0; i < m.h.length; i++) {
    out[3 * i] = m.h[i]!;
    out[3 * i + 1] = m.t[i]!;
    out[3 * i + 2] = m.f[i]!;
  }
  return out;
}

async function main(): Promise<void> {
  switch (config.channel) {
    case 'node-json':
    case 'node-advanced': {
      process.on('message', (m: { h: number[]; t: number[]; f: number[] } | { rows: Int32Array }) => {
        const rows = 'rows' in m ? m.rows : fromColumns(m);
        if (config.mode === 'echo') process.send!(m);
        else if (consume(rows)) process.send!({ report: report() });
      });
      process.send!({ ready: true });
      return;
    }
    case 'port-clone':
    case 'port-transfer': {
      parentPort!.on('message', (m: Int32Array) => {
        if (config.mode === 'echo') parentPort!.postMessage(m);
        else if (consume(m)) parentPort!.postMessage({ report: report() });
      });
      parentPort!.postMessage({ ready: true });
      return;
    }
    case 'zeromq': {
      const pull = new Pull({ receiveHighWaterMark: 1000 });
      await pull.bind(config.address!);
      const push = config.mode === 'echo' ? new Push() : null;
      if (push) await push.bind(`${config.address!}-back`);
      process.send!({ ready: true });
      for (;;) {
        const [frame] = await pull.receive();
        const rows = new Int32Array(frame!.buffer, frame!.byteOffset, frame!.byteLength / 4);
        if (push) {
          await push.send(frame!);
          continue;
        }
        if (consume(rows)) break;
      }
      process.send!({ report: report() });
      pull.close();
      return;
    }
    case 'unix': {
      const server = createServer((socket: Socket) => {
        let pending: Buffer = Buffer.alloc(0);
        socket.on('data', (chunk: Buffer) => {
          pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
          let at = 0;
          while (pending.length - at >= 4) {
            const len = pending.readUInt32LE(at);
            if (pending.length - at - 4 < len) break;
            const body = pending.subarray(at + 4, at + 4 + len);
            at += 4 + len;
            if (config.mode === 'echo') {
              const frame = Buffer.allocUnsafe(4 + len);
              frame.writeUInt32LE(len, 0);
              body.copy(frame, 4);
              socket.write(frame);
              continue;
            }
            const rows = new Int32Array(body.buffer.slice(body.byteOffset, body.byteOffset + len));
            if (consume(rows)) process.send!({ report: report() });
          }
          pending = pending.subarray(at);
        });
      });
      server.listen(config.address!, () => process.send!({ ready: true }));
      return;
    }
  }
}

await main();
