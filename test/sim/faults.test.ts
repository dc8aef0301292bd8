/**
 * The simulated rank's contract faults (src/sim/faults.ts; issue 26 part 4): `overrunTokens` runs a request past its
 * limit, `badTokenId` replaces its n-th token; the command line spells them `--fault-overrun-tokens`,
 * `--fault-token-id`, `--fault-token-at`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { withFaults } from '../../src/sim/faults.js';
import { SimArgsError, parseSimArgs } from '../../src/sim/main.js';
import { SimScheduler, type SimRequest, type TokenSource } from '../../src/sim/scheduler.js';

/** Token 7 forever. */
const sevens = (): TokenSource => ({ next: () => ({ tokenId: 7, logprob: -0.5 }) });

function req(over: Partial<SimRequest> = {}): SimRequest {
  return {
    rid: 'r',
    promptTokenIds: [1, 2, 3],
    maxNewTokens: 4,
    minNewTokens: 0,
    stopTokenIds: null,
    ignoreEos: true,
    stream: true,
    streamInterval: null,
    returnLogprob: true,
    validationError: null,
    tokens: sevens(),
    ...over,
  };
}

/** Every token id the rank emits for `spec`, and the last row's finish reason. */
function run(spec: SimRequest): { ids: number[]; finish: string } {
  const s = new SimScheduler({ engineIndex: 0, maxRunning: 4, kvTotalPages: 100, maxModelLen: 64, eosTokenIds: [999] });
  s.add(spec, 0);
  const ids: number[] = [];
  let finish = '';
  for (let i = 0; i < 1000 && finish === ''; i++) {
    s.plan();
    for (const r of s.commit()?.rows ?? []) {
      ids.push(...r.outputIds);
      finish = r.finishedReason;
    }
  }
  return { ids, finish };
}

test('no faults: the request as decoded', () => {
  const spec = req();
  assert.equal(withFaults(spec, undefined), spec);
  assert.equal(withFaults(spec, {}), spec);
  assert.deepEqual(run(spec), { ids: [7, 7, 7, 7], finish: 'length' });
});

test('overrunTokens: the rank runs past max_new_tokens (still within the context clamp); no limit stays no limit', () => {
  assert.equal(run(withFaults(req(), { overrunTokens: 6 })).ids.length, 10);
  // max_model_len 64, prompt 3: TokenSpeed's clamp is 64 − 1 − 3 − 1 = 59 tokens.
  assert.equal(run(withFaults(req(), { overrunTokens: 1000 })).ids.length, 59);
  assert.equal(withFaults(req({ maxNewTokens: null }), { overrunTokens: 5 }).maxNewTokens, null);
});

test('badTokenId replaces the n-th token (1-based) and only that one', () => {
  assert.deepEqual(run(withFaults(req(), { badTokenId: 151_669, badTokenAt: 2 })).ids, [7, 151_669, 7, 7]);
  assert.deepEqual(run(withFaults(req(), { badTokenId: 5, badTokenAt: 1 })).ids, [5, 7, 7, 7]);
});

test('the command line: --fault-overrun-tokens, --fault-token-id, --fault-token-at (default 1)', () => {
  const base = ['--handshake', 'tcp://127.0.0.1:1'];
  assert.equal(parseSimArgs(base).engine.faults, undefined);
  assert.deepEqual(parseSimArgs([...base, '--fault-overrun-tokens', '1000']).engine.faults, { overrunTokens: 1000 });
  assert.deepEqual(parseSimArgs([...base, '--fault-token-id', '151669']).engine.faults, {
    badTokenId: 151_669,
    badTokenAt: 1,
  });
  assert.deepEqual(
    parseSimArgs([...base, '--fault-token-id', '9', '--fault-token-at', '3', '--fault-overrun-tokens', '2']).engine
      .faults,
    {
      overrunTokens: 2,
      badTokenId: 9,
      badTokenAt: 3,
    },
  );
  assert.throws(() => parseSimArgs([...base, '--fault-token-at', '3']), SimArgsError);
  assert.throws(() => parseSimArgs([...base, '--fault-token-id', '-1']), SimArgsError);
  assert.throws(() => parseSimArgs([...base, '--fault-overrun-tokens', 'x']), SimArgsError);
});
