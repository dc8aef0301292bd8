/**
 * validator-compiler.ts: a route's request validator compiles on its first request, once per process across apps,
 * and validates exactly as fastify's default (eager) compiler does.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Fastify from 'fastify';
import { buildLazyValidator } from '../../src/server/validator-compiler.js';

const SCHEMA = {
  type: 'object',
  required: ['model'],
  properties: { model: { type: 'string' }, n: { type: 'integer', minimum: 1 } },
} as const;

/**
 * An app with one validated POST route. `lazy`: our compiler, with ajv options unique to `tag` so this file's pool
 * entry is its own and `onCreate` sees its ajv instance; else fastify's default compiler with the same options.
 */
function app(lazy: boolean, tag: string, onCompile: () => void) {
  const customOptions = { removeAdditional: false, coerceTypes: false, useDefaults: false, keywords: [`x-${tag}`] };
  const f = Fastify({
    ajv: {
      customOptions,
      onCreate: (ajv) => {
        const compile = ajv.compile.bind(ajv);
        ajv.compile = ((schema: unknown) => {
          onCompile();
          return compile(schema as object);
        }) as typeof ajv.compile;
      },
    },
    ...(lazy ? { schemaController: { compilersFactory: { buildValidator: buildLazyValidator } } } : {}),
  });
  f.post('/v', { schema: { body: SCHEMA } }, () => ({ ok: true }));
  return f;
}

const post = (f: ReturnType<typeof app>, body: unknown) =>
  f.inject({
    method: 'POST',
    url: '/v',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify(body),
  });

test('compiled on the first request, once for every app of the process', { timeout: 10_000 }, async (t) => {
  let compiles = 0;
  const a = app(true, 'lazy-shared', () => compiles++);
  const b = app(true, 'lazy-shared', () => compiles++);
  t.after(() => Promise.all([a.close(), b.close()]));
  await Promise.all([a.ready(), b.ready()]);
  assert.equal(compiles, 0, 'nothing compiles while the apps start');
  assert.equal((await post(a, { model: 'm' })).statusCode, 200);
  assert.equal(compiles, 1);
  assert.equal((await post(b, { model: 'm', n: 2 })).statusCode, 200);
  assert.equal((await post(a, { model: 'm' })).statusCode, 200);
  assert.equal(compiles, 1, 'the second app and later requests reuse the compiled validator');
});

test('answers what the eager compiler answers, valid and invalid bodies alike', { timeout: 10_000 }, async (t) => {
  let eagerCompiles = 0;
  const lazy = app(true, 'lazy-equal', () => undefined);
  const eager = app(false, 'eager-equal', () => eagerCompiles++);
  t.after(() => Promise.all([lazy.close(), eager.close()]));
  await Promise.all([lazy.ready(), eager.ready()]);
  assert.equal(eagerCompiles, 1, 'the default compiler compiles when the app starts (the cost this module defers)');
  const bodies: unknown[] = [{ model: 'm' }, {}, { model: 5 }, { model: 'm', n: 0 }, { model: 'm', n: 1.5 }, [], null];
  for (const body of bodies) {
    const [l, e] = await Promise.all([post(lazy, body), post(eager, body)]);
    assert.equal(l.statusCode, e.statusCode, JSON.stringify(body));
    assert.equal(l.body, e.body, JSON.stringify(body));
  }
  // An invalid body after a valid one: the errors of this call, not a stale or missing list.
  const bad = await post(lazy, { model: 'm', n: -1 });
  assert.equal(bad.statusCode, 400);
  assert.match(bad.body, /body\/n must be >= 1/);
});

test('a headers schema is refused when the app starts (fastify would not lowercase it for this compiler)', async () => {
  const f = Fastify({ schemaController: { compilersFactory: { buildValidator: buildLazyValidator } } });
  f.get(
    '/h',
    { schema: { headers: { type: 'object', required: ['X-Api-Version'], properties: { 'X-Api-Version': {} } } } },
    () => ({}),
  );
  await assert.rejects(async () => {
    await f.ready();
  }, /GET \/h: a headers schema is not supported/);
  await f.close();
});
