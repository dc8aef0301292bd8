/**
 * Tokenizer work off the event loop, bounded (issue 9 item 3, issue 26 part 5; tokenizer/off-loop.ts): large texts
 * are tokenized on a worker thread while the loop keeps running timers, with the ids of the main thread's `encode`,
 * and a small text at once without a promise; decode and chat rendering give the main thread's results and errors;
 * the queue refuses past its job and character bounds (`queue-full`), drops a waiting job whose signal aborted (never
 * run) and throws away the result of a running one, or ends its worker when it is large; a closed queue refuses.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../helpers/async.js';
import { ChatTemplateError, OffLoopError } from '../../src/tokenizer/errors.js';
import {
  DECODE_CHARS_PER_ID,
  OFF_LOOP_ENCODE_MIN_CHARS,
  OFF_LOOP_RESTART_MIN_CHARS,
  OffLoopTokenizer,
  RENDER_CHARS_PER_MESSAGE,
} from '../../src/tokenizer/off-loop.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';

const SENTENCE = 'The river runs past the old mill 🌊, and the weather turns as the evening comes. ';
/** ~100k tokens: about a quarter of a second or more of tokenizer work. */
const BIG = SENTENCE.repeat(Math.ceil(400_000 / SENTENCE.length));

/** A signal the test aborts by hand (the part of AbortSignal the queue uses). */
function handSignal() {
  const ctl = new AbortController();
  return { signal: ctl.signal, abort: () => ctl.abort() };
}

/** The `OffLoopError` kind a promise rejected with (fails on anything else). */
async function rejectionKind(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof OffLoopError, `expected an OffLoopError, got ${String(err)}`);
    return err.kind;
  }
  assert.fail('expected a rejection');
}

