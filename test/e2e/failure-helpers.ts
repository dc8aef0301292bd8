/**
 * Helpers of the engine-failure end-to-end tests (`failures*.test.ts`; issue #3 part 4, issue #8 part 1;
 * dp-routing.md 6 and 14.8; gateway.md 4.2, 11.3, 12 "Mid-stream errors", 15.3): start a gateway with a failing and a
 * healthy engine group of real simulated rank processes, place in-flight requests on known ranks, send requests whose
 * outcome (SSE stream or JSON body) is collected without ever rejecting, inject raw frames into a group's output
 * socket, capture the gateway's log, and check what a failure must leave behind. A rank's own failure (death,
 * stall) ends only the requests on that rank: its siblings and the other group keep serving, /health says the group
 * is degraded and lists the rank dead. A group-scope failure (3 undecodable outputs) ends every request of the group,
 * which /health and /metrics then report as unable to serve, while the other group keeps serving. Either way every
 * affected request ends with a clear terminal error and the in-flight sets empty.
 *
 * Layout of every scenario (`FailureScenario`): the failing group has one DP rank more than the healthy one, so its
 * top rank (`failingTopRank`) exists only there and a request pinned to it (`X-data-parallel-rank`, gateway.md 14)
 * can only go to the failing group. `placeLoad()` opens one long unpinned stream per rank of both groups (the
 * lowest best-rank score puts exactly one on each rank, whatever the tie order, src/server/groups.ts) and one long
 * non-streaming request pinned to the failing top rank.
 *
 * Determinism: nothing here asserts a duration. `performance.now()` stamps are only reported (diagnostics) and
 * `waitUntil` deadlines are hang guards.
 */
import assert from 'node:assert/strict';
import { Push } from 'zeromq';
import {
  startGateway,
  type GatewayOptions,
  type GroupOptions,
  type RunningGateway,
  type RunningGroup,
} from '../../src/gateway/index.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';
import { completionSse } from '../helpers/sse.js';
import { waitUntil } from './spread-helpers.js';

/** The served model name of every failure scenario. */
export const MODEL = 'sim-qwen3';
/** Hang guard of one failure test, in ms (node:test `timeout`). */
export const TEST_TIMEOUT = { timeout: 60_000 };
/** A completion that never finishes during a test (ignore_eos, 20 000 tokens at ~40 ms per step). */
export const LONG = {
  model: MODEL,
  prompt: 'Tell me a very long story.',
  max_tokens: 20_000,
  ignore_eos: true,
} as const;
/** A completion that finishes at once with finish reason `length`. */
export const SHORT = { model: MODEL, prompt: 'Say a few words.', max_tokens: 6, ignore_eos: true } as const;
/** Arguments of every simulated rank: slowed steps (so long requests keep streaming) and quiet logs. */
export const SIM_ARGS: readonly string[] = Object.freeze(['--time-scale', '5', '--log-level', 'warn']);

/** Body of a `/v1/completions` request (`prompt` as text or token ids, gateway.md 5). */
export interface CompletionRequest {
  model: string;
  prompt: string | number[];
  max_tokens: number;
  ignore_eos?: boolean;
}

/** What an SSE response carried (gateway.md 12). */
export interface SseOutcome {
  /** True when `data: [DONE]` arrived. */
  done: boolean;
  /** Last non-null `choices[0].finish_reason`, or null. */
  finishReason: string | null;
  /** Concatenated `choices[0].text`. */
  text: string;
  /** The mid-stream error event's `error` object, if one arrived. */
  error: { message: string; type: string; code: string | null } | null;
}

/**
 * How one request ended. `status`: the HTTP status, 0 when the fetch failed (then `networkError` says why).
 * `sse`: set for a `text/event-stream` response; `json`: the parsed body of any other response.
 * `cancelled`: ended by `cancel()` (a client disconnect). `endedAt`: `performance.now()` when the body ended (ms).
 */
export interface RequestOutcome {
  status: number;
  sse: SseOutcome | null;
  json: unknown;
  cancelled: boolean;
  networkError: string | null;
  endedAt: number;
}

