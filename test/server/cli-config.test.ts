/**
 * Configuration layering of `serve` (issue #13 part 4): MODEL_GATEWAY_* variables and --config FILE (YAML / JSON)
 * over the whole options table, precedence flag > environment > file, engine groups as one unit.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { USAGE, UsageError, parseServeArgs } from '../../src/cli.js';
import { envName } from '../../src/cli-config.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mg-config-'));
});
after(() => rm(dir, { recursive: true, force: true }));

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

test('flag > environment > file, option by option', async () => {
  const yaml = await file(
    'a.yaml',
    [
      'port: 31001',
      'host: 0.0.0.0',
      'dp-policy: round_robin',
      'log_level: warn          # snake_case keys are accepted too',
      'bodyLimit: 1024          # and camelCase',
      'served-model-name: [qwen3, Qwen/Qwen3-8B]',
      '',
    ].join('\n'),
  );
  const env = { MODEL_GATEWAY_PORT: '31002', MODEL_GATEWAY_DP_POLICY: 'inflight', HOME: '/x', PATH: '/bin' };
  assert.deepEqual(parseServeArgs(['--config', yaml, '--port', '31003'], { env }), {
    port: 31003,
    host: '0.0.0.0',
    dpPolicy: 'inflight',
    logLevel: 'warn',
    bodyLimitBytes: 1024,
    servedModelNames: ['qwen3', 'Qwen/Qwen3-8B'],
  });
  assert.equal(parseServeArgs(['--config', yaml], { env })?.port, 31002, 'env over file');
  assert.equal(parseServeArgs(['--config', yaml])?.port, 31001, 'file alone');
  // MODEL_GATEWAY_CONFIG names the file when --config is not given.
  assert.equal(parseServeArgs([], { env: { MODEL_GATEWAY_CONFIG: yaml } })?.host, '0.0.0.0');
  // JSON is YAML too.
  const json = await file('a.json', JSON.stringify({ port: 31004, 'served-model-name': 'one' }));
  assert.deepEqual(parseServeArgs(['--config', json]), { port: 31004, servedModelNames: ['one'] });
});

test('every option of the table has its variable: names, booleans, lists', () => {
  assert.equal(envName('silence-timeout-ms'), 'MODEL_GATEWAY_SILENCE_TIMEOUT_MS');
  assert.deepEqual(
    parseServeArgs([], {
      env: {
        MODEL_GATEWAY_SILENCE_TIMEOUT_MS: '5000',
        MODEL_GATEWAY_TOKENIZER: '/models/x',
        MODEL_GATEWAY_SERVED_MODEL_NAME: 'a, b',
        MODEL_GATEWAY_LOG_FORMAT: 'json',
        MODEL_GATEWAY_SIM: '2',
        MODEL_GATEWAY_SIM_ENGINE: 'vllm',
        MODEL_GATEWAY_SIM_LOCKSTEP: 'true',
        MODEL_GATEWAY_SIM_ARG: '--time-scale=0,--seed=3',
      },
    }),
    {
      silenceTimeoutMs: 5000,
      tokenizerDir: '/models/x',
      servedModelNames: ['a', 'b'],
      logFormat: 'json',
      sim: 2,
      engine: 'vllm',
      lockstep: true,
      simArgs: ['--time-scale=0', '--seed=3'],
    },
  );
  assert.deepEqual(parseServeArgs([], { env: { MODEL_GATEWAY_SIM: '2', MODEL_GATEWAY_SIM_LOCKSTEP: 'off' } }), {
    sim: 2,
  });
  // Every option in USAGE's serve list that is not flag-only maps to a variable the parser accepts.
  const flags = [...USAGE.matchAll(/^ {2}--([a-z-]+)/gm)]
    .map((m) => m[1]!)
    .filter((f) => !['help', 'version', 'config', 'exit-with-parent'].includes(f));
  assert.ok(flags.length >= 20, `${flags.length} flags in USAGE`);
  for (const flag of flags) {
    try {
      parseServeArgs([], { env: { [envName(flag)]: 'x' } });
    } catch (e) {
      // A bad value is fine here ('x' is no port); an unknown variable is not.
      assert.ok(
        e instanceof UsageError && !/unknown environment variable/.test(e.message),
        `${envName(flag)}: ${String(e)}`,
      );
    }
  }
});

test('engine groups: the file describes several; a group on a higher layer replaces them all', async () => {
  const yaml = await file(
    'groups.yaml',
    [
      'engine: vllm             # a default for every group',
      'groups:',
      '  - engine-url: ipc:///tmp/mg-cfg/a',
      '    dp-size: 2',
      '  - engine-url: ipc:///tmp/mg-cfg/b',
      '    engine: tokenspeed',
      '  - sim: 2',
      '    sim-lockstep: true',
      '    sim-arg: [--time-scale=0]',
      '',
    ].join('\n'),
  );
  assert.deepEqual(parseServeArgs(['--config', yaml]), {
    groups: [
      { engine: 'vllm', engineUrl: 'ipc:///tmp/mg-cfg/a', dpSize: 2 },
      { engine: 'tokenspeed', engineUrl: 'ipc:///tmp/mg-cfg/b' },
      { engine: 'vllm', sim: 2, simArgs: ['--time-scale=0'], lockstep: true },
    ],
  });
  assert.deepEqual(parseServeArgs(['--config', yaml, '--sim', '3']), { sim: 3 }, 'flags replace the file groups');
  assert.deepEqual(
    parseServeArgs(['--config', yaml], { env: { MODEL_GATEWAY_WORKER: 'vllm:ipc:///tmp/mg-cfg/c:2' } }),
    {
      engine: 'vllm',
      engineUrl: 'ipc:///tmp/mg-cfg/c',
      dpSize: 2,
    },
  );
});

test('mistakes name their source', async () => {
  const bad = (argv: string[], env: Record<string, string>, re: RegExp) =>
    assert.throws(
      () => parseServeArgs(argv, { env }),
      (e: unknown) => e instanceof UsageError && re.test(e.message),
      re.source,
    );
  bad([], { MODEL_GATEWAY_PORT: 'abc' }, /--port must be an integer.*\(from MODEL_GATEWAY_PORT\)/);
  bad([], { MODEL_GATEWAY_PROT: '1' }, /unknown environment variable MODEL_GATEWAY_PROT/);
  bad([], { MODEL_GATEWAY_HELP: '1' }, /unknown environment variable MODEL_GATEWAY_HELP/);
  bad([], { MODEL_GATEWAY_SIM_LOCKSTEP: 'maybe' }, /MODEL_GATEWAY_SIM_LOCKSTEP must be true or false/);
  bad(['--config', join(dir, 'missing.yaml')], {}, /cannot read the config file .*missing\.yaml: no such file/);
  const typo = await file('typo.yaml', 'prot: 1\n');
  bad(['--config', typo], {}, /typo\.yaml: unknown option 'prot'/);
  const port = await file('port.yaml', 'port: abc\n');
  bad(['--config', port], {}, /--port must be an integer.*\(from port in .*port\.yaml\)/);
  const broken = await file('broken.yaml', 'port: [1\n');
  bad(['--config', broken], {}, /broken\.yaml is not valid YAML or JSON/);
  const group = await file('group.yaml', 'groups:\n  - dp-size: 2\n');
  bad(['--config', group], {}, /groups\[0\] needs exactly one of engine-url, sim, worker, sim-worker/);
  const misplaced = await file('misplaced.yaml', 'groups:\n  - sim: 2\n    port: 1\n');
  bad(['--config', misplaced], {}, /groups\[0\]: 'port' is not an engine-group option/);
  const list = await file('list.yaml', 'port: [1, 2]\n');
  bad(['--config', list], {}, /'port' takes one value, got a list/);
  bad(['--bogus'], {}, /^unknown option '--bogus'$/);
  bad(['stray'], {}, /^unexpected argument 'stray'$/);
  bad(['--served-model-name', 'a', '--model', 'b'], {}, /--served-model-name or --model, not both/);
  bad(['--log-format', 'xml'], {}, /--log-format must be one of pretty, json/);
});

test("--served-model-name takes vLLM's space-separated list, or repeats", () => {
  assert.deepEqual(parseServeArgs(['--served-model-name', 'a', 'b', '--port', '1']), {
    port: 1,
    servedModelNames: ['a', 'b'],
  });
  assert.deepEqual(parseServeArgs(['--served-model-name', 'a', '--served-model-name', 'b']), {
    servedModelNames: ['a', 'b'],
  });
});
