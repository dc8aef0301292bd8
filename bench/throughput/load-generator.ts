/**
 * The load generator of bench:throughput: a process of its own (so its CPU is never counted as the gateway's) that
 * drives closed-loop streams over HTTP/1.1 keep-alive connections and times what a client sees. Started by
 * bench/throughput.ts with an IPC channel; it receives one `run` message (protocol.ts `LoadScenario`), reports the
 * instants its measured window opens and closes (the orchestrator samples the gateway's CPU then), tears the
 * connections down and sends the `result`, then waits for the next `run`.
 *
 * Kept cheap on purpose, because it shares the cores with the gateway: one raw `net` connection per stream
 * (./http-client.ts: the response parsed from its bytes into one reused read buffer, no `node:http` objects or
 * stream pipelines), request bytes built once per phase, bodies kept as bytes, SSE content events counted from the
 * bytes (./sse-scan.ts: only the usage chunk, error events and unusual records are JSON-parsed).
 *
 * What it measures and checks, per request (the figures' honesty rests on it):
 * - streaming: every content event (a record with non-empty first-choice text, as `JSON.parse` would judge it) is
 *   stamped with the arrival of the socket read that completed it; TTFT = request written → first content event (for
 *   requests sent inside the window), ITL = gap between consecutive content events of one request (both inside the
 *   window; events of one read have a gap of 0). Tokens = content events in the window × tokens per content event of
 *   the completed requests (`usage.completion_tokens` ÷ their events; 1.0 when each event is one token);
 * - not streaming: the whole JSON body is parsed at its end; tokens = its `usage.completion_tokens`, counted when it
 *   completes inside the window;
 * - errors of the phase (counted, the first message kept): an HTTP status other than 200 (`HTTP <code>: <body>`), a
 *   malformed or oversized response head or chunked framing, bytes past a response's end, a connection that fails
 *   before the response (`request failed: …`) or closes before the body's end (`response cut off before its end`), an
 *   SSE error event (`mid-stream error: …`), an SSE record that is not JSON, a stream that ends without `[DONE]` and a
 *   usage chunk, an SSE record or non-streamed body past its size cap (1 MiB / 4 MiB), a non-streamed body that is not JSON
 *   or has no usage. Connections torn down at the end of the phase
 *   are not errors.
 */
import { performance } from 'node:perf_hooks';
import { percentile } from '../routing/stats.js';
import { seededRandom } from '../routing/workloads.js';
import { HttpConnection, type ResponseSink } from './http-client.js';
import type { FromLoadGenerator, LoadResult, LoadScenario, Percentiles, ToLoadGenerator } from './protocol.js';
import { SseEventScanner } from './sse-scan.js';

function send(message: FromLoadGenerator): void {
  process.send?.(message);
}

const summary = (samples: number[]): Percentiles => ({
  p50: percentile(samples, 50),
  p99: percentile(samples, 99),
  samples: samples.length,
});

/** The state of one phase shared by all its streams. */
class Phase {
  windowOpen = false;
  windowStart = Infinity;
  stopped = false;
  eventsInWindow = 0;
  tokensInWindow = 0;
  requestsInWindow = 0;
  completedTokens = 0;
  completedEvents = 0;
  errors = 0;
  firstError: string | null = null;
  readonly ttft: number[] = [];
  readonly itl: number[] = [];
  readonly e2e: number[] = [];

  error(message: string): void {
    if (this.stopped) return; // connections torn down at the end of the phase are not errors
    this.errors++;
    this.firstError ??= message;
  }
}

/** Longest part of an error response's body kept for the message (characters). */
const ERROR_BODY_CHARS = 200;

/** Collects the body of a non-200 response and reports it as an error of the phase at its end. */
class ErrorBody {
  private text = '';
  constructor(private readonly status: number) {}
  add(bytes: Buffer, start: number, end: number): void {
    if (this.text.length < ERROR_BODY_CHARS)
      this.text += bytes.toString('utf8', start, Math.min(end, start + ERROR_BODY_CHARS * 4));
  }
  message(): string {
    return `HTTP ${this.status}: ${this.text.slice(0, ERROR_BODY_CHARS)}`;
  }
}

