/**
 * generation-run.ts: the synchronous merge of a request's choices: arrival order with indexes, exactly one end,
 * cancellation of every unfinished stream on a failure, stop strings cancel their stream, pause holds outputs in order,
 * and streams without push mode (an async iterator) behave the same.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { OutputListener } from '../../src/engine-client/request-stream.js';
import type { EngineOutput, FinishReason } from '../../src/protocols/types.js';
import { ApiError } from '../../src/server/errors.js';
import { ChoiceGeneration, ClientDisconnectedError, type GenerationEvent } from '../../src/server/generation.js';
import { GenerationRun, type RunChoice } from '../../src/server/generation-run.js';
import { StopStringMatcher } from '../../src/tokenizer/stop-matcher.js';
import { FakeStream } from './fake-backend.js';

/** A push-mode stream: `emit` hands an output to the listener at once (as the engine client's dispatcher does). */
class PushStream {
  readonly engineIndex = 0;
  listener: OutputListener | null = null;
  cancelled = 0;
  private completion = 0;
  constructor(readonly requestId: string) {}
  listen(l: OutputListener): void {
    this.listener = l;
  }
  cancel(): void {
    this.cancelled++;
  }
  emit(ids: number[], finish: FinishReason | null = null): void {
    this.completion += ids.length;
    const o: EngineOutput = {
      requestId: this.requestId,
      newTokenIds: ids,
      finishReason: finish,
      promptTokens: 3,
      completionTokens: this.completion,
      cachedTokens: 0,
      logprobs: [],
    };
    this.listener!.output(o);
  }
  [Symbol.asyncIterator](): AsyncIterator<EngineOutput> {
    throw new Error('push mode only');
  }
}

/** Token id i → letter 'a' + i. */
const letters = {
  push: (ids: readonly number[]) => ids.map((i) => String.fromCharCode(97 + i)).join(''),
  finish: () => '',
};

function choice(stream: PushStream | FakeStream, stops: string[] = []): RunChoice {
  const generation = new ChoiceGeneration({
    requestId: stream.requestId,
    detokenizer: letters,
    stopTokenIds: new Set([25]),
    promptTokens: 3,
    stopMatcher: new StopStringMatcher(stops),
  });
  return { stream, generation };
}

const describeEv = (i: number, e: GenerationEvent) =>
  `${i}:${e.type}:${e.text}${e.type === 'finish' ? `:${e.finishReason}` : ''}`;

test('events in exact arrival order across choices, synchronously; done resolves after the last finish', async () => {
  const s = [new PushStream('r-0'), new PushStream('r-1')];
  const log: string[] = [];
  const run = new GenerationRun(
    s.map((x) => choice(x)),
    (i, e) => log.push(describeEv(i, e)),
  );
  run.start();
  s[1]!.emit([0]);
  s[0]!.emit([1, 2]);
  assert.deepEqual(log, ['1:delta:a', '0:delta:bc'], 'delivered inside emit, no tick needed');
  s[0]!.emit([3], 'length');
  assert.equal(run.ended, false);
  s[1]!.emit([25], 'stop'); // a stop token id: counted, its text dropped
  assert.equal(run.ended, true);
  await run.done;
  assert.deepEqual(log, ['1:delta:a', '0:delta:bc', '0:finish:d:length', '1:finish::stop']);
  assert.deepEqual(
    s.map((x) => x.cancelled),
    [0, 0],
    'finished streams are not cancelled',
  );
});

test('a stop string finishes its choice and cancels that stream only; later outputs of it are ignored', async () => {
  const s = [new PushStream('r-0'), new PushStream('r-1')];
  const log: string[] = [];
  const run = new GenerationRun([choice(s[0]!, ['cd']), choice(s[1]!)], (i, e) => log.push(describeEv(i, e)));
  run.start();
  s[0]!.emit([1, 2, 3]);
  assert.equal(s[0]!.cancelled, 1);
  s[0]!.emit([4]);
  s[1]!.emit([0], 'stop');
  await run.done;
  assert.deepEqual(log, ['0:finish:b:stop', '1:finish:a:stop']);
  assert.equal(s[1]!.cancelled, 0);
});

