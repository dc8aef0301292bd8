/**
 * The KV-event subscriber (src/transport/kv-event-subscriber.ts) over real ZeroMQ, against a test publisher that sends
 * the engines' own frames (test/vectors/kv-events): every PUB payload vector of both engines, live batches in order, a
 * gap closed by a replay from the test's ROUTER (both engines' recorded replies too), the connect replay, a replay the
 * ring overran, a replay with no end marker, a restarted publisher, other topics and garbage.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { pino } from 'pino';
import { Router, XPublisher } from 'zeromq';
import { decodeKvEventBatch, type KvEventBatch } from '../../src/protocols/kv-events/codec.js';
import { KvEventSubscriber, type KvEventSink } from '../../src/transport/kv-event-subscriber.js';
import { waitFor } from '../helpers/async.js';
import { loadRepoVectors } from '../helpers/vectors.js';

const hex = (h: string): Buffer => Buffer.from(h, 'hex');
const vectors = loadRepoVectors('kv-events');
/** vLLM's rank-0 stream, as [seq, frames] in seq order. */
const vllmStream = vectors
  .filter((v) => v.kind === 'KVEventFrames' && v.name.startsWith('vllm_') && !v.name.includes('default_topic'))
  .map((v) => ({ seq: BigInt(v.seq as number), frames: v.frames_hex!.map(hex) }))
  .sort((a, b) => Number(a.seq - b.seq));
const TOPIC = 'kv-events';
const seq8 = (n: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(n);
  return b;
};
const framesAt = (n: bigint) => vllmStream.find((m) => m.seq === n)!.frames;

