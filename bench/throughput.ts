/**
 * Throughput benchmark (issue 9): the gateway's CPU per streamed and non-streamed token, per request, its saturated
 * tokens/s, client-side TTFT/ITL and its event-loop delay, next to floors measured in the same run.
 *
 * Shape: the gateway is a real process (`src/cli.ts serve --sim R`, simulated TokenSpeed ranks at `--time-scale 0`,
 * so they emit as fast as the gateway takes it; bench/throughput/gateway-process.ts) driven over real sockets by a
 * load generator in a process of its own (raw `net` HTTP/1.1 keep-alive connections, closed-loop streams;
 * bench/throughput/load-generator.ts). CPU comes from /proc/<pid>/stat of every process of the gateway's tree,
 * split by role (gateway or routing + fronts; ranks counted apart; bench/throughput/proc.ts) over a measured window
 * after a warm-up; event-loop delay from a timer probe preloaded into every gateway process, the worst process
 * reported (bench/throughput/loop-probe.ts, loop-probes.ts); the ranks' tokens per forward pass and rows per output batch from their counters
 * at the window's ends (SIGUSR2 with `--stats-dir`, src/sim/main.ts). Scenarios per `--workers` value: `stream-S` and `nonstream-S` for each
 * `--streams` S (max_tokens `--max-tokens`), `request-stream` / `request-nonstream` (max_tokens 1, CPU per request),
 * and `paced-stream-S` (ranks stepping every `--paced-step-ms`, so the gateway is not saturated: loop delay and ITL
 * under a steady load). Floors (bench/throughput/floors.ts): ZeroMQ receive + decode per row, detokenization per
 * token (window vs table), a minimal node:http SSE writer per chunk; each token figure is divided by its floor.
 * `--workers N` > 1 is passed to `serve` once it has the flag; until then those runs are reported unavailable.
 *
 * The gateway runs as compiled JavaScript by default (`--runtime dist`: what the container image runs; `--runtime
 * tsx` runs src/ through tsx as `npm start` does; bench/throughput/build.ts).
 *
 * Usage: `npm run bench:throughput -- [options]` (`--help` lists them): `--runtime dist|tsx` (dist), `--quick` (1 repeat, short windows: about 4 min), `--repeats N` (3),
 * `--workers 1,2`, `--streams 512,2000`, `--max-tokens N` (256), `--ranks N` (2), `--request-streams N` (64),
 * `--warmup-ms N`, `--window-ms N`, `--paced-step-ms N` (250; 0 = no paced scenario), `--scenarios a,b` (a subset by
 * name), `--no-floors`, `--seed N`, `--write` (bench/results/throughput.json + throughput.svg), `--profile` (one
 * run of the first `--scenarios` entry, default `stream-S`, under `node --cpu-prof`; prints where the gateway's time
 * goes, in % and µs per token or request; with `--write` also
 * bench/results/throughput-profile.json; `--profile-dir DIR` keeps the .cpuprofile files in DIR). Progress goes to stderr, the tables to stdout.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { throughputChart } from './throughput/chart.js';
import {
  floorFigures,
  floorTable,
  markdownTable,
  pacedTable,
  requestTable,
  scenarioFigures,
  tokenTable,
  workersTable,
  type FloorSample,
  type PhaseSample,
  type ScenarioSpec,
} from './throughput/figures.js';
import { detokenizeFloor, sseWriterFloor, zmqReceiveFloor } from './throughput/floors.js';
import { prepareGatewayBuild, type GatewayBuild, type GatewayRuntime } from './throughput/build.js';
import {
  GatewayProcess,
  workersSupported,
  type GatewayProcessOptions,
  type LoopDelay,
  type RankCounters,
} from './throughput/gateway-process.js';
import { LoadProcess } from './throughput/load-process.js';
import { cpuByRole, sampleTree, type ProcessRole } from './throughput/proc.js';
import { summarizeProfile, type CallFrame, type ProfileBucket, type ProfileSummary } from './throughput/profile.js';
import type { LoadResult, LoadScenario } from './throughput/protocol.js';

interface Args {
  quick: boolean;
  repeats: number;
  workers: number[];
  streams: number[];
  maxTokens: number;
  ranks: number;
  requestStreams: number;
  warmupMs: number;
  windowMs: number;
  pacedStepMs: number;
  scenarios: string[] | null;
  floors: boolean;
  seed: number;
  write: boolean;
  profile: boolean;
  /** `--profile-dir DIR`: keep the .cpuprofile files there (else they go to a temporary directory, removed). */
  profileDir: string | null;
  runtime: GatewayRuntime;
  /** Flags added to the gateway's `serve` command (`--serve-arg`). */
  serveArgs: string[];
}

