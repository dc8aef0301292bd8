/**
 * `model-gateway serve` argument parsing (src/cli.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseServeArgs, UsageError } from '../../src/cli.js';
import { resolveGroups } from '../../src/gateway/index.js';

test('parseServeArgs maps flags to startGateway options', () => {
  assert.deepEqual(parseServeArgs([]), {});
  assert.equal(parseServeArgs(['--help']), null);
  assert.deepEqual(
    parseServeArgs([
      '--port',
      '0',
      '--host',
      '0.0.0.0',
      '--engine-url',
      'ipc:///tmp/x/engine',
      '--dp-size',
      '2',
      '--handshake',
      'tcp://127.0.0.1:30500',
      '--tokenizer',
      '/tok',
      '--model',
      'm',
      '--log-level',
      'debug',
      '--body-limit',
      '1024',
    ]),
    {
      port: 0,
      host: '0.0.0.0',
      engineUrl: 'ipc:///tmp/x/engine',
      dpSize: 2,
      handshake: 'tcp://127.0.0.1:30500',
      tokenizerDir: '/tok',
      modelId: 'm',
      logLevel: 'debug',
      bodyLimitBytes: 1024,
    },
  );
  assert.deepEqual(parseServeArgs(['--sim', '2', '--sim-arg=--time-scale', '--sim-arg', '0.1']), {
    sim: 2,
    simArgs: ['--time-scale', '0.1'],
  });
});

test('parseServeArgs: several engine groups, each with its own engine; defaults before the first group', () => {
  // Long form: every --engine-url / --sim opens a group; the options after it are that group's.
  assert.deepEqual(
    parseServeArgs([
      '--engine-url',
      'ipc:///tmp/e/ts',
      '--dp-size',
      '2',
      '--engine-url',
      'ipc:///tmp/e/vl',
      '--engine',
      'vllm',
    ]),
    {
      groups: [
        { engineUrl: 'ipc:///tmp/e/ts', dpSize: 2 },
        { engine: 'vllm', engineUrl: 'ipc:///tmp/e/vl' },
      ],
    },
  );
  // Options before the first group are defaults; a group's own option wins.
  assert.deepEqual(
    parseServeArgs([
      '--engine',
      'vllm',
      '--engine-url',
      'ipc:///a',
      '--engine-url',
      'ipc:///b',
      '--engine',
      'tokenspeed',
    ]),
    {
      groups: [
        { engine: 'vllm', engineUrl: 'ipc:///a' },
        { engine: 'tokenspeed', engineUrl: 'ipc:///b' },
      ],
    },
  );
  // Simulated groups: a dense and a lockstep vLLM group; per-group and default --sim-arg.
  assert.deepEqual(
    parseServeArgs([
      '--sim-arg=--log-level',
      '--sim-arg=warn',
      '--sim',
      '2',
      '--sim-engine',
      'vllm',
      '--sim',
      '2',
      '--sim-engine',
      'vllm',
      '--sim-lockstep',
      '--sim-arg=--seed',
      '--sim-arg=7',
      '--silence-timeout-ms',
      '5000',
    ]),
    {
      groups: [
        { engine: 'vllm', sim: 2, simArgs: ['--log-level', 'warn'] },
        { engine: 'vllm', sim: 2, simArgs: ['--log-level', 'warn', '--seed', '7'], lockstep: true },
      ],
      silenceTimeoutMs: 5000,
    },
  );
  // A default --sim-engine reaches simulated groups only.
  assert.deepEqual(parseServeArgs(['--sim-engine', 'vllm', '--sim', '1', '--engine-url', 'ipc:///a']), {
    groups: [{ engine: 'vllm', sim: 1 }, { engineUrl: 'ipc:///a' }],
  });
  // No group at all: the defaults describe the default simulated group.
  assert.deepEqual(parseServeArgs(['--sim-engine', 'vllm', '--sim-lockstep']), { engine: 'vllm', lockstep: true });
  // Compact forms.
  assert.deepEqual(parseServeArgs(['--worker', 'tokenspeed:ipc:///tmp/e/ts:2', '--worker', 'vllm:ipc:///tmp/e/vl']), {
    groups: [
      { engine: 'tokenspeed', engineUrl: 'ipc:///tmp/e/ts', dpSize: 2 },
      { engine: 'vllm', engineUrl: 'ipc:///tmp/e/vl' },
    ],
  });
  assert.deepEqual(parseServeArgs(['--sim-worker', 'vllm:2:lockstep', '--sim-worker', 'tokenspeed:3']), {
    groups: [
      { engine: 'vllm', sim: 2, lockstep: true },
      { engine: 'tokenspeed', sim: 3 },
    ],
  });
  // One group keeps the single-group shorthand fields.
  assert.deepEqual(parseServeArgs(['--worker', 'vllm:ipc:///tmp/e/vl:4', '--handshake', 'tcp://127.0.0.1:30500']), {
    engine: 'vllm',
    engineUrl: 'ipc:///tmp/e/vl',
    dpSize: 4,
    handshake: 'tcp://127.0.0.1:30500',
  });
});

test('parseServeArgs: --lockstep / --no-lockstep are per-group options (lockstepMode), defaults before the first group', () => {
  assert.deepEqual(parseServeArgs(['--engine-url', 'ipc:///a', '--engine', 'vllm', '--lockstep']), {
    engine: 'vllm',
    engineUrl: 'ipc:///a',
    lockstepMode: true,
  });
  assert.deepEqual(
    parseServeArgs([
      '--no-lockstep',
      '--engine-url',
      'ipc:///a',
      '--engine',
      'vllm',
      '--engine-url',
      'ipc:///b',
      '--engine',
      'vllm',
      '--lockstep',
      '--worker',
      'vllm:ipc:///c',
    ]),
    {
      groups: [
        { engine: 'vllm', engineUrl: 'ipc:///a', lockstepMode: false },
        { engine: 'vllm', engineUrl: 'ipc:///b', lockstepMode: true },
        { engine: 'vllm', engineUrl: 'ipc:///c', lockstepMode: false },
      ],
    },
  );
  // Separate from --sim-lockstep, which shapes the simulated ranks: both may be given.
  assert.deepEqual(parseServeArgs(['--sim', '2', '--sim-engine', 'vllm', '--sim-lockstep', '--lockstep']), {
    engine: 'vllm',
    sim: 2,
    lockstep: true,
    lockstepMode: true,
  });
  // Absent: auto (resolveGroups fills it in).
  assert.equal(parseServeArgs(['--engine-url', 'ipc:///a'])!.lockstepMode, undefined);
  assert.throws(
    () => parseServeArgs(['--engine-url', 'ipc:///a', '--lockstep', '--no-lockstep']),
    /--lockstep \/ --no-lockstep given twice for --engine-url ipc:\/\/\/a/,
  );
  assert.throws(() => parseServeArgs(['--lockstep', '--lockstep']), /given twice before the first group/);
  assert.deepEqual(
    resolveGroups({ engineUrl: 'ipc:///a' }).map((g) => g.lockstepMode),
    ['auto'],
  );
  assert.deepEqual(
    resolveGroups({ groups: [{ engineUrl: 'ipc:///a', lockstepMode: false }, { sim: 1 }] }).map((g) => g.lockstepMode),
    [false, 'auto'],
  );
  assert.throws(
    () => resolveGroups({ engineUrl: 'ipc:///a', lockstepMode: 'yes' as unknown as boolean }),
    /lockstepMode must be 'auto', true or false/,
  );
});

test('parseServeArgs refuses bad input with a UsageError naming the flag', () => {
  const bad: Array<[string[], RegExp]> = [
    [['--port', 'x'], /--port/],
    [['--port', '70000'], /--port/],
    [['--dp-size', '0'], /--dp-size/],
    [['--sim', '-1'], /--sim|argument/],
    [['--engine-url', 'tcp://x'], /--engine-url/],
    [['--handshake', 'ipc:///x'], /--handshake/],
    [['--log-level', 'loud'], /--log-level/],
    [['--engine', 'sglang'], /--engine must be tokenspeed or vllm/],
    [['--sim', '2', '--sim-lockstep'], /lockstep applies to a group of at least 2 simulated vLLM ranks/],
    [['--engine-url', 'ipc:///a', '--sim-lockstep'], /--sim-lockstep applies to simulated groups/],
    [['--sim-worker', 'vllm:1:lockstep'], /at least 2 simulated vLLM ranks/],
    [['--engine-url', 'ipc:///a', '--sim-engine', 'vllm'], /use --engine/],
    [
      ['--engine-url', 'ipc:///a', '--engine', 'vllm', '--engine', 'vllm'],
      /engine is given twice for --engine-url ipc:\/\/\/a/,
    ],
    [['--engine-url', 'ipc:///a', '--dp-size', '2', '--dp-size', '2'], /--dp-size given twice/],
    [['--engine-url', 'ipc:///a', '--engine-url', 'ipc:///a'], /share the worker URL ipc:\/\/\/a/],
    [['--handshake', 'tcp://127.0.0.1:1', '--sim', '1', '--sim', '1'], /share the handshake address/],
    [['--worker', 'vllm:tcp://x'], /--worker must look like ENGINE:ipc:\/\/PATH/],
    [['--worker', 'sglang:ipc:///a'], /--worker engine must be tokenspeed or vllm/],
    [['--sim-worker', 'vllm:0'], /--sim-worker/],
    [['--sim-worker', 'vllm:2:moe'], /--sim-worker must look like/],
    [['--sim', '2', '--dp-size', '3'], /dpSize \(3\) must equal the number of simulated ranks \(2\)/],
    [['--silence-timeout-ms', '0'], /--silence-timeout-ms/],
    [['--bogus'], /bogus/],
    [['stray'], /stray|positional/i],
  ];
  for (const [argv, re] of bad) {
    assert.throws(
      () => parseServeArgs(argv),
      (e: unknown) => e instanceof UsageError && re.test(e.message),
      argv.join(' '),
    );
  }
});

test('output-parsing flags: --tool-call-parser, --enable-auto-tool-choice, --reasoning-parser, --responses-store', () => {
  assert.deepEqual(
    parseServeArgs([
      '--tool-call-parser',
      'llama3_json',
      '--enable-auto-tool-choice',
      '--reasoning-parser',
      'deepseek_r1',
      '--responses-store',
      '0',
    ]),
    { toolCallParser: 'llama3_json', reasoningParser: 'deepseek_r1', responsesStoreSize: 0 },
  );
  assert.deepEqual(parseServeArgs(['--tool-call-parser', 'none']), { toolCallParser: 'none' });
  assert.throws(
    () => parseServeArgs(['--tool-call-parser', 'mistral']),
    /--tool-call-parser must be one of hermes, llama3_json or none/,
  );
  assert.throws(
    () => parseServeArgs(['--tool-call-parser', 'none', '--enable-auto-tool-choice']),
    /needs a tool-call parser/,
  );
  assert.throws(
    () => parseServeArgs(['--reasoning-parser', 'o1']),
    /--reasoning-parser must be one of qwen3, deepseek_r1/,
  );
  assert.throws(() => parseServeArgs(['--responses-store', '-1']), /--responses-store/);
});

test('parseServeArgs: rank lifecycle flags (issue #8)', () => {
  assert.deepEqual(
    parseServeArgs([
      '--rank-stall-timeout-ms',
      '2000',
      '--handshake-timeout-ms',
      '120000',
      '--shutdown-grace-ms',
      '0',
      '--max-output-message-bytes',
      '1048576',
    ]),
    { rankStallTimeoutMs: 2000, handshakeTimeoutMs: 120000, shutdownGraceMs: 0, maxMessageBytes: { output: 1048576 } },
  );
  assert.throws(
    () => parseServeArgs(['--rank-stall-timeout-ms', '0']),
    (e: unknown) => e instanceof UsageError && /--rank-stall-timeout-ms must be an integer ≥ 1/.test(e.message),
  );
  assert.throws(() => parseServeArgs(['--shutdown-grace-ms', '-5']), UsageError);
  assert.throws(() => parseServeArgs(['--max-output-message-bytes', 'lots']), UsageError);
});

test('parseServeArgs: --workers N|auto (issue 9); startGateway itself is one process', async () => {
  const { autoWorkers, restartDelayMs } = await import('../../src/fronts/router/cluster.js');
  const { startGateway } = await import('../../src/gateway/index.js');
  assert.deepEqual(parseServeArgs(['--workers', '3']), { workers: 3 });
  assert.deepEqual(parseServeArgs(['--workers', 'auto']), { workers: autoWorkers() });
  assert.deepEqual(parseServeArgs(['--workers', '1']), { workers: 1 });
  assert.deepEqual(parseServeArgs([], { env: { MODEL_GATEWAY_WORKERS: '2' } }), { workers: 2 });
  for (const bad of ['0', '-1', 'two', '1.5']) {
    assert.throws(
      () => parseServeArgs(['--workers', bad]),
      (e: unknown) => e instanceof UsageError && /--workers/.test(e.message),
      bad,
    );
  }
  assert.deepEqual(
    [1, 2, 3, 9, 64].map((cores) => autoWorkers(cores)),
    [1, 1, 2, 8, 8],
    'cores − 1, 1..8',
  );
  assert.deepEqual([1, 2, 3, 4, 10].map(restartDelayMs), [100, 200, 400, 800, 5000]);
  await assert.rejects(startGateway({ workers: 2 }), RangeError);
});

test('--tasks per group: parsed, defaulted by engine, and refused for TokenSpeed embeddings', () => {
  const opts = parseServeArgs(['--sim', '2', '--engine', 'vllm', '--tasks', 'embed'])!;
  assert.deepEqual(opts.tasks, ['embed']);
  assert.deepEqual(resolveGroups(opts)[0]!.tasks, ['embed']);
  assert.deepEqual(resolveGroups({ engine: 'vllm', sim: 2 })[0]!.tasks, ['generate', 'embed'], 'simulated vLLM: both');
  assert.deepEqual(resolveGroups({ engine: 'vllm', engineUrl: 'ipc:///x' })[0]!.tasks, ['generate'], 'real: generate');
  assert.deepEqual(resolveGroups({})[0]!.tasks, ['generate'], 'TokenSpeed: generate');
  assert.throws(() => resolveGroups({ tasks: ['embed'] }), /TokenSpeed engines serve no embeddings/);
  assert.throws(() => parseServeArgs(['--tasks', 'generate,chat']), /unknown task 'chat'/);
  assert.throws(() => parseServeArgs(['--tasks', 'embed,embed']), /named twice/);
});

test('--group-name per group: the name operators see; defaulted to the family and an index; checked', () => {
  const two = parseServeArgs(['--sim', '2', '--group-name', 'blue', '--sim', '1', '--engine', 'vllm'])!;
  assert.deepEqual(
    resolveGroups(two).map((g) => g.name),
    ['blue', 'vllm-0'],
  );
  assert.deepEqual(
    resolveGroups({ groups: [{ sim: 1 }, { sim: 1, engine: 'vllm' }, { sim: 1 }] }).map((g) => g.name),
    ['tokenspeed-0', 'vllm-0', 'tokenspeed-1'],
    'per-family index',
  );
  assert.equal(parseServeArgs(['--group-name', 'solo'])!.name, 'solo', 'before the only group: names it');
  assert.equal(parseServeArgs(['--group-name', 'solo', '--sim', '2'])!.name, 'solo');
  assert.throws(
    () => parseServeArgs(['--group-name', 'x', '--sim', '1', '--sim', '1']),
    /names the only group; give it after each group/,
  );
  assert.throws(() => parseServeArgs(['--sim', '1', '--group-name', 'a', '--group-name', 'b']), /given twice/);
  assert.throws(
    () => parseServeArgs(['--group-name', 'ipc:///tmp/x']),
    /group name \(--group-name\) must be 1 to 64 letters/,
  );
  assert.throws(() => resolveGroups({ name: '' }), /--group-name/);
  assert.throws(
    () => parseServeArgs(['--sim', '1', '--group-name', 'same', '--sim', '1', '--group-name', 'same']),
    /share the name same/,
  );
  assert.throws(
    () => parseServeArgs(['--sim', '1', '--group-name', 'tokenspeed-1', '--sim', '1']),
    /share the name tokenspeed-1/,
    'a chosen name that a default takes',
  );
});
