import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { SIM_USAGE, SimArgsError, parseSimArgs, simMain, statsFilePath } from '../../src/sim/main.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType } from '../../src/protocols/types.js';
import { OutputReader, freshDir, hangGuard, startSpawnedRanks } from './helpers.js';

test('parseSimArgs reads every option', () => {
  const a = parseSimArgs([
    '--handshake',
    'tcp://127.0.0.1:30500',
    '--engine-index',
    '3',
    '--max-running',
    '8',
    '--max-loras',
    '3',
    '--kv-pages',
    '512',
    '--max-model-len',
    '4096',
    '--time-scale',
    '0.25',
    '--seed',
    '9',
    '--stream-interval',
    '2',
    '--step-decode-ms',
    '0.5',
    '--disable-output-logprobs',
    '--disable-prefix-caching',
    '--init-timeout-ms',
    '5000',
    '--log-level',
    'warn',
    '--abort-lag-rounds',
    '20',
  ]);
  assert.equal(a.logLevel, 'warn');
  assert.deepEqual(a.engine, {
    handshakeAddress: 'tcp://127.0.0.1:30500',
    engineIndex: 3,
    maxRunning: 8,
    maxLoras: 3,
    kvTotalPages: 512,
    maxModelLen: 4096,
    timeScale: 0.25,
    seed: 9,
    streamInterval: 2,
    initTimeoutMs: 5000,
    enableOutputLogprobs: false,
    prefixCaching: false,
    abortLagRounds: 20,
    stepTimeModel: { baseMs: 8, perPrefillTokenMs: 0.02, perDecodeTokenMs: 0.5 },
  });
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--abort-lag-rounds', '1.5']), /--abort-lag-rounds/);
});

test('parseSimArgs defaults: engine index 0, info logs, engine defaults left to runSimEngine', () => {
  const a = parseSimArgs(['--handshake', 'tcp://127.0.0.1:1']);
  assert.equal(a.engine.engineIndex, 0);
  assert.equal(a.logLevel, 'info');
  assert.equal(a.engine.maxRunning, undefined);
  assert.equal(a.engine.stepTimeModel, undefined);
  assert.equal(a.engine.enableOutputLogprobs, undefined);
  assert.equal(a.engine.prefixCaching, undefined, 'the prefix cache is on unless disabled');
});

test('parseSimArgs names the bad option', () => {
  assert.throws(() => parseSimArgs([]), /--handshake .* is required/);
  assert.throws(() => parseSimArgs(['--handshake', 'ipc:///tmp/x']), /--handshake: expected tcp/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--engine-index', '70000']), /--engine-index/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--max-running', '0']), /--max-running/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--time-scale', 'fast']), /--time-scale/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--log-level', 'loud']), /--log-level/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--bogus']), SimArgsError);
});

test('parseSimArgs --ready-response: short for vLLM ranks (issue #14), long by default, refused for TokenSpeed', () => {
  const short = parseSimArgs([
    '--handshake',
    'tcp://h:1',
    '--engine',
    'vllm',
    '--lockstep',
    '--dp-size',
    '2',
    '--ready-response',
    'short',
  ]);
  assert.equal(short.engine.readyResponse, 'short');
  assert.equal(short.engine.lockstep, true);
  assert.equal(parseSimArgs(['--handshake', 'tcp://h:1', '--engine', 'vllm']).engine.readyResponse, undefined);
  assert.equal(parseSimArgs(['--handshake', 'tcp://h:1', '--ready-response', 'long']).engine.readyResponse, 'long');
  assert.throws(
    () => parseSimArgs(['--handshake', 'tcp://h:1', '--ready-response', 'short']),
    /--ready-response short needs --engine vllm/,
  );
  assert.throws(
    () => parseSimArgs(['--handshake', 'tcp://h:1', '--engine', 'vllm', '--ready-response', 'tiny']),
    /--ready-response: expected long or short/,
  );
  assert.ok(SIM_USAGE.includes('--ready-response FORM'));
});

test('parseSimArgs --output-layout 13|16 and --vllm-version: vLLM only; left to runSimEngine (13, vllm-sim) when absent', () => {
  const base = ['--handshake', 'tcp://h:1', '--engine', 'vllm'];
  assert.equal(parseSimArgs([...base, '--output-layout', '16']).engine.outputLayout, 16);
  assert.equal(parseSimArgs([...base, '--output-layout', '13']).engine.outputLayout, 13);
  assert.equal(parseSimArgs(base).engine.outputLayout, undefined);
  assert.equal(parseSimArgs([...base, '--vllm-version', '0.21.1+g52a31ccec']).engine.vllmVersion, '0.21.1+g52a31ccec');
  assert.throws(() => parseSimArgs([...base, '--output-layout', '14']), /--output-layout: expected 13 or 16/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--output-layout', '16']), /need --engine vllm/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--vllm-version', 'x']), /need --engine vllm/);
  assert.ok(SIM_USAGE.includes('--output-layout N') && SIM_USAGE.includes('--vllm-version STR'));
});

test('simMain --help prints the usage and exits 0 without dialling anything', async () => {
  const written: string[] = [];
  const original = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array) => {
    written.push(String(chunk));
    return true;
  }) as typeof process.stdout.write;
  let code: number;
  try {
    code = await simMain(['--help']);
  } finally {
    process.stdout.write = original;
  }
  assert.equal(code, 0);
  assert.equal(written.join(''), SIM_USAGE);
  assert.match(SIM_USAGE, /--handshake ADDR/);
});