/** A request in flight; `done` never rejects. */
export interface SentRequest {
  /** What it is, for messages (e.g. `stream #2`). */
  readonly label: string;
  /** Resolves with the status once the response headers arrived (never for a fetch that fails first). */
  readonly headers: Promise<number>;
  readonly done: Promise<RequestOutcome>;
  /** True once `done` resolved. */
  ended(): boolean;
  /** The SSE outcome so far (live: it keeps growing while the stream runs), or null before SSE headers / for JSON. */
  progress(): SseOutcome | null;
  /** Disconnect the client (aborts the fetch). Idempotent; a no-op once ended. */
  cancel(): void;
}

/**
 * POST `/v1/completions` (`stream` true or false; optionally pinned with `X-data-parallel-rank`) and collect the
 * outcome in the background. Never throws or rejects: a failed fetch is an outcome with status 0.
 */
export function sendCompletion(
  baseUrl: string,
  body: CompletionRequest,
  opts: { stream: boolean; dpRank?: number; label?: string },
): SentRequest {
  const controller = new AbortController();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.dpRank !== undefined) headers['x-data-parallel-rank'] = String(opts.dpRank);
  let ended = false;
  let cancelled = false;
  let live: SseOutcome | null = null;
  let resolveHeaders: (status: number) => void = () => {};
  const headersPromise = new Promise<number>((r) => (resolveHeaders = r));
  const done = (async (): Promise<RequestOutcome> => {
    const outcome: RequestOutcome = {
      status: 0,
      sse: null,
      json: null,
      cancelled: false,
      networkError: null,
      endedAt: 0,
    };
    try {
      const res = await fetch(`${baseUrl}/v1/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ ...body, stream: opts.stream }),
        signal: controller.signal,
      });
      outcome.status = res.status;
      resolveHeaders(res.status);
      if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
        outcome.sse = live = { done: false, finishReason: null, text: '', error: null };
        await readSse(res, outcome.sse);
      } else {
        const text = await res.text();
        try {
          outcome.json = JSON.parse(text);
        } catch {
          outcome.json = text;
        }
      }
    } catch (err) {
      if (!cancelled) outcome.networkError = err instanceof Error ? err.message : String(err);
    }
    outcome.cancelled = cancelled;
    outcome.endedAt = performance.now();
    ended = true;
    return outcome;
  })();
  return {
    label:
      opts.label ??
      `${opts.stream ? 'stream' : 'request'}${opts.dpRank !== undefined ? ` pinned to rank ${opts.dpRank}` : ''}`,
    headers: headersPromise,
    done,
    ended: () => ended,
    progress: () => live,
    cancel(): void {
      if (ended || cancelled) return;
      cancelled = true;
      controller.abort();
    },
  };
}

/** Parse an SSE body into `into` (throws whatever the body read throws, e.g. on abort). */
async function readSse(res: Response, into: SseOutcome): Promise<void> {
  if (res.body === null) return;
  for await (const item of completionSse(res.body)) {
    if (item.done) {
      into.done = true;
      continue;
    }
    if (item.error) into.error = item.error;
    into.text += item.text;
    if (item.finishReason) into.finishReason = item.finishReason;
  }
}

/**
 * Assert that `o` is a clear terminal error (gateway.md 11.3, 12): either an SSE stream (status 200) that carried an
 * error event (non-empty `message`, a `type`) with no finish reason and then `data: [DONE]`, or a 5xx response whose
 * body is an OpenAI-style `{error: {message, type, param, code}}`. `expect` must match the error message. Returns a
 * short description (`SSE error …` / `HTTP 503 …`) for diagnostics.
 */
export function assertTerminalError(o: RequestOutcome, label: string, expect: RegExp): string {
  const dump = JSON.stringify(o);
  assert.equal(o.networkError, null, `${label}: the connection failed instead of an error answer: ${dump}`);
  assert.equal(o.cancelled, false, `${label}: cancelled by the test, not ended by the gateway`);
  if (o.sse !== null) {
    assert.equal(o.status, 200, `${label}: ${dump}`);
    assert.ok(o.sse.error !== null, `${label}: the stream ended without an error event: ${dump}`);
    assert.ok(o.sse.error.message.length > 0 && typeof o.sse.error.type === 'string', `${label}: ${dump}`);
    assert.match(o.sse.error.message, expect, `${label}: ${o.sse.error.message}`);
    assert.equal(o.sse.finishReason, null, `${label}: a failed request has no finish reason`);
    assert.equal(o.sse.done, true, `${label}: the error event must be followed by data: [DONE]: ${dump}`);
    return `SSE error (${o.sse.error.code}) after ${o.sse.text.length} chars`;
  }
  assert.ok(o.status >= 500 && o.status <= 599, `${label}: expected an HTTP 5xx, got ${dump}`);
  const body = o.json as { error?: { message?: unknown; type?: unknown; param?: unknown; code?: unknown } } | null;
  const err = body?.error;
  assert.ok(
    err && typeof err.message === 'string' && typeof err.type === 'string' && 'param' in err && 'code' in err,
    `${label}: not an OpenAI-style error body: ${dump}`,
  );
  assert.match(err.message as string, expect, `${label}: HTTP ${o.status} ${String(err.message)}`);
  return `HTTP ${o.status} (${String(err.code)})`;
}

/** `/metrics` sample lines of `name` without the name, e.g. `{model="m",group="vllm-0",engine="vllm"} 1`. */
export async function scrape(url: string, name: string): Promise<string[]> {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200, '/metrics status');
  const text = await res.text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .map((l) => l.slice(name.length));
}

/** The value of the `/metrics` sample `name{model, group}` (decode errors, aborts, ...), or NaN when absent. */
export async function groupCounter(url: string, name: string, group: string): Promise<number> {
  const line = (await scrape(url, name)).find((l) => l.startsWith(`{model="${MODEL}",group="${group}"}`));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf('}') + 1).trim());
}

export { captureLogs, type LogRecord };

/**
 * A ZeroMQ PUSH connected to a group's output endpoint (the gateway's bound PULL, engine-wire.md 1.1): what it
 * sends is received like a rank's output message. Close it once what it sent was observed (its disconnect makes
 * the engine client probe the ranks, which live ranks ignore).
 */
export class FrameInjector {
  private readonly socket: Push;

  private constructor(socket: Push) {
    this.socket = socket;
  }

  /** Connect to `endpoint` (`ipc://…`). Throws when zeromq refuses the address. */
  static connect(endpoint: string): FrameInjector {
    const socket = new Push({ linger: 0 });
    socket.connect(endpoint);
    return new FrameInjector(socket);
  }

  /** Send one multipart message (resolves once zeromq queued it). */
  async send(frames: Uint8Array[]): Promise<void> {
    await this.socket.send(frames);
  }

  close(): void {
    if (!this.socket.closed) this.socket.close();
  }
}

/** Undecodable output messages for both wires (none is the ENGINE_CORE_DEAD sentinel, engine-wire.md 1.7). */
export const GARBAGE: readonly Uint8Array[][] = Object.freeze([
  [Uint8Array.of(0xc1)], // a byte msgpack never uses
  [new TextEncoder().encode('not msgpack at all')], // a positive fixint followed by junk: not an array
  [Uint8Array.of(0x81, 0xa1, 0x78, 0x01)], // msgpack {x: 1}: a map, where both wires want an array
]);

/** In-flight set sizes of a group's ranks, in identity order. */
export const inFlight = (g: RunningGroup): number[] => g.client.rankStates().map((r) => r.inFlight);
/** Successful submits to a group (pinned and unpinned, all ranks). */
export const dispatched = (g: RunningGroup): number =>
  g.client.rankStates().reduce((n, r) => n + r.dispatchedUnpinned + r.dispatchedPinned, 0);

/** True while the child process has neither exited nor been killed. */
function running(child: { exitCode: number | null; signalCode: string | null }): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Format ms for diagnostics. */
export const ms = (x: number): string => `${x.toFixed(0)} ms`;

/** Options of `FailureScenario.start`: the two groups (the failing one has one DP rank more) and gateway options. */
export interface ScenarioOptions {
  failing: GroupOptions;
  healthy: GroupOptions;
  gateway?: Pick<GatewayOptions, 'silenceTimeoutMs' | 'sendTimeoutMs' | 'sendHighWaterMark' | 'rankStallTimeoutMs'>;
}

/** The requests `placeLoad` opened. */
export interface PlacedLoad {
  /** One unpinned long stream per rank of both groups (which group holds which is not visible over HTTP). */
  streams: SentRequest[];
  /** The long non-streaming request pinned to the failing group's top rank. */
  nonStreaming: SentRequest;
}

/** What `awaitFailure` measured and checked. */
export interface FailureReport {
  /** `performance.now()` when the failing group's client emitted `failed`. */
  failedAt: number;
  /** The affected requests (the failing group's streams, the non-streaming one, and any extra ones). */
  affected: SentRequest[];
  outcomes: RequestOutcome[];
  /** The healthy group's long streams, still open. */
  survivors: SentRequest[];
  /** One diagnostic line per affected request: label, how it ended, ms after the failure was induced. */
  lines: string[];
}

/**
 * One gateway with a failing and a healthy engine group of simulated ranks, plus everything the test opened, so
 * `close()` can always clean up: SIGCONT every rank (a stopped process cannot act on SIGTERM), cancel every request,
 * wait for each to end, close the gateway.
 */
export class FailureScenario {
  readonly requests: SentRequest[] = [];
  /** `performance.now()` and error kind of the failing group's `failed` event, once emitted. */
  failedEvent: { at: number; kind: string; message: string } | null = null;

  private constructor(
    readonly gateway: RunningGateway,
    readonly failing: RunningGroup,
    readonly healthy: RunningGroup,
    readonly logs: LogRecord[],
  ) {
    failing.client.once('failed', (err) => {
      this.failedEvent = { at: performance.now(), kind: err.kind, message: err.message };
    });
  }

  /** Start the gateway with `[failing, healthy]` (each spawning `sim` ranks) on a free port, logs captured at warn. */
  static async start(opts: ScenarioOptions): Promise<FailureScenario> {
    const { logger, records } = captureLogs('warn');
    const gateway = await startGateway({
      port: 0,
      logger,
      modelId: MODEL,
      ...opts.gateway,
      groups: [opts.failing, opts.healthy],
    });
    const [failing, healthy] = gateway.groups as [RunningGroup, RunningGroup];
    const s = new FailureScenario(gateway, failing, healthy, records);
    assert.equal(failing.client.dpSize, healthy.client.dpSize + 1, 'the failing group has one rank more');
    return s;
  }

  /** The DP rank only the failing group has. */
  get failingTopRank(): number {
    return this.failing.client.dpSize - 1;
  }

  /** Send a request and remember it for `close()`. */
  send(body: CompletionRequest, opts: { stream: boolean; dpRank?: number; label?: string }): SentRequest {
    const r = sendCompletion(this.gateway.url, body, opts);
    this.requests.push(r);
    return r;
  }

  /**
   * Open one long unpinned stream per rank of both groups (each waits for its headers, so its rank is reserved
   * before the next is chosen) and one long non-streaming request pinned to the failing top rank; assert the
   * placement through the in-flight sets (every rank holds 1, the failing top rank 2) and wait until every stream
   * has received text.
   */
  async placeLoad(): Promise<PlacedLoad> {
    const total = this.failing.client.dpSize + this.healthy.client.dpSize;
    const streams: SentRequest[] = [];
    for (let i = 0; i < total; i++) {
      const s = this.send(LONG, { stream: true, label: `stream #${i}` });
      assert.equal(await s.headers, 200, 'long stream accepted');
      streams.push(s);
    }
    assert.deepEqual(
      inFlight(this.failing),
      this.failing.client.rankStates().map(() => 1),
      'one stream per failing rank',
    );
    assert.deepEqual(
      inFlight(this.healthy),
      this.healthy.client.rankStates().map(() => 1),
      'one stream per healthy rank',
    );
    const top = this.failingTopRank;
    const nonStreaming = this.send(LONG, {
      stream: false,
      dpRank: top,
      label: `non-streaming request pinned to rank ${top}`,
    });
    await waitUntil(
      () => inFlight(this.failing)[top] === 2,
      'the non-streaming request reached the failing top rank',
      () => inFlight(this.failing),
    );
    // Every stream has streamed text, so the failure hits them mid-stream (gateway.md 12 "Mid-stream errors").
    await waitUntil(
      () => streams.every((r) => (r.progress()?.text.length ?? 0) > 0),
      'every long stream has streamed text',
    );
    return { streams, nonStreaming };
  }

  /**
   * A rank failure (issue #8 part 1): wait until rank `rank` of the failing group is `state` (dead, or stalled) and
   * the requests it held ended (hang guard only): the one long stream `placeLoad` put there, the non-streaming request
   * when `rank` is the failing top rank, and `extra`. Assert each ended with a terminal error matching `expect`, that
   * every other stream is still open (the failing group's other ranks and the healthy group keep serving), and
   * return the measurements.
   */
  async awaitRankFailure(
    load: PlacedLoad,
    rank: number,
    inducedAt: number,
    expect: RegExp,
    extra: SentRequest[] = [],
    state: 'dead' | 'stalled' = 'dead',
  ): Promise<FailureReport> {
    const rankOf = () => this.failing.client.rankStates().find((r) => r.engineIndex === rank)!;
    await waitUntil(
      () => rankOf().state === state,
      `rank ${rank} of the failing group is ${state}`,
      () => this.failing.client.rankStates(),
    );
    const failedAt = performance.now();
    const pinned = rank === this.failingTopRank ? [load.nonStreaming] : [];
    await waitUntil(
      () => load.streams.filter((s) => s.ended()).length >= 1 && [...pinned, ...extra].every((r) => r.ended()),
      'every request of the failed rank ended',
      () => [...load.streams, load.nonStreaming, ...extra].map((r) => `${r.label}: ${r.ended()}`),
    );
    const endedStreams = load.streams.filter((s) => s.ended());
    assert.equal(endedStreams.length, 1, 'only the stream on the failed rank ended');
    const affected = [...endedStreams, ...pinned, ...extra];
    const outcomes = await Promise.all(affected.map((r) => r.done));
    assert.ok(
      (outcomes[0]!.sse?.text.length ?? 0) > 0,
      `${affected[0]!.label}: text streamed before the error (a mid-stream failure)`,
    );
    const lines = affected.map(
      (r, i) =>
        `${r.label}: ${assertTerminalError(outcomes[i]!, r.label, expect)}, ended ${ms(outcomes[i]!.endedAt - inducedAt)} after the failure was induced`,
    );
    const survivors = load.streams.filter((s) => !s.ended());
    assert.equal(survivors.length, this.failing.client.dpSize - 1 + this.healthy.client.dpSize);
    if (rank !== this.failingTopRank)
      assert.equal(load.nonStreaming.ended(), false, 'the pinned request on a live rank goes on');
    assert.deepEqual(
      inFlight(this.healthy),
      this.healthy.client.rankStates().map(() => 1),
      "the healthy group's requests are untouched",
    );
    const siblings = this.failing.client.rankStates().filter((r) => r.engineIndex !== rank);
    assert.ok(
      siblings.every((r) => r.state === 'ready' && r.inFlight >= 1),
      `the failed rank's siblings keep their requests: ${JSON.stringify(siblings)}`,
    );
    return { failedAt, affected, outcomes, survivors, lines };
  }

  /**
   * After a rank failure: the failing group is 200 `degraded` in /health with rank `rank` in state `state` and a cause
   * in `causes` (dead) and every other rank ready; it still serves (`model_gateway_engine_alive` 1, no group-scope
   * failure); `/metrics` has the rank's state gauge and, for a death, `model_gateway_rank_deaths_total{cause} 1`.
   * Returns the cause.
   */
  async assertRankReported(
    rank: number,
    causes: readonly string[],
    state: 'dead' | 'stalled' = 'dead',
  ): Promise<string> {
    const { failing, healthy, gateway } = this;
    const st = failing.client.rankStates().find((r) => r.engineIndex === rank)!;
    assert.equal(st.inFlight, 0, 'the failed rank holds nothing');
    const cause = st.cause ?? '';
    assert.ok(causes.includes(cause), `cause ${cause} is one of ${causes.join(', ')}`);
    assert.deepEqual(failing.client.stats.failures, {}, 'no group-scope failure');
    const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
    assert.equal(health.status, 200);
    const body = (await health.json()) as {
      status: string;
      groups: {
        worker: string;
        status: string;
        message: string;
        ranks: { engineIndex: number; state: string; cause: string | null }[];
      }[];
    };
    assert.equal(body.status, 'degraded');
    assert.deepEqual(
      body.groups.map((g) => [g.worker, g.status]),
      [
        [failing.worker, 'degraded'],
        [healthy.worker, 'ok'],
      ],
    );
    assert.deepEqual(
      body.groups[0]!.ranks.map((r) => [r.engineIndex, r.state]),
      failing.client.rankStates().map((r) => [r.engineIndex, r.engineIndex === rank ? state : 'ready']),
    );
    const alive = await scrape(gateway.url, 'model_gateway_engine_alive');
    assert.ok(
      alive.includes(`{model="${MODEL}",group="${failing.name}",engine="${failing.engine}"} 1`),
      alive.join('\n'),
    );
    const states = await scrape(gateway.url, 'model_gateway_rank_state');
    assert.ok(
      states.includes(`{model="${MODEL}",group="${failing.name}",dp_rank="${rank}",state="${state}"} 1`),
      states.join('\n'),
    );
    if (state === 'dead') {
      const deaths = await scrape(gateway.url, 'model_gateway_rank_deaths_total');
      assert.ok(
        deaths.includes(`{model="${MODEL}",group="${failing.name}",dp_rank="${rank}",cause="${cause}"} 1`),
        deaths.join('\n'),
      );
    }
    return cause;
  }

  /**
   * A group-scope failure: wait until the failing group cannot serve and every request of it ended (hang guard
   * only): its share of `load.streams` (one per rank), the non-streaming request and `extra`. Assert each ended with
   * a terminal error matching `expect`, that the healthy group's streams are still open, and return the measurements.
   */
  async awaitGroupFailure(
    load: PlacedLoad,
    inducedAt: number,
    expect: RegExp,
    extra: SentRequest[] = [],
  ): Promise<FailureReport> {
    await waitUntil(
      () => !this.failing.client.canServe(),
      'the failing group cannot serve',
      () => this.failing.client.rankStates(),
    );
    const failingStreams = this.failing.client.dpSize;
    await waitUntil(
      () =>
        load.streams.filter((s) => s.ended()).length >= failingStreams &&
        load.nonStreaming.ended() &&
        extra.every((r) => r.ended()),
      'every affected request ended',
      () => [...load.streams, load.nonStreaming, ...extra].map((r) => `${r.label}: ${r.ended()}`),
    );
    const endedStreams = load.streams.filter((s) => s.ended());
    assert.equal(endedStreams.length, failingStreams, "only the failing group's streams ended");
    const affected = [...endedStreams, load.nonStreaming, ...extra];
    const outcomes = await Promise.all(affected.map((r) => r.done));
    for (const [i, r] of endedStreams.entries()) {
      assert.ok(
        (outcomes[i]!.sse?.text.length ?? 0) > 0,
        `${r.label}: text streamed before the error (a mid-stream failure)`,
      );
    }
    const lines = affected.map(
      (r, i) =>
        `${r.label}: ${assertTerminalError(outcomes[i]!, r.label, expect)}, ended ${ms(outcomes[i]!.endedAt - inducedAt)} after the failure was induced`,
    );
    const survivors = load.streams.filter((s) => !s.ended());
    assert.equal(survivors.length, this.healthy.client.dpSize);
    assert.ok(this.healthy.client.canServe(), 'the healthy group serves');
    assert.deepEqual(
      inFlight(this.healthy),
      this.healthy.client.rankStates().map(() => 1),
      "the healthy group's requests are untouched",
    );
    assert.ok(this.failedEvent !== null, "the failing group's client emitted 'failed'");
    return { failedAt: this.failedEvent.at, affected, outcomes, survivors, lines };
  }

  /**
   * After a group-scope failure: the failing group holds nothing and counted exactly one group failure with a cause
   * in `causes`; its ranks are all dead; `/health` answers 200 `degraded` with the failing group `unavailable`
   * (`engine core dead`) and the healthy one `ok`; `/metrics` has `model_gateway_engine_alive` 0 / 1 and
   * `model_gateway_engine_failures_total{cause} 1`. Returns the cause.
   */
  async assertFailedGroupReported(causes: readonly string[]): Promise<string> {
    const { failing, healthy, gateway } = this;
    assert.deepEqual(
      inFlight(failing),
      failing.client.rankStates().map(() => 0),
      "the failed group's in-flight sets are empty",
    );
    assert.equal(failing.client.registeredCount, 0, 'no request left registered in the failed group');
    const entries = Object.entries(failing.client.stats.failures);
    assert.equal(entries.length, 1, `exactly one failure cause: ${JSON.stringify(failing.client.stats.failures)}`);
    const [cause, count] = entries[0]!;
    assert.equal(count, 1);
    assert.ok(causes.includes(cause), `failure cause ${cause} is one of ${causes.join(', ')}`);
    assert.ok(
      failing.client.rankStates().every((r) => r.state === 'dead'),
      'every rank of the failed group is marked dead',
    );

    const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
    assert.equal(health.status, 200, '/health is 200 while a group serves');
    const body = (await health.json()) as {
      status: string;
      groups: { worker: string; engine: string; alive: boolean; message: string; failures: Record<string, number> }[];
    };
    assert.equal(body.status, 'degraded');
    assert.deepEqual(
      body.groups.map((g) => [g.worker, g.engine, g.alive, g.message]),
      [
        [failing.worker, failing.engine, false, 'engine core dead'],
        [healthy.worker, healthy.engine, true, 'ok'],
      ],
    );
    assert.deepEqual(body.groups[0]!.failures, { [cause]: 1 });

    const alive = await scrape(gateway.url, 'model_gateway_engine_alive');
    assert.ok(
      alive.includes(`{model="${MODEL}",group="${failing.name}",engine="${failing.engine}"} 0`),
      alive.join('\n'),
    );
    assert.ok(
      alive.includes(`{model="${MODEL}",group="${healthy.name}",engine="${healthy.engine}"} 1`),
      alive.join('\n'),
    );
    const failures = await scrape(gateway.url, 'model_gateway_engine_failures_total');
    assert.ok(failures.includes(`{model="${MODEL}",group="${failing.name}",cause="${cause}"} 1`), failures.join('\n'));
    assert.ok(
      !failures.some((l) => l.includes(`group="${healthy.name}"`)),
      `the healthy group has no failure: ${failures.join('\n')}`,
    );
    return cause;
  }

  /**
   * The gateway keeps serving after a failure: three short streams and one short non-streaming request succeed
   * (finish reason `length`), none of them placed on a rank in `avoid` (a failed rank of the failing group; every rank
   * of it after a group failure: `'all'`); then every long stream still open is cancelled (they had kept streaming:
   * text, no error) and every in-flight set of both groups is empty.
   */
  async assertServesAndDrains(survivors: readonly SentRequest[], avoid: readonly number[] | 'all'): Promise<void> {
    const { failing, healthy } = this;
    const perRank = () => failing.client.rankStates().map((r) => r.dispatchedUnpinned + r.dispatchedPinned);
    const before = dispatched(healthy) + dispatched(failing);
    const failingBefore = perRank();
    const fresh = [0, 1, 2].map((i) => this.send(SHORT, { stream: true, label: `fresh stream #${i}` }));
    fresh.push(this.send(SHORT, { stream: false, label: 'fresh non-streaming request' }));
    const outcomes = await Promise.all(fresh.map((r) => r.done));
    for (const o of outcomes) {
      assert.equal(o.status, 200, JSON.stringify(o));
      if (o.sse) assert.ok(o.sse.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
      else assert.equal((o.json as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason, 'length');
    }
    assert.equal(dispatched(healthy) + dispatched(failing) - before, 4, 'the new requests were all served');
    const after = perRank();
    for (const [i, r] of failing.client.rankStates().entries()) {
      if (avoid === 'all' || avoid.includes(r.engineIndex))
        assert.equal(after[i], failingBefore[i], `nothing was placed on failed rank ${r.engineIndex}`);
    }

    for (const s of survivors) s.cancel();
    for (const o of await Promise.all(survivors.map((s) => s.done))) {
      assert.ok(
        o.cancelled && o.sse !== null && o.sse.error === null && o.sse.text.length > 0,
        `a live stream kept streaming: ${JSON.stringify(o)}`,
      );
    }
    await waitUntil(
      () => [...inFlight(healthy), ...inFlight(failing)].every((n) => n === 0),
      'in-flight sets empty',
      () => [inFlight(healthy), inFlight(failing)],
    );
    assert.equal(healthy.client.registeredCount, 0);
    assert.equal(failing.client.registeredCount, 0);
  }

  /** Resume every stopped rank (SIGCONT to each live child of both groups). */
  resumeAll(): void {
    for (const g of [this.failing, this.healthy]) {
      for (const r of g.sims?.ranks ?? []) if (running(r.child)) r.child.kill('SIGCONT');
    }
  }

  /** Tear down: SIGCONT, cancel and await every request, close the gateway (which stops the ranks). Idempotent. */
  async close(): Promise<void> {
    this.resumeAll();
    for (const r of this.requests) r.cancel();
    await Promise.all(this.requests.map((r) => r.done));
    await this.gateway.close();
  }
}
