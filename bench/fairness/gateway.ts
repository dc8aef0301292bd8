/**
 * The gateway of bench:fairness as a real process (`node --import tsx src/cli.ts serve`), with simulated vLLM ranks
 * running in real time, a keys file naming the benchmark's tenants, and flow control on or off. Its resident memory
 * is read from `/proc/<pid>/status` (the gateway process alone; the simulated ranks are processes of their own).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/net.js';
import type { TenantLoad } from './load.js';

/** The model name the gateway serves (what every request of the load names). */
export const BENCH_MODEL = 'sim';

const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));

/** How the fleet is built: ranks, each rank's batch (`--max-running`, the engine's max_num_seqs). */
export interface FleetShape {
  readonly ranks: number;
  readonly maxRunning: number;
}

/** Flow control's settings for the run, or null for off. */
export interface FlowSettings {
  readonly maxInFlightPerRank: number | null;
  readonly queueTimeoutMs: number;
}

/** Write the keys file that names `tenants` (each its key, its band as default and ceiling) into `dir`. */
export function writeKeysFile(dir: string, tenants: readonly TenantLoad[]): string {
  const path = join(dir, 'keys.json');
  const spec = Object.fromEntries(
    tenants.map((t) => [t.name, { keys: [t.key], priority: t.band, max_priority: t.band }]),
  );
  writeFileSync(path, JSON.stringify({ tenants: spec }));
  return path;
}

/** One running gateway: its URL, its RSS now, and `close`. */
export class GatewayUnderTest {
  private constructor(
    readonly url: string,
    private readonly child: ChildProcess,
  ) {}

  /**
   * Start a gateway over `fleet` with `flow` (null: flow control off), the tenants of `keysFile`, and resolve once it
   * answers /ready. @throws Error when it exits or is not ready within 60 s.
   */
  static async start(fleet: FleetShape, flow: FlowSettings | null, keysFile: string): Promise<GatewayUnderTest> {
    const port = await freePort();
    const args = [
      '--import',
      'tsx',
      CLI,
      'serve',
      '--sim',
      String(fleet.ranks),
      '--sim-engine',
      'vllm',
      `--sim-arg=--max-running`,
      `--sim-arg=${fleet.maxRunning}`,
      `--sim-arg=--time-scale`,
      '--sim-arg=1',
      '--port',
      String(port),
      '--host',
      '127.0.0.1',
      '--log-level',
      'warn',
      '--served-model-name',
      BENCH_MODEL,
      '--api-keys-file',
      keysFile,
      // The gateway-wide cap would refuse the flood before flow control sees it: the benchmark measures the queue.
      '--max-concurrent-requests',
      '1000000',
      '--exit-with-parent',
      ...(flow === null
        ? []
        : [
            '--flow-control',
            '--queue-timeout-ms',
            String(flow.queueTimeoutMs),
            ...(flow.maxInFlightPerRank === null ? [] : ['--max-in-flight-per-rank', String(flow.maxInFlightPerRank)]),
          ]),
    ];
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'ignore', 'inherit'] });
    const url = `http://127.0.0.1:${port}`;
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (code) => reject(new Error(`the gateway exited (${code}) before it was ready`))),
    );
    exited.catch(() => {});
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) await exited;
      try {
        if ((await fetch(`${url}/ready`)).status === 200) return new GatewayUnderTest(url, child);
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error('the gateway was not ready within 60 s');
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** The gateway process's resident memory now, MiB (null when /proc cannot tell). */
  rssMiB(): number | null {
    try {
      const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${this.child.pid}/status`, 'utf8'))?.[1];
      return kb === undefined ? null : Number(kb) / 1024;
    } catch {
      return null;
    }
  }

  /** Stop it (SIGTERM, then SIGKILL after 10 s) and wait for its exit. */
  async close(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const done = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(timer);
  }
}