describe('off-loop tokenizer', () => {
  let tokenizer: GatewayTokenizer;
  const queues: OffLoopTokenizer[] = [];
  const make = (limits?: { maxJobs: number; maxChars: number }) => {
    const q = new OffLoopTokenizer(tokenizer, limits);
    queues.push(q);
    return q;
  };

  before(async () => {
    tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  });
  after(async () => {
    await Promise.all(queues.map((q) => q.close()));
  });

  test(
    'a large prompt is tokenized on a worker thread while the event loop keeps ticking; the ids are the same',
    { timeout: 120_000 },
    async () => {
      const q = make();
      const small = q.encode('Hello there', { addSpecialTokens: true });
      assert.ok(Array.isArray(small), 'a small text is tokenized synchronously');
      assert.deepEqual(small, tokenizer.encode('Hello there', { addSpecialTokens: true }));
      assert.equal(q.stats().run, 0, 'no worker job for a small text');

      assert.ok(BIG.length >= OFF_LOOP_ENCODE_MIN_CHARS);
      let ticks = 0;
      const timer = setInterval(() => ticks++, 1);
      const started = q.encode(BIG);
      assert.ok(started instanceof Promise, 'a large text is handed to the worker');
      assert.equal(ticks, 0);
      const ids = await started;
      clearInterval(timer);
      assert.ok(ticks >= 2, `timers kept firing while the worker tokenized (${ticks} ticks)`);
      assert.deepEqual(ids, tokenizer.encode(BIG));
      // A second large text reuses the worker (it is loaded once) and gives the same ids too.
      assert.deepEqual(await q.encode(BIG.slice(7)), tokenizer.encode(BIG.slice(7)));
      // The JSON form: the count and the id array's JSON text.
      const asJson = await q.encodeJson(BIG.slice(3), { addSpecialTokens: true });
      const expected = tokenizer.encode(BIG.slice(3), { addSpecialTokens: true });
      assert.equal(asJson.count, expected.length);
      assert.deepEqual(JSON.parse(asJson.json.toString('utf8')), expected);
      assert.deepEqual(q.stats(), {
        queuedJobs: 0,
        queuedChars: 0,
        run: 3,
        started: 3,
        dropped: 0,
        discarded: 0,
        refused: 0,
        restarts: 0,
      });
    },
  );

  test(
    'encodePrompt: a prompt that cannot fit is refused by its size bound or its count, on the worker for a large text',
    { timeout: 120_000 },
    async () => {
      const q = make();
      const small = 'Hello there, river.';
      assert.deepEqual(
        q.encodePrompt(small, { addSpecialTokens: true, maxTokens: 100 }),
        tokenizer.encode(small, { addSpecialTokens: true }),
      );
      assert.deepEqual(q.encodePrompt(' '.repeat(1281), { addSpecialTokens: false, maxTokens: 11 }), {
        tooLong: true,
        tokens: 11,
        bytes: 1281,
      });
      assert.equal(q.stats().run, 0);

      const exact = tokenizer.encode(BIG);
      const bound = tokenizer.minTokenCount(BIG);
      assert.ok(bound < exact.length);
      // The size bound alone refuses it: no tokenizing.
      assert.deepEqual(await q.encodePrompt(BIG, { addSpecialTokens: false, maxTokens: bound }), {
        tooLong: true,
        tokens: bound,
        bytes: Buffer.byteLength(BIG),
      });
      // The bound leaves room, the count does not: the count, and no ids.
      assert.deepEqual(await q.encodePrompt(BIG, { addSpecialTokens: false, maxTokens: exact.length }), {
        tooLong: true,
        tokens: exact.length,
        bytes: null,
      });
      assert.deepEqual(await q.encodePrompt(BIG, { addSpecialTokens: false, maxTokens: exact.length + 1 }), exact);
      assert.equal(q.stats().run, 3, 'each large text was one worker job');
    },
  );

  test('decode and chat rendering give the main thread results and errors', { timeout: 120_000 }, async () => {
    const q = make();
    const ids = tokenizer.encode('Hello 世界 🎉 <|im_end|> and more');
    assert.equal(
      JSON.parse((await q.decodeJson(ids, { skipSpecialTokens: false })).toString('utf8')),
      tokenizer.decode(ids, { skipSpecialTokens: false }),
    );
    assert.equal(JSON.parse((await q.decodeJson(ids)).toString('utf8')), tokenizer.decode(ids));
    await assert.rejects(
      q.decodeJson([1, tokenizer.vocabSize]),
      (err: Error) => err instanceof RangeError && /at index 1/.test(err.message),
    );
    await assert.rejects(q.decodeJson([0.5]), RangeError);

    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    assert.equal(
      await q.render(messages, { addGenerationPrompt: true }),
      tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true }),
    );
    const kwargs = { templateKwargs: { enable_thinking: false } };
    assert.equal(await q.render(messages, kwargs), tokenizer.applyChatTemplate(messages, kwargs));
    // A message the template cannot take: the same ChatTemplateError kind and message as on the main thread.
    await assert.rejects(
      q.render([{ role: 'user', content: 'x' }, 42 as never], {}),
      (err: Error) => err instanceof ChatTemplateError && err.kind === 'render' && /messages\[1\]/.test(err.message),
    );
  });

  test(
    'past its job or character bound the queue refuses; one job always fits an idle queue',
    { timeout: 120_000 },
    async () => {
      const byJobs = make({ maxJobs: 2, maxChars: 100_000_000 });
      const first = byJobs.encode(BIG);
      const second = byJobs.encode(BIG);
      assert.equal(await rejectionKind(byJobs.encode(BIG) as Promise<number[]>), 'queue-full');
      assert.equal(await rejectionKind(byJobs.decodeJson([1, 2, 3])), 'queue-full');
      assert.equal(byJobs.stats().refused, 2);
      await Promise.all([first, second]);
      // Room again once the jobs are done.
      assert.deepEqual(await byJobs.decodeJson([9707]).then((b) => JSON.parse(b.toString())), tokenizer.decode([9707]));

      const byChars = make({ maxJobs: 100, maxChars: BIG.length + 100 });
      // Larger than the bound, but the queue is idle: it runs.
      const alone = byChars.encode(BIG + BIG);
      assert.equal(byChars.stats().queuedChars, 2 * BIG.length);
      assert.equal(await rejectionKind(byChars.encode(BIG.slice(1)) as Promise<number[]>), 'queue-full');
      await alone;
      const fits = byChars.encode(BIG);
      // Job sizes: an encode counts its text, a decode its ids × DECODE_CHARS_PER_ID, a render its messages' content.
      assert.equal(await rejectionKind(byChars.decodeJson(new Array(26).fill(1))), 'queue-full');
      const d = byChars.decodeJson(new Array(Math.floor(100 / DECODE_CHARS_PER_ID)).fill(1));
      assert.equal(byChars.stats().queuedChars, BIG.length + 100);
      assert.equal(
        await rejectionKind(
          byChars.render([{ role: 'user', content: 'x'.repeat(100 - RENDER_CHARS_PER_MESSAGE) }], {}),
        ),
        'queue-full',
      );
      await Promise.all([fits, d]);
      assert.deepEqual(byChars.stats(), {
        queuedJobs: 0,
        queuedChars: 0,
        run: 3,
        started: 3,
        dropped: 0,
        discarded: 0,
        refused: 3,
        restarts: 0,
      });
    },
  );

  test(
    'a waiting job whose client left is dropped and never run; a running one has its result thrown away',
    { timeout: 120_000 },
    async () => {
      const q = make();
      const a = handSignal();
      const b = handSignal();
      const c = handSignal();
      const running = q.encode(BIG, { signal: a.signal }) as Promise<number[]>;
      const waiting = q.encode(BIG.slice(1), { signal: b.signal }) as Promise<number[]>;
      const kept = q.encode(BIG.slice(2), { signal: c.signal }) as Promise<number[]>;
      assert.deepEqual(
        { ...q.stats(), run: 0, started: 0 },
        {
          queuedJobs: 3,
          queuedChars: 3 * BIG.length - 3,
          run: 0,
          started: 0,
          dropped: 0,
          discarded: 0,
          refused: 0,
          restarts: 0,
        },
      );
      // The running job has started (the worker said so): from then on it cannot be skipped.
      await waitFor(() => q.stats().started === 1, 'the first job started');
      b.abort();
      assert.equal(await rejectionKind(waiting), 'cancelled');
      assert.equal(q.stats().dropped, 1);
      assert.equal(q.stats().queuedChars, 2 * BIG.length - 2, 'the dropped job holds no place');
      a.abort();
      // The client of the running job hears at once; the worker still holds the job until it answers.
      assert.equal(await rejectionKind(running), 'cancelled');
      assert.equal(q.stats().discarded, 1);
      assert.deepEqual(await kept, tokenizer.encode(BIG.slice(2)));
      assert.deepEqual(q.stats(), {
        queuedJobs: 0,
        queuedChars: 0,
        run: 2,
        started: 2,
        dropped: 1,
        discarded: 1,
        refused: 0,
        restarts: 0,
      });
      // A signal already aborted: refused before it is queued.
      assert.equal(await rejectionKind(q.encode(BIG, { signal: a.signal }) as Promise<number[]>), 'cancelled');
      assert.equal(q.stats().run, 2);
    },
  );

  test(
    'a large running job whose client left ends its worker; the next job runs on a new one',
    { timeout: 120_000 },
    async () => {
      const q = make();
      const huge = BIG.repeat(Math.ceil(OFF_LOOP_RESTART_MIN_CHARS / BIG.length));
      assert.ok(huge.length >= OFF_LOOP_RESTART_MIN_CHARS);
      const a = handSignal();
      const running = q.encode(huge, { signal: a.signal }) as Promise<number[]>;
      const next = q.encode(BIG.slice(5)) as Promise<number[]>;
      assert.equal(q.stats().queuedJobs, 2);
      await waitFor(() => q.stats().started === 1, 'the large job started');
      a.abort();
      assert.equal(await rejectionKind(running), 'cancelled');
      // At once: the abandoned job no longer counts, and the waiting one went to a new worker.
      assert.deepEqual(q.stats(), {
        queuedJobs: 1,
        queuedChars: BIG.length - 5,
        run: 2,
        started: 1,
        dropped: 0,
        discarded: 1,
        refused: 0,
        restarts: 1,
      });
      assert.deepEqual(await next, tokenizer.encode(BIG.slice(5)));
      // A smaller abandoned job is left to finish (its result thrown away): no restart.
      const b = handSignal();
      const small = q.encode(BIG, { signal: b.signal }) as Promise<number[]>;
      await waitFor(() => q.stats().started === 3, 'the smaller job started');
      b.abort();
      assert.equal(await rejectionKind(small), 'cancelled');
      assert.deepEqual(await q.encode(BIG.slice(9)), tokenizer.encode(BIG.slice(9)));
      assert.equal(q.stats().restarts, 1);
    },
  );

  test(
    'a job whose client left before the worker started it (still loading) is skipped there; the worker stays',
    { timeout: 120_000 },
    async () => {
      const q = make();
      const a = handSignal();
      // A new queue: its worker is loading the tokenizer when the job is handed to it.
      const first = q.encode(BIG, { signal: a.signal }) as Promise<number[]>;
      const second = q.encode(BIG.slice(11)) as Promise<number[]>;
      await new Promise((r) => setImmediate(r)); // a job this large is posted in a turn of its own (OFF_LOOP_OWN_TURN_MIN_CHARS)
      assert.equal(q.stats().run, 1);
      a.abort();
      assert.equal(await rejectionKind(first), 'cancelled');
      assert.deepEqual(await second, tokenizer.encode(BIG.slice(11)));
      // Whether the cancel came in time depends on the load; either way the worker was kept and only the second ran.
      const s = q.stats();
      assert.equal(s.restarts, 0);
      assert.equal(s.discarded, 1);
      assert.equal(s.run, 2);
      assert.ok(s.started === 1 || s.started === 2, JSON.stringify(s));
    },
  );

  test('a closed queue fails what it holds and refuses later jobs', { timeout: 120_000 }, async () => {
    const q = make();
    const running = q.encode(BIG) as Promise<number[]>;
    const waiting = q.encode(BIG) as Promise<number[]>;
    const kinds = Promise.all([rejectionKind(running), rejectionKind(waiting)]);
    await q.close();
    assert.deepEqual(await kinds, ['worker-failed', 'worker-failed']);
    assert.equal(await rejectionKind(q.encode(BIG) as Promise<number[]>), 'worker-failed');
    assert.throws(() => new OffLoopTokenizer(tokenizer, { maxJobs: 0, maxChars: 1 }), RangeError);
  });
});
