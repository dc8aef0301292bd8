/**
 * The benchmark's end of the event-loop probes (./loop-probe.ts): a unix socket server that every process of the
 * measured gateway connects to, so the delay of the `--workers N` fronts is measured too, not only the root's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Event-loop delay of one process over a window, in ms. */
export interface LoopDelay {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
  samples: number;
}

/** One connected probe: its process and the replies it owes, oldest first. */
interface Probe {
  pid: number;
  sock: Socket;
  waiting: Array<(reply: Record<string, unknown>) => void>;
}

/** The probes of one gateway run. `socketPath` goes into the gateway's `BENCH_LOOP_PROBE_SOCK`. */
export class LoopProbes {
  readonly socketPath: string;
  private readonly dir: string;
  private readonly server: Server;
  private readonly probes = new Map<number, Probe>();

  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), 'mgw-bench-probe-'));
    this.socketPath = join(this.dir, 'loop.sock');
    this.server = createServer((sock) => this.accept(sock));
  }

  /** Listen (before the gateway starts). */
  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.socketPath, () => resolve());
    });
  }

  private accept(sock: Socket): void {
    sock.setEncoding('utf8');
    let probe: Probe | null = null;
    let pending = '';
    sock.on('data', (chunk: string) => {
      pending += chunk;
      for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n')) {
        const message = JSON.parse(pending.slice(0, nl)) as Record<string, unknown>;
        pending = pending.slice(nl + 1);
        if (probe === null) {
          probe = { pid: Number(message.pid), sock, waiting: [] };
          this.probes.set(probe.pid, probe);
        } else {
          probe.waiting.shift()?.(message);
        }
      }
    });
    sock.on('error', () => sock.destroy());
    sock.on('close', () => {
      if (probe !== null && this.probes.get(probe.pid) === probe) this.probes.delete(probe.pid);
    });
  }

  /**
   * Sends `command` to the probes of `pids` and resolves with their replies (pids without a probe are skipped).
   * Rejects after 60 s without every answer (a loop may lag seconds).
   */
  private ask(pids: readonly number[], command: 'reset' | 'read'): Promise<Record<string, unknown>[]> {
    const asked = pids.map((pid) => this.probes.get(pid)).filter((p): p is Probe => p !== undefined);
    return Promise.all(
      asked.map(
        (p) =>
          new Promise<Record<string, unknown>>((resolve, reject) => {
            const timer = setTimeout(
              () => reject(new Error(`loop probe of pid ${p.pid} did not answer '${command}'`)),
              60_000,
            );
            p.waiting.push((reply) => {
              clearTimeout(timer);
              resolve(reply);
            });
            p.sock.write(`${command}\n`);
          }),
      ),
    );
  }

  /** Starts a fresh window in the processes `pids`. */
  async reset(pids: readonly number[]): Promise<void> {
    await this.ask(pids, 'reset');
  }

  /**
   * The delay since the last reset of the worst of the processes `pids` (each figure the largest over them; samples
   * summed): with `--workers N` the fronts serve the streams and the routing process carries every token, so a
   * stall in any of them is a stall some client sees. Throws when none of them has a probe.
   */
  async read(pids: readonly number[]): Promise<LoopDelay> {
    const replies = (await this.ask(pids, 'read')) as unknown as LoopDelay[];
    if (replies.length === 0) throw new Error(`no loop probe connected for pids ${pids.join(', ')}`);
    const worst = (key: 'p50Ms' | 'p99Ms' | 'maxMs' | 'meanMs') => Math.max(...replies.map((r) => r[key]));
    return {
      p50Ms: worst('p50Ms'),
      p99Ms: worst('p99Ms'),
      maxMs: worst('maxMs'),
      meanMs: worst('meanMs'),
      samples: replies.reduce((s, r) => s + r.samples, 0),
    };
  }

  /** Closes the server and every probe connection; removes the socket's folder. */
  close(): void {
    for (const p of this.probes.values()) p.sock.destroy();
    this.probes.clear();
    this.server.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
