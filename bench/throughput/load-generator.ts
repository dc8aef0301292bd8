/**
 * The load generator of bench:throughput: a process of its own (so its CPU is never counted as the gateway's) that
 * drives closed-loop streams over raw `node:http` keep-alive connections and times what a client sees. Started by
 * bench/throughput.ts with an IPC channel; it receives one `run` message (protocol.ts `LoadScenario`), reports the
 * instants its measured window opens and closes (the orchestrator samples the gateway's CPU then), tears the
 * connections down and sends the `result`, then waits for the next `run`.
 *
 * Kept cheap on purpose: one socket per stream, SSE records split with `indexOf`, one `JSON.parse` per record.
 */
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { percentile } from '../routing/stats.js';
import { seededRandom } from '../routing/workloads.js';
import type { FromLoadGenerator, LoadResult, LoadScenario, Percentiles, ToLoadGenerator } from './protocol.js';

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

/** The text of one chunk's first choice: chat `delta.content` or completions `text` ('' when absent). */
function choiceText(chunk: { choices?: Array<{ delta?: { content?: string | null }; text?: string }> }): string {
  const c = chunk.choices?.[0];
  return c?.delta?.content ?? c?.text ?? '';
}

/** Reads one SSE response to its end, recording content events, TTFT, ITL and the usage of the phase. */
function readStream(res: IncomingMessage, phase: Phase, sentAt: number, done: () => void): void {
  res.setEncoding('utf8');
  let buffered = '';
  let lastContent = -1;
  let events = 0;
  let completionTokens = -1;
  let terminated = false;
  res.on('data', (chunk: string) => {
    const now = performance.now();
    buffered += chunk;
    let cut: number;
    while ((cut = buffered.indexOf('\n\n')) >= 0) {
      const data = buffered.slice(6, cut); // after 'data: '
      buffered = buffered.slice(cut + 2);
      if (data === '[DONE]') {
        terminated = true;
        continue;
      }
      let parsed: { error?: { message?: string }; usage?: { completion_tokens?: number } | null };
      try {
        parsed = JSON.parse(data) as typeof parsed;
      } catch {
        phase.error(`unparseable SSE record ${JSON.stringify(data.slice(0, 80))}`);
        continue;
      }
      if (parsed.error) phase.error(`mid-stream error: ${parsed.error.message ?? '?'}`);
      if (parsed.usage) completionTokens = parsed.usage.completion_tokens ?? -1;
      if (choiceText(parsed as Parameters<typeof choiceText>[0]) === '') continue;
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
    if (!terminated || completionTokens < 0) phase.error('stream ended without [DONE] and usage');
    else {
      phase.completedTokens += completionTokens;
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
  res.setEncoding('utf8');
  let body = '';
  res.on('data', (chunk: string) => (body += chunk));
  res.on('end', () => {
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
        // 'close' also covers a response cut off by the teardown, which emits neither 'end' nor 'error'.
        let settled = false;
        const done = () => {
          if (!settled) (settled = true), resolve();
        };
        res.on('close', done);
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
