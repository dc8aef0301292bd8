/**
 * What the simulated ranks write (issue #11 part 7): documents valid against JSON schemas (checked with ajv, on the
 * shapes clients send: OpenAI strict schemas, zod output with $defs/$ref, anyOf, enums, formats, bounds), regex and
 * choice matches, tool calls in the prompt's format, quoted tool results, <think> blocks — and the vLLM ranks' ranked
 * logprob candidates.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Ajv } from 'ajv';
import { Prng } from '../../src/sim/prng.js';
import { instanceOf, stringForRegex } from '../../src/sim/schema-instance.js';
import { declaredTools, planResponse } from '../../src/sim/response-plan.js';
import { candidateRow } from '../../src/sim/vllm-wire.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';

const SCHEMAS: Record<string, unknown>[] = [
  {
    type: 'object',
    properties: { name: { type: 'string' }, age: { type: 'integer', minimum: 0, maximum: 120 } },
    required: ['name', 'age'],
    additionalProperties: false,
  },
  {
    $schema: 'http://json-schema.org/draft-07/schema#',
    type: 'object',
    properties: {
      items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 2, maxItems: 4 },
      status: { type: 'string', enum: ['open', 'closed'] },
      when: { type: 'string', format: 'date-time' },
      code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' },
      ratio: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      note: { anyOf: [{ type: 'string', minLength: 12 }, { type: 'null' }] },
      tags: { type: 'array', items: { type: 'string', maxLength: 4 } },
      flag: { type: 'boolean' },
      kind: { const: 'fixed' },
    },
    required: ['items', 'status', 'when', 'code', 'ratio', 'note', 'tags', 'flag', 'kind'],
    additionalProperties: false,
    $defs: {
      item: {
        type: 'object',
        properties: { id: { type: 'integer' }, label: { type: ['string', 'null'] } },
        required: ['id', 'label'],
      },
    },
  },
  {
    type: 'array',
    minItems: 1,
    items: {
      type: 'object',
      anyOf: [
        {
          properties: { name: { type: 'string', enum: ['a'] }, parameters: { type: 'object' } },
          required: ['name', 'parameters'],
        },
      ],
    },
  },
];

test('JSON-schema instances are valid (many seeds) and repeatable', () => {
  const ajv = new Ajv({ strict: false, validateFormats: false });
  for (const schema of SCHEMAS) {
    const { $schema: _s, ...s } = schema;
    const validate = ajv.compile(s);
    for (let seed = 0; seed < 50; seed++) {
      const doc = instanceOf(s, new Prng(seed));
      assert.ok(validate(doc), `seed ${seed}: ${JSON.stringify(doc)} ${JSON.stringify(validate.errors)}`);
    }
    assert.deepEqual(instanceOf(s, new Prng(7)), instanceOf(s, new Prng(7)));
  }
});

test('regex and choice constraints', () => {
  for (let seed = 0; seed < 20; seed++) {
    assert.match(stringForRegex('^[a-z]{2,5}@[0-9]+$', new Prng(seed)), /^[a-z]{2,5}@[0-9]+$/);
    const plan = planResponse(
      '',
      { kind: 'choice', choices: ['red', 'green'] },
      { toolCallFormat: 'hermes', reasoning: true },
      new Prng(seed),
    );
    assert.ok(plan.kind === 'fixed' && ['red', 'green'].includes(plan.text), JSON.stringify(plan));
  }
});

test("tools declared in the prompt are called in the prompt's format; a tool result is quoted", async () => {
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  ];
  const prompt = tokenizer.applyChatTemplate([{ role: 'user', content: 'Use get_time, then get_weather.' }], { tools });
  assert.deepEqual(
    declaredTools(prompt).map((t) => t.name),
    ['get_weather', 'get_time'],
  );
  const hermes = planResponse(prompt, null, { toolCallFormat: 'hermes', reasoning: false }, new Prng(1));
  assert.equal(hermes.kind, 'fixed');
  const calls = [...(hermes as { text: string }).text.matchAll(/<tool_call>\n(.*)\n<\/tool_call>/g)].map((m) =>
    JSON.parse(m[1]!),
  );
  assert.deepEqual(
    calls.map((c) => c.name),
    ['get_time', 'get_weather'],
    'the tools the user named, in order',
  );
  assert.equal(typeof calls[1].arguments.city, 'string');
  const llama = planResponse(prompt, null, { toolCallFormat: 'llama3_json', reasoning: false }, new Prng(1)) as {
    text: string;
  };
  assert.deepEqual(
    llama.text.split('; ').map((c) => JSON.parse(c).name),
    ['get_time', 'get_weather'],
  );
  assert.equal(planResponse(prompt, null, { toolCallFormat: 'none', reasoning: false }, new Prng(1)).kind, 'corpus');
  const after = tokenizer.applyChatTemplate(
    [
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: '12 degrees and sunny' },
    ],
    { tools },
  );
  assert.deepEqual(planResponse(after, null, { toolCallFormat: 'hermes', reasoning: false }, new Prng(1)), {
    kind: 'corpus',
    prefix: 'According to the tool, 12 degrees and sunny.',
  });
});

test('reasoning: a <think> block unless the prompt closed one; continued when the prompt opened it', () => {
  const on = { toolCallFormat: 'hermes' as const, reasoning: true };
  const open = planResponse('<|im_start|>assistant\n', null, on, new Prng(2)) as { prefix: string };
  assert.match(open.prefix, /^<think>\n.+\n<\/think>\n\n$/);
  assert.deepEqual(planResponse('<|im_start|>assistant\n<think>\n\n</think>\n\n', null, on, new Prng(2)), {
    kind: 'corpus',
    prefix: '',
  });
  assert.match(
    (planResponse('x<think>\n', null, on, new Prng(2)) as { prefix: string }).prefix,
    /^[^<]+\n<\/think>\n\n$/,
  );
});

test('vLLM candidates: k columns after the sampled token, ranked, the sampled token first or second', () => {
  const pool = [10, 11, 12, 13, 14, 15];
  for (const [id, lp] of [
    [11, -0.2],
    [12, -1.5],
    [4, -3],
  ] as const) {
    const row = candidateRow(id, lp, 3, pool);
    assert.equal(row.ids.length, 4);
    assert.equal(row.ids[0], id);
    const cand = row.ids.slice(1);
    assert.equal(new Set(cand).size, cand.length, 'distinct candidates');
    const lps = row.logprobs.slice(1);
    assert.deepEqual(
      [...lps].sort((a, b) => b - a),
      lps,
      'rank order',
    );
    assert.ok(lps.every((x) => x <= 0));
    assert.equal(cand.indexOf(id) + 1 || row.rank, row.rank, 'the reported rank is where the sampled token stands');
  }
  assert.deepEqual(candidateRow(3, -1, 0, pool), { ids: [3], logprobs: [-1], rank: 1 });
  assert.deepEqual(
    candidateRow(3, -1, 5, [3]).ids,
    [3, 3],
    'a pool without other tokens: the sampled token alone (no hang)',
  );
});

test(
  'hostile constraints never make a rank drop or wedge a request: recursive $refs, huge counts, huge or invalid regexes',
  { timeout: 20_000 },
  () => {
    // A dropped ADD leaves the request silent until the rank is stalled (60 s by default), and a stalled TokenSpeed rank
    // whose requests were aborted never speaks again: two such requests took every simulated rank out of rotation.
    const prng = new Prng(1);
    for (const schema of [
      { $ref: '#' },
      { type: 'object', properties: { next: { $ref: '#' } }, required: ['next'] },
      { $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' },
    ]) {
      assert.doesNotThrow(() => instanceOf(schema, prng), JSON.stringify(schema));
    }
    const big = JSON.stringify(
      instanceOf({ type: 'array', minItems: 10_000_000, items: { type: 'string', minLength: 10_000_000 } }, prng),
    );
    assert.ok(big.length < 10_000_000, `a best effort of bounded size (${big.length} characters)`);
    const behaviour = { toolCallFormat: 'hermes' as const, reasoning: false };
    for (const constraint of [
      { kind: 'regex' as const, pattern: '(' },
      { kind: 'regex' as const, pattern: 'a{100000000}' },
      { kind: 'regex' as const, pattern: 'b{2,100000000}' },
      { kind: 'json' as const, schema: { $ref: '#' } },
    ]) {
      const plan = planResponse('hello', constraint, behaviour, new Prng(2));
      assert.ok(plan.kind === 'corpus' || plan.text.length < 100_000, JSON.stringify(constraint));
    }
  },
);
