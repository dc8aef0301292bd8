/**
 * End to end (issue 26 part 3): hostile or broken peers on a group's sockets never take the real ranks out of
 * service. One gateway (in process) over a group of two simulated TokenSpeed ranks on real ZeroMQ; each test holds
 * one stream per rank and then plays a peer that reaches the sockets (any process with write access to the socket
 * folder, or one buggy engine):
 * - a rogue `ENGINE_CORE_DEAD` on the output socket: no rank's identity vanishes and both keep streaming, so nothing
 *   fails (before: 3 s later every rank was marked dead for good and every stream failed);
 * - rogue undecodable frames, in bursts of three: counted and skipped, nothing fails (before: the group failed);
 * - an identity thief: a DEALER presenting rank 0's identity on the input socket gets nothing; the real rank 0 keeps
 *   receiving its requests (before: the newcomer took the identity over and rank 0 was lost);
 * - a well-formed batch naming rank 1 with rows for a request on rank 0: the rows reach no client (before: the client
 *   got the injected tokens and a `stop`), the owner keeps streaming, the mismatch is counted.
 * Every held stream must end normally (its own `length` finish, no error event) and new requests must be served.
 *
 * In-process only: it reads the group's socket endpoints and engine-client counters directly. Nothing asserts a
 * duration; waits are on events (counters, stream ends) with hang guards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Dealer, Push } from 'zeromq';
import { startGateway, type RunningGateway, type RunningGroup } from '../../src/gateway/index.js';
import { ENGINE_CORE_DEAD } from '../../src/protocols/frames.js';
import { encodeBatchTokenIDOutSlim } from '../../src/protocols/tokenspeed/index.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { waitFor } from '../helpers/async.js';
import { captureLogs } from '../helpers/logs.js';
import { GARBAGE } from './failure-helpers.js';

const MODEL = 'sim-qwen3';
const TIMEOUT = { timeout: 90_000 };
/** ~40 ms per step (time scale 5): 120 tokens stream for about 5 s, longer than the 3 s of ENGINE_CORE_DEAD probing. */
const HELD_TOKENS = 120;

/** One streamed completion read to its end: its engine request id (the chunks' `id`), text, finish and error. */
interface Streamed {
  id: Promise<string>;
  done: Promise<{ id: string; text: string; finish: string | null; error: unknown; done: boolean }>;
}

function stream(url: string, maxTokens: number, dpRank?: number): Streamed {
  let gotId: (id: string) => void = () => {};
  const id = new Promise<string>((r) => (gotId = r));
  const done = (async () => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (dpRank !== undefined) headers['x-data-parallel-rank'] = String(dpRank);
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        model: MODEL,
        prompt: 'Tell me a story.',
        max_tokens: maxTokens,
        ignore_eos: true,
        stream: true,
      }),
    });
    assert.equal(res.status, 200, await (res.status === 200 ? Promise.resolve('') : res.text()));
    const out = { id: '', text: '', finish: null as string | null, error: null as unknown, done: false };
    let buf = '';
    const decoder = new TextDecoder();
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      for (let nl = buf.indexOf('\n\n'); nl >= 0; nl = buf.indexOf('\n\n')) {
        const event = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        const data = event
          .split('\n')
          .find((l) => l.startsWith('data: '))
          ?.slice(6);
        if (data === undefined) continue;
        if (data === '[DONE]') {
          out.done = true;
          continue;
        }
        const body = JSON.parse(data) as {
          id?: string;
          error?: unknown;
          choices?: Array<{ text?: string; finish_reason?: string | null }>;
        };
        if (body.error !== undefined) out.error = body.error;
        if (body.id !== undefined && out.id === '') {
          out.id = body.id;
          gotId(body.id);
        }
        const c = body.choices?.[0];
        if (c?.text) out.text += c.text;
        if (c?.finish_reason) out.finish = c.finish_reason;
      }
    }
    return out;
  })();
  return { id, done };
}

/** Both held streams ended on their own (`length`, [DONE], no error event). */
async function assertFinishedNormally(held: readonly Streamed[]): Promise<void> {
  for (const h of held) {
    const r = await h.done;
    assert.equal(r.error, null, `stream ${r.id} ended with an error: ${JSON.stringify(r.error)}`);
    assert.equal(r.finish, 'length', `stream ${r.id} finish`);
    assert.equal(r.done, true);
  }
}

