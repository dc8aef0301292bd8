/**
 * What tracing costs per request (issue 32: "on with a sampler at 1 %: ≤ 5 µs CPU per request"), measured apart from
 * the saturated gateway of bench:throughput. There, CPU per request at saturation is not linear in the work per request:
 * a gateway a few µs slower per request reads smaller output batches from ranks that step as fast as they can, so its
 * per-batch costs spread over fewer requests and a small cost shows several times over (and the same code's runs move
 * by ±20 % on a shared 2-core machine).
 *
 * Shape: in one process, apps answer the same one-token completion through fastify's `inject`, in alternating blocks
 * (bench/inject-ab.ts; a pino logger at `info`, the gateway's default, writing nowhere: each request's `request
 * finished` line is made, with its trace id when tracing is on), spans posted over OTLP/protobuf to a sink in a child
 * process by the gateway's own startTracing (`parentbased_traceidratio`). Two phases, each a tracing arm against its
 * own tracing-off app (two arms: with more, two identical apps came out up to 1.3 % apart):
 * - `left out`: ratio 0, every request's new root left out: the cost of an unsampled request, U;
 * - `sampled`: ratio 1, every request sampled, and its spans exported at the end of each block, inside the block's
 *   measurement (a batch processor's timer would run the export in whichever arm's block it fell, and the median
 *   would drop it): a batch of 100 spans per block (a request span and its `tokenize` child; this app has no engine
 *   client to add `queue` and `route`), what a gateway at 1 % exporting every 5 s sends at ~1000 requests/s. The cost
 *   of a sampled request, S.
 * It prints both pairs and the cost at ratio R, (1 − R) × U + R × S, overall and per chunk of rounds. An arm at R
 * itself cannot show it: at 1 % most of its blocks hold no sampled request, so the median drops the sampled ones, and
 * an export per block would post a span or two at a time, far smaller batches than a loaded gateway's. `--control`
 * adds a phase of two tracing-off apps. A diagnostic: nothing is written.
 *
 * Usage: `npm run bench:tracing-cost -- [--rounds N (2500)] [--block N (50)] [--ratio R (0.01)] [--control]`. Small
 * blocks keep each round's arms close in time: 2500 rounds of 50 put two identical arms 0.3–0.5 µs apart here, where
 * 150 rounds of 200 moved by several µs.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { pino } from 'pino';
import { startTracing, tracingSettings, type Tracing } from '../src/tracing.js';
import { FakeBackend } from '../test/server/fake-backend.js';
import { makeApp } from '../test/server/helpers.js';
import { freePort } from '../test/helpers/net.js';
import {
  CHUNKS,
  answerOneToken,
  alternate,
  benchCli,
  chunkMedians,
  pairedDifferences,
  pairedTable,
  type InjectArm,
} from './inject-ab.js';
import { spread } from './throughput/figures.js';

const USAGE = `npm run bench:tracing-cost -- [options]
  --rounds N   alternating rounds of every arm (2500)
  --block N    requests per arm and round (50)
  --ratio R    the sampling ratio to price (0.01)
  --control    a third phase: tracing off against tracing off (the rig's own spread)
  --help       this text`;

const { values, rounds, block } = benchCli(
  'bench:tracing-cost',
  USAGE,
  { rounds: 2500, block: 50 },
  { ratio: { type: 'string', default: '0.01' }, control: { type: 'boolean', default: false } },
  (v) => {
    const r = String(v['ratio']);
    if (!/^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(r) || !(Number(r) > 0))
      throw new Error('--ratio must be a decimal in (0, 1]');
  },
);
const ratio = String(values['ratio']);
/** Fewer rounds than this give figures within the machine's noise (see the module comment). */
const FEW_ROUNDS = 500;

/** An OTLP sink in a child process: its CPU is not the gateway's. */
async function startSink(): Promise<{ url: string; stop: () => void }> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      '-e',
      `require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => { s.writeHead(200); s.end(); }); })` +
        `.listen(${port}, '127.0.0.1', () => process.stdout.write('up\\n'));` +
        // Its stdin closes when this process dies, however it dies (a SIGKILL too): then the sink exits.
        `process.stdin.on('end', () => process.exit(0)).resume();`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  process.once('exit', () => child.kill()); // an interrupted run leaves no sink behind
  await once(child.stdout!, 'data');
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill() };
}

interface Arm extends InjectArm {
  readonly tracing: Tracing | null;
}

async function makeArm(name: string, tracing: Tracing | null): Promise<Arm> {
  const backend = new FakeBackend({ ranks: [0, 1] });
  answerOneToken(backend);
  const logger = pino({ level: 'info' }, { write() {} });
  const { app } = await makeApp({ backend, logger, ...(tracing !== null ? { tracer: tracing.tracer } : {}) });
  // Only an arm that samples has spans to export: an empty flush would count its own promise work as the arm's.
  const exports = tracing !== null && tracing.settings.ratio > 0;
  return { name, app, tracing, samples: [], ...(exports ? { afterBlock: () => tracing.flush() } : {}) };
}

/** The phases: each tracing arm against its own tracing-off app, two arms at a time (the rig's least spread). */
const PHASES = [
  { name: 'left out', ratio: '0' },
  { name: 'sampled', ratio: '1' },
  ...(values['control'] === true ? [{ name: 'off again', ratio: null }] : []),
] as const;

const sink = await startSink();
const pairs: Arm[][] = [];
try {
  for (const phase of PHASES) {
    const tracing =
      phase.ratio === null
        ? null
        : await startTracing(
            tracingSettings(sink.url, {
              OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
              OTEL_TRACES_SAMPLER_ARG: phase.ratio,
            })!,
            'gateway',
          );
    const pair = [await makeArm('off', null), await makeArm(phase.name, tracing)];
    pairs.push(pair);
    process.stderr.write(`${phase.name} against off:\n`);
    await alternate(pair, rounds, block);
  }
} finally {
  // Also after a failed start: the sink is a child process, which would keep this one running.
  for (const arm of pairs.flat()) {
    await arm.app.close();
    await arm.tracing?.shutdown();
  }
  sink.stop();
}

console.log(
  `Tracing's CPU per request: each arm against its own tracing-off app, ${rounds} alternating rounds of ${block} requests per arm, POST /v1/completions (max_tokens 1) through inject, one process.\n`,
);
for (const [k, pair] of pairs.entries()) for (const row of pairedTable(pair).slice(k === 0 ? 0 : 2)) console.log(row);
// The cost at the ratio from the unsampled and sampled arms' paired differences, overall and chunk by chunk.
const r = Number(ratio);
const [unsampled, sampled] = [pairs[0]!, pairs[1]!].map(([off, on]) => pairedDifferences(on!, off!));
const sampledChunks = chunkMedians(sampled!);
const chunks = spread(chunkMedians(unsampled!).map((u, c) => (1 - r) * u + r * sampledChunks[c]!));
const [u, s] = [spread(unsampled!).median, spread(sampled!).median];
console.log(
  `\nAt ratio ${ratio}: (1 − ${ratio}) × ${u.toFixed(2)} + ${ratio} × ${s.toFixed(1)} = ${((1 - r) * u + r * s).toFixed(2)} µs per request` +
    (chunks.values.length > 0
      ? ` (its ${CHUNKS} chunk medians: ${chunks.min.toFixed(2)}–${chunks.max.toFixed(2)} µs)`
      : ''),
);
// A pair's figure needs many rounds on a shared machine: at 150 rounds two identical apps moved by several µs.
if (rounds < FEW_ROUNDS)
  console.log(`Only ${rounds} rounds: these figures are noise here; the default (2500) resolves about 0.5 µs.`);
