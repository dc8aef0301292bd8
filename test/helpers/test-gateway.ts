/**
 * One gateway for an end-to-end file, in either mode (issue 9: "run the e2e suite in both modes"):
 * - **one process** (default): `startGateway` in the test's own process (helpers/gateway.ts `startSimGateway`);
 * - **`--workers N`** when `GATEWAY_TEST_WORKERS=N` (N ≥ 2; `npm run test:e2e:workers`; not a `MODEL_GATEWAY_*` name,
 *   which `serve` would refuse as an unknown option variable in every gateway the tests spawn): a child
 *   `model-gateway serve --workers N --exit-with-parent` over the same simulated ranks and options, translated to CLI
 *   flags by `serveArgsFor` (an option without a flag is an error, never dropped).
 *
 * Tests read the gateway only through what HTTP shows, the same way in both modes: `/v1/gateway/ranks` (rank states,
 * in-flight, dispatch counts), `/health`, `/metrics` (aggregated over the fronts), plus the pids of the simulated ranks
 * (for SIGKILL / SIGSTOP tests: the children of this process, or of the child gateway's router). The child dies with
 * this process even when the test runner SIGKILLs it: `--exit-with-parent` stops the gateway when its stdin pipe
 * from here closes, and the simulated ranks and fronts die with the router.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { GatewayOptions, GroupOptions, RunningGateway } from '../../src/gateway/index.js';
import type { HealthBody } from '../../src/server/health.js';
import type { RanksAnswer, RankAnswer } from '../../src/server/routes/ranks.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { serveArgsOf } from '../../src/serve-options.js';
import { waitFor } from './async.js';
import { entryPattern, nodeEntry } from './entry.js';
import { startSimGateway } from './gateway.js';
import type { LogRecord } from './logs.js';
import { freePort } from './net.js';
import { alive, simRanksOf } from './processes.js';

const CLI = new URL('../../src/cli.ts', import.meta.url);
const CLI_FILE = entryPattern('src/cli');
const SIM_MAIN_FILE = entryPattern('sim/main');

/** `GATEWAY_TEST_WORKERS` as a number: 1 (one process) unless set to an integer ≥ 2. */
export function testWorkers(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env['GATEWAY_TEST_WORKERS'];
  if (raw === undefined || raw === '' || raw === '1') return 1;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 2) throw new Error(`GATEWAY_TEST_WORKERS must be an integer ≥ 1, got '${raw}'`);
  return n;
}

/** The default simulated-rank arguments of the harness (as `startSimGateway`'s): time scale 0, warn logs. */
export const DEFAULT_SIM_ARGS: readonly string[] = Object.freeze(['--time-scale', '0', '--log-level', 'warn']);

/** One simulated rank process of the gateway: its pid, engine index and the handshake address it dialed. */
export interface SimRankPid {
  pid: number;
  engineIndex: number;
  handshake: string;
}

/** One engine group as HTTP shows it (/health), with its handshake address (for replacement ranks). */
export interface TestGroup {
  worker: string;
  /** The group's name (`--group-name`): its `group` label in /metrics. */
  name: string;
  engine: 'tokenspeed' | 'vllm';
  handshake: string;
}

/** A started gateway, either mode; every read goes over HTTP (or /proc for pids). */
export interface TestGateway {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** 1 for the in-process gateway, N for `serve --workers N`. */
  readonly workers: number;
  /**
   * The in-process gateway, for the few assertions on engine-client internals that HTTP does not show (null with
   * `--workers N`: such an assertion is then skipped, and the test says so).
   */
  readonly inProcess: RunningGateway | null;
  /**
   * Log records: in-process, what `opts.logger` captured is the caller's business and this stays empty; with
   * `--workers N`, the child's JSON log lines (router, fronts, relayed sim ranks) at `logLevel` (default warn).
   */
  readonly logs: LogRecord[];
  /** GET /v1/gateway/ranks. */
  ranks(): Promise<RanksAnswer>;
  /** The ranks of group `group` (configuration order) from /v1/gateway/ranks. */
  rankStates(group?: number): Promise<RankAnswer[]>;
  /** GET /health: status code and body. */
  health(): Promise<{ status: number; body: HealthBody }>;
  /** The engine groups (/health order) with their handshake addresses. */
  groups(): Promise<TestGroup[]>;
  /** GET /metrics as text (throws on a non-200). */
  metricsText(): Promise<string>;
  /** Sum of the samples of `name` (with labels) whose line contains `labelFilter`. */
  metricSum(name: string, labelFilter?: string): Promise<number>;
  /** The simulated rank processes alive now that the gateway spawned (sorted by handshake, then engine index). */
  simRanks(): SimRankPid[];
  /** Stop at once (live requests end) and wait until the gateway and its ranks are gone. Idempotent. */
  close(): Promise<void>;
  /**
   * What SIGHUP does to a `serve` with `--api-keys-file` (read the keys file again): in-process, `reloadKeys()`; with
   * `--workers N`, a real SIGHUP to the child gateway, which asks every front.
   */
  hangup(): void;
}

