/**
 * `model-gateway serve --dp-policy NAME` (src/cli.ts) and its passthrough by `startGateway` (src/gateway/) to every
 * engine client (issue #5 part 1; dp-routing.md 9.2).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import { CLI_DP_POLICIES, parseServeArgs, UsageError, USAGE } from '../../src/cli.js';
import { startGateway } from '../../src/gateway/index.js';

test('--dp-policy maps to dpPolicy for every CLI policy; absent means no option (default load)', () => {
  assert.deepEqual(
    [...CLI_DP_POLICIES],
    ['round_robin', 'inflight', 'load', 'load_no_clamp', 'cache_aware', 'lora_aware'],
  );
  for (const name of CLI_DP_POLICIES) {
    assert.deepEqual(parseServeArgs(['--dp-policy', name]), { dpPolicy: name });
  }
  assert.deepEqual(parseServeArgs(['--sim', '2', '--dp-policy', 'round_robin']), { sim: 2, dpPolicy: 'round_robin' });
  assert.equal(parseServeArgs([])?.dpPolicy, undefined);
  assert.match(USAGE, /--dp-policy NAME/);
});

test('--load-horizon-ms and the cache_aware balance bounds become dpPolicyOptions; bad values are usage errors', () => {
  assert.deepEqual(
    parseServeArgs([
      '--dp-policy',
      'cache_aware',
      '--load-horizon-ms',
      '2000',
      '--balance-abs-threshold',
      '4',
      '--balance-rel-threshold',
      '1.25',
    ]),
    {
      dpPolicy: 'cache_aware',
      dpPolicyOptions: { loadHorizonMs: 2000, balanceAbsThreshold: 4, balanceRelThreshold: 1.25 },
    },
  );
  assert.deepEqual(parseServeArgs(['--load-horizon-ms', '750']), { dpPolicyOptions: { loadHorizonMs: 750 } });
  assert.throws(() => parseServeArgs(['--load-horizon-ms', '0']), UsageError);
  assert.throws(() => parseServeArgs(['--balance-abs-threshold', '-1']), UsageError);
  assert.throws(() => parseServeArgs(['--balance-rel-threshold', '0.5']), UsageError);
  assert.match(USAGE, /--load-horizon-ms N/);
  assert.match(USAGE, /--balance-abs-threshold N/);
});

test('--dp-policy oracle is refused (benchmark only); unknown names list the valid ones', () => {
  assert.throws(
    () => parseServeArgs(['--dp-policy', 'oracle']),
    (e: unknown) => e instanceof UsageError && /benchmark only/.test(e.message),
  );
  assert.throws(
    () => parseServeArgs(['--dp-policy', 'random']),
    (e: unknown) =>
      e instanceof UsageError && /'random'/.test(e.message) && CLI_DP_POLICIES.every((n) => e.message.includes(n)),
  );
  assert.throws(() => parseServeArgs(['--dp-policy']), UsageError);
});

test('startGateway refuses an unknown policy and oracle without a source before starting anything', async () => {
  const logger = pino({ level: 'silent' });
  await assert.rejects(
    startGateway({ sim: 1, port: 0, logger, dpPolicy: 'nope' as never }),
    /unknown DP policy "nope"/,
  );
  await assert.rejects(startGateway({ sim: 1, port: 0, logger, dpPolicy: 'oracle' }), /OracleSource/);
});

test('startGateway gives every group its own instance of the chosen policy', async () => {
  const lines: Array<{ msg: string; dpPolicy?: string }> = [];
  const gateway = await startGateway({
    groups: [{ sim: 1 }, { sim: 1 }],
    port: 0,
    logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
    dpPolicy: 'load_no_clamp',
  });
  try {
    const serving = lines.find((l) => l.msg.startsWith('serving model'));
    assert.equal(serving?.dpPolicy, 'load_no_clamp', 'the startup line names the policy');
    assert.match(serving?.msg ?? '', /DP policy 'load_no_clamp'/);
    const policies = gateway.groups.map((g) => g.client.policy);
    assert.deepEqual(
      policies.map((p) => p.name),
      ['load_no_clamp', 'load_no_clamp'],
    );
    assert.equal(policies[0]!.releaseClamp, false);
    assert.notEqual(policies[0], policies[1], 'one instance per engine client');
  } finally {
    await gateway.close();
  }
});