/** What the sink saw, as short strings: `apply <ts>`, `reset`, `sure`, `unsure: <reason>`. */
class RecordingSink implements KvEventSink {
  readonly seen: string[] = [];
  /** Every batch applied, in order. */
  readonly batches: KvEventBatch[] = [];
  private waiters: Array<() => void> = [];
  apply(_rank: number, batch: KvEventBatch): void {
    this.batches.push(batch);
    this.push(`apply ${batch.ts}`);
  }
  reset(): void {
    this.push('reset');
  }
  sureness(_rank: number, sure: boolean, reason: string | null): void {
    this.push(sure ? 'sure' : `unsure: ${reason}`);
  }
  private push(s: string): void {
    this.seen.push(s);
    for (const w of this.waiters.splice(0)) w();
  }
  /** Resolves once `cond` holds of what was seen; a hang guard (not a speed check) fails after 20 s. */
  async until(cond: (seen: string[]) => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (!cond(this.seen)) {
      const left = deadline - Date.now();
      assert.ok(left > 0, `timed out waiting for ${what}; saw ${JSON.stringify(this.seen)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }
}

/** A test publisher: an XPUB (its subscription message says the subscriber is in) and a replay ROUTER. */
async function publisher() {
  const pub = new XPublisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const router = new Router({ linger: 0 });
  await router.bind('tcp://127.0.0.1:*');
  return { pub, router, close: () => (pub.close(), router.close()) };
}

const open: Array<{ close(): unknown }> = [];
after(async () => {
  for (const o of open.splice(0)) await o.close();
});

/** A publisher and a subscriber to it, once the subscription reached the publisher. */
async function pair(opts: { replay?: boolean; replayTimeoutMs?: number } = {}) {
  const p = await publisher();
  const sink = new RecordingSink();
  const sub = new KvEventSubscriber({
    rank: 0,
    eventsAddress: p.pub.lastEndpoint!,
    replayAddress: opts.replay === false ? null : p.router.lastEndpoint!,
    topic: TOPIC,
    sink,
    logger: pino({ level: 'silent' }),
    // Beyond the hang guard unless a test is about the timeout: a loaded machine must not fail a replay it answers.
    replayTimeoutMs: opts.replayTimeoutMs ?? 60_000,
  });
  open.push(p, sub);
  sub.start();
  // The XPUB's first message is the subscription (0x01 + topic): from then on nothing published is lost to a late join.
  const [subscription] = await p.pub.receive();
  assert.equal(subscription!.toString('latin1'), `\x01${TOPIC}`);
  if (opts.replay !== false) {
    // On connecting, the subscriber asks for everything from seq 0 (the slow joiner's loss): nothing published yet.
    const { identity, from } = await replayRequest(p.router);
    assert.equal(from, 0n);
    await p.router.send([identity, Buffer.alloc(0), hex('ffffffffffffffff'), Buffer.alloc(0)]);
    await waitFor(() => !sub.replayRunning, 'the end of the connect replay');
  }
  return { ...p, sink, sub };
}

/** Reads one replay request on the ROUTER: the requester's identity and the start seq. */
async function replayRequest(router: Router): Promise<{ identity: Buffer; from: bigint }> {
  const [identity, delimiter, seq] = await router.receive();
  assert.equal(delimiter!.length, 0, 'a DEALER request carries the empty delimiter');
  return { identity: identity!, from: seq!.readBigUInt64BE() };
}

const tsOf = (n: bigint) =>
  `apply ${JSON.stringify((vectors.find((v) => v.kind === 'KVEventFrames' && v.name.startsWith('vllm_') && BigInt(v.seq as number) === n && !v.name.includes('default_topic'))!.decoded as { ts: number }).ts)}`;

describe('KvEventSubscriber over ZeroMQ', { timeout: 60_000 }, () => {
  test('live batches apply in seq order; another topic and garbage are counted, and the index is then unsure', async () => {
    const { pub, sink, sub } = await pair({ replay: false });
    for (const n of [0n, 1n, 2n]) await pub.send(framesAt(n));
    await pub.send([Buffer.from(`${TOPIC}-other`), seq8(3n), framesAt(3n)[2]!]);
    await pub.send([Buffer.from(TOPIC), seq8(3n)]); // two frames
    await pub.send([Buffer.from(TOPIC), seq8(3n), Buffer.from([0xc1])]); // not msgpack
    await pub.send(framesAt(3n));
    await sink.until((s) => s.filter((x) => x.startsWith('apply')).length === 4, 'four batches');
    assert.deepEqual(
      sink.seen.filter((x) => x.startsWith('apply')),
      [0n, 1n, 2n, 3n].map(tsOf),
    );
    assert.equal(sub.counters.otherTopics, 1);
    assert.equal(sub.counters.badFrames, 2);
    assert.ok(sink.seen.some((x) => x.startsWith('unsure: a KV-event message did not decode')));
  });

  test('every PUB vector of both engines crosses ZeroMQ intact and applies in seq order', async () => {
    // The PUB messages (19) and the two payloads encoded outside a publisher (rank unset).
    const payloads = vectors
      .filter((v) => v.kind === 'KVEventFrames' || v.kind === 'KVEventBatch')
      .map((v) => hex(v.kind === 'KVEventFrames' ? v.frames_hex![2]! : v.hex!));
    assert.equal(payloads.length, 21);
    const { pub, sink, sub } = await pair({ replay: false });
    // Re-sequenced under one topic: the vectors come from several publishers, each starting its own seq.
    for (const [i, p] of payloads.entries()) await pub.send([Buffer.from(TOPIC), seq8(BigInt(i)), p]);
    await sink.until((s) => s.filter((x) => x.startsWith('apply')).length === payloads.length, 'every vector');
    assert.deepEqual(
      sink.batches,
      payloads.map((p) => decodeKvEventBatch(p)),
    );
    assert.equal(sub.counters.badFrames, 0);
    assert.equal(sub.indexSure, true);
  });

  test("both engines' replay replies close a gap: the publishers' own answers, end marker included", async () => {
    for (const name of ['ts_replay_reply_from_2', 'vllm_replay_reply_from_7']) {
      const v = vectors.find((x) => x.name === name)!;
      const messages = (v.messages_frames_hex as string[][]).map((m) => m.map(hex));
      const seqs = (v.messages as Array<{ seq: number; end_marker: boolean }>).filter((m) => !m.end_marker);
      const from = BigInt(seqs[0]!.seq);
      const last = BigInt(seqs.at(-1)!.seq);
      const { pub, router, sink, sub } = await pair();
      // Live batches up to the replay's start, then one past its end: a gap exactly the reply fills.
      const filler = framesAt(0n)[2]!;
      for (let n = 0n; n < from; n++) await pub.send([Buffer.from(TOPIC), seq8(n), filler]);
      await pub.send([Buffer.from(TOPIC), seq8(last + 1n), filler]);
      const request = await replayRequest(router);
      assert.equal(request.from, from, name);
      for (const m of messages) await router.send([request.identity, ...m]);
      const total = Number(last) + 2;
      await sink.until((x) => x.filter((y) => y.startsWith('apply')).length === total, `${name}: every batch`);
      const replayed = sink.batches.slice(Number(from), Number(last) + 1);
      assert.deepEqual(
        replayed,
        messages.slice(0, -1).map((m) => decodeKvEventBatch(m[2]!)),
        name,
      );
      assert.equal(sub.indexSure, true, name);
    }
  });

  test('a gap is closed by a replay: the missed batches, then the live ones held meanwhile, in order', async () => {
    const { pub, router, sink, sub } = await pair();
    await pub.send(framesAt(0n));
    await sink.until((s) => s.length === 1, 'seq 0');
    await pub.send(framesAt(3n));
    const { identity, from } = await replayRequest(router);
    assert.equal(from, 1n);
    await pub.send(framesAt(4n)); // live while the replay runs: held
    for (const n of [1n, 2n, 3n]) await router.send([identity, Buffer.alloc(0), seq8(n), framesAt(n)[2]!]);
    await router.send([identity, Buffer.alloc(0), hex('ffffffffffffffff'), Buffer.alloc(0)]);
    await sink.until((s) => s.length === 5, 'five batches');
    assert.deepEqual(sink.seen, [0n, 1n, 2n, 3n, 4n].map(tsOf));
    assert.equal(sub.indexSure, true);
    assert.equal(sub.counters.replays, 2, 'the connect replay, then the gap');
  });

  test("the engine's overrun reply (the ring no longer held the start) leaves the index unsure", async () => {
    const { pub, router, sink, sub } = await pair();
    const overrun = vectors.find((v) => v.name === 'vllm_replay_buffer_overrun')!;
    const published = (overrun.published_seqs as number[]).at(-1)!;
    // Join late: the first batch seen is the last one published, so the subscriber bootstraps from 0.
    await pub.send([
      Buffer.from(TOPIC),
      seq8(BigInt(published)),
      hex((overrun.messages_frames_hex as string[][])[1]![2]!),
    ]);
    const { identity, from } = await replayRequest(router);
    assert.equal(from, 0n);
    for (const m of overrun.messages_frames_hex as string[][]) await router.send([identity, ...m.map(hex)]);
    await sink.until((s) => s.filter((x) => x.startsWith('apply')).length === 2, 'the two surviving batches');
    assert.equal(sink.seen[0], 'unsure: the replay started after the missed batches (the ring no longer held them)');
    assert.equal(sub.indexSure, false);
  });

  test('a replay that never ends counts as failed: the held batches apply and the index is unsure', async () => {
    const { pub, router, sink, sub } = await pair({ replayTimeoutMs: 200 });
    await pub.send(framesAt(0n));
    await pub.send(framesAt(2n));
    await replayRequest(router); // and no answer
    await sink.until((s) => s.includes(tsOf(2n)), 'the held batch after the timeout');
    // On a loaded machine the connect replay may time out too before the test answers it: the same verdict, once.
    assert.deepEqual(
      sink.seen.filter((x) => x.startsWith('apply')),
      [tsOf(0n), tsOf(2n)],
    );
    assert.deepEqual(
      sink.seen.filter((x) => !x.startsWith('apply')),
      ['unsure: the replay failed: no end marker in time'],
    );
    assert.ok(sub.counters.replayFailures >= 1);
  });

  test('a publisher that restarted (seq back to 0) resets the index', async () => {
    const { pub, sink } = await pair({ replay: false });
    for (const n of [0n, 1n, 2n]) await pub.send(framesAt(n));
    await pub.send(framesAt(0n));
    await sink.until((s) => s.length === 5, 'the reset and the batch after it');
    assert.deepEqual(sink.seen, [tsOf(0n), tsOf(1n), tsOf(2n), 'reset', tsOf(0n)]);
  });
});
