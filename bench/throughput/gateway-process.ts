/**
 * The measured gateway of bench:throughput as a real process: `node --import loop-probe.js .build-bench/cli.js
 * serve --sim R` (the compiled build; or `node --import tsx --import loop-probe.ts src/cli.ts`, ./build.ts) with simulated TokenSpeed ranks at `--time-scale 0` (as fast as the gateway takes their output),
 * one HTTP port, warn-level logs. Every process of it reports its event-loop delay on the benchmark's probe socket
 * (./loop-probe.ts, ./loop-probes.ts); its process tree (./proc.ts) gives the CPU per role. `--workers N` is passed
 * through when the CLI has it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { USAGE } from '../../src/cli.js';
import { SIM_USAGE } from '../../src/sim/main.js';
import { freePort } from '../../test/helpers/net.js';
import type { GatewayBuild } from './build.js';
import { LoopProbes, type LoopDelay } from './loop-probes.js';
import { cpuMicros, processTree, type TreeProcess } from './proc.js';

/** Whether this checkout's `serve` accepts `--workers N` (multi-process fronts, issue 9 phase 2). */
export function workersSupported(): boolean {
  return /--workers\b/.test(USAGE);
}

/** Whether this checkout's `serve` has `--max-concurrent-requests` (issue 10; the bench turns the cap off). */
function capSupported(): boolean {
  return /--max-concurrent-requests\b/.test(USAGE);
}

/** Whether this checkout's sim ranks write their counters on SIGUSR2 (`--stats-dir`, src/sim/main.ts). */
function rankStatsSupported(): boolean {
  return /--stats-dir\b/.test(SIM_USAGE);
}

/**
 * Counters of the simulated ranks, summed over them (src/sim/engine.ts `SimEngineStats`): forward passes, step
 * messages, the rows in them, tokens generated. The difference of two reads gives a window's tokens per step and
 * rows per output batch.
 */
export interface RankCounters {
  rounds: number;
  steps: number;
  stepRows: number;
  tokensGenerated: number;
}

/** How to start the gateway. Units: requests, 16-token pages. */
export interface GatewayProcessOptions {
  /** Which build runs (./build.ts `prepareGatewayBuild`). */
  build: GatewayBuild;
  /** Simulated DP ranks (one process each). */
  ranks: number;
  /** `--workers N`; only passed when greater than 1 (needs {@link workersSupported}). */
  workers: number;
  /** `--max-running` of each rank: enough for every stream to decode at once. */
  maxRunningPerRank: number;
  /** `--kv-pages` of each rank. */
  kvPagesPerRank: number;
  /** Write a V8 CPU profile of the gateway process into this directory at exit (`node --cpu-prof`). */
  cpuProfileDir?: string;
  /**
   * Pace the ranks instead of running them flat out (`--time-scale 0`): every step takes `stepMs` ms whatever the
   * batch (each running request gets one token per step), so the offered load is streams × 1000 / stepMs tokens/s.
   */
  paceStepMs?: number;
  /** More `serve` flags, before `--sim` (e.g. limits a scenario needs). */
  extraArgs?: string[];
}

