/**
 * Helpers of the routing-spread end-to-end test (`routing-spread.test.ts`): open streaming `/v1/completions`
 * requests against a running gateway and hold them, cancel them like a disconnecting client, wait on the engine
 * client's routing state (dp-routing.md sections 9-11), flush a rank's output pipe, and read `/metrics` gauges
 * (gateway.md section 15.3).
 *
 * Determinism: nothing here measures time. `waitUntil` polls a condition with a generous deadline that only guards
 * against a hang; every assertion is made on dispatch counts, in-flight sets and stored loads.
 */
import assert from 'node:assert/strict';
import type { RankView } from '../../src/engine-client/policy.js';
import type { RankState } from '../../src/engine-client/client.js';
import type { TestGateway } from '../helpers/test-gateway.js';
import { completionSse } from '../helpers/sse.js';

/** How a held stream ended: the finish reasons seen in its chunks, whether `data: [DONE]` arrived, the text. */
export interface StreamOutcome {
  /** Last non-null `choices[0].finish_reason` (`stop`, `length`, ...), or null when none arrived. */
  finishReason: string | null;
  /** True when the stream ended with `data: [DONE]`. */
  completed: boolean;
  /** True when the stream was ended by `cancel()` (a client disconnect) before it completed. */
  cancelled: boolean;
  /** Concatenated `choices[0].text`. */
  text: string;
  /** The mid-stream error event (`{error: {message, code, ...}}`, gateway.md 12 "Mid-stream errors"), if one arrived. */
  error: { message: string; code: string | null } | null;
}

/** A streaming completion whose response headers arrived (so the gateway's submit has resolved). */
export interface HeldStream {
  /** The HTTP status (200 for an accepted streaming request). */
  readonly status: number;
  /** Disconnect the client (aborts the fetch, closing the socket; the gateway then sends ABORT). Idempotent. */
  cancel(): void;
  /** Resolves (never rejects) when the body ended, with what the stream carried. */
  readonly done: Promise<StreamOutcome>;
}

/** Body fields of a `/v1/completions` request (OpenAI names; `ignore_eos` is the SGLang/vLLM extension). */
export interface CompletionBody {
  model: string;
  prompt: string;
  max_tokens: number;
  ignore_eos?: boolean;
}

/**
 * POST a streaming `/v1/completions` request (optionally pinned with `X-data-parallel-rank`, gateway.md section 14)
 * and resolve once its response headers arrive. The SSE body is drained in the background (so the gateway's SSE
 * writer never waits on back-pressure) and parsed into `done`.
 * Throws when the fetch itself fails before the headers (e.g. connection refused).
 */
