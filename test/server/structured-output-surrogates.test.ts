/**
 * A structured-output string with a lone surrogate (valid JSON, e.g. `"\udc00"`, but not encodable as UTF-8) is bad
 * input: a 400 naming the parameter, and nothing is submitted. Found by the streaming-path hostile tests: through a
 * real engine client, `guided_regex`, `guided_choice`, `guided_grammar`, `structured_outputs.regex`, a raw (non-JSON)
 * schema string and `guided_whitespace_pattern` reached the wire encoder (wire/writer.ts refuses lone surrogates) and
 * came back as a 500 `server_error` with code `encode` (CONTRIBUTING.md: a malformed body is a 4xx, never a 500). A paired
 * surrogate (an emoji) stays accepted.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { useApp } from './helpers.js';

const LONE = '\udc00';
const CASES: Array<[string, Record<string, unknown>]> = [
  ['guided_regex', { guided_regex: `a${LONE}` }],
  ['guided_choice', { guided_choice: ['ok', `x${LONE}`] }],
  ['guided_grammar', { guided_grammar: `root ::= "${LONE}"` }],
  ['structured_outputs.regex', { structured_outputs: { regex: `${LONE}b` } }],
  ['structured_outputs.choice', { structured_outputs: { choice: [`\ud800`] } }],
  ['guided_json', { guided_json: `not json ${LONE}` }],
  ['guided_whitespace_pattern', { guided_json: { type: 'object' }, guided_whitespace_pattern: `[ ${LONE}]*` }],
];

describe('structured-output strings with lone surrogates', () => {
  const fx = useApp();

  test('are a 400 naming the parameter, never submitted', async () => {
    for (const [param, extra] of CASES) {
      for (const url of ['/v1/completions', '/v1/chat/completions']) {
        const base = url === '/v1/completions' ? { prompt: 'x' } : { messages: [{ role: 'user', content: 'x' }] };
        const before = fx.backend.submissions.length;
        fx.backend.onSubmit = (s) => s.stream.push([1], 'length');
        const res = await fx.app.inject({
          method: 'POST',
          url,
          payload: JSON.stringify({ ...base, max_tokens: 1, ...extra }),
          headers: { 'content-type': 'application/json' },
        });
        assert.equal(res.statusCode, 400, `${url} ${param}: ${res.body}`);
        const err = res.json().error;
        assert.equal(err.type, 'invalid_request_error', `${url} ${param}`);
        assert.equal(err.param, param, `${url} ${param}`);
        assert.equal(fx.backend.submissions.length, before, `${url} ${param}: submitted`);
      }
    }
  });

  test('a paired surrogate (emoji) is accepted', async () => {
    fx.backend.onSubmit = (s) => s.stream.push([1], 'length');
    const res = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', max_tokens: 1, guided_choice: ['🐉', '龍'] },
    });
    assert.equal(res.statusCode, 200, res.body);
  });
});
