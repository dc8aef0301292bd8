/**
 * Shared helpers of the server tests: the real tokenizer (loaded once), an app over a `FakeBackend`, and an SSE
 * payload parser that refuses malformed records.
 */
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { buildApp } from '../../src/server/app.js';
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

/** A built (not listening) app over a fresh fake backend. */
export async function makeApp(
  opts: { backend?: FakeBackend; bodyLimitBytes?: number } = {},
): Promise<{ app: FastifyInstance; backend: FakeBackend; tokenizer: GatewayTokenizer; metrics: GatewayMetrics }> {
  const backend = opts.backend ?? new FakeBackend();
  const tokenizer = await loadTokenizer();
  const metrics = new GatewayMetrics({ modelId: MODEL_ID });
  const app = await buildApp({
    client: backend,
    tokenizer,
    modelId: MODEL_ID,
    logger: pino({ level: 'silent' }),
    metrics,
    ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
  });
  return { app, backend, tokenizer, metrics };
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
