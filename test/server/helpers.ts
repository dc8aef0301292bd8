/**
 * Shared helpers of the server tests: the real tokenizer (loaded once, optionally behind an `encode` counter), an
 * app over a `FakeBackend`, an SSE payload parser that refuses malformed records, and a raw HTTP/1.1 exchange.
 */
import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import { after, before } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { buildApp, type GatewayDeps } from '../../src/server/app.js';
import type { HttpEdgeOptions } from '../../src/server/edge-options.js';
import type { AdmissionGate } from '../../src/server/admission.js';
import type { BackendGroup } from '../../src/server/backend.js';
import type { GatewayEvents } from '../../src/server/gateway-events.js';
import { GatewayMetrics } from '../../src/server/metrics.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { FakeBackend } from './fake-backend.js';

let tokenizerPromise: Promise<GatewayTokenizer> | null = null;

/** The bundled Qwen3 tokenizer, loaded once per test process. */
export function loadTokenizer(): Promise<GatewayTokenizer> {
  tokenizerPromise ??= GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  return tokenizerPromise;
}

export const MODEL_ID = 'test-model';

/** The worker name of the single group `makeApp` builds when no `groups` are given. */
export const WORKER = 'ipc:///tmp/fake/worker';

/**
 * A built (not listening) app over fake backends (and the shared Qwen3 tokenizer unless one is given): one TokenSpeed
 * group named `WORKER` over `backend` (a fresh fake by default), or the given `groups`; `edge` options (API keys,
 * CORS, limits), a `logger` (default silent) and the served model names (default `MODEL_ID`) are passed through.
 */
export async function makeApp(
  opts: {
    backend?: FakeBackend;
    groups?: BackendGroup[];
    bodyLimitBytes?: number;
    tokenizer?: GatewayTokenizer;
    /** Output-parsing options of the app (tool-call parser, reasoning parser, Responses store). */
    output?: Pick<GatewayDeps, 'toolCallParser' | 'reasoningParser' | 'responsesStore' | 'trustRequestChatTemplate'>;
    edge?: HttpEdgeOptions;
    logger?: Logger;
    servedModelNames?: string[];
    /** The drain gate (src/lifecycle.ts); default: never draining. */
    admission?: AdmissionGate;
    /** Tracing (request-trace.ts); default: off. */
    tracer?: GatewayDeps['tracer'];
    /** The event list (a test's clock); default: the app's own. */
    events?: GatewayEvents;
  } = {},
): Promise<{ app: FastifyInstance; backend: FakeBackend; tokenizer: GatewayTokenizer; metrics: GatewayMetrics }> {
  const backend = opts.backend ?? new FakeBackend();
  const tokenizer = opts.tokenizer ?? (await loadTokenizer());
  const metrics = new GatewayMetrics({ modelId: opts.servedModelNames?.[0] ?? MODEL_ID });
  const app = await buildApp({
    groups: opts.groups ?? [{ worker: WORKER, name: 'tokenspeed-0', engine: 'tokenspeed', backend }],
    tokenizer,
    modelId: opts.servedModelNames?.[0] ?? MODEL_ID,
    ...(opts.servedModelNames !== undefined ? { servedModelNames: opts.servedModelNames } : {}),
    logger: opts.logger ?? pino({ level: 'silent' }),
    metrics,
    ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
    ...opts.output,
    ...(opts.edge !== undefined ? { edge: opts.edge } : {}),
    ...(opts.admission !== undefined ? { admission: opts.admission } : {}),
    ...(opts.tracer !== undefined ? { tracer: opts.tracer } : {}),
    ...(opts.events !== undefined ? { events: opts.events } : {}),
  });
  return { app, backend, tokenizer, metrics };
}

/**
 * `makeApp(opts)` listening on 127.0.0.1 (any free port); `port` is the bound port. The caller closes `app`.
 */
export async function listenApp(opts: Parameters<typeof makeApp>[0] = {}): Promise<AppFixture & { port: number }> {
  const made = await makeApp(opts);
  await made.app.listen({ port: 0, host: '127.0.0.1' });
  return { ...made, port: (made.app.server.address() as AddressInfo).port };
}

/** The app, fake backend, tokenizer and metrics of one `describe` block (filled in by its `before` hook). */
export type AppFixture = Awaited<ReturnType<typeof makeApp>>;