const USAGE = `npm run bench:throughput -- [options]
  --quick             1 repeat, short windows (about 4 minutes; the full run takes about 12)
  --repeats N         repeats of every scenario (3)
  --workers 1,2       the --workers values to run (1,2)
  --streams 512,2000  concurrent streams of the saturated scenarios
  --max-tokens N      max_tokens per request (256)
  --ranks N           simulated TokenSpeed ranks (2)
  --request-streams N streams of the per-request scenarios, max_tokens 1 (64)
  --warmup-ms N, --window-ms N   warm-up and measured window per scenario
  --paced-step-ms N   step time of the paced ranks (250; 0 = no paced scenario)
  --scenarios a,b     a subset by name (stream-512, nonstream-512, request-stream, request-nonstream, paced-stream-2000, ...)
  --no-floors         skip the floors
  --seed N            the load generator's seed
  --runtime dist|tsx  the compiled build (dist, default: what the container runs) or src/ through tsx
  --profile           one run of the first --scenarios entry under node --cpu-prof: where the gateway's time goes
  --profile-dir DIR   with --profile: keep the .cpuprofile files in DIR (for Chrome DevTools or speedscope)
  --serve-arg ARG     one more flag for the gateway's serve command (repeatable; e.g. --serve-arg --dp-policy
                      --serve-arg cache_aware)
  --write             write bench/results/throughput.json and throughput.svg
  --help              this text`;

const FLAGS = [
  '--quick',
  '--repeats',
  '--workers',
  '--streams',
  '--max-tokens',
  '--ranks',
  '--request-streams',
  '--warmup-ms',
  '--window-ms',
  '--paced-step-ms',
  '--scenarios',
  '--no-floors',
  '--seed',
  '--write',
  '--profile',
  '--profile-dir',
  '--runtime',
  '--serve-arg',
];

function positiveInts(flag: string, value: string): number[] {
  const out = value.split(',').map(Number);
  if (out.length === 0 || out.some((n) => !Number.isSafeInteger(n) || n <= 0))
    throw new RangeError(`${flag} must be positive integers, got '${value}'`);
  return out;
}

