/**
 * The simulated rank's own cost (issue 9: "keep the ranks cheap"): one sim rank process (`src/sim/main.ts`, at
 * `--time-scale 0`) against a minimal gateway side in this process (a `ZmqEngineLink` whose outputs are decoded and
 * counted, no HTTP), driven closed-loop: `--streams` streaming requests of `--max-tokens` tokens (ignore_eos), each
 * replaced by a new one as soon as its terminal row is read. Prints the rank's CPU per token and per step (from
 * /proc), its tokens per step and rows per batch (its `--stats-dir` counters) over a measured window.
 *
 * A diagnostic of one rank's cost, not a benchmark of ratios: one run, no repeats, nothing measured side by side, no
 * spread, nothing written (the guide's benchmarks print ratios over repeats; use this one to see where a rank's time
 * goes, with `--cpu-prof`). It fails (exit code 1) when the rank exits before the run stops it or does not write its
 * counters within 5 s of a SIGUSR2; an ADD that fails to send is counted and printed, not left unhandled.
 *
 * Usage: `npx tsx bench/sim-step.ts [--streams N (256)] [--max-tokens N (256)] [--window-ms N (5000)]
 * [--warmup-ms N (2000)] [--cpu-prof DIR] [--sim-arg ARG ...]` (`--cpu-prof` runs the rank under `node --cpu-prof`).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { tokenspeedProtocol } from '../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../src/protocols/types.js';
import { simEntryArgs } from '../src/sim/spawn.js';
import { deriveEndpoints } from '../src/transport/endpoints.js';
import { ZmqEngineLink } from '../src/transport/zmq-link.js';
import { freePort } from '../test/helpers/net.js';
import { cpuMicros } from './throughput/proc.js';

const USAGE = `npx tsx bench/sim-step.ts [options]
  --streams N       concurrent streaming requests (256)
  --max-tokens N    tokens per request (256)
  --window-ms N     measured window (5000); --warmup-ms N before it (2000)
  --cpu-prof DIR    run the rank under node --cpu-prof, profiles in DIR
  --sim-arg ARG     an extra argument for the rank (repeatable)
  --help            this text`;

let parsed: ReturnType<typeof parseCli>;
try {
  parsed = parseCli();
} catch (error) {
  process.stderr.write(`bench/sim-step: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
  process.exit(2);
}
if (parsed.values.help === true) {
  console.log(USAGE);
  process.exit(0);
}
const { values } = parsed;

function parseCli() {
  return parseArgs({
    options: {
      help: { type: 'boolean' },
      streams: { type: 'string', default: '256' },
      'max-tokens': { type: 'string', default: '256' },
      'window-ms': { type: 'string', default: '5000' },
      'warmup-ms': { type: 'string', default: '2000' },
      'cpu-prof': { type: 'string' },
      'sim-arg': { type: 'string', multiple: true, default: [] },
    },
  });
}
const streams = Number(values.streams);
const maxTokens = Number(values['max-tokens']);
const windowMs = Number(values['window-ms']);
const warmupMs = Number(values['warmup-ms']);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), 'mgw-sim-step-'));
const statsDir = join(dir, 'stats');
const endpoints = deriveEndpoints(`ipc://${dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
const link = await ZmqEngineLink.bind({ endpoints, dpSize: 1, handshakeReceiveTimeoutMs: 60_000 });
const nodeArgs = values['cpu-prof'] !== undefined ? ['--cpu-prof', '--cpu-prof-dir', values['cpu-prof']] : [];
const simArgs = [
  '--handshake',
  endpoints.handshake,
  '--engine-index',
  '0',
  '--time-scale',
  '0',
  '--max-running',
  String(streams + 16),
  '--kv-pages',
  String(Math.ceil((streams + 16) * (Math.ceil((64 + maxTokens) / 16) + 1) * 1.25)),
  '--log-level',
  'warn',
  '--stats-dir',
  statsDir,
  ...values['sim-arg'],
];
mkdirSync(statsDir);
const child = spawn(process.execPath, [...nodeArgs, ...simEntryArgs(), ...simArgs], {
  stdio: ['ignore', 'inherit', 'inherit'],
});
// Never leave the rank or the folder behind, whatever fails below.
process.on('exit', () => {
  child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});
let stopping = false;
/** Rejects when the rank exits before the run stops it (a crash, a kill); the waits on the rank race it. */
const rankGone = new Promise<never>((_, reject) =>
  child.once('exit', (code, signal) => {
    if (!stopping) reject(new Error(`the sim rank exited (${signal ?? `code ${code}`}) before the run stopped it`));
  }),
);
rankGone.catch(() => undefined); // observed through the races below
await Promise.race([link.whenJoined(1), rankGone]);
const identity = link.engines[0]!.identity;

