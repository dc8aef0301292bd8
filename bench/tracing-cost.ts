/**
 * What tracing costs per request (issue 32: "on with a sampler at 1 %: ≤ 5 µs CPU per request"), measured apart from
 * the saturated gateway of bench:throughput. There, CPU per request at saturation is not linear in the work per request:
 * a gateway a few µs slower per request reads smaller output batches from ranks that step as fast as they can, so its
 * per-batch costs spread over fewer requests and a small cost shows several times over (and the same code's runs move
 * by ±20 % on a shared 2-core machine).
 *
 * Shape: in one process, two or three apps answer the same one-token completion through fastify's `inject`, in
 * alternating blocks (bench/inject-ab.ts; a pino logger at `warn` writing nowhere). Arms: tracing off; tracing on with
 * `parentbased_traceidratio` at `--ratio` (1 %), spans batched and posted over OTLP/protobuf to a sink in a child
 * process (the gateway's own startTracing); with `--all`, tracing on sampling every request. Prints each arm's µs per
 * request and its paired difference and ratio to tracing off. A diagnostic: nothing is written.
 *
 * Usage: `npm run bench:tracing-cost -- [--rounds N (2500)] [--block N (50)] [--ratio R (0.01)] [--all]`. Small
 * blocks keep each round's arms close in time: 2500 rounds of 50 put two identical arms 0.4 µs apart here, where 150
 * rounds of 200 moved by several µs.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { pino } from 'pino';
import { startTracing, tracingSettings, type Tracing } from '../src/tracing.js';
import { FakeBackend } from '../test/server/fake-backend.js';
import { makeApp } from '../test/server/helpers.js';
import { freePort } from '../test/helpers/net.js';
import { ONE_TOKEN, alternate, benchCli, pairedTable, type InjectArm } from './inject-ab.js';

const USAGE = `npm run bench:tracing-cost -- [options]
  --rounds N   alternating rounds of every arm (2500)
  --block N    requests per arm and round (50)
  --ratio R    the sampled arm's ratio (0.01)
  --all        also an arm that samples every request
  --help       this text`;

const { values, rounds, block } = benchCli(
  'bench:tracing-cost',
  USAGE,
  { rounds: 2500, block: 50 },
  { ratio: { type: 'string', default: '0.01' }, all: { type: 'boolean', default: false } },
  (v) => {
    const r = String(v['ratio']);
    if (!/^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(r) || !(Number(r) > 0))
      throw new Error('--ratio must be a decimal in (0, 1]');
  },
);
const ratio = String(values['ratio']);

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
  backend.onSubmit = ONE_TOKEN;
  const logger = pino({ level: 'warn' }, { write() {} });
  const { app } = await makeApp({ backend, logger, ...(tracing !== null ? { tracer: tracing.tracer } : {}) });
  return { name, app, tracing, samples: [] };
}

const sink = await startSink();
const arms: Arm[] = [];
try {
  const tracingAt = (r: string) =>
    startTracing(
      tracingSettings(sink.url, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: r })!,
      'gateway',
    );
  arms.push(await makeArm('off', null), await makeArm(`on ${ratio}`, await tracingAt(ratio)));
  if (values['all'] === true) arms.push(await makeArm('on 1', await tracingAt('1')));
  await alternate(arms, rounds, block);
} finally {
  // Also after a failed start: the sink is a child process, which would keep this one running.
  for (const arm of arms) {
    await arm.app.close();
    await arm.tracing?.shutdown();
  }
  sink.stop();
}

console.log(
  `Tracing's CPU per request: ${rounds} alternating rounds of ${block} requests per arm, POST /v1/completions (max_tokens 1) through inject, one process.\n`,
);
for (const row of pairedTable(arms)) console.log(row);
