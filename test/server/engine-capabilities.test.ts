/**
 * What each engine family can serve (engine-capabilities.ts): `allowed_token_ids` rides vLLM's wire only (issue 31
 * part 4), top logprobs beyond the sampled token too; a vLLM group serves both.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { capabilityProblem, type OutputNeeds } from '../../src/server/engine-capabilities.js';

const plain: OutputNeeds = {
  topLogprobs: null,
  logprobsParam: 'logprobs',
  structuredOutput: null,
  structuredOutputParam: 'response_format',
  allowedTokenIds: false,
};

test('allowed_token_ids: served by vLLM groups, refused by name on TokenSpeed groups', () => {
  assert.equal(capabilityProblem('tokenspeed', plain), null);
  assert.equal(capabilityProblem('vllm', { ...plain, allowedTokenIds: true }), null);
  const p = capabilityProblem('tokenspeed', { ...plain, allowedTokenIds: true });
  assert.equal(p?.param, 'allowed_token_ids');
  assert.match(p!.message, /TokenSpeed's request has no such field/);
  assert.equal(capabilityProblem('tokenspeed', { ...plain, topLogprobs: 5 })?.param, 'logprobs');
});