test('parseSimArgs: --engine vllm, and --lockstep with --dp-size', () => {
  const dense = parseSimArgs(['--handshake', 'tcp://127.0.0.1:1', '--engine', 'vllm']);
  assert.equal(dense.engine.engine, 'vllm');
  assert.equal(dense.engine.lockstep, undefined);
  assert.equal(dense.engine.dataParallelSize, undefined);
  const lock = parseSimArgs(['--handshake', 'tcp://127.0.0.1:1', '--engine', 'vllm', '--lockstep', '--dp-size', '4']);
  assert.deepEqual([lock.engine.engine, lock.engine.lockstep, lock.engine.dataParallelSize], ['vllm', true, 4]);
  assert.equal(parseSimArgs(['--handshake', 'tcp://127.0.0.1:1']).engine.engine, undefined, 'default: TokenSpeed');
});

test('parseSimArgs refuses bad engine and lockstep combinations, naming the option', () => {
  const h = ['--handshake', 'tcp://h:1'];
  assert.throws(() => parseSimArgs([...h, '--engine', 'sglang']), /--engine: expected one of tokenspeed, vllm/);
  assert.throws(() => parseSimArgs([...h, '--lockstep', '--dp-size', '2']), /--lockstep needs --engine vllm/);
  assert.throws(() => parseSimArgs([...h, '--engine', 'vllm', '--lockstep']), /--lockstep needs --dp-size/);
  assert.throws(() => parseSimArgs([...h, '--engine', 'vllm', '--lockstep', '--dp-size', '1']), /--dp-size/);
  assert.throws(() => parseSimArgs([...h, '--engine', 'vllm', '--dp-size', '2']), /only meaningful with --lockstep/);
});

test("parseSimArgs --slowdown X: this rank's step-time multiplier (> 0), absent by default (issue #5 part 2)", () => {
  assert.equal(parseSimArgs(['--handshake', 'tcp://h:1', '--slowdown', '2.5']).engine.slowdown, 2.5);
  assert.equal('slowdown' in parseSimArgs(['--handshake', 'tcp://h:1']).engine, false);
  assert.throws(
    () => parseSimArgs(['--handshake', 'tcp://h:1', '--slowdown', '0']),
    /--slowdown: expected a number > 0/,
  );
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--slowdown', '-1']), /--slowdown/);
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--slowdown', 'slow']), /--slowdown/);
  assert.match(SIM_USAGE, /--slowdown X/);
});

test('parseSimArgs --stats-dir DIR: absent by default, refused when empty', () => {
  assert.equal(parseSimArgs(['--handshake', 'tcp://h:1']).statsDir, null);
  assert.equal(parseSimArgs(['--handshake', 'tcp://h:1', '--stats-dir', '/tmp/x']).statsDir, '/tmp/x');
  assert.throws(() => parseSimArgs(['--handshake', 'tcp://h:1', '--stats-dir', '']), /--stats-dir/);
  assert.ok(SIM_USAGE.includes('--stats-dir DIR'));
});

test(
  'a spawned rank with --stats-dir writes its counters to rank-<index>.json on SIGUSR2 and keeps serving',
  { timeout: 120_000 },
  async () => {
    const stats = await freshDir();
    const group = await startSpawnedRanks(
      {
        count: 1,
        firstEngineIndex: 2,
        extraArgs: ['--time-scale', '0', '--log-level', 'warn', '--stats-dir', stats.dir],
      },
      'handshake with the spawned rank',
    );
    try {
      const file = statsFilePath(stats.dir, 2);
      const rank = group.ranks.ranks[0]!;
      const read = async (): Promise<Record<string, unknown>> => {
        await hangGuard(
          (async () => {
            while (!existsSync(file)) await new Promise((r) => setTimeout(r, 20));
          })(),
          20_000,
          'the stats file',
        );
        return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      };
      rank.child.kill('SIGUSR2');
      const first = await read();
      assert.equal(first.engineIndex, 2);
      assert.equal(first.pid, rank.child.pid);
      assert.equal(first.rounds, 0);
      assert.equal(first.steps, 0);
      assert.equal(first.stepRows, 0);
      // Still serving after the signal: one request runs to its end and the next file counts it.
      const reader = new OutputReader(group.link);
      const identity = group.link.engines[0]!.identity;
      await group.link.send(
        identity,
        RequestType.ADD,
        tokenspeedProtocol.encodeAdd({
          requestId: 'r1',
          promptTokenIds: [9707, 11],
          sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 5, ignoreEos: true },
          stream: true,
          returnLogprob: false,
        }),
      );
      await reader.untilFinished(['r1']);
      rmSync(file);
      rank.child.kill('SIGUSR2');
      const second = await read();
      assert.equal(second.tokensGenerated, 5);
      assert.equal(second.stepRows, 5, 'one row per token at stream interval 1');
      assert.ok((second.steps as number) >= 5 && (second.rounds as number) >= 5);
      assert.equal(readdirSync(stats.dir).filter((f) => f.endsWith('.tmp')).length, 0, 'no temporary file left');
    } finally {
      await group.close();
      await stats.cleanup();
    }
  },
);
