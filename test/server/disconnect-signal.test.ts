/**
 * The HTTP layer's per-request cancellation signal (src/server/disconnect.ts `DisconnectSignal`): the part of
 * `AbortSignal` the engine clients use, with `AbortSignal`'s semantics, checked side by side with a real one.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CancelSignal } from '../../src/engine-client/client.js';
import { DisconnectSignal, watchClientDisconnect } from '../../src/server/disconnect.js';

/** Runs the same script against a signal and its abort function; returns what the listeners saw. */
function script(signal: CancelSignal, abort: (reason?: unknown) => void): string[] {
  const seen: string[] = [];
  const a = () => seen.push('a');
  const b = () => seen.push('b');
  const removed = () => seen.push('removed');
  signal.addEventListener('abort', a, { once: true });
  signal.addEventListener('abort', a); // the same listener twice: called once
  signal.addEventListener('abort', removed);
  signal.addEventListener('abort', b, { once: true });
  signal.removeEventListener('abort', removed);
  seen.push(`aborted ${signal.aborted}`);
  abort();
  seen.push(`aborted ${signal.aborted}`);
  abort(); // a second abort does nothing
  signal.addEventListener('abort', () => seen.push('late')); // never called
  abort();
  return seen;
}

describe('DisconnectSignal', () => {
  test('listeners, removal, a second abort and a late listener behave as with an AbortSignal', () => {
    const light = new DisconnectSignal();
    const controller = new AbortController();
    const seen = script(light, () => light.abort());
    assert.deepEqual(seen, ['aborted false', 'a', 'b', 'aborted true']);
    assert.deepEqual(
      script(controller.signal, () => controller.abort()),
      seen,
    );
  });

  test('the default reason is an AbortError DOMException, as AbortController.abort() gives; a given reason is kept', () => {
    const light = new DisconnectSignal();
    const controller = new AbortController();
    assert.equal(light.reason, undefined);
    light.abort();
    controller.abort();
    const reasonOf = (s: { reason: unknown }): unknown => s.reason;
    assert.ok(reasonOf(light) instanceof DOMException);
    assert.equal((reasonOf(light) as DOMException).name, (controller.signal.reason as DOMException).name);
    const other = new DisconnectSignal();
    const reason = new Error('gone');
    other.abort(reason);
    assert.equal(other.reason, reason);
  });

  test('a throwing listener does not stop the next one; its error surfaces uncaught on a later tick', async () => {
    const light = new DisconnectSignal();
    const seen: string[] = [];
    const boom = new Error('listener failed');
    light.addEventListener('abort', () => {
      throw boom;
    });
    light.addEventListener('abort', () => seen.push('second'));
    const uncaught = new Promise<unknown>((resolve) => {
      const listeners = process.listeners('uncaughtException');
      process.removeAllListeners('uncaughtException');
      process.once('uncaughtException', (err) => {
        for (const l of listeners) process.on('uncaughtException', l);
        resolve(err);
      });
    });
    light.abort();
    assert.deepEqual(seen, ['second']);
    assert.equal(await uncaught, boom);
  });

  test('watchClientDisconnect hands out one (it is what the submit and the run listen to)', () => {
    const fakeSocket = { destroyed: false, on() {}, off() {} };
    const response = { writableFinished: false, on() {}, off() {}, headersSent: false } as unknown as Parameters<
      typeof watchClientDisconnect
    >[1];
    const request = { socket: fakeSocket, httpVersion: '1.1' } as unknown as Parameters<
      typeof watchClientDisconnect
    >[0];
    const watch = watchClientDisconnect(request, response);
    assert.ok(watch.signal instanceof DisconnectSignal);
    watch.dispose();
  });
});
