/**
 * bench:throughput's SSE content-event counter (bench/throughput/sse-scan.ts): it counts what `JSON.parse` of every
 * record would (a content event = non-empty first-choice text), across any split of the body into reads, and still
 * reports error events, unparseable records, `[DONE]` and the usage chunk's `completion_tokens`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_RECORD_BYTES, SseEventScanner } from '../../bench/throughput/sse-scan.js';

const base = {
  id: 'chatcmpl-4f1c0e9a2b3d4c5e6f708192a3b4c5d6',
  object: 'chat.completion.chunk',
  created: 1764000000,
  model: 'qwen3',
  system_fingerprint: 'fp_0',
};
const chat = (delta: Record<string, unknown>, finish: string | null = null): Record<string, unknown> => ({
  ...base,
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  usage: null,
});
const record = (data: unknown): string => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

/** A chat stream with every record shape the gateway sends (the content events are marked). */
const CHAT: Array<{ data: unknown; content: boolean }> = [
  { data: chat({ role: 'assistant', content: '' }), content: false },
  { data: chat({ content: 'Hello' }), content: true },
  { data: chat({ content: ' "quoted" \\ text with "content":"" inside' }), content: true },
  { data: chat({ content: '"' }), content: true },
  { data: chat({ reasoning_content: 'thinking', content: '' }), content: false },
  { data: chat({ reasoning_content: 'thinking' }), content: false },
  {
    data: chat({
      content: null,
      tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"content":"x"}' } }],
    }),
    content: false,
  },
  { data: chat({ content: 'ünïcödé 🙂' }), content: true },
  {
    data: {
      ...chat({ content: 'x' }),
      choices: [
        {
          index: 0,
          delta: { content: 'x' },
          logprobs: { content: [{ token: 'x', logprob: -0.1, bytes: [120], top_logprobs: [] }] },
          finish_reason: null,
        },
      ],
    },
    content: true,
  },
  { data: chat({}, 'length'), content: false },
  { data: chat({ content: 'last' }, 'stop'), content: true },
  {
    data: { ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } },
    content: false,
  },
];

/** What the generator judged before the scanner: `JSON.parse` of every record. */
function parsedContent(data: unknown): boolean {
  const c = (
    JSON.parse(JSON.stringify(data)) as { choices?: Array<{ delta?: { content?: string | null }; text?: string }> }
  ).choices?.[0];
  return (c?.delta?.content ?? c?.text ?? '') !== '';
}

const body = CHAT.map((r) => record(r.data)).join('') + record('[DONE]');
const expected = CHAT.filter((r) => r.content).length;

test('the records of the sample stream are judged as JSON.parse judges them', () => {
  for (const r of CHAT) assert.equal(parsedContent(r.data), r.content, JSON.stringify(r.data));
});

function scan(reads: Buffer[]): { events: number; errors: string[]; scanner: SseEventScanner } {
  const scanner = new SseEventScanner();
  const errors: string[] = [];
  let events = 0;
  for (const read of reads) events += scanner.feed(read, (m) => errors.push(m));
  return { events, errors, scanner };
}

test('a whole chat stream in one read: content events, [DONE] and the usage', () => {
  const { events, errors, scanner } = scan([Buffer.from(body)]);
  assert.equal(events, expected);
  assert.deepEqual(errors, []);
  assert.equal(scanner.done, true);
  assert.equal(scanner.completionTokens, 7);
});

test('split across reads at every byte (multi-byte characters and the blank line included), the count is the same', () => {
  const bytes = Buffer.from(body);
  for (let cut = 1; cut < bytes.length; cut++) {
    const { events, errors, scanner } = scan([bytes.subarray(0, cut), bytes.subarray(cut)]);
    assert.equal(events, expected, `cut at ${cut}`);
    assert.deepEqual(errors, []);
    assert.ok(scanner.done && scanner.completionTokens === 7, `cut at ${cut}`);
  }
  // One byte per read.
  const single = scan([...bytes].map((b) => Buffer.from([b])));
  assert.equal(single.events, expected);
  assert.equal(single.scanner.done, true);
});

test('an event completed by a read is counted by that read, not before', () => {
  const scanner = new SseEventScanner();
  const first = record(chat({ content: 'a' }));
  assert.equal(
    scanner.feed(Buffer.from(first.slice(0, -1)), () => {}),
    0,
  );
  assert.equal(
    scanner.feed(
      Buffer.from(`\n${record(chat({ content: 'b' }))}${record(chat({ content: 'c' })).slice(0, 20)}`),
      () => {},
    ),
    2,
  );
  assert.equal(
    scanner.feed(Buffer.from(record(chat({ content: 'c' })).slice(20)), () => {}),
    1,
  );
});

test('completions text chunks count like chat content', () => {
  const text = (t: string): Record<string, unknown> => ({
    ...base,
    object: 'text_completion',
    choices: [{ index: 0, text: t, logprobs: null, finish_reason: null }],
    usage: null,
  });
  const { events } = scan([
    Buffer.from(record(text('')) + record(text('one')) + record(text(' two')) + record('[DONE]')),
  ]);
  assert.equal(events, 2);
});

test('an error event, an unparseable record and a record that is not an object are reported; a stream without [DONE] and usage is visible', () => {
  const error = { error: { message: 'engine rank 1 died', type: 'internal_error', param: null, code: 500 } };
  const { events, errors, scanner } = scan([
    Buffer.from(record(chat({ content: 'a' })) + record(error) + record('{"id": truncated') + record('null')),
  ]);
  assert.equal(events, 1);
  assert.equal(errors.length, 3);
  assert.match(errors[0]!, /mid-stream error: engine rank 1 died/);
  assert.match(errors[1]!, /unparseable SSE record/);
  assert.match(errors[2]!, /not a JSON object/);
  assert.equal(scanner.done, false);
  assert.equal(scanner.completionTokens, -1);
});

test('a chunk in another layout (spaces, no usage key) is judged by JSON.parse', () => {
  const spaced = `data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n`;
  const noUsage = record({ ...base, choices: [{ index: 0, delta: { content: '' }, finish_reason: null }] });
  const { events, errors } = scan([Buffer.from(spaced + noUsage)]);
  assert.equal(events, 1);
  assert.deepEqual(errors, []);
});

test('a record that never ends is dropped and reported once it passes MAX_RECORD_BYTES, not kept growing', () => {
  const scanner = new SseEventScanner();
  const errors: string[] = [];
  const piece = Buffer.alloc(64 * 1024, 'x');
  assert.equal(
    scanner.feed(Buffer.from('data: {"id":"'), (m) => errors.push(m)),
    0,
  );
  for (let k = 0; k * piece.length < MAX_RECORD_BYTES; k++) scanner.feed(piece, (m) => errors.push(m));
  assert.equal(errors.length, 1);
  assert.match(errors[0]!, /longer than/);
  assert.equal((scanner as unknown as { pending: Buffer | null }).pending, null);
});