let next = 0;
/** ADDs whose send failed (the link closed or refused it); the first failure is printed. */
let sendFailures = 0;
const submit = (): void => {
  const req: GenerateRequest = {
    requestId: `r-${(next++).toString(16).padStart(24, '0')}`,
    promptTokenIds: [9707, 11, 1879, 3838, 30],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: maxTokens, ignoreEos: true },
    stream: true,
    returnLogprob: false,
  };
  link.send(identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(req)).catch((err: unknown) => {
    if (sendFailures++ === 0) console.error(`sim-step: sending an ADD failed: ${String(err)}`);
  });
};
for (let i = 0; i < streams; i++) submit();

const reading = (async () => {
  for await (const m of link.outputs()) {
    if (m.kind !== 'frames') continue;
    // Decoded like the gateway does; every finished request is replaced at once (closed loop).
    const batch = tokenspeedProtocol.decodeOutput(m.frames);
    for (let i = 0; i < batch.finishedRequestIds.length; i++) submit();
  }
})();

/**
 * The rank's counters: SIGUSR2, then its `--stats-dir` file (written atomically, src/sim/main.ts `writeStatsFile`).
 * Throws when the rank exits first (`rankGone`) or the file is not there after `timeoutMs` (ms).
 */
async function counters(timeoutMs = 5000): Promise<Record<string, number>> {
  const file = join(statsDir, 'rank-0.json');
  rmSync(file, { force: true });
  if (!child.kill('SIGUSR2')) throw new Error('the sim rank could not be signalled (it exited)');
  const deadline = performance.now() + timeoutMs;
  while (!existsSync(file)) {
    if (performance.now() > deadline)
      throw new Error(`the sim rank wrote no counters to ${file} within ${timeoutMs} ms`);
    await Promise.race([sleep(5), rankGone]);
  }
  return JSON.parse(readFileSync(file, 'utf8')) as Record<string, number>;
}

await sleep(warmupMs);
const c0 = await counters();
const cpu0 = cpuMicros(child.pid!)!;
const t0 = performance.now();
await sleep(windowMs);
const c1 = await counters();
const cpu1 = cpuMicros(child.pid!)!;
const elapsed = performance.now() - t0;
const d = (k: string): number => c1[k]! - c0[k]!;
const cpu = cpu1 - cpu0;
console.log(
  `${streams} streams, max_tokens ${maxTokens}: ${((d('tokensGenerated') / elapsed) * 1000).toFixed(0)} tokens/s, ` +
    `rank ${(cpu / d('tokensGenerated')).toFixed(2)} µs/token, ${(cpu / d('rounds')).toFixed(1)} µs/step, ` +
    `${(d('tokensGenerated') / d('rounds')).toFixed(1)} tokens/step, ${(d('stepRows') / d('steps')).toFixed(1)} rows/batch, ` +
    `${((d('rounds') / elapsed) * 1000).toFixed(0)} steps/s, ${((cpu / elapsed / 1000) * 100).toFixed(0)}% of a core` +
    (sendFailures > 0 ? `; ${sendFailures} ADD sends failed` : ''),
);
stopping = true;
if (child.exitCode === null && child.signalCode === null) {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}
await link.close();
await reading.catch(() => undefined);
rmSync(dir, { recursive: true, force: true });