export type { LoopDelay };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A running gateway process. */
export class GatewayProcess {
  private readonly output: string[] = [];
  private exited = false;
  private tree: TreeProcess[] = [];

  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
    /** Where the ranks write their counters (`--stats-dir`), or null when this checkout's sim cannot. */
    private readonly statsDir: string | null,
    private readonly probes: LoopProbes,
  ) {
    const keep = (chunk: Buffer) => {
      this.output.push(chunk.toString('utf8'));
      if (this.output.length > 50) this.output.shift();
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', () => (this.exited = true));
  }

  /**
   * Starts the gateway and resolves once `/health` answers 200 with status `ok` (every rank joined: the gateway serves
   * as soon as one rank has, so 200 alone would start the load on part of the ranks). Throws with the process's last
   * output otherwise.
   */
  static async start(opts: GatewayProcessOptions): Promise<GatewayProcess> {
    const port = await freePort();
    const pace =
      opts.paceStepMs === undefined
        ? ['--time-scale', '0']
        : [
            '--time-scale',
            '1',
            '--step-base-ms',
            String(opts.paceStepMs),
            '--step-prefill-ms',
            '0',
            '--step-decode-ms',
            '0',
          ];
    const statsDir = rankStatsSupported() ? mkdtempSync(join(tmpdir(), 'mgw-bench-ranks-')) : null;
    const simArgs = [
      ...pace,
      '--max-running',
      String(opts.maxRunningPerRank),
      '--kv-pages',
      String(opts.kvPagesPerRank),
      '--log-level',
      'warn',
      ...(statsDir !== null ? ['--stats-dir', statsDir] : []),
    ];
    const args = [
      ...opts.build.nodeArgs,
      ...(opts.cpuProfileDir !== undefined ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfileDir] : []),
      opts.build.cliPath,
      'serve',
      '--port',
      String(port),
      '--log-level',
      'warn',
      // Every stream of a phase is admitted: the bench measures per-token cost, not the concurrency cap (429s).
      ...(capSupported() ? ['--max-concurrent-requests', '0'] : []),
      ...(opts.workers > 1 ? ['--workers', String(opts.workers)] : []),
      ...(opts.extraArgs ?? []),
      '--sim',
      String(opts.ranks),
      ...simArgs.map((a) => `--sim-arg=${a}`),
    ];
    const probes = new LoopProbes();
    await probes.listen();
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, BENCH_LOOP_PROBE_SOCK: probes.socketPath },
    });
    const gateway = new GatewayProcess(child, `http://127.0.0.1:${port}`, statsDir, probes);
    const deadline = performance.now() + 60_000;
    for (;;) {
      if (gateway.exited) {
        await gateway.stop();
        throw new Error(`gateway exited during start:\n${gateway.output.join('')}`);
      }
      if (performance.now() > deadline) {
        await gateway.stop();
        throw new Error(`gateway not healthy after 60 s:\n${gateway.output.join('')}`);
      }
      try {
        const res = await fetch(`${gateway.url}/health`);
        const body = (await res.json()) as { status?: string };
        if (res.status === 200 && body.status === 'ok') break;
      } catch {
        // not listening yet
      }
      await sleep(200);
    }
    gateway.tree = processTree(child.pid!);
    return gateway;
  }

  /** The gateway's processes with their roles (taken once it was healthy). */
  get processes(): readonly TreeProcess[] {
    return this.tree;
  }

  /** The pids of the gateway's own processes (not the ranks): the root, and the fronts with `--workers N`. */
  private gatewayPids(): number[] {
    return this.tree.filter((p) => p.role !== 'rank').map((p) => p.pid);
  }

  /** Starts a fresh event-loop delay window in every gateway process. */
  async resetLoopDelay(): Promise<void> {
    await this.probes.reset(this.gatewayPids());
  }

  /** The event-loop delay since the last reset of the worst gateway process (./loop-probes.ts `read`). */
  async readLoopDelay(): Promise<LoopDelay> {
    return this.probes.read(this.gatewayPids());
  }

  /**
   * Waits until every process of the gateway used less than `maxShare` of a core over 250 ms (the aborted streams of
   * the previous phase are cleaned up), at most `timeoutMs`. Resolves false on timeout.
   */
  async waitIdle(maxShare = 0.1, timeoutMs = 20_000): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      const before = this.tree.map((p) => cpuMicros(p.pid) ?? 0);
      await sleep(250);
      const busy = this.tree.some((p, i) => (cpuMicros(p.pid) ?? 0) - before[i]! > maxShare * 250_000);
      if (!busy) return true;
    }
    return false;
  }

  /**
   * The ranks' counters now, summed (`RankCounters`): SIGUSR2 to every rank process, then their `--stats-dir` files
   * (src/sim/main.ts `writeStatsFile`). Resolves null when this checkout's sim has no `--stats-dir`, or when not every
   * rank answered within `timeoutMs`.
   */
  async readRankCounters(timeoutMs = 5000): Promise<RankCounters | null> {
    const dir = this.statsDir;
    const ranks = this.tree.filter((p) => p.role === 'rank');
    if (dir === null || ranks.length === 0) return null;
    for (const f of readdirSync(dir)) rmSync(join(dir, f), { force: true });
    for (const r of ranks) {
      try {
        process.kill(r.pid, 'SIGUSR2');
      } catch {
        return null; // a rank is gone
      }
    }
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const files = readdirSync(dir).filter((f) => f.endsWith('.json'));
      if (files.length >= ranks.length) {
        const sum: RankCounters = { rounds: 0, steps: 0, stepRows: 0, tokensGenerated: 0 };
        for (const f of files) {
          const s = JSON.parse(readFileSync(join(dir, f), 'utf8')) as Partial<RankCounters>;
          for (const k of Object.keys(sum) as (keyof RankCounters)[]) sum[k] += s[k] ?? Number.NaN;
        }
        return sum;
      }
      if (performance.now() > deadline) return null;
      await sleep(10);
    }
  }

  /** SIGTERM (a clean shutdown, which also writes the CPU profile), SIGKILL after 15 s; removes the stats folder. */
  async stop(): Promise<void> {
    if (!this.exited) {
      const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    this.probes.close();
    if (this.statsDir !== null) rmSync(this.statsDir, { recursive: true, force: true });
  }
}
