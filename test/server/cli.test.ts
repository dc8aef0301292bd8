/**
 * `model-gateway serve` argument parsing (src/cli.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseServeArgs, UsageError } from '../../src/cli.js';

test('parseServeArgs maps flags to startGateway options', () => {
  assert.deepEqual(parseServeArgs([]), {});
  assert.equal(parseServeArgs(['--help']), null);
  assert.deepEqual(
    parseServeArgs([
      '--port', '0', '--host', '0.0.0.0', '--engine-url', 'ipc:///tmp/x/engine', '--dp-size', '2',
      '--handshake', 'tcp://127.0.0.1:30500', '--tokenizer', '/tok', '--model', 'm', '--log-level', 'debug',
      '--body-limit', '1024',
    ]),
    {
      port: 0, host: '0.0.0.0', engineUrl: 'ipc:///tmp/x/engine', dpSize: 2, handshake: 'tcp://127.0.0.1:30500',
      tokenizerDir: '/tok', modelId: 'm', logLevel: 'debug', bodyLimitBytes: 1024,
    },
  );
  assert.deepEqual(parseServeArgs(['--sim', '2', '--sim-arg=--time-scale', '--sim-arg', '0.1']), {
    sim: 2,
    simArgs: ['--time-scale', '0.1'],
  });
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
    [['--bogus'], /bogus/],
    [['stray'], /stray|positional/i],
  ];
  for (const [argv, re] of bad) {
    assert.throws(() => parseServeArgs(argv), (e: unknown) => e instanceof UsageError && re.test(e.message), argv.join(' '));
  }
});