/**
 * One SSE response: content events counted from the bytes (./sse-scan.ts), TTFT and ITL stamped per read, the usage
 * of the phase at the end.
 */
class StreamResponse implements ResponseSink {
  private readonly scanner = new SseEventScanner();
  private readonly onError: (message: string) => void;
  private errorBody: ErrorBody | null = null;
  private lastContent = -1;
  private events = 0;

  constructor(
    private readonly phase: Phase,
    private readonly sentAt: number,
    private readonly done: () => void,
  ) {
    this.onError = (message) => phase.error(message);
  }

  head(status: number): void {
    if (status !== 200) this.errorBody = new ErrorBody(status);
  }

  body(bytes: Buffer, start: number, end: number, now: number): void {
    if (this.errorBody !== null) return this.errorBody.add(bytes, start, end);
    const n = this.scanner.feed(bytes, this.onError, start, end);
    if (n === 0) return;
    const phase = this.phase;
    this.events += n;
    if (phase.windowOpen) {
      phase.eventsInWindow += n;
      if (this.lastContent < 0) {
        if (this.sentAt >= phase.windowStart) phase.ttft.push(now - this.sentAt);
      } else if (this.lastContent >= phase.windowStart) phase.itl.push(now - this.lastContent);
      // The other events of this read arrived with it: a gap of 0 each.
      for (let i = 1; i < n; i++) phase.itl.push(0);
    }
    this.lastContent = now;
  }

  end(now: number): void {
    const phase = this.phase;
    if (this.errorBody !== null) phase.error(this.errorBody.message());
    else if (!this.scanner.done || this.scanner.completionTokens < 0)
      phase.error('stream ended without [DONE] and usage');
    else {
      phase.completedTokens += this.scanner.completionTokens;
      phase.completedEvents += this.events;
      if (phase.windowOpen) {
        phase.requestsInWindow++;
        phase.e2e.push(now - this.sentAt);
      }
    }
    this.done();
  }

  fail(message: string): void {
    this.phase.error(message);
    this.done();
  }
}

/** Longest non-streamed body kept for its JSON, bytes; a longer one (or one that never ends) is an error, not memory. */
const MAX_WHOLE_BODY_BYTES = 4 * 1024 * 1024;

/** One JSON response: its usage recorded at completion. */
class WholeResponse implements ResponseSink {
  private readonly chunks: Buffer[] = [];
  /** Body bytes seen; past `MAX_WHOLE_BODY_BYTES` the chunks are dropped and the end reports the overflow. */
  private size = 0;
  private errorBody: ErrorBody | null = null;

  constructor(
    private readonly phase: Phase,
    private readonly sentAt: number,
    private readonly done: () => void,
  ) {}

  head(status: number): void {
    if (status !== 200) this.errorBody = new ErrorBody(status);
  }

  body(bytes: Buffer, start: number, end: number): void {
    if (this.errorBody !== null) return this.errorBody.add(bytes, start, end);
    this.size += end - start;
    if (this.size > MAX_WHOLE_BODY_BYTES) this.chunks.length = 0;
    else this.chunks.push(Buffer.from(bytes.subarray(start, end))); // the read buffer is reused
  }

  end(now: number): void {
    const phase = this.phase;
    if (this.errorBody !== null) phase.error(this.errorBody.message());
    else if (this.size > MAX_WHOLE_BODY_BYTES) phase.error(`response body longer than ${MAX_WHOLE_BODY_BYTES} bytes`);
    else {
      const body = Buffer.concat(this.chunks).toString('utf8');
      try {
        const tokens = (JSON.parse(body) as { usage?: { completion_tokens?: number } }).usage?.completion_tokens;
        if (typeof tokens !== 'number') phase.error('response without usage');
        else if (phase.windowOpen) {
          phase.requestsInWindow++;
          phase.tokensInWindow += tokens;
          phase.e2e.push(now - this.sentAt);
        }
      } catch {
        phase.error(`unparseable response ${JSON.stringify(body.slice(0, 80))}`);
      }
    }
    this.done();
  }

  fail(message: string): void {
    this.phase.error(message);
    this.done();
  }
}

