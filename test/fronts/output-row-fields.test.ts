/**
 * One field list for output rows (src/protocols/types.ts `OUTPUT_ROW_FIELDS`, issue 28): every hand-written copy of a
 * row on the per-token path carries every field of the table. A row with every field set crosses the request stream
 * (`deliver`: iterated, listened, and in row mode) and the channel's OUT record (written from an output and from a
 * row, read in place and from a generic tuple) whole; each optional field alone arrives alone, and none arrives as
 * none (absent, not undefined). `FULL` is typed over the table, so a field added there does not compile here until it
 * has a value, and then a copy that drops it fails here.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RequestStreamImpl } from '../../src/engine-client/request-stream.js';
import { decodeDown } from '../../src/fronts/channel/decode.js';
import { DownMessage } from '../../src/fronts/channel/messages.js';
import { OUT_ELEMENT, Tag, type WireOutput } from '../../src/fronts/channel/records.js';
import {
  OUTPUT_ROW_FIELDS,
  type EngineOutput,
  type EngineOutputBase,
  type OutputRowField,
} from '../../src/protocols/types.js';

/** Every field set, each to a value no other field or default has (a copy that swaps two fields shows too). */
const FULL: { [F in OutputRowField]-?: Exclude<EngineOutput[F], undefined> } = {
  requestId: 'req-7',
  newTokenIds: [5, 300, 70_000],
  finishReason: 'stop',
  logprobs: [-0.25, -1.5, Number.NEGATIVE_INFINITY],
  promptTokens: 11,
  completionTokens: 13,
  cachedTokens: 3,
  stopReason: 'END',
  topLogprobs: [
    [
      { id: 5, logprob: -0.25 },
      { id: 9, logprob: -2 },
    ],
    [{ id: 300, logprob: -1.5 }],
    [{ id: 70_000, logprob: Number.NEGATIVE_INFINITY }],
  ],
  pooled: Float32Array.of(0.5, -1.25, 3),
};

const FIELDS = Object.keys(OUTPUT_ROW_FIELDS) as OutputRowField[];
const OPTIONAL = FIELDS.filter((f) => OUTPUT_ROW_FIELDS[f] === 'optional');

/** `FULL` with only the optional fields in `keep` (the rest absent). */
function rowWith(keep: readonly OutputRowField[]): EngineOutput {
  const row: Record<string, unknown> = { ...FULL };
  for (const f of OPTIONAL) if (!keep.includes(f)) delete row[f];
  return row as unknown as EngineOutput;
}

/** The optional-field cases: all set, each alone, none. */
const CASES: Array<{ name: string; row: EngineOutput }> = [
  { name: 'every field', row: rowWith(OPTIONAL) },
  ...OPTIONAL.map((f) => ({ name: `only ${f} of the optional fields`, row: rowWith([f]) })),
  { name: 'no optional field', row: rowWith([]) },
];

/** What a copy of `row` must hold: each field as `row` has it, an absent optional field absent. */
function assertCarries(got: object, row: EngineOutput, what: string, requestId = row.requestId): void {
  const g = got as Record<string, unknown>;
  const r = row as unknown as Record<string, unknown>;
  for (const f of FIELDS) {
    const expected = f === 'requestId' ? requestId : r[f];
    if (expected === undefined) assert.equal(f in g, false, `${what}: ${f} absent stays absent`);
    else assert.deepEqual(g[f], expected, `${what}: ${f}`);
  }
  assert.deepEqual(Object.keys(g).sort(), Object.keys({ ...r, requestId }).sort(), `${what}: no other field`);
}

test('the table names the fields of an output row, and FULL sets each', () => {
  assert.deepEqual(Object.keys(FULL).sort(), [...FIELDS].sort());
  // Each optional field is one FULL has and every copy must keep absent when absent.
  assert.ok(OPTIONAL.length > 0);
});

test('the request stream copies every field of a row into its output (iterated, listened), and row mode hands the row itself', async () => {
  for (const { name, row } of CASES) {
    const iterated = new RequestStreamImpl(row.requestId, 1, () => {});
    iterated.deliver(row);
    const first = await iterated[Symbol.asyncIterator]().next();
    assert.equal(first.done, false);
    assertCarries(first.value as EngineOutput, row, `iterated, ${name}`);
    for (const f of FIELDS) {
      // By reference: the stream builds no copy of a list.
      if (OUTPUT_ROW_FIELDS[f] !== 'count') assert.equal((first.value as EngineOutput)[f], row[f], `${name}: ${f}`);
    }

    const listened = new RequestStreamImpl(row.requestId, 1, () => {});
    const heard: EngineOutput[] = [];
    listened.listen({ output: (o) => heard.push(o), error: (e) => assert.fail(e) });
    listened.deliver(row);
    assert.equal(heard.length, 1);
    assertCarries(heard[0]!, row, `listened, ${name}`);

    const rows = new RequestStreamImpl(row.requestId, 1, () => {});
    const handed: Array<[EngineOutputBase, number, number, number]> = [];
    rows.listenRows({ row: (r, p, c, k) => handed.push([r, p, c, k]), error: (e) => assert.fail(e) });
    rows.deliver(row);
    assert.equal(handed.length, 1);
    assert.equal(handed[0]![0], row, `row mode hands the row itself, ${name}`);
    assert.deepEqual(handed[0]!.slice(1), [row.promptTokens, row.completionTokens, row.cachedTokens]);
  }
});

/** The OUT record `write` appends, decoded by the in-place reader and (its tag re-encoded as a uint8) the tuple one. */
function bothReaders(write: (m: DownMessage) => void): [inPlace: EngineOutput, viaTuple: EngineOutput] {
  const m = new DownMessage();
  write(m);
  const bytes = m.finish();
  // The message: an array32 header (5 bytes), then the record: its list header, then its fixint tag.
  assert.equal(bytes[6], Tag.OUT);
  const longTag = Uint8Array.from([...bytes.subarray(0, 6), 0xcc, ...bytes.subarray(6)]);
  const outputOf = (b: Uint8Array): EngineOutput => {
    const [r] = decodeDown(b);
    assert.ok(r !== undefined && r.tag === Tag.OUT);
    assert.equal(r.handle, 42);
    return r.output;
  };
  return [outputOf(bytes), outputOf(longTag)];
}

test("the channel's OUT record carries every field but the request id (the handle names it), both ways, through both readers", () => {
  for (const f of FIELDS) {
    assert.equal(OUT_ELEMENT[f] === null, OUTPUT_ROW_FIELDS[f] === 'id', `${f}: only the id has no element`);
  }
  for (const { name, row } of CASES) {
    const { requestId: _id, ...wire } = row;
    const fromOutput = bothReaders((m) => m.out(42, wire satisfies WireOutput));
    // Row mode: the counts are the stream's, not the row's (a row's own may be null).
    const engineRow = { ...row, promptTokens: null, completionTokens: null, cachedTokens: null };
    const fromRow = bothReaders((m) =>
      m.outRow(42, engineRow, row.promptTokens, row.completionTokens, row.cachedTokens),
    );
    for (const [how, got] of [
      ['out, read in place', fromOutput[0]],
      ['out, read from a tuple', fromOutput[1]],
      ['outRow, read in place', fromRow[0]],
      ['outRow, read from a tuple', fromRow[1]],
    ] as const) {
      assertCarries(got, row, `${how}, ${name}`, '');
    }
  }
});
