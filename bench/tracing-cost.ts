/**
 * What tracing costs per request (issue 32: "on with a sampler at 1 %: ≤ 5 µs CPU per request"), measured apart from
 * the saturated gateway of bench:throughput. There, CPU per request at saturation is not linear in the work per request:
 * a gateway a few µs slower per request reads smaller output batches from ranks that step as fast as they can, so its
 * per-batch costs spread over fewer requests and a small cost shows several times over (and the same code's runs move
 * by ±20 % on a shared 2-core machine).
 *
 * Shape: in one process, two or three apps (src/server/app.ts over a fake engine backend that finishes each request
 * with one token; the bundled Qwen3 tokenizer; a pino logger at `warn` writing nowhere) answer the same
 * `POST /v1/completions` (`max_tokens` 1) through fastify's `inject` (routing, hooks, the request's logger, validation,
 * tokenization, the route, the record: everything but the socket). Arms: tracing off; tracing on with
 * `parentbased_traceidratio` at `--ratio` (1 %), spans batched and posted over OTLP/protobuf to a sink in a child
 * process (the gateway's own startTracing); with `--all`, tracing on sampling every request. The arms run in
 * alternating blocks of `--block` requests, `--rounds` times, so the machine's drift hits them alike; CPU from
 * `process.cpuUsage()` per block. Prints each arm's µs per request (median, min–max over rounds) and the paired
 * difference to tracing off. A diagnostic: nothing is written.
 *
 * Usage: `npm run bench:tracing-cost -- [--rounds N (2500)] [--block N (50)] [--ratio R (0.01)] [--all]`. Small
 * blocks keep each round's arms close in time, so the machine's drift cancels from their paired difference: 2500
 * rounds of 50 resolve about 1 µs where 150 of 200 moved by several.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { startTracing, tracingSettings, type Tracing } from '../src/tracing.js';
import { FakeBackend } from '../test/server/fake-backend.js';
import { makeApp } from '../test/server/helpers.js';
import { freePort } from '../test/helpers/net.js';

const USAGE = `npm run bench:tracing-cost -- [options]
  --rounds N   alternating rounds of every arm (2500)
  --block N    requests per arm and round (50)
  --ratio R    the sampled arm's ratio (0.01)
  --all        also an arm that samples every request
  --help       this text`;

let parsed: ReturnType<typeof parseCli>;
try {
  parsed = parseCli();
  if (parsed.values.help !== true) {
    for (const k of ['rounds', 'block'] as const)
      if (!/^[1-9]\d*$/.test(parsed.values[k])) throw new Error(`--${k} must be a positive integer`);
    const r = parsed.values.ratio;
    if (!/^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(r) || !(Number(r) > 0))
      throw new Error('--ratio must be a decimal in (0, 1]');
  }
} catch (error) {
  process.stderr.write(`bench:tracing-cost: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
  process.exit(2);
}
if (parsed.values.help === true) {
  console.log(USAGE);
  process.exit(0);
}

function parseCli() {
  return parseArgs({
    options: {
      help: { type: 'boolean' },
      rounds: { type: 'string', default: '2500' },
      block: { type: 'string', default: '50' },
      ratio: { type: 'string', default: '0.01' },
      all: { type: 'boolean', default: false },
    },
  });
}

const rounds = Number(parsed.values.rounds);
const block = Number(parsed.values.block);
const ratio = parsed.values.ratio;

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

interface Arm {
  readonly name: string;
  readonly app: FastifyInstance;
  readonly tracing: Tracing | null;
  readonly samples: number[];
}

async function makeArm(name: string, tracing: Tracing | null): Promise<Arm> {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.onSubmit = (s) => s.stream.pushAll([9707], 'length');
  const logger = pino({ level: 'warn' }, { write() {} });
  const { app } = await makeApp({ backend, logger, ...(tracing !== null ? { tracer: tracing.tracer } : {}) });
  return { name, app, tracing, samples: [] };
}

const payload = { prompt: 'Tell me about the ranks', max_tokens: 1 };

/** `n` requests one after another (each awaited: one in flight, as the route's steady state per request). */
async function drive(app: FastifyInstance, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await app.inject({ method: 'POST', url: '/v1/completions', payload });
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${res.body}`);
  }
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const sink = await startSink();
const arms: Arm[] = [];
try {
  const tracingAt = (r: string) =>
    startTracing(
      tracingSettings(sink.url, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: r })!,
      'gateway',
    );
  arms.push(await makeArm('off', null), await makeArm(`on ${ratio}`, await tracingAt(ratio)));
  if (parsed.values.all) arms.push(await makeArm('on 1', await tracingAt('1')));
  for (const arm of arms) await drive(arm.app, block); // warm-up: compiled paths, the validator, the tokenizer's cache
  for (let r = 0; r < rounds; r++) {
    // Rotate the order each round: no arm always runs first (after another arm's garbage).
    for (let k = 0; k < arms.length; k++) {
      const arm = arms[(r + k) % arms.length]!;
      const before = process.cpuUsage();
      await drive(arm.app, block);
      const used = process.cpuUsage(before);
      arm.samples.push((used.user + used.system) / block);
    }
    if ((r + 1) % 100 === 0 || r + 1 === rounds)
      process.stderr.write(
        `round ${r + 1}/${rounds}: ${arms.map((a) => `${a.name} ${a.samples.at(-1)!.toFixed(1)}`).join(', ')} µs/request\n`,
      );
  }
} finally {
  // Also after a failed start: the sink is a child process, which would keep this one running.
  for (const arm of arms) {
    await arm.app.close();
    await arm.tracing?.shutdown();
  }
  sink.stop();
}

const off = arms[0]!.samples;
console.log(
  `Tracing's CPU per request: ${rounds} alternating rounds of ${block} requests per arm, POST /v1/completions (max_tokens 1) through inject, one process. Cells: median (min–max over rounds).\n`,
);
console.log('| arm | µs per request | minus tracing off, paired per round (µs) | ratio to off |');
console.log('|-----|----------------|------------------------------------------|--------------|');
for (const arm of arms) {
  const d = arm.samples.map((x, i) => x - off[i]!);
  const q = arm.samples.map((x, i) => x / off[i]!);
  const cell = (xs: number[], f: number) =>
    `${median(xs).toFixed(f)} (${Math.min(...xs).toFixed(f)}–${Math.max(...xs).toFixed(f)})`;
  console.log(
    `| ${arm.name} | ${cell(arm.samples, 1)} | ${arm === arms[0] ? '-' : cell(d, 1)} | ${arm === arms[0] ? '-' : cell(q, 3)} |`,
  );
}