function parseArgs(argv: readonly string[]): Args {
  if (argv.includes('--help')) {
    console.log(USAGE);
    process.exit(0);
  }
  const quick = argv.includes('--quick');
  const args: Args = {
    quick,
    repeats: quick ? 1 : 3,
    workers: [1, 2],
    streams: [512, 2000],
    maxTokens: 256,
    ranks: 2,
    requestStreams: 64,
    warmupMs: quick ? 2000 : 3000,
    windowMs: quick ? 4000 : 8000,
    pacedStepMs: 250,
    scenarios: null,
    floors: true,
    seed: 20260611,
    write: false,
    profile: false,
    profileDir: null,
    runtime: 'dist',
    serveArgs: [],
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag === '--quick') continue;
    if (flag === '--write') {
      args.write = true;
      continue;
    }
    if (flag === '--profile') {
      args.profile = true;
      continue;
    }
    if (flag === '--no-floors') {
      args.floors = false;
      continue;
    }
    const value = argv[++i];
    if (value === undefined || !FLAGS.includes(flag))
      throw new RangeError(`unknown option or missing value: ${flag} (valid: ${FLAGS.join(', ')})`);
    const one = () => positiveInts(flag, value)[0]!;
    switch (flag) {
      case '--repeats':
        args.repeats = one();
        break;
      case '--workers':
        args.workers = positiveInts(flag, value);
        break;
      case '--streams':
        args.streams = positiveInts(flag, value);
        break;
      case '--max-tokens':
        args.maxTokens = one();
        break;
      case '--ranks':
        args.ranks = one();
        break;
      case '--request-streams':
        args.requestStreams = one();
        break;
      case '--warmup-ms':
        args.warmupMs = one();
        break;
      case '--window-ms':
        args.windowMs = one();
        break;
      case '--paced-step-ms':
        args.pacedStepMs = Number(value);
        break;
      case '--scenarios':
        args.scenarios = value.split(',');
        break;
      case '--seed':
        args.seed = one();
        break;
      case '--profile-dir':
        args.profileDir = value;
        break;
      case '--runtime':
        if (value !== 'dist' && value !== 'tsx') throw new RangeError(`--runtime must be dist or tsx, got '${value}'`);
        args.runtime = value;
        break;
      case '--serve-arg':
        args.serveArgs.push(value);
        break;
    }
  }
  if (!(Number.isFinite(args.pacedStepMs) && args.pacedStepMs >= 0))
    throw new RangeError('--paced-step-ms must be a number ≥ 0');
  return args;
}

/** The scenarios of one worker count, in run order (saturated ones first, the paced one needs its own gateway). */
function scenarioSpecs(args: Args): ScenarioSpec[] {
  const specs: ScenarioSpec[] = [];
  for (const streams of args.streams) {
    specs.push({ name: `stream-${streams}`, kind: 'token', streams, stream: true, maxTokens: args.maxTokens });
    specs.push({ name: `nonstream-${streams}`, kind: 'token', streams, stream: false, maxTokens: args.maxTokens });
  }
  specs.push({ name: 'request-stream', kind: 'request', streams: args.requestStreams, stream: true, maxTokens: 1 });
  specs.push({ name: 'request-nonstream', kind: 'request', streams: args.requestStreams, stream: false, maxTokens: 1 });
  if (args.pacedStepMs > 0) {
    const streams = Math.max(...args.streams);
    specs.push({ name: `paced-stream-${streams}`, kind: 'paced', streams, stream: true, maxTokens: args.maxTokens });
  }
  return args.scenarios === null ? specs : specs.filter((s) => args.scenarios!.includes(s.name));
}

