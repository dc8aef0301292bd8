/**
 * The SSE floor of bench:throughput: the least an HTTP front can do per streamed token on `node:http`. A bare server
 * (no framework, no engine, no tokenizer) answering `/v1/chat/completions` with `stream: true` like the gateway: the
 * same headers, a role chunk, then `max_tokens` content chunks of the gateway's JSON shape (one `JSON.stringify` and
 * one `res.write` per chunk, all open streams advanced once per event-loop turn), the terminal chunk, the usage chunk
 * and `[DONE]`. Started by bench/throughput/floors.ts with an IPC channel; listens on a free port and sends
 * `{ port }`. Its CPU per chunk is the floor the gateway's CPU per streamed token is compared with.
 */
import { createServer, type ServerResponse } from 'node:http';

interface OpenStream {
  res: ServerResponse;
  id: string;
  left: number;
  total: number;
}

const open = new Set<OpenStream>();
let ticking = false;
const created = Math.floor(Date.now() / 1000);
const WORDS = [' The', ' river', ' runs', ' past', ' the', ' old', ' mill', ' and', ' turns', ' slowly', '.'];

function chunk(s: OpenStream, choice: Record<string, unknown>, usage?: Record<string, number>): string {
  const body = {
    id: s.id,
    object: 'chat.completion.chunk',
    created,
    model: 'qwen3',
    system_fingerprint: 'fp_floor',
    choices: usage ? [] : [choice],
    usage: usage ?? null,
  };
  return `data: ${JSON.stringify(body)}\n\n`;
}

/** Advances every open stream by one token; re-arms itself while streams are open. */
function tick(): void {
  for (const s of open) {
    if (s.res.destroyed) {
      open.delete(s);
      continue;
    }
    const n = s.total - s.left;
    s.left--;
    if (s.left > 0) {
      s.res.write(
        chunk(s, { index: 0, delta: { content: WORDS[n % WORDS.length] }, logprobs: null, finish_reason: null }),
      );
      continue;
    }
    s.res.write(
      chunk(s, { index: 0, delta: { content: WORDS[n % WORDS.length] }, logprobs: null, finish_reason: 'length' }),
    );
    s.res.write(chunk(s, {}, { prompt_tokens: 20, completion_tokens: s.total, total_tokens: 20 + s.total }));
    s.res.end('data: [DONE]\n\n');
    open.delete(s);
  }
  if (open.size > 0) setImmediate(tick);
  else ticking = false;
}

let counter = 0;
const server = createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (c: string) => (body += c));
  req.on('end', () => {
    const parsed = JSON.parse(body) as { max_tokens?: number };
    const total = Math.max(1, parsed.max_tokens ?? 16);
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    });
    const s: OpenStream = { res, id: `chatcmpl-${(counter++).toString(16).padStart(32, '0')}`, left: total, total };
    res.write(chunk(s, { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }));
    open.add(s);
    if (!ticking) {
      ticking = true;
      setImmediate(tick);
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.send?.({ port: typeof address === 'object' && address !== null ? address.port : 0 });
});
process.on('disconnect', () => process.exit(0));
