/**
 * A submit that throws inside the reservation step leaves no in-flight slot held (dp-routing.md section 3: every
 * failure before the send rolls back synchronously; the gateway is the authority on quiescence, so a leaked slot
 * would keep a rank "busy" for good). Found by the fronts breaker: a SUBMIT without a prompt token id list reserved a
 * slot, then failed reading its length.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { DpPolicy } from '../../src/engine-client/policy.js';
import type { GenerateRequest } from '../../src/protocols/types.js';
import { inFlight, req, setup, tick } from './fakes.js';

test(
  'a request without a prompt token id list is an encode error and reserves nothing',
  { timeout: 10_000 },
  async () => {
    const { client } = setup(2);
    const bad = { ...req('bad'), promptTokenIds: undefined } as unknown as GenerateRequest;
    await assert.rejects(client.submit(bad), { kind: 'encode', message: /no prompt token id list/ });
    assert.deepEqual(inFlight(client), [0, 0]);
    assert.equal(client.registeredCount, 0);
    const s = await client.submit(req('good'));
    assert.equal(
      inFlight(client).reduce((a, b) => a + b, 0),
      1,
    );
    s.cancel();
    await tick();
    await client.close();
  },
);

test(
  "a policy whose onDispatch throws fails the submit and the rank's slot is released",
  { timeout: 10_000 },
  async () => {
    let fail = true;
    const policy: DpPolicy = {
      name: 'throws-on-dispatch',
      select: () => 0,
      onDispatch: () => {
        if (fail) throw new Error('policy bookkeeping failed');
      },
    };
    const { client } = setup(2, { policy });
    await assert.rejects(client.submit(req('r1')), /policy bookkeeping failed/);
    assert.deepEqual(inFlight(client), [0, 0]);
    assert.equal(client.registeredCount, 0);
    fail = false;
    const s = await client.submit(req('r2'));
    assert.deepEqual(inFlight(client), [1, 0]);
    s.cancel();
    await tick();
    await client.close();
  },
);
