/**
 * Launch simulated TokenSpeed or vLLM EngineCore ranks as separate processes, one per DP rank, each running `main.ts`
 * through tsx (or the compiled `main.js` on plain node, see `simEntryArgs`). Like a real DP group (engine-wire.md 1.2 `--zmq-engine-index`, 2.6), rank i dials the handshake
 * address with engine index `firstEngineIndex + i`. `engine` picks the wire (`--engine`); `lockstep` makes the ranks
 * one lockstep (MoE) group of `count` ranks (`--lockstep --dp-size count`, engine-wire.md 5.12).
 *
 * Each child's stdout/stderr is read line by line: pino JSON lines are re-logged through the parent logger at their
 * own level (with the rank's engine index attached), anything else is logged as a `warn` line.
 */
import { existsSync } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { silentLogger, type MinimalLogger } from '../logging.js';
import type { SimEngineFamily } from './wire.js';

/** Options of `spawnSimRanks`. */
export interface SpawnSimRanksOptions {
  /** The gateway's handshake address, `tcp://host:port` (engine-wire.md 1.3). */
  handshakeAddress: string;
  /** Number of ranks (processes), ≥ 1. */
  count: number;
  /** Engine index of the first rank (default 0); rank i gets `firstEngineIndex + i`, which must stay ≤ 65535. */
  firstEngineIndex?: number;
  /** The wire the ranks speak (default `'tokenspeed'`; passed as `--engine`). */
  engine?: SimEngineFamily;
  /**
   * One lockstep group of `count` ranks (vLLM only, `count` ≥ 2): passed as `--lockstep --dp-size <count>`, so each
   * rank reports `data_parallel_size` = count and parks when drained (engine-wire.md 5.12). Default false (dense).
   */
  lockstep?: boolean;
  /** Extra `main.ts` arguments given to every rank (e.g. `['--max-running', '8', '--time-scale', '0.1']`). */
  extraArgs?: string[];
  /**
   * Per-rank step-time multipliers keyed by engine index (e.g. `{ 1: 2.0 }`: rank 1 is twice as slow, a noisy
   * neighbour; issue #5 part 2), passed as `--slowdown X` to that rank only; unlisted ranks run at 1. Each key must
   * be one of the spawned engine indexes and each value a finite number > 0.
   */
  slowdowns?: Readonly<Record<number, number>>;
  /**
   * Engine indexes of `firstEngineIndex..` not to spawn: ranks of the group already running, such as ranks a restarted
   * gateway adopted (src/transport/adoption.ts). A lockstep group still reports `count` as its size. Default: none.
   */
  skip?: ReadonlySet<number>;
  /** Where the children's log lines go (default: dropped). */
  logger?: MinimalLogger;
  /** How long `stop()` waits after SIGTERM before SIGKILL (ms, default 5000). */
  stopGraceMs?: number;
}