/** Options of `startTestGateway`: `startGateway`'s (port and logger are the harness's in `--workers` mode). */
export type TestGatewayOptions = GatewayOptions & {
  /** Child gateway's log level in `--workers` mode (default warn; records in `TestGateway.logs`). */
  childLogLevel?: string;
};

/**
 * Start the file's gateway in the mode `GATEWAY_TEST_WORKERS` selects (see the module docs), with
 * `startSimGateway`'s defaults (model `sim`, sim args `DEFAULT_SIM_ARGS`). Resolves once every rank of every group
 * is ready (as `startGateway` does by default) and, with `--workers N`, N fronts listen. Throws when the gateway
 * cannot start (with its stderr), or when `opts` holds an option `serve` has no flag for.
 */
export async function startTestGateway(opts: TestGatewayOptions = {}, workers = testWorkers()): Promise<TestGateway> {
  const { childLogLevel, ...gatewayOpts } = opts;
  if (workers <= 1) return inProcess(await startSimGateway(gatewayOpts));
  return ChildGateway.start(gatewayOpts, workers, childLogLevel ?? 'warn');
}

/** Read-only helpers over a base URL, shared by both modes. */
abstract class HttpView {
  abstract readonly url: string;

  async ranks(): Promise<RanksAnswer> {
    const res = await fetch(`${this.url}/v1/gateway/ranks`);
    if (res.status !== 200) throw new Error(`/v1/gateway/ranks: ${res.status} ${await res.text()}`);
    return (await res.json()) as RanksAnswer;
  }

  async rankStates(group = 0): Promise<RankAnswer[]> {
    const view = await this.ranks();
    const g = view.groups[group];
    if (g === undefined) throw new Error(`no group ${group} in /v1/gateway/ranks`);
    return g.ranks;
  }

  async health(): Promise<{ status: number; body: HealthBody }> {
    const res = await fetch(`${this.url}/health`);
    return { status: res.status, body: (await res.json()) as HealthBody };
  }

  async groups(): Promise<TestGroup[]> {
    // ?verbose=1: the plain /health shows names in place of worker URLs (health-redact.ts).
    const body = (await (await fetch(`${this.url}/health?verbose=1`)).json()) as HealthBody;
    return body.groups.map((g) => ({
      worker: g.worker,
      name: g.name,
      engine: g.engine,
      handshake: deriveEndpoints(g.worker).handshake,
    }));
  }

  async metricsText(): Promise<string> {
    const res = await fetch(`${this.url}/metrics`);
    const text = await res.text();
    if (res.status !== 200) throw new Error(`/metrics: ${res.status} ${text}`);
    return text;
  }