/**
 * Register, in the calling `describe` block, a `before` hook that builds an app with `makeApp(opts)` and an `after`
 * hook that closes it. Returns the fixture object, whose fields are set once the `before` hook has run (read them
 * inside hooks and tests only). Hooks the caller registers later run after this one, so they may use the fixture.
 */
export function useApp(opts: Parameters<typeof makeApp>[0] = {}): AppFixture {
  const fixture = {} as AppFixture;
  before(async () => {
    Object.assign(fixture, await makeApp(opts));
  });
  after(() => fixture.app.close());
  return fixture;
}

/** Parsed SSE stream: the JSON events in order, and whether it ended with exactly one `[DONE]`. */
export interface ParsedSse {
  events: Array<Record<string, unknown>>;
  doneCount: number;
}

/** Parse an SSE payload; asserts every record is a complete `data: ...` line and `[DONE]` is last and unique. */
export function parseSse(payload: string): ParsedSse {
  assert.ok(payload.endsWith('\n\n'), 'SSE payload must end with a blank line');
  const records = payload.slice(0, -2).split('\n\n');
  const events: Array<Record<string, unknown>> = [];
  let doneCount = 0;
  records.forEach((rec, i) => {
    assert.ok(rec.startsWith('data: '), `record ${i} is not a data record: ${JSON.stringify(rec)}`);
    assert.ok(!rec.includes('\n'), `record ${i} spans several lines`);
    const data = rec.slice('data: '.length);
    if (data === '[DONE]') {
      doneCount++;
      assert.equal(i, records.length - 1, '[DONE] must be the last record');
      return;
    }
    events.push(JSON.parse(data) as Record<string, unknown>);
  });
  return { events, doneCount };
}

/** The choices array of an SSE event (asserting it is an array). */
export function choicesOf(ev: Record<string, unknown>): Array<Record<string, unknown>> {
  assert.ok(Array.isArray(ev.choices), `event has no choices array: ${JSON.stringify(ev)}`);
  return ev.choices as Array<Record<string, unknown>>;
}

/** Concatenated streamed text of chat (`delta.content`) or completions (`text`) chunks. */
export function streamedText(events: Array<Record<string, unknown>>): string {
  let text = '';
  for (const ev of events) {
    if (!Array.isArray(ev.choices)) continue;
    for (const c of ev.choices as Array<Record<string, unknown>>) {
      const delta = c.delta as { content?: string } | undefined;
      if (delta?.content !== undefined) text += delta.content;
      if (typeof c.text === 'string') text += c.text;
    }
  }
  return text;
}

/**
 * The shared Qwen3 tokenizer behind a delegate that counts `encode` calls (the prototype chain keeps every other
 * method and field). `encodeCalls` grows by one per call.
 */
export async function countingTokenizer(): Promise<{ tokenizer: GatewayTokenizer; encodeCalls: () => number }> {
  const base = await loadTokenizer();
  let calls = 0;
  const tokenizer = Object.create(base) as GatewayTokenizer;
  tokenizer.encode = (text, opts) => {
    calls++;
    return base.encode(text, opts);
  };
  return { tokenizer, encodeCalls: () => calls };
}

/** A raw HTTP/1.1 exchange: everything the server sent until it closed the connection. */
export interface RawExchange {
  status: number;
  /** Response header names lower-cased → value. */
  headers: Record<string, string>;
  /** The bytes after the header section, as text (chunked framing left in place). */
  body: string;
}

/**
 * Write `text` on a fresh TCP connection to 127.0.0.1:`port` and resolve once the SERVER closes it (so the
 * request must make the server close: `Connection: close`, or an error the server ends the connection on).
 * Rejects after `guardMs` (a hang guard, not a timing assertion) naming `what`.
 */
export function rawExchange(port: number, text: string | Buffer, what: string, guardMs = 10_000): Promise<RawExchange> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`hang guard: the server did not close the connection within ${guardMs} ms (${what})`));
    }, guardMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => {}); // a reset after the response is fine: 'close' follows
    socket.on('close', () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks).toString('utf8');
      const split = raw.indexOf('\r\n\r\n');
      const head = split === -1 ? raw : raw.slice(0, split);
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: split === -1 ? '' : raw.slice(split + 4) });
    });
  });
}
