/**
 * Bounded client work (issue 26 part 5): what one large request does to the other streams, and what abandoned large
 * prompts leave behind.
 *
 * Shape: the gateway is a real process (`src/cli.ts serve --sim R`, simulated TokenSpeed ranks paced at `--step-ms`
 * per step, so every stream gets a token per step; bench/throughput/gateway-process.ts, with the event-loop probe in
 * every gateway process). `--streams` streamed chats run in a client process of their own
 * (bench/bounded-work/stream-client.ts) that records the gap between reads of each stream.
 * - Stall phase: one at a time, a 4 MB chat prompt, a 7 MB `/tokenize`, a 1.3 M-id `/detokenize` and a 240k-message
 *   chat (bodies built before the window), then an idle window of the same length as the baseline. For each: its
 *   status and duration, the largest gap between two reads of the other streams while it was in flight (the step
 *   included: a gap of `--step-ms` is no stall), and the worst gateway process's largest event-loop delay.
 * - Flood phase: `--rounds` rounds of `--flood` clients that each post a `--flood-chars` character chat prompt and
 *   close their connection `--leave-ms` after their body was sent (an answer before that, e.g. a 429, is counted);
 *   then at once a 5-character prompt (how long the event loop is still busy with the bodies already sent), and once
 *   it is answered a normal `--normal-chars` character prompt (max_tokens 1): how long it waits for the tokenizer. The RSS of the gateway's
 *   processes (ranks not counted) before the flood, at its peak (sampled every 100 ms), once the gateway is idle after
 *   the normal prompt, and 10 s later.
 * Both run for each `--workers` value. `--source DIR` runs the gateway from another checkout (DIR/src/cli.ts through
 * tsx, DIR/node_modules needed), e.g. `git archive <commit> | tar -x -C DIR` for a before/after comparison: the same
 * bench against both. The gateway runs from src/ through tsx (`npm start`'s runtime).
 *
 * Usage: `npm run bench:bounded-work -- [--workers 1,2] [--streams 16] [--step-ms 20] [--ranks 2] [--flood 200]
 * [--flood-chars 1000000] [--rounds 3] [--leave-ms 1000] [--normal-chars 40000] [--source DIR]`. Progress goes to
 * stderr, the figures to stdout (a table per `--workers` value, then the JSON of every figure).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { GatewayProcess } from './throughput/gateway-process.js';

interface Args {
  workers: number[];
  streams: number;
  stepMs: number;
  ranks: number;
  flood: number;
  floodChars: number;
  rounds: number;
  leaveMs: number;
  normalChars: number;
  source: string | null;
  phases: Array<'stall' | 'flood'>;
}

const USAGE = `npm run bench:bounded-work -- [options]
  --workers 1,2        the --workers values to run (1,2)
  --streams N          background streamed chats (16)
  --step-ms N          step time of the paced ranks: each stream gets a token per step (20)
  --ranks N            simulated TokenSpeed ranks (2)
  --flood N            clients per flood round (200)
  --flood-chars N      characters of each flood prompt (1000000)
  --rounds N           flood rounds (3)
  --leave-ms N         a flood client closes its connection N ms after its body was sent (1000)
  --normal-chars N     characters of the normal prompt sent right after the flood (40000)
  --source DIR         run the gateway from DIR/src/cli.ts (another checkout) instead of this one
  --phases stall,flood the phases to run (both)
  --help               this text`;

function parseArgs(argv: readonly string[]): Args {
  if (argv.includes('--help')) {
    console.log(USAGE);
    process.exit(0);
  }
  const args: Args = {
    workers: [1, 2],
    streams: 16,
    stepMs: 20,
    ranks: 2,
    flood: 200,
    floodChars: 1_000_000,
    rounds: 3,
    leaveMs: 1000,
    normalChars: 40_000,
    source: null,
    phases: ['stall', 'flood'],
  };
  const int = (flag: string, v: string | undefined): number => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`${flag} must be a positive integer, got '${v}'`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const v = argv[++i];
    switch (flag) {
      case '--workers':
        args.workers = (v ?? '').split(',').map((w) => int(flag, w));
        break;
      case '--streams':
        args.streams = int(flag, v);
        break;
      case '--step-ms':
        args.stepMs = int(flag, v);
        break;
      case '--ranks':
        args.ranks = int(flag, v);
        break;
      case '--flood':
        args.flood = int(flag, v);
        break;
      case '--flood-chars':
        args.floodChars = int(flag, v);
        break;
      case '--rounds':
        args.rounds = int(flag, v);
        break;
      case '--leave-ms':
        args.leaveMs = int(flag, v);
        break;
      case '--normal-chars':
        args.normalChars = int(flag, v);
        break;
      case '--phases':
        args.phases = (v ?? '').split(',').map((p) => {
          if (p !== 'stall' && p !== 'flood') throw new UsageError(`--phases takes stall and flood, got '${p}'`);
          return p;
        });
        break;
      case '--source':
        if (v === undefined) throw new UsageError('--source needs a directory');
        args.source = resolve(v);
        break;
      default:
        throw new UsageError(`unknown option ${flag} (--help lists them)`);
    }
  }
  return args;
}

/** A bad command-line option or value (printed without a stack trace). */
class UsageError extends Error {}

