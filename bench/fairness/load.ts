/**
 * The load of bench:fairness: open-loop (Poisson) arrivals per tenant against a gateway's HTTP port, each request a
 * streamed completion of a fixed length, with what the client saw: when it was sent, its TTFT (first SSE chunk with
 * text, ms), when it ended, its HTTP status, and the error code of a refusal. Nothing here reads the gateway's
 * internals: the benchmark judges flow control from the client's side.
 */
import { performance } from 'node:perf_hooks';
import { prng } from '../../test/helpers/prng.js';
import { BENCH_MODEL } from './gateway.js';

/** One tenant of the load: its key, band and offered rate (requests per second). */
export interface TenantLoad {
  readonly name: string;
  readonly key: string;
  readonly band: 'critical' | 'standard' | 'sheddable';
  readonly ratePerSecond: number;
}

/** What one request did. Times are ms on this process's `performance.now()` clock. */
export interface RequestResult {
  readonly tenant: string;
  readonly sentAt: number;
  /** ms from sending to the first text chunk; null when none came. */
  readonly ttftMs: number | null;
  readonly endedAt: number;
  /** HTTP status; 0 when the request failed without one (a network error: a lost request). */
  readonly status: number;
  /** The error body's `code` (or the SSE error event's) when the request did not end with tokens. */
  readonly code: string | null;
}

/** The request body: `tokens` output tokens exactly (min_tokens = max_tokens), a short prompt. */
function body(tokens: number, i: number): string {
  return JSON.stringify({
    model: BENCH_MODEL,
    prompt: `Request ${i}: write about the weather.`,
    max_tokens: tokens,
    min_tokens: tokens,
    stream: true,
  });
}

/** Send one streamed completion and read it to its end. Never throws (a failure is status 0). */
export async function sendOne(url: string, t: TenantLoad, tokens: number, i: number): Promise<RequestResult> {
  const sentAt = performance.now();
  let ttftMs: number | null = null;
  let code: string | null = null;
  try {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${t.key}`,
        'x-gateway-inference-objective': t.band,
      },
      body: body(tokens, i),
      signal: AbortSignal.timeout(300_000),
    });
    if (res.status !== 200) {
      const text = await res.text();
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
      } catch {
        code = null;
      }
      return { tenant: t.name, sentAt, ttftMs, endedAt: performance.now(), status: res.status, code };
    }
    const decoder = new TextDecoder();
    for await (const chunk of res.body!) {
      const text = decoder.decode(chunk as Uint8Array, { stream: true });
      if (ttftMs === null && text.includes('"text":"')) ttftMs = performance.now() - sentAt;
      if (text.includes('"error"')) code = /"code":"([^"]+)"/.exec(text)?.[1] ?? 'stream_error';
    }
    return { tenant: t.name, sentAt, ttftMs, endedAt: performance.now(), status: 200, code };
  } catch {
    return { tenant: t.name, sentAt, ttftMs, endedAt: performance.now(), status: 0, code: 'network' };
  }
}

/**
 * Offer every tenant's load for `durationMs` (Poisson arrivals from `seed`), then wait for every request to end.
 * Resolves with every request's result, in sending order.
 */
export async function offer(
  url: string,
  tenants: readonly TenantLoad[],
  tokens: number,
  durationMs: number,
  seed: number,
): Promise<RequestResult[]> {
  const start = performance.now();
  const pending: Promise<RequestResult>[] = [];
  let i = 0;
  await Promise.all(
    tenants.map(async (t, k) => {
      if (t.ratePerSecond <= 0) return;
      const random = prng(seed * 31 + k);
      let at = 0;
      for (;;) {
        at += (-Math.log(1 - random()) * 1000) / t.ratePerSecond;
        if (at >= durationMs) return;
        const wait = start + at - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        pending.push(sendOne(url, t, tokens, i++));
      }
    }),
  );
  return Promise.all(pending);
}

/**
 * Keep `concurrency` requests of `t` in flight for `durationMs` (a closed loop); resolves with the requests per
 * second that ended with 200 (the fleet's capacity when `concurrency` fills every rank's batch).
 */
export async function closedLoopRate(
  url: string,
  t: TenantLoad,
  tokens: number,
  concurrency: number,
  durationMs: number,
): Promise<number> {
  const start = performance.now();
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, c) => {
      let i = c;
      while (performance.now() - start < durationMs) {
        const r = await sendOne(url, t, tokens, i);
        i += concurrency;
        if (r.status === 200 && r.endedAt - start <= durationMs) done++;
      }
    }),
  );
  return (done * 1000) / durationMs;
}