  async metricSum(name: string, labelFilter = ''): Promise<number> {
    return (await this.metricsText())
      .split('\n')
      .filter((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && l.includes(labelFilter))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  }
}

function inProcess(gw: RunningGateway): TestGateway {
  const handshakes = new Map(gw.groups.map((g) => [g, g.endpoints.handshake]));
  return new (class extends HttpView implements TestGateway {
    readonly url = gw.url;
    readonly workers = 1;
    readonly inProcess = gw;
    readonly logs: LogRecord[] = [];
    simRanks(): SimRankPid[] {
      return gw.groups
        .flatMap((g) =>
          (g.sims?.ranks ?? [])
            .filter((r) => r.child.pid !== undefined && alive(r.child.pid))
            .map((r) => ({ pid: r.child.pid!, engineIndex: r.engineIndex, handshake: handshakes.get(g)! })),
        )
        .sort(byRank);
    }
    close(): Promise<void> {
      return gw.close();
    }
    hangup(): void {
      gw.reloadKeys();
    }
  })();
}

const byRank = (a: SimRankPid, b: SimRankPid): number =>
  a.handshake.localeCompare(b.handshake) || a.engineIndex - b.engineIndex;

/** The value after `flag` in a NUL-separated /proc cmdline, or undefined. */
function cmdlineValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

/** The `serve` flags of a group's options (simulated groups only: the harness runs no real engines). */
function groupArgs(g: GroupOptions, defaultSimArgs: readonly string[]): string[] {
  for (const key of Object.keys(g)) {
    if (!GROUP_KEYS.has(key))
      throw new Error(`startTestGateway --workers: group option '${key}' has no serve flag here`);
  }
  const out = ['--sim', String(g.sim ?? 4)];
  if (g.engine !== undefined) out.push('--engine', g.engine);
  if (g.dpSize !== undefined) out.push('--dp-size', String(g.dpSize));
  if (g.lockstep === true) out.push('--sim-lockstep');
  if (g.lockstepMode === true) out.push('--lockstep');
  if (g.lockstepMode === false) out.push('--no-lockstep');
  if (g.kvEventsConfig !== undefined) {
    const c = g.kvEventsConfig;
    out.push('--kv-events-config', typeof c === 'string' ? c : JSON.stringify(c));
  }
  if (g.tasks !== undefined) out.push('--tasks', g.tasks.join(','));
  if (g.name !== undefined) out.push('--group-name', g.name);
  for (const a of g.simArgs ?? defaultSimArgs) out.push(`--sim-arg=${a}`);
  return out;
}

const GROUP_KEYS: ReadonlySet<string> = new Set([
  'engine',
  'sim',
  'simArgs',
  'lockstep',
  'lockstepMode',
  'dpSize',
  'kvEventsConfig',
  'tasks',
  'name',
]);

/**
 * `serve` flags for `opts` (without port and workers flags, which the harness passes itself): the option table's
 * inverse (src/serve-options.ts `serveArgsOf`) for the gateway options, `groupArgs` for the groups. Throws for an
 * option the harness cannot pass to a child (a logger aside, which the child replaces with its own JSON log lines).
 */
export function serveArgsFor(opts: GatewayOptions): string[] {
  const top: GroupOptions = {};
  const rest: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(opts)) {
    if (value === undefined) continue;
    if (GROUP_KEYS.has(key)) (top as Record<string, unknown>)[key] = value;
    else rest[key] = value;
  }
  const out = serveArgsOf(rest, new Set(['logger', 'port', 'workers', 'groups']));
  const groups = opts.groups ?? [top];
  if (opts.groups !== undefined && Object.keys(top).length > 0)
    throw new Error('startTestGateway --workers: group options beside groups[]');
  for (const g of groups) out.push(...groupArgs(g, DEFAULT_SIM_ARGS));
  return out;
}

/** pino's numeric levels by name (a record's `level`). */
const PINO_LEVELS: Readonly<Record<string, number>> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: Infinity,
};

/** `model-gateway serve --workers N --exit-with-parent` in a child process. */
class ChildGateway extends HttpView implements TestGateway {
  /** The router logged its "listening" line: every front listens, the start is over. */
  listening = false;

