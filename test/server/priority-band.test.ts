import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../../src/server/errors.js';
import {
  PRIORITY_BANDS,
  parsePriorityBand,
  vllmPriorityOf,
  type PriorityBand,
} from '../../src/server/priority-band.js';

const refused = (fn: () => unknown, status: number, code: string) =>
  assert.throws(fn, (err: unknown) => err instanceof ApiError && err.statusCode === status && err.code === code);

test('bands: most urgent first; the vLLM priority keeps standard at 0 (what every request carried before)', () => {
  assert.deepEqual(PRIORITY_BANDS, ['critical', 'standard', 'sheddable']);
  assert.deepEqual(
    PRIORITY_BANDS.map((b: PriorityBand) => vllmPriorityOf(b)),
    [-1, 0, 1],
  );
});

test('header: absent or empty is the default; a band at or below the ceiling is taken, in any case', () => {
  assert.equal(parsePriorityBand(undefined), 'standard');
  assert.equal(parsePriorityBand('  '), 'standard');
  assert.equal(parsePriorityBand('sheddable'), 'sheddable');
  assert.equal(parsePriorityBand('Standard'), 'standard');
  assert.equal(parsePriorityBand('critical', 'critical'), 'critical');
  assert.equal(parsePriorityBand(undefined, 'critical', 'sheddable'), 'sheddable', "a tenant's own default");
  assert.equal(
    parsePriorityBand(undefined, 'sheddable', 'standard'),
    'sheddable',
    'a default above the ceiling is held to it',
  );
});

test('header: a band above the ceiling is 403, an unknown one 400, both naming the header', () => {
  refused(() => parsePriorityBand('critical'), 403, 'priority_not_allowed');
  refused(() => parsePriorityBand('standard', 'sheddable'), 403, 'priority_not_allowed');
  refused(() => parsePriorityBand('urgent'), 400, 'invalid_priority_band');
  refused(() => parsePriorityBand(['sheddable', 'critical']), 400, 'invalid_priority_band');
  assert.equal(parsePriorityBand('sheddable, sheddable'), 'sheddable', 'the same band sent twice');
  try {
    parsePriorityBand('critical');
  } catch (err) {
    const body = (err as ApiError).toBody();
    assert.equal(body.error.type, 'permission_error');
    assert.equal(body.error.param, 'x-gateway-inference-objective');
  }
});