test('a failure (disconnect) ends the run once and cancels every unfinished stream; an engine error does too', async () => {
  const s = [new PushStream('r-0'), new PushStream('r-1'), new PushStream('r-2')];
  const run = new GenerationRun(
    s.map((x) => choice(x)),
    () => {},
  );
  run.start();
  s[2]!.emit([0], 'stop');
  run.fail(new ClientDisconnectedError());
  run.fail(new Error('second'));
  await assert.rejects(run.done, ClientDisconnectedError);
  assert.deepEqual(
    s.map((x) => x.cancelled),
    [1, 1, 0],
  );
  s[0]!.emit([1]); // ignored after the end

  const t = [new PushStream('q-0'), new PushStream('q-1')];
  const run2 = new GenerationRun(
    t.map((x) => choice(x)),
    () => {},
  );
  run2.start();
  t[0]!.emit([1], 'error');
  await assert.rejects(run2.done, (e: unknown) => e instanceof ApiError && e.statusCode === 500);
  assert.deepEqual(
    t.map((x) => x.cancelled),
    [0, 1],
    'the failed choice is retired by the engine; the other is aborted',
  );

  const u = [new PushStream('u-0')];
  const run3 = new GenerationRun(
    u.map((x) => choice(x)),
    () => {},
  );
  run3.start();
  u[0]!.listener!.error(new Error('engine dead'));
  await assert.rejects(run3.done, /engine dead/);
  assert.equal(u[0]!.cancelled, 0);
});

test('a sink that throws fails the run with that error and cancels the streams', async () => {
  const s = [new PushStream('r-0'), new PushStream('r-1')];
  const run = new GenerationRun(
    s.map((x) => choice(x)),
    () => {
      throw new RangeError('sink bug');
    },
  );
  run.start();
  s[0]!.emit([1]);
  await assert.rejects(run.done, RangeError);
  assert.deepEqual(
    s.map((x) => x.cancelled),
    [1, 1],
  );
});

test('pause holds outputs (and a failure) in arrival order; resume replays them, stopping if paused again', async () => {
  const s = [new PushStream('r-0'), new PushStream('r-1')];
  const log: string[] = [];
  const run: GenerationRun = new GenerationRun(
    s.map((x) => choice(x)),
    (i, e) => {
      log.push(describeEv(i, e));
      if (e.text === 'b') run.pause();
    },
  );
  run.start();
  run.pause();
  s[0]!.emit([0]);
  s[1]!.emit([1]);
  s[0]!.emit([2], 'stop');
  s[1]!.emit([3], 'stop');
  assert.deepEqual(log, []);
  run.resume();
  assert.deepEqual(log, ['0:delta:a', '1:delta:b'], 'paused again by the sink after b');
  run.resume();
  await run.done;
  assert.deepEqual(log, ['0:delta:a', '1:delta:b', '0:finish:c:stop', '1:finish:d:stop']);
});

test('streams without push mode are read through their iterator; one that ends without a terminal output is a 503', async () => {
  const a = new FakeStream('r-0', 0, 3);
  const b = new FakeStream('r-1', 1, 3);
  const log: string[] = [];
  const run = new GenerationRun([choice(a), choice(b)], (i, e) => log.push(describeEv(i, e)));
  run.start();
  a.push([0]);
  b.push([1], 'length');
  a.push([2], 'stop');
  await run.done;
  assert.deepEqual(log.sort(), ['0:delta:a', '0:finish:c:stop', '1:finish:b:length']);

  const c = new FakeStream('q-0', 0, 3);
  const d = new FakeStream('q-1', 0, 3);
  const run2 = new GenerationRun([choice(c), choice(d)], () => {});
  run2.start();
  c.end();
  await assert.rejects(run2.done, (e: unknown) => e instanceof ApiError && e.statusCode === 503);
  assert.equal(d.isCancelled, true, 'the other choice is aborted');
});