/** The request bytes (head and JSON body) of one request with `maxTokens`. */
function requestBytes(scenario: LoadScenario, target: URL, maxTokens: number): string {
  const chat = scenario.path.endsWith('/chat/completions');
  const body = JSON.stringify({
    ...(chat
      ? { messages: [{ role: 'user', content: 'Tell me about the weather and the river.' }] }
      : { prompt: 'Tell me about the river.' }),
    max_tokens: maxTokens,
    ignore_eos: true,
    stream: scenario.stream,
    ...(scenario.stream ? { stream_options: { include_usage: true } } : {}),
  });
  return (
    `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: keep-alive\r\n\r\n${body}`
  );
}

/** One closed-loop stream: a request, then the next as soon as its response ended or failed, until the phase stops. */
function runStream(
  scenario: LoadScenario,
  target: URL,
  phase: Phase,
  readBuffer: Buffer,
  firstMaxTokens: number,
  steady: string,
  open: Set<HttpConnection>,
): Promise<void> {
  return new Promise<void>((resolve) => {
    let conn: HttpConnection | null = null;
    let first = true;
    const next = (): void => {
      if (phase.stopped) return resolve();
      if (conn === null || !conn.usable) {
        if (conn !== null) open.delete(conn);
        conn = new HttpConnection(target.hostname, Number(target.port), readBuffer, (message) => phase.error(message));
        open.add(conn);
      }
      const bytes = first ? requestBytes(scenario, target, firstMaxTokens) : steady;
      first = false;
      const sentAt = performance.now();
      // A failed request retries on the next turn of the loop (no tight loop on a refused connection).
      let settled = false;
      const done = (): void => {
        if (settled) return;
        settled = true;
        if (conn !== null && !conn.usable) setImmediate(next);
        else next();
      };
      conn.request(
        bytes,
        scenario.stream ? new StreamResponse(phase, sentAt, done) : new WholeResponse(phase, sentAt, done),
      );
    };
    next();
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs one phase: warm-up, the measured window, then teardown of every connection. */
async function runPhase(scenario: LoadScenario): Promise<LoadResult> {
  const phase = new Phase();
  const random = seededRandom(scenario.seed);
  const target = new URL(scenario.path, scenario.url);
  const steady = requestBytes(scenario, target, scenario.maxTokens);
  // One read buffer for every connection: reads are handled one at a time, synchronously (./http-client.ts).
  const readBuffer = Buffer.allocUnsafe(256 * 1024);
  const open = new Set<HttpConnection>();
  const loops = Array.from({ length: scenario.streams }, () =>
    runStream(scenario, target, phase, readBuffer, 1 + Math.floor(random() * scenario.maxTokens), steady, open),
  );
  await sleep(scenario.warmupMs);
  const cpuBefore = process.cpuUsage();
  phase.windowStart = performance.now();
  phase.windowOpen = true;
  send({ type: 'window-start' });
  await sleep(scenario.windowMs);
  phase.windowOpen = false;
  const windowMs = performance.now() - phase.windowStart;
  const cpu = process.cpuUsage(cpuBefore);
  send({ type: 'window-end' });
  phase.stopped = true;
  for (const conn of open) conn.destroy();
  await Promise.all(loops);
  const tokensPerEvent = phase.completedEvents > 0 ? phase.completedTokens / phase.completedEvents : Number.NaN;
  return {
    windowMs,
    tokens: scenario.stream
      ? phase.eventsInWindow * (Number.isFinite(tokensPerEvent) ? tokensPerEvent : 1)
      : phase.tokensInWindow,
    requests: phase.requestsInWindow,
    errors: phase.errors,
    firstError: phase.firstError,
    ttftMs: summary(phase.ttft),
    itlMs: summary(phase.itl),
    e2eMs: summary(phase.e2e),
    tokensPerEvent: scenario.stream ? tokensPerEvent : Number.NaN,
    clientCpuMicros: cpu.user + cpu.system,
  };
}

process.on('message', (message: ToLoadGenerator) => {
  if (message.type !== 'run') return;
  runPhase(message.scenario).then(
    (result) => send({ type: 'result', result }),
    (err: unknown) =>
      send({ type: 'failed', message: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
});
process.on('disconnect', () => process.exit(0));