const started = performance.now();
function progress(message: string): void {
  process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(0).padStart(4)} s] ${message}\n`);
}

/** Gateway options able to run every stream of `specs` at once. */
function gatewayOptions(
  args: Args,
  build: GatewayBuild,
  workers: number,
  specs: readonly ScenarioSpec[],
  extra: Partial<GatewayProcessOptions> = {},
): GatewayProcessOptions {
  const maxStreams = Math.max(1, ...specs.map((s) => s.streams));
  const maxRunningPerRank = Math.ceil(maxStreams / args.ranks) + 16;
  const pagesPerRequest = Math.ceil((64 + args.maxTokens) / 16) + 1;
  return {
    build,
    ranks: args.ranks,
    workers,
    maxRunningPerRank,
    kvPagesPerRank: Math.ceil(maxRunningPerRank * pagesPerRequest * 1.25),
    ...extra,
    extraArgs: [...(extra.extraArgs ?? []), ...args.serveArgs],
  };
}

/** Monotonic µs (the clock of V8 CPU profiles). */
const monotonicMicros = (): number => Number(process.hrtime.bigint() / 1000n);

/** One measured phase against `gw`. `window` receives the monotonic µs bounds of the window. */
async function measurePhase(
  gw: GatewayProcess,
  load: LoadProcess,
  spec: ScenarioSpec,
  args: Args,
  seed: number,
  window?: { startUs: number; endUs: number },
): Promise<{ cpu: Record<ProcessRole, number>; load: LoadResult; loop: LoopDelay; ranks: RankCounters | null }> {
  const tree = gw.processes;
  let before = new Map<number, number>();
  let cpu: Record<ProcessRole, number> | null = null;
  let loop: LoopDelay | null = null;
  let ranksBefore: RankCounters | null = null;
  let ranks: RankCounters | null = null;
  const scenario: LoadScenario = {
    url: gw.url,
    path: '/v1/chat/completions',
    streams: spec.streams,
    stream: spec.stream,
    maxTokens: spec.maxTokens,
    // Plus 2 ms per stream: every stream's first request arrives at once, and admitting one costs ~0.7 ms of CPU
    // (more on a shared machine), so the window opens after that burst.
    warmupMs: args.warmupMs + 2 * spec.streams,
    windowMs: args.windowMs,
    seed,
  };
  const result = await load.run(scenario, {
    onWindowStart: async () => {
      before = sampleTree(tree);
      if (window) window.startUs = monotonicMicros();
      await gw.resetLoopDelay();
      ranksBefore = await gw.readRankCounters();
    },
    onWindowEnd: async () => {
      cpu = cpuByRole(tree, before, sampleTree(tree));
      if (window) window.endUs = monotonicMicros();
      loop = await gw.readLoopDelay();
      const after = await gw.readRankCounters();
      const start: RankCounters | null = ranksBefore;
      if (start !== null && after !== null) {
        ranks = {
          rounds: after.rounds - start.rounds,
          steps: after.steps - start.steps,
          stepRows: after.stepRows - start.stepRows,
          tokensGenerated: after.tokensGenerated - start.tokensGenerated,
        };
      }
    },
  });
  return { cpu: cpu!, load: result, loop: loop!, ranks };
}

/** Every phase of one worker count in one repeat (one gateway for the saturated phases, one for the paced one). */
async function runWorkers(
  args: Args,
  build: GatewayBuild,
  load: LoadProcess,
  workers: number,
  repeat: number,
  specs: readonly ScenarioSpec[],
): Promise<PhaseSample[]> {
  const samples: PhaseSample[] = [];
  const groups = [specs.filter((s) => s.kind !== 'paced'), specs.filter((s) => s.kind === 'paced')];
  for (const group of groups) {
    if (group.length === 0) continue;
    const paced = group[0]!.kind === 'paced';
    const gw = await GatewayProcess.start(
      gatewayOptions(args, build, workers, group, paced ? { paceStepMs: args.pacedStepMs } : {}),
    );
    try {
      let startedIdle = true;
      for (const spec of group) {
        const seed = args.seed + repeat * 1000 + samples.length;
        const m = await measurePhase(gw, load, spec, args, seed);
        const units = spec.kind === 'request' ? m.load.requests : m.load.tokens;
        const gwMicros = m.cpu.gateway + m.cpu.routing + m.cpu.front;
        progress(
          `repeat ${repeat + 1}/${args.repeats} workers ${workers} ${spec.name}: ${units.toFixed(0)} ${spec.kind === 'request' ? 'requests' : 'tokens'} ` +
            `in ${(m.load.windowMs / 1000).toFixed(1)} s, gateway ${(gwMicros / units).toFixed(1)} µs/${spec.kind === 'request' ? 'request' : 'token'}, ` +
            `${((gwMicros / m.load.windowMs / 1000) * 100).toFixed(0)}% of a core, loop p99 ${m.loop.p99Ms.toFixed(0)} ms` +
            (m.ranks !== null ? `, ranks ${(m.ranks.tokensGenerated / m.ranks.rounds).toFixed(0)} tokens/step` : '') +
            (m.load.errors > 0 ? `, ${m.load.errors} errors (${m.load.firstError})` : ''),
        );
        samples.push({ scenario: spec.name, workers, repeat, ...m, startedIdle });
        startedIdle = await gw.waitIdle();
        if (!startedIdle) progress('warning: the gateway did not go idle within 20 s after the phase');
      }
    } finally {
      await gw.stop();
    }
  }
  return samples;
}

/** The floors of one repeat. */
async function runFloors(
  args: Args,
  build: GatewayBuild,
  load: LoadProcess,
  tokenizer: GatewayTokenizer,
  repeat: number,
  streams: readonly number[],
): Promise<FloorSample> {
  const zmqRow = await zmqReceiveFloor(args.quick ? 1000 : 2000, 256);
  const detok = detokenizeFloor(tokenizer, args.quick ? 2 : 4);
  const sseChunk: Record<number, number> = {};
  for (const n of streams) {
    const r = await sseWriterFloor(build, load, {
      url: '',
      path: '/v1/chat/completions',
      streams: n,
      stream: true,
      maxTokens: args.maxTokens,
      warmupMs: Math.min(args.warmupMs, 2000),
      windowMs: Math.min(args.windowMs, 5000),
      seed: args.seed + repeat,
    });
    sseChunk[n] = r.microsPerChunk;
  }
  progress(
    `repeat ${repeat + 1}/${args.repeats} floors: zmq ${zmqRow.toFixed(2)} µs/row, detokenize window ${detok.window.toFixed(2)} / table ` +
      `${detok.table.toFixed(2)} µs/token, SSE ${Object.entries(sseChunk)
        .map(([n, v]) => `${v.toFixed(1)} µs/chunk @${n}`)
        .join(', ')}`,
  );
  return { repeat, zmqRow, detokWindow: detok.window, detokTable: detok.table, sseChunk };
}

function gitCommit(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

const RESULTS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'results');

/** Functions whose inclusive time the profile reports (the per-token path named in issue 9). */
const PROFILED_FUNCTIONS = [
  'serveGeneration',
  'onOutput',
  'take',
  'deliver',
  'flush',
  'push',
  'decode',
  'send',
  'write',
  'writeOrBuffer',
  '_writeGeneric',
  'tokens',
  'observeItl',
  'observe',
  'receiveLoop',
  'decodeOutput',
  'handleGeneration',
  'applyChatTemplate',
  'encode',
  'submit',
];

const areaIn =
  (...prefixes: string[]) =>
  (_f: CallFrame, area: string) =>
    prefixes.some((p) => area.startsWith(p));
/**
 * The buckets the profile's time is split into (issue 9's categories): libraries and per-request work by any frame on
 * the stack, the rest by the sample's own frame.
 */
const PROFILE_BUCKETS: ProfileBucket[] = [
  { name: 'metrics (prom-client)', onStack: areaIn('prom-client') },
  { name: 'chat template (jinja)', onStack: areaIn('@huggingface/jinja') },
  {
    name: 'prompt tokenization',
    onStack: (f, area) => f.functionName === 'encode' && area === 'src/tokenizer/tokenizer.ts',
  },
  {
    name: 'detokenization',
    onStack: areaIn(
      '@huggingface/tokenizers',
      'src/tokenizer/detokenizer.ts',
      'src/tokenizer/table-detokenizer.ts',
      'src/tokenizer/utf8-stream.ts',
    ),
  },
  { name: 'garbage collection', leaf: (f) => f.functionName === '(garbage collector)' },
  {
    name: 'socket writes (node:http, streams, libuv)',
    leaf: (f, area) =>
      ['writev', 'writeUtf8String', 'writeBuffer', 'writeLatin1String'].includes(f.functionName) ||
      areaIn('node:internal/stream_base_commons', 'node:_http_outgoing', 'node:internal/streams', 'node:net')(f, area),
  },
  {
    name: 'SSE send + JSON.stringify (sse.ts, chunk-json.ts, coalescing-writer.ts)',
    leaf: areaIn('src/server/sse.ts', 'src/server/chunk-json.ts', 'src/server/coalescing-writer.ts'),
  },
  {
    name: 'chunk objects and the request path (response-shape.ts, serve-generation.ts, respond-*.ts, choice-outputs.ts)',
    leaf: areaIn(
      'src/server/response-shape.ts',
      'src/server/serve-generation.ts',
      'src/server/respond-streamed.ts',
      'src/server/respond-buffered.ts',
      'src/server/choice-outputs.ts',
      'src/server/request-record.ts',
    ),
  },
  {
    name: 'per-token dispatch (generation run and state, request streams, abort listeners, microtasks)',
    leaf: (f, area) =>
      f.functionName === 'runMicrotasks' ||
      areaIn(
        'src/server/fan-out.ts',
        'src/server/generation.ts',
        'src/server/generation-run.ts',
        'src/engine-client/request-stream.ts',
        'node:internal/event_target',
        'node:internal/abort_controller',
      )(f, area),
  },
  {
    name: 'ZeroMQ receive, decode, engine client',
    leaf: areaIn('src/transport/', 'src/wire/', 'src/protocols/', 'src/engine-client/', 'zeromq', '@msgpack'),
  },
  {
    name: 'HTTP request handling (fastify, node:http)',
    leaf: areaIn(
      'fastify',
      '@fastify',
      'find-my-way',
      'avvio',
      'node:_http_server',
      'node:_http_common',
      'node:_http_incoming',
      'src/server/',
    ),
  },
];

/**
 * `--profile`: one phase with `node --cpu-prof` on the gateway, summarized over the measured window: the first of
 * `--scenarios` (a saturated or per-request one), by default `stream-S` for the first `--streams` S.
 */
async function profileMode(args: Args, build: GatewayBuild, load: LoadProcess): Promise<void> {
  const spec = scenarioSpecs(args).find((s) => s.kind !== 'paced' && (args.scenarios !== null || s.stream));
  if (spec === undefined) throw new RangeError('--profile needs a saturated or per-request scenario');
  const dir = args.profileDir ?? mkdtempSync(join(tmpdir(), 'gw-bench-prof-'));
  if (args.profileDir !== null) mkdirSync(dir, { recursive: true });
  const earlier = new Set(readdirSync(dir));
  const window = { startUs: 0, endUs: 0 };
  const profArgs = { ...args, windowMs: Math.max(args.windowMs, args.quick ? 6000 : 15000) };
  const workers = args.workers[0] ?? 1;
  const gw = await GatewayProcess.start(gatewayOptions(args, build, workers, [spec], { cpuProfileDir: dir }));
  const routingPid = gw.processes.find((p) => p.role === 'routing' || p.role === 'gateway')!.pid;
  let m;
  try {
    progress(
      `profiling ${spec.name} for ${profArgs.windowMs / 1000} s (node --cpu-prof${workers > 1 ? `, ${workers} fronts and the router` : ''})`,
    );
    m = await measurePhase(gw, load, spec, profArgs, args.seed, window);
  } finally {
    await gw.stop();
  }
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile') && !earlier.has(f));
  // node names a profile CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile
  const pidOf = (f: string) => Number(f.split('.')[3]);
  const rootFile = files.find((f) => pidOf(f) === routingPid);
  if (rootFile === undefined) throw new Error(`no .cpuprofile of the gateway process written in ${dir}`);
  const profiles: Array<{ title: string; file: string; micros: number }> = [
    {
      title: workers > 1 ? 'the routing process' : 'the gateway',
      file: rootFile,
      micros: workers > 1 ? m.cpu.routing : m.cpu.gateway,
    },
  ];
  const frontFile = files.find((f) => pidOf(f) !== routingPid);
  if (workers > 1 && frontFile !== undefined)
    profiles.push({
      title: `one front (of ${workers}; the fronts' CPU is ${workers}× its share)`,
      file: frontFile,
      micros: m.cpu.front / workers,
    });
  const perRequest = spec.kind === 'request';
  const units = perRequest ? m.load.requests : m.load.tokens;
  const unit = perRequest ? 'request' : 'token';
  const written: Record<string, unknown> = {};
  for (const prof of profiles) {
    const summary: ProfileSummary = summarizeProfile(
      join(dir, prof.file),
      window.startUs,
      window.endUs,
      PROFILED_FUNCTIONS,
      PROFILE_BUCKETS,
      30,
    );
    written[prof.title] = { microsPerUnit: prof.micros / units, summary };
    console.log(
      `CPU profile of ${prof.title}, ${spec.name} (max_tokens ${spec.maxTokens}, ${spec.streams} streams, ${args.ranks} ranks at --time-scale 0, --workers ${workers}), ` +
        `${(window.endUs - window.startUs) / 1e6} s window: ${(prof.micros / units).toFixed(1)} µs/${unit} (with the profiler on), ` +
        `${((units / m.load.windowMs) * 1000).toFixed(0)} ${unit}s/s; ${summary.busyMs.toFixed(0)} ms busy, ${summary.idleMs.toFixed(0)} ms idle in the profile. ` +
        `Last column: µs per ${unit}.\n`,
    );
    const perUnit = (ms: number) => ((ms * 1000) / units).toFixed(perRequest ? 0 : 2);
    const rows = (r: ProfileSummary['topSelf']) =>
      r.map((x) => [x.label, x.ms.toFixed(0), x.percent.toFixed(1), perUnit(x.ms)]);
    const head = (first: string) => [first, 'ms', '% of busy', `µs/${unit}`];
    console.log('### Where the time goes (buckets)\n' + markdownTable(head('bucket'), rows(summary.buckets)) + '\n');
    console.log('### Self time by function\n' + markdownTable(head('function'), rows(summary.topSelf)) + '\n');
    console.log(
      '### Self time by area (file, package, node internals, GC)\n' +
        markdownTable(head('area'), rows(summary.byArea)) +
        '\n',
    );
    console.log(
      '### Inclusive time of the per-token path (by function name; names can collide)\n' +
        markdownTable(head('function'), rows(summary.inclusive)) +
        '\n',
    );
  }
  if (args.profileDir === null) rmSync(dir, { recursive: true, force: true });
  else progress(`profiles kept in ${dir}`);
  if (args.write) {
    await mkdir(RESULTS_DIR, { recursive: true });
    const only =
      workers > 1
        ? { workers, profiles: written }
        : {
            [perRequest ? 'microsPerRequest' : 'microsPerToken']: (
              written[profiles[0]!.title] as { microsPerUnit: number }
            ).microsPerUnit,
            summary: (written[profiles[0]!.title] as { summary: unknown }).summary,
          };
    await writeFile(
      join(RESULTS_DIR, 'throughput-profile.json'),
      JSON.stringify(
        { generatedBy: 'npm run bench:throughput -- --profile --write', commit: gitCommit(), scenario: spec, ...only },
        null,
        2,
      ) + '\n',
    );
    console.log(`wrote ${join('bench', 'results', 'throughput-profile.json')}`);
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  progress(
    args.runtime === 'dist' ? 'compiling the gateway (tsconfig.build.json → .build-bench)' : 'running src/ through tsx',
  );
  const build = await prepareGatewayBuild(args.runtime);
  const load = LoadProcess.start(build);
  try {
    if (args.profile) {
      await profileMode(args, build, load);
      return;
    }
    const specs = scenarioSpecs(args);
    if (specs.length === 0) throw new RangeError('no scenario selected');
    const available = workersSupported();
    const workers = args.workers.filter((w) => w === 1 || available);
    const unavailable = args.workers.filter((w) => !workers.includes(w));
    if (unavailable.length > 0)
      progress(
        `workers ${unavailable.join(', ')}: unavailable (this gateway's serve has no --workers yet); skipped, not simulated`,
      );
    const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
    const sseStreams = [...new Set(specs.filter((s) => s.kind === 'token' && s.stream).map((s) => s.streams))];
    const loadStart = loadavg()[0]!;
    const samples: PhaseSample[] = [];
    const floors: FloorSample[] = [];
    for (let repeat = 0; repeat < args.repeats; repeat++) {
      for (const w of workers) samples.push(...(await runWorkers(args, build, load, w, repeat, specs)));
      if (args.floors) floors.push(await runFloors(args, build, load, tokenizer, repeat, sseStreams));
    }
    const figures = workers.flatMap((w) =>
      specs.map((spec) =>
        scenarioFigures(
          spec,
          w,
          samples.filter((s) => s.scenario === spec.name && s.workers === w),
          floors,
        ),
      ),
    );
    const ff = floorFigures(floors, sseStreams);
    const commit = gitCommit();
    console.log(
      `Throughput benchmark at ${commit} (${args.runtime === 'dist' ? 'compiled build, node .build-bench/cli.js' : 'src/ through tsx'}): ${args.ranks} simulated TokenSpeed ranks at --time-scale 0, chat completions with max_tokens ` +
        `${args.maxTokens} (ignore_eos), ${args.repeats} repeat(s) of a ${args.windowMs / 1000} s window after ${args.warmupMs / 1000} s of warm-up ` +
        `(+2 ms per stream); CPU from /proc over the window. Cells: median (min–max over repeats). Machine: ${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores, ` +
        `load average ${loadStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end (shared: only per-unit CPU figures compare across runs).\n`,
    );
    if (unavailable.length > 0)
      console.log(`workers ${unavailable.join(', ')}: unavailable — serve has no --workers yet (issue 9 phase 2).\n`);
    console.log('### CPU per token (saturated)\n' + tokenTable(figures) + '\n');
    if (workers.some((w) => w > 1) && workers.includes(1))
      console.log('### --workers N against one process (per repeat)\n' + workersTable(samples, specs) + '\n');
    console.log('### CPU per request (max_tokens 1)\n' + requestTable(figures) + '\n');
    if (specs.some((s) => s.kind === 'paced'))
      console.log(
        `### Paced ranks (a step every ${args.pacedStepMs} ms: not saturated)\n` + pacedTable(figures) + '\n',
      );
    if (floors.length > 0) console.log('### Floors (same run)\n' + floorTable(ff) + '\n');
    if (args.write) {
      await mkdir(RESULTS_DIR, { recursive: true });
      const json = {
        generatedBy: 'npm run bench:throughput -- --write',
        commit,
        args,
        unavailableWorkers: unavailable,
        units: {
          perToken: 'µs of CPU',
          perRequest: 'µs of CPU',
          latency: 'ms',
          loopDelay: 'ms',
          tokensPerSecond: 'tokens/s',
          cores: 'CPU cores',
        },
        scenarios: specs,
        figures,
        floors: { summary: ff, samples: floors },
        samples,
      };
      await writeFile(join(RESULTS_DIR, 'throughput.json'), JSON.stringify(json, null, 2) + '\n');
      const svg = throughputChart(json);
      await writeFile(join(RESULTS_DIR, 'throughput.svg'), svg);
      console.log(
        `wrote ${join('bench', 'results', 'throughput.json')} and ${join('bench', 'results', 'throughput.svg')}`,
      );
    }
  } finally {
    load.stop();
  }
}

main().catch((error: unknown) => {
  // A bad option is the user's mistake: one line and the usage, no stack.
  const badOption = error instanceof RangeError;
  const detail = badOption
    ? `${error.message}\n${USAGE}`
    : error instanceof Error
      ? (error.stack ?? error.message)
      : String(error);
  process.stderr.write(`\nbench:throughput failed: ${detail}\n`);
  process.exitCode = badOption ? 2 : 1;
});
