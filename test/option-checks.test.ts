/**
 * The numeric option checks (src/option-checks.ts), declared once and called by every layer that takes the option:
 * the words a user reads are pinned here for each caller, so moving a check (issue 28: the silence timeout was
 * checked in three places) cannot change them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { EngineClient, type EngineClientOptions } from '../src/engine-client/client.js';
import { createLoadPolicy } from '../src/engine-client/policy.js';
import { startGateway } from '../src/gateway/index.js';
import { MAX_TIMER_MS, positiveInteger, positiveMs } from '../src/option-checks.js';
import { resolveEdgeOptions } from '../src/server/edge-options.js';
import { OffLoopTokenizer } from '../src/tokenizer/off-loop.js';
import type { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';

/** Asserts `fn` throws a RangeError whose message is exactly `message`. */
function throwsExactly(fn: () => unknown, message: string): void {
  assert.throws(fn, (e: unknown) => e instanceof RangeError && e.message === message, message);
}

test('positiveMs takes a finite number > 0 (fractions too) and names the option otherwise', () => {
  assert.equal(positiveMs('silenceTimeoutMs', 1), 1);
  assert.equal(positiveMs('silenceTimeoutMs', 0.5), 0.5);
  for (const [bad, shown] of [
    [0, '0'],
    [-1, '-1'],
    [Number.NaN, 'NaN'],
    [Number.POSITIVE_INFINITY, 'Infinity'],
  ] as const)
    throwsExactly(
      () => positiveMs('silenceTimeoutMs', bad),
      `silenceTimeoutMs must be a positive number of ms, got ${shown}`,
    );
});

test('a timer delay above 2^31 - 1 ms is refused, not left to fire at once', () => {
  assert.equal(positiveMs('silenceTimeoutMs', MAX_TIMER_MS), MAX_TIMER_MS);
  for (const bad of [MAX_TIMER_MS + 1, 99_999_999_999])
    throwsExactly(
      () => positiveMs('rankStallTimeoutMs', bad),
      `rankStallTimeoutMs must be at most 2147483647 ms (the longest timer Node keeps), got ${bad}`,
    );
  throwsExactly(
    () => resolveEdgeOptions({ requestTimeoutMs: 2 ** 31 }),
    'requestTimeoutMs must be at most 2147483647 ms (the longest timer Node keeps), got 2147483648',
  );
  throwsExactly(
    () => resolveEdgeOptions({ clientStallTimeoutMs: 2 ** 32 }),
    'clientStallTimeoutMs must be at most 2147483647 ms (the longest timer Node keeps), got 4294967296',
  );
});

test('positiveInteger takes a safe integer ≥ 1 and names the option otherwise', () => {
  assert.equal(positiveInteger('dpSize', 1), 1);
  for (const bad of [0, -3, 1.5, Number.NaN, 2 ** 53])
    throwsExactly(() => positiveInteger('dpSize', bad), `dpSize must be an integer ≥ 1, got ${bad}`);
});

test('startGateway refuses a bad watchdog timeout, horizon, rank count or edge bound in the same words', async () => {
  const logger = pino({ level: 'silent' });
  const refuses = (opts: Parameters<typeof startGateway>[0], message: string) =>
    assert.rejects(
      startGateway({ sim: 1, port: 0, logger, ...opts }),
      (e: unknown) => e instanceof RangeError && e.message === message,
      message,
    );
  await refuses({ silenceTimeoutMs: 0 }, 'silenceTimeoutMs must be a positive number of ms, got 0');
  await refuses({ rankStallTimeoutMs: Number.NaN }, 'rankStallTimeoutMs must be a positive number of ms, got NaN');
  await refuses({ dpPolicyOptions: { loadHorizonMs: -1 } }, 'loadHorizonMs must be a positive number of ms, got -1');
  await refuses({ sim: 2, dpSize: 1.5 }, 'dpSize must be an integer ≥ 1, got 1.5');
  await refuses({ edge: { requestTimeoutMs: 0 } }, 'requestTimeoutMs must be an integer ≥ 1, got 0');
});

test('the layers below check the same options in the same words', () => {
  // The engine client checks its timeouts before it touches the link (client.ts constructor).
  throwsExactly(
    () => new EngineClient({ silenceTimeoutMs: 0 } as unknown as EngineClientOptions),
    'silenceTimeoutMs must be a positive number of ms, got 0',
  );
  throwsExactly(
    () => new EngineClient({ rankStallTimeoutMs: -5 } as unknown as EngineClientOptions),
    'rankStallTimeoutMs must be a positive number of ms, got -5',
  );
  throwsExactly(() => createLoadPolicy({ loadHorizonMs: 0 }), 'loadHorizonMs must be a positive number of ms, got 0');
  throwsExactly(
    () => resolveEdgeOptions({ tokenizerQueueJobs: 0 }),
    'tokenizerQueueJobs must be an integer ≥ 1, got 0',
  );
  throwsExactly(
    () => new OffLoopTokenizer(null as unknown as GatewayTokenizer, { maxJobs: 1, maxChars: 0 }),
    'off-loop maxChars must be an integer ≥ 1, got 0',
  );
});