export async function openStream(
  baseUrl: string,
  body: CompletionBody,
  opts: { dpRank?: number } = {},
): Promise<HeldStream> {
  const controller = new AbortController();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.dpRank !== undefined) headers['x-data-parallel-rank'] = String(opts.dpRank);
  const res = await fetch(`${baseUrl}/v1/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ ...body, stream: true }),
    signal: controller.signal,
  });
  const outcome: StreamOutcome = { finishReason: null, completed: false, cancelled: false, text: '', error: null };
  const done = (async (): Promise<StreamOutcome> => {
    if (res.body === null) return outcome;
    try {
      for await (const item of completionSse(res.body)) {
        if (item.done) {
          outcome.completed = true;
          continue;
        }
        if (item.error) outcome.error = { message: item.error.message, code: item.error.code };
        outcome.text += item.text;
        if (item.finishReason) outcome.finishReason = item.finishReason;
      }
    } catch {
      // The fetch was aborted by cancel() (or the gateway closed the connection); `cancelled` tells which.
    }
    return outcome;
  })();
  return {
    status: res.status,
    cancel(): void {
      if (outcome.completed) return;
      outcome.cancelled = true;
      controller.abort();
    },
    done,
  };
}

/**
 * Poll `condition` every 10 ms until it holds. The deadline (`guardMs`, default 20 000 ms) is a hang guard only:
 * when it passes, the assertion fails with `what` and the last `describe()` output.
 */
export async function waitUntil(
  condition: () => boolean,
  what: string,
  describe: () => unknown = () => '',
  guardMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + guardMs;
  while (!condition()) {
    if (Date.now() > deadline)
      assert.fail(`hang guard: ${what} did not happen within ${guardMs} ms; state: ${JSON.stringify(describe())}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** What the spread tests read of a rank (`RankState`'s fields, as /v1/gateway/ranks shows them). */
export type SpreadRank = Pick<
  RankState,
  'engineIndex' | 'inFlight' | 'load' | 'dispatchedPinned' | 'dispatchedUnpinned' | 'clampEvents'
>;

/**
 * The rank states of the gateway's first group in identity-sorted engine order, read over HTTP
 * (`/v1/gateway/ranks`, fresh from the routing state in either mode): the stored load is null before a rank's first
 * report.
 */
export async function states(gateway: Pick<TestGateway, 'rankStates'>): Promise<SpreadRank[]> {
  return (await gateway.rankStates()).map((r) => ({
    engineIndex: r.dp_rank,
    inFlight: r.in_flight,
    load:
      r.num_running_reqs === null
        ? null
        : { numRunning: r.num_running_reqs, numWaiting: r.num_waiting_reqs ?? 0, kvCacheUsage: r.kv_cache_usage ?? 0 },
    dispatchedPinned: r.dispatched_pinned,
    dispatchedUnpinned: r.dispatched_unpinned,
    clampEvents: r.clamp_events,
  }));
}

/** The policy's view of each rank (same order as `states`), as the client builds it for `select` (policy.ts). */
export function views(list: readonly SpreadRank[]): RankView[] {
  return list.map((s) => ({ engineIndex: s.engineIndex, inFlight: s.inFlight, load: s.load }));
}

/** Per-rank `dispatchedUnpinned` of `after` minus `before` (same order; ranks matched by engine index). */
export function unpinnedDelta(before: readonly SpreadRank[], after: readonly SpreadRank[]): number[] {
  return after.map(
    (a) => a.dispatchedUnpinned - (before.find((b) => b.engineIndex === a.engineIndex)?.dispatchedUnpinned ?? 0),
  );
}

/** Total unpinned selections so far (= the load policy's scan-start counter, dp-routing.md 9.2 step 3). */
export function unpinnedTotal(list: readonly SpreadRank[]): number {
  return list.reduce((n, s) => n + s.dispatchedUnpinned, 0);
}

/**
 * Output-pipe barrier for the given DP ranks: send one pinned one-token request to each and read it to the end.
 * Each rank handles ADD and ABORT messages in order and pushes its batches in order, so once this resolves every
 * batch the rank produced for earlier (e.g. just aborted) requests has been dispatched by the engine client, and the
 * terminal batch of the flush request has released it (its in-flight set empties, so the release clamp, dp-routing.md
 * 10.2, leaves the stored running and waiting counts at 0 if nothing else is in flight there).
 * Fails the test if a flush request does not complete with finish reason `length`.
 */
export async function flushRanks(gateway: { url: string }, model: string, ranks: readonly number[]): Promise<void> {
  const flushes = await Promise.all(
    ranks.map((r) =>
      openStream(gateway.url, { model, prompt: 'flush', max_tokens: 1, ignore_eos: true }, { dpRank: r }),
    ),
  );
  const outcomes = await Promise.all(flushes.map((f) => f.done));
  outcomes.forEach((o, i) => {
    assert.equal(flushes[i]!.status, 200);
    assert.ok(
      o.completed && o.finishReason === 'length',
      `flush request on rank ${ranks[i]} ended ${JSON.stringify(o)}`,
    );
  });
}

/**
 * Read `/metrics` and return the samples of gauge/counter `name` as a map from the `dp_rank` label (plus any other
 * labels in `extraLabel`, e.g. `pinned`) to the value. Throws when the scrape fails.
 */
export async function scrapeByRank(baseUrl: string, name: string, extraLabel?: string): Promise<Map<string, number>> {
  const res = await fetch(`${baseUrl}/metrics`);
  assert.equal(res.status, 200, '/metrics status');
  const text = await res.text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.lastIndexOf('}');
    const labels = Object.fromEntries(
      [...line.slice(name.length + 1, close).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]),
    );
    const rank = labels['dp_rank'];
    if (rank === undefined) continue;
    const key = extraLabel !== undefined ? `${rank}/${labels[extraLabel] ?? ''}` : rank;
    out.set(key, Number(line.slice(close + 1).trim()));
  }
  return out;
}
