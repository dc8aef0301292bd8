/**
 * The load generator of bench:throughput: a process of its own (so its CPU is never counted as the gateway's) that
 * drives closed-loop streams over raw `node:http` keep-alive connections and times what a client sees. Started by
 * bench/throughput.ts with an IPC channel; it receives one `run` message (protocol.ts `LoadScenario`), reports the
 * instants its measured window opens and closes (the orchestrator samples the gateway's CPU then), tears the
 * connections down and sends the `result`, then waits for the next `run`.
 *
 * Kept cheap on purpose: one socket per stream, bodies kept as bytes, SSE content events counted from the bytes
 * (./sse-scan.ts: only the usage chunk, error events and unusual records are JSON-parsed). A non-200 answer, an error
 * event, a stream without `[DONE]` and usage, and a body cut off before the teardown are errors of the phase.
 */
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { percentile } from '../routing/stats.js';
import { seededRandom } from '../routing/workloads.js';
import type { FromLoadGenerator, LoadResult, LoadScenario, Percentiles, ToLoadGenerator } from './protocol.js';
import { SseEventScanner } from './sse-scan.js';

function send(message: FromLoadGenerator): void {
  process.send?.(message);
}

const summary = (samples: number[]): Percentiles => ({ p50: percentile(samples, 50), p99: percentile(samples, 99), samples: samples.length });

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

/**
 * Reads one SSE response to its end, recording content events, TTFT, ITL and the usage of the phase. The body stays
 * bytes: ./sse-scan.ts counts the content events of each read, and every event a read completes is stamped with
 * that read's arrival time.
 */
function readStream(res: IncomingMessage, phase: Phase, sentAt: number, done: () => void): void {
  const scanner = new SseEventScanner();
  const onError = (message: string): void => phase.error(message);
  let lastContent = -1;
  let events = 0;
  res.on('data', (chunk: Buffer) => {
    const now = performance.now();
    const n = scanner.feed(chunk, onError);
    for (let i = 0; i < n; i++) {
      events++;
      if (phase.windowOpen) {
        phase.eventsInWindow++;
        if (lastContent < 0) {
          if (sentAt >= phase.windowStart) phase.ttft.push(now - sentAt);
        } else if (lastContent >= phase.windowStart) phase.itl.push(now - lastContent);
      }
      lastContent = now;
    }
  });
  res.on('end', () => {
    if (!scanner.done || scanner.completionTokens < 0) phase.error('stream ended without [DONE] and usage');
    else {
      phase.completedTokens += scanner.completionTokens;
      phase.completedEvents += events;
      if (phase.windowOpen) {
        phase.requestsInWindow++;
        phase.e2e.push(performance.now() - sentAt);
      }
    }
    done();
  });
  res.on('error', () => done());
}

/** Reads one JSON response, recording its usage at completion. */
function readWhole(res: IncomingMessage, phase: Phase, sentAt: number, done: () => void): void {
  const chunks: Buffer[] = [];
  res.on('data', (chunk: Buffer) => chunks.push(chunk));
  res.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    try {
      const tokens = (JSON.parse(body) as { usage?: { completion_tokens?: number } }).usage?.completion_tokens;
      if (typeof tokens !== 'number') phase.error('response without usage');
      else if (phase.windowOpen) {
        phase.requestsInWindow++;
        phase.tokensInWindow += tokens;
        phase.e2e.push(performance.now() - sentAt);
      }
    } catch {
      phase.error(`unparseable response ${JSON.stringify(body.slice(0, 80))}`);
    }
    done();
  });
  res.on('error', () => done());
}

/** Sends one request and resolves when its response ended or failed (never rejects). */
function oneRequest(scenario: LoadScenario, agent: Agent, phase: Phase, maxTokens: number): Promise<void> {
  const target = new URL(scenario.path, scenario.url);
  const chat = scenario.path.endsWith('/chat/completions');
  const body = JSON.stringify({
    ...(chat ? { messages: [{ role: 'user', content: 'Tell me about the weather and the river.' }] } : { prompt: 'Tell me about the river.' }),
    max_tokens: maxTokens,
    ignore_eos: true,
    stream: scenario.stream,
    ...(scenario.stream ? { stream_options: { include_usage: true } } : {}),
  });
  return new Promise<void>((resolve) => {
    const sentAt = performance.now();
    const req = httpRequest(
      {
        agent,
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        if (res.statusCode !== 200) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => {
            phase.error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
            resolve();
          });
          res.on('error', () => resolve());
          return;
        }
        // 'close' also covers a response cut off by the teardown, which emits neither 'end' nor 'error'. Cut off
        // before the teardown (`phase.error` ignores it after), the response is an error: a truncated body.
        let settled = false;
        const done = () => {
          if (!settled) (settled = true), resolve();
        };
        res.on('close', () => {
          if (!res.complete) phase.error('response cut off before its end');
          done();
        });
        (scenario.stream ? readStream : readWhole)(res, phase, sentAt, done);
      },
    );
    req.on('error', (err) => {
      phase.error(`request failed: ${err.message}`);
      resolve();
    });
    req.end(body);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs one phase: warm-up, the measured window, then teardown of every connection. */
async function runPhase(scenario: LoadScenario): Promise<LoadResult> {
  const phase = new Phase();
  const agent = new Agent({ keepAlive: true, maxSockets: scenario.streams, maxFreeSockets: scenario.streams });
  const random = seededRandom(scenario.seed);
  const loops = Array.from({ length: scenario.streams }, async () => {
    let maxTokens = 1 + Math.floor(random() * scenario.maxTokens);
    while (!phase.stopped) {
      await oneRequest(scenario, agent, phase, maxTokens);
      maxTokens = scenario.maxTokens;
    }
  });
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
  agent.destroy();
  await Promise.all(loops);
  const tokensPerEvent = phase.completedEvents > 0 ? phase.completedTokens / phase.completedEvents : Number.NaN;
  return {
    windowMs,
    tokens: scenario.stream ? phase.eventsInWindow * (Number.isFinite(tokensPerEvent) ? tokensPerEvent : 1) : phase.tokensInWindow,
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
    (err: unknown) => send({ type: 'failed', message: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
});
process.on('disconnect', () => process.exit(0));