/** How one child ended. */
export interface SimRankExit {
  engineIndex: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One spawned rank. */
export interface SimRankProcess {
  engineIndex: number;
  child: ChildProcess;
  /** Resolves when the process has exited and all it wrote to stdout and stderr was relayed (never rejects). */
  exited: Promise<SimRankExit>;
}

/** The spawned ranks. */
export interface SimRankProcesses {
  readonly ranks: readonly SimRankProcess[];
  /**
   * SIGTERM every live rank (each sends `ENGINE_CORE_DEAD` and closes its sockets), wait for them to exit, and
   * SIGKILL any still alive after the grace period. Idempotent; resolves when every child has exited.
   */
  stop(): Promise<void>;
  /**
   * Emergency teardown, synchronous: SIGKILL every rank that has not exited yet and return at once (no
   * `ENGINE_CORE_DEAD`, no waiting). For a parent about to `process.exit()`; never throws.
   */
  killNow(): void;
}

/**
 * Absolute path of the runnable entry: `main.ts` beside this file; compiled, `main.js`, or `main.bundle.js` when the
 * test suite's copy bundled it (scripts/test-build.mjs: one file loads in a third of the CPU time).
 */
export function simMainPath(): string {
  if (import.meta.url.endsWith('.ts')) return fileURLToPath(new URL('./main.ts', import.meta.url));
  const bundle = fileURLToPath(new URL('./main.bundle.js', import.meta.url));
  return existsSync(bundle) ? bundle : fileURLToPath(new URL('./main.js', import.meta.url));
}

/**
 * The node arguments that run `simMainPath()`: the TypeScript entry needs tsx's loader (`--import tsx`); the
 * compiled one (dist/, `npm run build`) runs on plain node.
 */
export function simEntryArgs(): string[] {
  const main = simMainPath();
  return main.endsWith('.ts') ? ['--import', import.meta.resolve('tsx'), main] : [main];
}

/**
 * How long a rank's stdout and stderr are still read after its process exited, in ms: its last lines are in the
 * pipes by then unless another process holds them open (see `spawnSimRanks`).
 */
const OUTPUT_AFTER_EXIT_MS = 2000;

const PINO_LEVELS: Record<number, keyof MinimalLogger> = {
  10: 'debug',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'error',
};

function relay(
  stream: NodeJS.ReadableStream | null,
  log: MinimalLogger,
  engineIndex: number,
  source: 'stdout' | 'stderr',
): void {
  if (stream === null) return;
  const rl = createInterface({ input: stream, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (line.trim() === '') return;
    let parsed: unknown = undefined;
    if (line.startsWith('{')) {
      try {
        parsed = JSON.parse(line);
      } catch {
        parsed = undefined;
      }
    }
    if (parsed !== null && typeof parsed === 'object' && typeof (parsed as { level?: unknown }).level === 'number') {
      // engine / engineIndex are dropped: the parent's group logger binds `engine`, and `simEngineIndex` names the
      // rank (pino would otherwise write the `engine` key twice).
      const {
        level,
        msg,
        time: _time,
        pid,
        hostname: _host,
        engine: _engine,
        engineIndex: _index,
        ...rest
      } = parsed as Record<string, unknown>;
      const method = PINO_LEVELS[level as number] ?? 'info';
      log[method](
        { simEngineIndex: engineIndex, simPid: pid, ...rest },
        typeof msg === 'string' ? msg : 'sim rank log',
      );
    } else {
      log.warn({ simEngineIndex: engineIndex, source, line }, 'sim rank output');
    }
  });
}

/**
 * Spawn `count` simulated ranks: `node --import <tsx> <main.ts> --handshake <addr> --engine-index <i> [--engine F]
 * [--lockstep --dp-size <count>] ...extraArgs`. Returns at once (the children dial the gateway on their own; the
 * gateway's handshake tells when they are ready). Throws `RangeError` on a bad count or engine index range, an
 * unknown engine, `lockstep` without engine `'vllm'` or with fewer than 2 ranks, or a bad `slowdowns` entry. A child that fails to start or exits early is logged at
 * `error`; its `exited` promise resolves.
 */
export function spawnSimRanks(opts: SpawnSimRanksOptions): SimRankProcesses {
  const first = opts.firstEngineIndex ?? 0;
  if (!Number.isSafeInteger(opts.count) || opts.count < 1)
    throw new RangeError(`spawnSimRanks: count must be an integer ≥ 1, got ${opts.count}`);
  if (!Number.isSafeInteger(first) || first < 0 || first + opts.count - 1 > 0xffff) {
    throw new RangeError(`spawnSimRanks: engine indexes ${first}..${first + opts.count - 1} must lie in 0..65535`);
  }
  if (!opts.handshakeAddress.startsWith('tcp://')) {
    throw new RangeError(
      `spawnSimRanks: handshakeAddress must start with tcp://, got ${JSON.stringify(opts.handshakeAddress)}`,
    );
  }
  const engine = opts.engine ?? 'tokenspeed';
  if (engine !== 'tokenspeed' && engine !== 'vllm')
    throw new RangeError(`spawnSimRanks: engine must be tokenspeed or vllm, got ${JSON.stringify(engine)}`);
  if (opts.lockstep === true && engine !== 'vllm') {
    throw new RangeError(
      'spawnSimRanks: lockstep needs engine "vllm" (the TokenSpeed wire has no wave messages, engine-wire.md 5.12)',
    );
  }
  if (opts.lockstep === true && opts.count < 2)
    throw new RangeError(`spawnSimRanks: a lockstep group needs count ≥ 2, got ${opts.count}`);
  const familyArgs = [
    ...(engine !== 'tokenspeed' ? ['--engine', engine] : []),
    ...(opts.lockstep === true ? ['--lockstep', '--dp-size', String(opts.count)] : []),
  ];
  const slowdowns = new Map<number, number>();
  for (const [key, factor] of Object.entries(opts.slowdowns ?? {})) {
    const index = Number(key);
    if (!Number.isSafeInteger(index) || index < first || index >= first + opts.count) {
      throw new RangeError(
        `spawnSimRanks: slowdowns names engine index ${key}, not one of ${first}..${first + opts.count - 1}`,
      );
    }
    if (!Number.isFinite(factor) || factor <= 0) {
      throw new RangeError(`spawnSimRanks: slowdown of engine index ${key} must be a finite number > 0, got ${factor}`);
    }
    slowdowns.set(index, factor);
  }
  const log = opts.logger ?? silentLogger;
  const grace = opts.stopGraceMs ?? 5000;
  const entry = simEntryArgs();
  const ranks: SimRankProcess[] = [];
  let stopping = false;
  for (let i = 0; i < opts.count; i++) {
    const engineIndex = first + i;
    if (opts.skip?.has(engineIndex) === true) continue;
    const args = [
      ...entry,
      '--handshake',
      opts.handshakeAddress,
      '--engine-index',
      String(engineIndex),
      // The rank's stdin is a pipe from this process: when this process dies (even by SIGKILL) the pipe closes
      // and the rank shuts down instead of living on as an orphan (unless `--keep-running` is among the extra
      // arguments: then, once registered, it outlives this process for a restarted gateway to adopt; main.ts).
      '--exit-with-parent',
      ...familyArgs,
      ...(opts.extraArgs ?? []),
      ...(slowdowns.has(engineIndex) ? ['--slowdown', String(slowdowns.get(engineIndex))] : []),
    ];
    // Its own process group: a Ctrl-C in the gateway's terminal goes to the gateway alone, which stops the ranks in
    // order (otherwise each rank would also get the SIGINT and report ENGINE_CORE_DEAD mid-shutdown).
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    relay(child.stdout, log, engineIndex, 'stdout');
    relay(child.stderr, log, engineIndex, 'stderr');
    const exited = new Promise<SimRankExit>((resolve) => {
      child.once('error', (err) => {
        log.error({ simEngineIndex: engineIndex, err: err.message }, 'sim rank process error');
        if (child.pid === undefined) resolve({ engineIndex, code: null, signal: null });
      });
      // Resolved on 'close', not 'exit': after the process ended and its stdout and stderr were read to their end,
      // so every line it wrote (its closing "sim rank stopped" among them) was relayed first. A process the rank
      // started that still holds those pipes (tsx's esbuild helper, stopped with the rank's process group) would
      // delay 'close' forever: `OUTPUT_AFTER_EXIT_MS` after the exit the pipes are dropped and the exit counts.
      let done = false;
      const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
        if (done) return;
        done = true;
        // A rank stopped on purpose already said "sim rank stopped": its exit is debug; any other exit is an error.
        const level = stopping && code === 0 ? 'debug' : stopping || code === 0 ? 'info' : 'error';
        log[level]({ simEngineIndex: engineIndex, code, signal }, 'sim rank exited');
        resolve({ engineIndex, code, signal });
      };
      child.once('close', finish);
      child.once('exit', (code, signal) => {
        setTimeout(() => {
          if (done) return;
          child.stdout?.destroy();
          child.stderr?.destroy();
          finish(code, signal);
        }, OUTPUT_AFTER_EXIT_MS).unref();
      });
    });
    ranks.push({ engineIndex, child, exited });
  }
  let stopped: Promise<void> | null = null;
  const stopOne = async (r: SimRankProcess): Promise<void> => {
    if (r.child.exitCode !== null || r.child.signalCode !== null || r.child.pid === undefined) {
      await r.exited;
      return;
    }
    r.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        log.warn({ simEngineIndex: r.engineIndex, graceMs: grace }, 'sim rank ignored SIGTERM, sending SIGKILL');
        r.child.kill('SIGKILL');
        resolve();
      }, grace);
    });
    await Promise.race([r.exited, killed]);
    clearTimeout(timer);
    await r.exited;
  };
  return {
    ranks,
    stop(): Promise<void> {
      stopping = true;
      stopped ??= Promise.all(ranks.map(stopOne)).then(() => undefined);
      return stopped;
    },
    killNow(): void {
      stopping = true;
      for (const r of ranks) {
        if (r.child.exitCode !== null || r.child.signalCode !== null || r.child.pid === undefined) continue;
        try {
          r.child.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    },
  };
}