const started = performance.now();
function progress(message: string): void {
  process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(0).padStart(4)} s] ${message}\n`);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const epoch = (): number => performance.timeOrigin + performance.now();
const SENTENCE = 'The river runs past the old mill, and the weather turns as the evening comes. ';
const text = (chars: number): string => SENTENCE.repeat(Math.ceil(chars / SENTENCE.length)).slice(0, chars);

/** One large request of the stall phase: its path and pre-serialized body. */
interface Heavy {
  name: string;
  path: string;
  body: string;
}

/** The four large requests of the issue (bodies built once, before any window). */
function heavyRequests(tokenizer: GatewayTokenizer): Heavy[] {
  const ids = tokenizer.encode(SENTENCE.repeat(64));
  const tokens = Array.from({ length: 1_300_000 }, (_, i) => ids[i % ids.length]!);
  const messages = Array.from({ length: 240_000 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: 'hi',
  }));
  return [
    {
      name: '4 MB chat prompt',
      path: '/v1/chat/completions',
      body: JSON.stringify({ messages: [{ role: 'user', content: text(4_000_000) }], max_tokens: 1 }),
    },
    { name: '7 MB /tokenize', path: '/tokenize', body: JSON.stringify({ prompt: text(7_000_000) }) },
    { name: '1.3M-id /detokenize', path: '/detokenize', body: JSON.stringify({ tokens }) },
    { name: '240k-message chat', path: '/v1/chat/completions', body: JSON.stringify({ messages, max_tokens: 1 }) },
  ];
}

/**
 * POST `body` to `url + path`; resolves with the status (0: the connection failed) once the answer was read. A body the
 * gateway refuses by its declared size (413, e.g. past --tokenize-body-limit) shows as 0 here: the gateway answers and
 * closes while Node's client is still writing, and the client reports only the failed write.
 */
function post(url: string, path: string, body: string, timeoutMs = 600_000): Promise<number> {
  const target = new URL(path, url);
  return new Promise((resolveStatus) => {
    const req = request({
      host: target.hostname,
      port: target.port,
      path: target.pathname,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    const timer = setTimeout(() => req.destroy(), timeoutMs);
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => {
        clearTimeout(timer);
        resolveStatus(res.statusCode ?? 0);
      });
    });
    req.on('error', () => {
      clearTimeout(timer);
      resolveStatus(0);
    });
    req.end(body);
  });
}

/** The background streams' process (./bounded-work/stream-client.ts). */
class StreamClient {
  private readonly replies: Array<(m: unknown) => void> = [];

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m) => this.replies.shift()?.(m));
  }

  static async start(url: string, streams: number): Promise<StreamClient> {
    const script = fileURLToPath(new URL('./bounded-work/stream-client.ts', import.meta.url));
    const client = new StreamClient(
      fork(script, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
    );
    await client.ask({ start: { url, streams, maxTokens: 30_000 } });
    return client;
  }

  private ask(m: object): Promise<unknown> {
    return new Promise((r) => {
      this.replies.push(r);
      this.child.send(m);
    });
  }

  async gaps(from: number, to: number): Promise<{ maxMs: number; p99Ms: number; reads: number }> {
    const m = (await this.ask({ gaps: { from, to } })) as { gaps: { maxMs: number; p99Ms: number; reads: number } };
    return m.gaps;
  }

  stop(): void {
    this.child.send({ stop: true });
  }
}

/** The RSS of `pids` summed, MB (/proc/<pid>/status VmRSS; a process gone counts 0). */
function rssMb(pids: readonly number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m !== null) kb += Number(m[1]);
    } catch {
      // gone
    }
  }
  return kb / 1024;
}

interface StallFigure {
  request: string;
  status: number;
  durationMs: number;
  maxGapMs: number;
  p99GapMs: number;
  loopMaxMs: number;
}

interface FloodFigure {
  rounds: number;
  clients: number;
  answered: Record<string, number>;
  rssBeforeMb: number;
  rssPeakMb: number;
  rssAfterMb: number;
  /** 10 s later (V8 gives memory back some time after it is freed). */
  rssLaterMb: number;
  normalStatus: number;
  normalMs: number;
  /** A 5-character prompt sent first, right after the flood (the normal prompt goes once it is answered). */
  smallMs: number;
}

/** One stall window: reset the probes, run `send`, read the gaps and loop delay over its span. */
async function stallWindow(
  gw: GatewayProcess,
  streams: StreamClient,
  name: string,
  send: () => Promise<number>,
  stepMs: number,
): Promise<StallFigure> {
  await gw.resetLoopDelay();
  const from = epoch();
  const t0 = performance.now();
  const status = await send();
  const durationMs = performance.now() - t0;
  const to = epoch();
  // Let the first read after the window arrive (it carries the gap that covers the window's end).
  await sleep(stepMs * 5);
  const gaps = await streams.gaps(from, to);
  const loop = await gw.readLoopDelay();
  return { request: name, status, durationMs, maxGapMs: gaps.maxMs, p99GapMs: gaps.p99Ms, loopMaxMs: loop.maxMs };
}

/** The flood phase (see the module comment). */
async function flood(gw: GatewayProcess, url: string, args: Args): Promise<FloodFigure> {
  const pids = gw.processes.filter((p) => p.role !== 'rank').map((p) => p.pid);
  const rssBeforeMb = rssMb(pids);
  let rssPeakMb = rssBeforeMb;
  const sampler = setInterval(() => (rssPeakMb = Math.max(rssPeakMb, rssMb(pids))), 100);
  const body = JSON.stringify({ messages: [{ role: 'user', content: text(args.floodChars) }], max_tokens: 1 });
  const target = new URL('/v1/chat/completions', url);
  const answered: Record<string, number> = {};
  for (let round = 1; round <= args.rounds; round++) {
    progress(
      `  flood round ${round}/${args.rounds}: ${args.flood} clients × ${args.floodChars} characters, leaving ${args.leaveMs} ms after sending`,
    );
    await Promise.all(
      Array.from(
        { length: args.flood },
        () =>
          new Promise<void>((done) => {
            const req = request({
              host: target.hostname,
              port: target.port,
              path: target.pathname,
              method: 'POST',
              headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
            });
            const count = (key: string) => {
              answered[key] = (answered[key] ?? 0) + 1;
              done();
            };
            let settled = false;
            const settle = (key: string) => {
              if (settled) return;
              settled = true;
              count(key);
            };
            req.on('response', (res) => {
              res.resume();
              settle(String(res.statusCode));
            });
            req.on('error', () => settle('left'));
            req.on('finish', () =>
              setTimeout(() => {
                req.destroy();
                settle('left');
              }, args.leaveMs),
            );
            req.end(body);
          }),
      ),
    );
  }
  progress(`  flood done; a normal ${args.normalChars}-character prompt now`);
  // First a 5-character prompt (never queued for the tokenizer): how long the event loop still reads the bodies the
  // flood's clients sent before they left. Then, once it is answered, the normal prompt: how long it waits for the
  // tokenizer (the issue's 117 s).
  const t0 = performance.now();
  await post(
    url,
    '/v1/chat/completions',
    JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 1 }),
  );
  const smallMs = performance.now() - t0;
  const t1 = performance.now();
  const normalStatus = await post(
    url,
    '/v1/chat/completions',
    JSON.stringify({ messages: [{ role: 'user', content: text(args.normalChars) }], max_tokens: 1 }),
    300_000,
  );
  const normalMs = performance.now() - t1;
  // The RSS once the gateway is idle again (the worker done with what it had, a GC or two).
  await gw.waitIdle(0.1, 30_000);
  clearInterval(sampler);
  const rssAfterMb = rssMb(pids);
  await sleep(10_000);
  const rssLaterMb = rssMb(pids);
  return {
    rounds: args.rounds,
    clients: args.flood,
    answered,
    rssBeforeMb,
    rssPeakMb,
    rssAfterMb,
    rssLaterMb,
    normalStatus,
    normalMs,
    smallMs,
  };
}

const f1 = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : 'n/a');

async function runWorkers(
  args: Args,
  workers: number,
  heavy: Heavy[],
): Promise<{ workers: number; stall: StallFigure[]; flood: FloodFigure | null }> {
  const root = args.source ?? fileURLToPath(new URL('../', import.meta.url));
  const probe = fileURLToPath(new URL('./throughput/loop-probe.ts', import.meta.url));
  progress(`--workers ${workers}: starting the gateway (${args.ranks} ranks, ${args.stepMs} ms steps) from ${root}`);
  const gw = await GatewayProcess.start({
    build: {
      runtime: 'tsx',
      nodeArgs: ['--import', 'tsx', '--import', probe],
      cliPath: resolve(root, 'src/cli.ts'),
      benchScript: () => {
        throw new Error('not used');
      },
    },
    ranks: args.ranks,
    workers,
    maxRunningPerRank: args.streams + 64,
    kvPagesPerRank: 1 << 16,
    paceStepMs: args.stepMs,
    extraArgs: workers === 1 ? ['--workers', '1'] : [],
  });
  let streams: StreamClient | null = null;
  try {
    streams = await StreamClient.start(gw.url, args.streams);
    progress(`  ${args.streams} streams running`);
    // Warm-up: the tokenizer worker loads on its first large prompt (both fronts get one with --workers N).
    for (let i = 0; i < Math.max(2, workers * 2); i++)
      await post(gw.url, '/tokenize', JSON.stringify({ prompt: text(20_000) }));
    await sleep(500);
    const stall: StallFigure[] = [];
    if (args.phases.includes('stall')) {
      const idleMs = 2000;
      stall.push(await stallWindow(gw, streams, 'none (idle window)', () => sleep(idleMs).then(() => 0), args.stepMs));
      for (const h of heavy) {
        progress(`  ${h.name} (${(Buffer.byteLength(h.body) / 1e6).toFixed(1)} MB body)`);
        stall.push(await stallWindow(gw, streams, h.name, () => post(gw.url, h.path, h.body), args.stepMs));
        await gw.waitIdle(0.2, 60_000);
      }
    }
    const floodFigure = args.phases.includes('flood') ? await flood(gw, gw.url, args) : null;
    return { workers, stall, flood: floodFigure };
  } finally {
    streams?.stop();
    await gw.stop();
  }
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  progress('building the request bodies');
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const heavy = args.phases.includes('stall') ? heavyRequests(tokenizer) : [];
  const results = [];
  for (const w of args.workers) {
    const r = await runWorkers(args, w, heavy);
    results.push(r);
    console.log(
      `\n--workers ${w}${args.source !== null ? ` (gateway from ${args.source})` : ''}: ${args.streams} streams, a token per ${args.stepMs} ms step`,
    );
    if (r.stall.length > 0) {
      console.log('| request | status | duration ms | max gap of other streams ms | p99 gap ms | loop delay max ms |');
      console.log('|---|---|---|---|---|---|');
    }
    for (const s of r.stall)
      console.log(
        `| ${s.request} | ${s.status} | ${f1(s.durationMs)} | ${f1(s.maxGapMs)} | ${f1(s.p99GapMs)} | ${f1(s.loopMaxMs)} |`,
      );
    const fl = r.flood;
    if (fl === null) continue;
    console.log(
      `flood: ${fl.rounds} × ${fl.clients} clients × ${args.floodChars} characters, answers ${JSON.stringify(fl.answered)}`,
    );
    console.log(
      `  gateway RSS before ${f1(fl.rssBeforeMb)} MB, peak ${f1(fl.rssPeakMb)} MB, after ${f1(fl.rssAfterMb)} MB (after − before ${f1(fl.rssAfterMb - fl.rssBeforeMb)} MB), 10 s later ${f1(fl.rssLaterMb)} MB`,
    );
    console.log(
      `  a 5-character prompt right after: ${f1(fl.smallMs)} ms; then a normal ${args.normalChars}-character prompt: status ${fl.normalStatus} in ${f1(fl.normalMs)} ms`,
    );
  }
  console.log(`\n${JSON.stringify({ args, results }, null, 2)}`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    // A bad option is the caller's: its message alone; anything else with its stack.
    const usage = err instanceof UsageError;
    process.stderr.write(
      `\nbench:bounded-work failed: ${err instanceof Error ? (usage ? err.message : (err.stack ?? err.message)) : String(err)}\n`,
    );
    process.exit(usage ? 2 : 1);
  },
);
