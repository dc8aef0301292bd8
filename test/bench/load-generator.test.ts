/**
 * bench:throughput's load generator (bench/throughput/load-generator.ts, driven through load-process.ts) against a
 * small SSE server in this process: content events, TTFT and ITL are measured from the bytes, and a mid-stream
 * error event, a body cut off before its end and an HTTP error are each counted as errors of the phase.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LoadProcess } from '../../bench/throughput/load-process.js';
import { prepareGatewayBuild } from '../../bench/throughput/build.js';
import type { LoadResult } from '../../bench/throughput/protocol.js';

type Mode = 'ok' | 'error-event' | 'cut-off' | 'http-500';

const base = { id: 'chatcmpl-0', object: 'chat.completion.chunk', created: 1, model: 'm', system_fingerprint: 'fp' };
const chunk = (content: string): string =>
  `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: null })}\n\n`;

/** Streams `max_tokens` one-token chunks 2 ms apart (two of them in one write, to exercise several events per read). */
function serve(mode: Mode, res: ServerResponse, maxTokens: number): void {
  if (mode === 'http-500') {
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'boom', type: 'internal_error', param: null, code: 500 } }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let sent = 0;
  const tick = (): void => {
    if (res.destroyed) return;
    if (mode === 'cut-off' && sent >= 2) return void res.destroy();
    if (mode === 'error-event' && sent >= 2) {
      res.end(
        `data: ${JSON.stringify({ error: { message: 'rank died', type: 'internal_error', param: null, code: 500 } })}\n\ndata: [DONE]\n\n`,
      );
      return;
    }
    if (sent >= maxTokens) {
      res.end(
        `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: sent, total_tokens: 3 + sent } })}\n\ndata: [DONE]\n\n`,
      );
      return;
    }
    const two = sent + 2 <= maxTokens && sent % 4 === 0;
    res.write(two ? chunk('a') + chunk('b') : chunk('c'));
    sent += two ? 2 : 1;
    setTimeout(tick, 2);
  };
  tick();
}

async function withServer(mode: Mode, run: (url: string) => Promise<void>): Promise<void> {
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => serve(mode, res, (JSON.parse(body) as { max_tokens: number }).max_tokens));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await run(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

async function phase(load: LoadProcess, mode: Mode): Promise<LoadResult> {
  let result: LoadResult | undefined;
  await withServer(mode, async (url) => {
    result = await load.run(
      {
        url,
        path: '/v1/chat/completions',
        streams: 4,
        stream: true,
        maxTokens: 12,
        warmupMs: 200,
        windowMs: 600,
        seed: 1,
      },
      { onWindowStart() {}, onWindowEnd() {} },
    );
  });
  return result!;
}

test(
  'the load generator measures streams from their bytes and counts error events, cut-off bodies and HTTP errors',
  { timeout: 60_000 },
  async () => {
    const load = LoadProcess.start(await prepareGatewayBuild('tsx'));
    try {
      const ok = await phase(load, 'ok');
      assert.equal(ok.errors, 0, String(ok.firstError));
      assert.ok(ok.requests > 0 && ok.tokens > 0, JSON.stringify(ok));
      assert.equal(ok.tokensPerEvent, 1, 'usage.completion_tokens = content events');
      assert.ok(ok.ttftMs.samples > 0 && ok.itlMs.samples > 0, JSON.stringify(ok));
      // Two events in one read: the second has an ITL of 0 (stamped with the same arrival).
      assert.equal(ok.itlMs.p50 >= 0, true);

      const errorEvent = await phase(load, 'error-event');
      assert.ok(errorEvent.errors > 0);
      assert.match(String(errorEvent.firstError), /^mid-stream error: rank died$/);

      const cutOff = await phase(load, 'cut-off');
      assert.ok(cutOff.errors > 0);
      assert.match(String(cutOff.firstError), /^response cut off before its end$/);
      assert.equal(cutOff.requests, 0);

      const refused = await phase(load, 'http-500');
      assert.ok(refused.errors > 0);
      assert.match(String(refused.firstError), /^HTTP 500: .*boom/);
    } finally {
      load.stop();
    }
  },
);