describe("hostile peers on a group's sockets", () => {
  let gateway: RunningGateway;
  let group: RunningGroup;
  const logs = captureLogs('warn');

  before(async () => {
    gateway = await startGateway({
      port: 0,
      logger: logs.logger,
      modelId: MODEL,
      groups: [{ engine: 'tokenspeed', sim: 2, simArgs: ['--time-scale', '5', '--log-level', 'warn'] }],
    });
    group = gateway.groups[0]!;
  });

  after(async () => {
    await gateway?.close();
  });

  /** One long stream pinned to each rank, started (its first chunk arrived). */
  const holdBoth = async (): Promise<Streamed[]> => {
    const held = [stream(gateway.url, HELD_TOKENS, 0), stream(gateway.url, HELD_TOKENS, 1)];
    await Promise.all(held.map((h) => h.id));
    return held;
  };
  const ready = () => group.client.rankStates().map((r) => r.state);
  const servesBothRanks = async (): Promise<void> => {
    for (const rank of [0, 1]) {
      const r = await stream(gateway.url, 4, rank).done;
      assert.equal(r.error, null, `a new request on rank ${rank}: ${JSON.stringify(r.error)}`);
      assert.equal(r.finish, 'length');
    }
  };

  test('a rogue ENGINE_CORE_DEAD while every rank streams: nothing fails, it is counted', TIMEOUT, async () => {
    const held = await holdBoth();
    const rogue = new Push({ linger: 0 });
    rogue.connect(group.endpoints.output);
    try {
      await rogue.send([ENGINE_CORE_DEAD]);
      await waitFor(
        () => group.client.stats.unattributedSentinels === 1,
        'the sentinel is settled (after the last probe round)',
        30_000,
      );
    } finally {
      rogue.close();
    }
    assert.deepEqual(ready(), ['ready', 'ready']);
    assert.deepEqual(group.client.stats.failures, {});
    assert.deepEqual(group.client.stats.rankDeaths, {});
    await assertFinishedNormally(held);
    await servesBothRanks();
  });

  test('rogue undecodable frames: counted and skipped while the ranks stream; no rank is blamed', TIMEOUT, async () => {
    const before = group.client.stats.decodeErrors;
    const held = await holdBoth();
    const rogue = new Push({ linger: 0 });
    rogue.connect(group.endpoints.output);
    try {
      for (let burst = 0; burst < 5; burst++) for (const frames of GARBAGE) await rogue.send(frames);
      await waitFor(
        () => group.client.stats.decodeErrors - before === 5 * GARBAGE.length,
        'every garbage frame is read',
        30_000,
      );
    } finally {
      rogue.close();
    }
    assert.deepEqual(ready(), ['ready', 'ready']);
    assert.equal(group.client.stats.decodeSuspects, 0);
    assert.deepEqual(group.client.stats.failures, {});
    await assertFinishedNormally(held);
    await servesBothRanks();
  });

  test(
    'an identity thief on the input socket gets nothing; the real rank keeps its identity and serves',
    TIMEOUT,
    async () => {
      const held = await holdBoth();
      const thief = new Dealer({ routingId: '\u0000\u0000', linger: 0, receiveTimeout: 0 });
      const events = thief.events; // observed before connecting, so the handshake event is not missed
      thief.connect(group.endpoints.input);
      try {
        // Wait until the thief's ZMTP handshake with the input ROUTER completed: the ROUTER has seen its identity.
        for await (const event of events) if (event.type === 'handshake') break;
        for (let i = 0; i < 3; i++) {
          const pinned = await stream(gateway.url, 4, 0).done;
          assert.equal(pinned.error, null);
          assert.equal(pinned.finish, 'length', 'a request to rank 0 is served by the real rank 0');
        }
        await assert.rejects(thief.receive(), { code: 'EAGAIN' }, 'nothing was routed to the thief');
      } finally {
        thief.close();
      }
      assert.deepEqual(ready(), ['ready', 'ready']);
      await assertFinishedNormally(held);
    },
  );

  test(
    'a batch naming rank 1 with rows for a request on rank 0 reaches no client; the owner keeps streaming',
    TIMEOUT,
    async () => {
      const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
      const held = await holdBoth();
      const victim = await held[0]!.id;
      const injected = tokenizer.encode(' INJECTED BY A ROGUE');
      const mismatchesBefore = group.client.stats.rankMismatches;
      const rogue = new Push({ linger: 0 });
      rogue.connect(group.endpoints.output);
      try {
        const frame = encodeBatchTokenIDOutSlim(
          {
            rids: [victim, victim],
            output_ids: [injected, []],
            finished_reasons: ['', 'stop'],
            prompt_tokens: [5, 5],
            completion_tokens: [injected.length, injected.length],
            cached_tokens: [0, 0],
            output_token_logprobs_val: [[], []],
            output_token_logprobs_idx: [[], []],
            engine_index: 1,
            num_running: 0,
            num_waiting: 0,
            kv_active_pages: 0,
            kv_total_pages: 0,
          },
          { form: 14 },
        );
        await rogue.send([frame]);
        await waitFor(
          () => group.client.stats.rankMismatches - mismatchesBefore === 2,
          'the forged batch is read',
          30_000,
        );
      } finally {
        rogue.close();
      }
      await assertFinishedNormally(held);
      const r = await held[0]!.done;
      assert.ok(!r.text.includes('INJECTED'), 'the injected tokens reached no client');
      assert.deepEqual(ready(), ['ready', 'ready']);
    },
  );
});