  readonly logs: LogRecord[] = [];
  readonly inProcess = null;
  private stderr = '';
  private closing: Promise<void> | null = null;

  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
    readonly workers: number,
    private readonly exited: Promise<unknown>,
  ) {
    super();
  }

  static async start(opts: GatewayOptions, workers: number, logLevel: string): Promise<ChildGateway> {
    const port = await freePort();
    // The child logs at info whatever `logLevel` is: its "listening" line (info) is the event that the start is over
    // (every front listens); `logs` keeps only the records at `logLevel` and above, as asked.
    const keepFrom = PINO_LEVELS[logLevel] ?? 0;
    const args = [
      ...nodeEntry(CLI),
      'serve',
      '--workers',
      String(workers),
      '--exit-with-parent',
      '--port',
      String(port),
      '--log-level',
      logLevel === 'silent' || keepFrom > PINO_LEVELS['info']! ? 'info' : logLevel,
      '--log-format',
      'json',
      // close() is "stop at once", as RunningGateway.close(): no grace for requests still live.
      ...(opts.shutdownGraceMs === undefined ? ['--shutdown-grace-ms', '0'] : []),
      ...serveArgsFor({ modelId: 'sim', ...opts }),
    ];
    // stdin is the pipe --exit-with-parent watches; stdout carries the JSON log lines (read, so it never fills).
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const g = new ChildGateway(
      child,
      `http://127.0.0.1:${port}`,
      workers,
      once(child, 'exit').catch(() => undefined),
    );
    createInterface({ input: child.stdout!, crlfDelay: Infinity }).on('line', (line) => {
      let record: LogRecord;
      try {
        record = JSON.parse(line) as LogRecord;
      } catch {
        record = { level: 0, msg: line };
      }
      if (typeof record.msg === 'string' && record.msg.startsWith('model-gateway listening on ')) g.listening = true;
      if (record.level === 0 || record.level >= keepFrom) g.logs.push(record);
    });
    child.stderr!.on('data', (d: Buffer) => (g.stderr += d.toString()));
    const deadline = performance.now() + 90_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`serve --workers ${workers} exited (${child.exitCode ?? child.signalCode}): ${g.stderr}`);
      if (performance.now() > deadline) {
        await g.close();
        throw new Error(`serve --workers ${workers} not ready within 90 s: ${g.stderr}`);
      }
      if (await g.allReady()) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    return g;
  }

  /**
   * The start is over (the router logged that every front listens), every rank of every group is ready (`/health`
   * 200 ok, as `startGateway` waits for) and N fronts run.
   */
  private async allReady(): Promise<boolean> {
    if (!this.listening) return false;
    try {
      const { status, body } = await this.health();
      return status === 200 && body.status === 'ok' && this.fronts().length === this.workers;
    } catch {
      return false;
    }
  }

  /** The child's front processes (its children that run the CLI, not a sim rank). */
  private fronts(): number[] {
    const pid = this.child.pid;
    if (pid === undefined) return [];
    return childrenOf(pid).filter((p) => {
      const cmd = cmdline(p);
      return cmd.some((a) => CLI_FILE.test(a)) && !cmd.some((a) => SIM_MAIN_FILE.test(a));
    });
  }

  simRanks(): SimRankPid[] {
    const pid = this.child.pid;
    if (pid === undefined) return [];
    return simRanksOf(pid)
      .map((p) => {
        const args = cmdline(p);
        return {
          pid: p,
          engineIndex: Number(cmdlineValue(args, '--engine-index')),
          handshake: cmdlineValue(args, '--handshake') ?? '',
        };
      })
      .sort(byRank);
  }

  hangup(): void {
    this.child.kill('SIGHUP');
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      const pid = this.child.pid;
      const leftovers = pid === undefined ? [] : [...simRanksOf(pid), ...this.fronts()];
      if (this.child.exitCode === null && this.child.signalCode === null) {
        this.child.kill('SIGTERM');
        const timer = setTimeout(() => this.child.kill('SIGKILL'), 20_000);
        await this.exited;
        clearTimeout(timer);
      }
      for (const p of leftovers.filter(alive)) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
    })();
    return this.closing;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
      .filter(alive);
  } catch {
    return [];
  }
}

function cmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

/**
 * Resolves with `performance.now()` once rank `index` of group `group` is in `state` according to
 * `/v1/gateway/ranks` (hang guard `ms`).
 */
export async function waitRankState(
  gw: TestGateway,
  index: number,
  state: string,
  group = 0,
  ms = 30_000,
): Promise<number> {
  await waitFor(
    async () => (await gw.rankStates(group)).find((r) => r.dp_rank === index)?.state === state,
    `rank ${index} ${state}`,
    ms,
    async () => (await gw.rankStates(group)).map((r) => `${r.dp_rank}:${r.state}`),
  );
  return performance.now();
}

/** Total in-flight requests over every rank of every group (`/v1/gateway/ranks`). */
export async function inFlightTotal(gw: TestGateway): Promise<number> {
  return (await gw.ranks()).groups.reduce((n, g) => n + g.ranks.reduce((m, r) => m + r.in_flight, 0), 0);
}
