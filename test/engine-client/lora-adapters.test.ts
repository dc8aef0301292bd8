/**
 * The adapter registry of a vLLM group (src/engine-client/lora-adapters.ts) over a fake utility channel: a load asks
 * every ready rank and serves the adapter only when all took it (the ranks that took a refused or unanswered one drop
 * it again); a name already served is refused; unloading forgets the adapter; a rank that goes away ends its calls at
 * once (utility-calls.ts `failRank`); `--lora-modules` values parse as vLLM parses them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { LoraAdapters, parseLoraModule, type UtilityChannel } from '../../src/engine-client/lora-adapters.js';
import { UtilityCalls } from '../../src/engine-client/utility-calls.js';
import { anyValue, decodeMessage } from '../../src/wire/codec.js';
import { encodeUtilityCall, toUtilityCall } from '../../src/protocols/vllm/utility.js';

/** A channel to ranks 0 and 1 that answers each call with `answer(rank, method)` (undefined: never answers). */
function fakeRanks(calls: UtilityCalls, answer: (rank: number, method: string) => string | true | undefined) {
  const sent: { rank: number; method: string }[] = [];
  const channel: UtilityChannel = {
    readyRanks: () => [0, 1].map((engineIndex) => ({ engineIndex, identity: Uint8Array.of(engineIndex, 0) })),
    encode: (callId, method, args) => encodeUtilityCall(callId, method, args as never),
    async send(identity, payload) {
      const call = toUtilityCall(decodeMessage(anyValue, payload));
      const rank = identity[0]!;
      sent.push({ rank, method: call.method });
      const a = answer(rank, call.method);
      if (a === undefined) return;
      queueMicrotask(() =>
        calls.settle({ callId: call.callId, failure: a === true ? null : a, result: a === true ? true : null }),
      );
    },
  };
  return { channel, sent };
}

test('a load every rank takes is served; a refused one is not, and the ranks that took it drop it', async () => {
  const calls = new UtilityCalls();
  const { channel, sent } = fakeRanks(calls, (rank, method) =>
    method === 'add_lora' && rank === 1 ? 'No adapter found for /x' : true,
  );
  const reg = new LoraAdapters(calls, channel, [{ name: 'base', path: '/b' }]);
  assert.deepEqual(
    reg.list().map((a) => [a.name, a.id]),
    [['base', 1]],
  );
  const refused = await reg.load({ name: 'x', path: '/x' });
  assert.equal(refused.ok, false);
  assert.match((refused as { message: string }).message, /DP rank 1: No adapter found/);
  assert.equal(reg.get('x'), undefined);
  assert.deepEqual(
    sent.filter((s) => s.method === 'remove_lora').map((s) => s.rank),
    [0, 1],
  );
  assert.equal(calls.size, 0, 'no call left pending');
});

test('load, a second load of the name, unload, unload again', async () => {
  const calls = new UtilityCalls();
  const reg = new LoraAdapters(calls, fakeRanks(calls, () => true).channel);
  const first = await reg.load({ name: 'sql', path: '/s' });
  assert.ok(first.ok && first.adapter.id === 1);
  assert.deepEqual(await reg.load({ name: 'sql', path: '/s' }), {
    ok: false,
    reason: 'exists',
    message: "The lora adapter 'sql' has already been loaded.",
  });
  assert.equal((await reg.unload('sql')).ok, true);
  assert.equal((await reg.unload('sql')).ok, false);
  const again = await reg.load({ name: 'sql', path: '/s' });
  assert.ok(again.ok && again.adapter.id === 2, 'ids are never reused');
});

test('a rank that goes away ends the call at once; one that never answers ends it at the deadline', async () => {
  const calls = new UtilityCalls();
  const { channel } = fakeRanks(calls, (rank) => (rank === 0 ? true : undefined));
  const reg = new LoraAdapters(calls, channel);
  const pending = reg.load({ name: 'slow', path: '/s' }, 60_000);
  await new Promise((r) => setImmediate(r));
  calls.failRank(1, new EngineClientError('engine-dead', 'DP rank 1 went away'));
  await assert.rejects(pending, /DP rank 1 went away/);
  assert.equal(reg.get('slow'), undefined);
  // The ranks that took it are asked to drop it, in the background (rank 1 is gone: its call ends too).
  await new Promise((r) => setImmediate(r));
  calls.failRank(1, new EngineClientError('engine-dead', 'DP rank 1 went away'));
  // The deadline timers are unref'd (they never hold a gateway open): this one keeps the test's loop alive meanwhile.
  const alive = setTimeout(() => {}, 5_000);
  await assert.rejects(reg.load({ name: 'slower', path: '/s' }, 20), /did not answer/);
  await new Promise((r) => setTimeout(r, 50));
  clearTimeout(alive);
  assert.equal(calls.size, 0);
});

test('--lora-modules values: NAME=PATH or vLLM\'s JSON; one "=" only; names a model can have', () => {
  assert.deepEqual(parseLoraModule('sql=/a/b'), { name: 'sql', path: '/a/b', baseModelName: null });
  assert.deepEqual(parseLoraModule('{"name":"x","path":"/p","base_model_name":"m"}'), {
    name: 'x',
    path: '/p',
    baseModelName: 'm',
  });
  for (const bad of ['k==/x', '=/x', 'k=', '{"name":"x"}', ' =/x', 'a\u0001=/x'])
    assert.throws(() => parseLoraModule(bad), RangeError, bad);
});
