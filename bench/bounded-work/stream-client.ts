/**
 * The background streams of bench:bounded-work, in a process of their own (forked with IPC) so the benchmark's own
 * work (building and sending multi-megabyte bodies, reading large answers) never delays their reads. Opens `streams`
 * streamed chat completions against `url` and records, for every SSE read, when it arrived (epoch ms,
 * `performance.timeOrigin + performance.now()`) and the gap since the stream's previous read. A stream that ends is
 * replaced.
 *
 * IPC: `{start: {url, streams, maxTokens}}` → `{started: true}` once every stream has had its first read;
 * `{gaps: {from, to}}` → `{gaps: {maxMs, p99Ms, reads}}`: the largest gap (and p99 of gaps) of the reads whose gap
 * overlaps [from, to] (epoch ms); `{stop: true}` ends every stream and exits.
 */
import { request, type ClientRequest } from 'node:http';
import { performance } from 'node:perf_hooks';

interface Read {
  at: number;
  gap: number;
}

const reads: Read[] = [];
const open = new Set<ClientRequest>();
let stopping = false;
const now = () => performance.timeOrigin + performance.now();

/** One streamed chat completion; calls `first` at its first read; replaced when it ends. */
function stream(url: URL, maxTokens: number, first: () => void): void {
  const body = JSON.stringify({
    messages: [{ role: 'user', content: 'Tell me a long story about a river.' }],
    stream: true,
    max_tokens: maxTokens,
  });
  const req = request({
    host: url.hostname,
    port: url.port,
    path: '/v1/chat/completions',
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
  });
  open.add(req);
  let last = 0;
  let told = false;
  req.on('response', (res) => {
    res.on('data', () => {
      const t = now();
      if (last !== 0) reads.push({ at: t, gap: t - last });
      last = t;
      if (!told) {
        told = true;
        first();
      }
    });
    res.on('end', () => {
      open.delete(req);
      if (!stopping) stream(url, maxTokens, () => {});
    });
  });
  req.on('error', () => open.delete(req));
  req.end(body);
}

process.on(
  'message',
  (m: {
    start?: { url: string; streams: number; maxTokens: number };
    gaps?: { from: number; to: number };
    stop?: true;
  }) => {
    if (m.start !== undefined) {
      const { url, streams, maxTokens } = m.start;
      let waiting = streams;
      for (let i = 0; i < streams; i++) {
        stream(new URL(url), maxTokens, () => {
          if (--waiting === 0) process.send?.({ started: true });
        });
      }
    } else if (m.gaps !== undefined) {
      const { from, to } = m.gaps;
      const gaps = reads
        .filter((r) => r.at >= from && r.at - r.gap <= to)
        .map((r) => r.gap)
        .sort((a, b) => a - b);
      // Keep memory bounded: reads older than the window asked about are never asked about again.
      const keepFrom = reads.findIndex((r) => r.at >= from);
      if (keepFrom > 0) reads.splice(0, keepFrom);
      process.send?.({
        gaps: {
          maxMs: gaps.at(-1) ?? Number.NaN,
          p99Ms: gaps.length === 0 ? Number.NaN : gaps[Math.min(gaps.length - 1, Math.floor(gaps.length * 0.99))]!,
          reads: gaps.length,
        },
      });
    } else if (m.stop === true) {
      stopping = true;
      for (const req of open) req.destroy();
      process.exit(0);
    }
  },
);
