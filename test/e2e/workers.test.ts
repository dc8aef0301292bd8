/**
 * End to end, `model-gateway serve --workers 2` (issue 9 part 2; src/fronts): one router process (the cluster
 * primary: engine clients, routing state, concurrency count, Responses store) and two HTTP fronts sharing the port.
 * One gateway for the file (2 simulated ranks, a concurrency cap of 3), the tests in order: chat streamed and not,
 * /metrics summed over the fronts, `previous_response_id` resolved by whichever front gets the next turn, the cap
 * enforced once over both fronts, a client disconnect reaching the engine as an ABORT, a front SIGKILLed mid-stream
 * (its requests aborted at the engines, a new front forked), and the SIGTERM drain (exit 0).
 *
 * Every request here uses a fresh TCP connection: node:cluster hands connections to the fronts round robin, so
 * consecutive requests land on alternate fronts. Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { hangGuard } from '../helpers/async.js';
import { freePort } from '../helpers/net.js';
import { alive, simRanksOf } from '../helpers/processes.js';
import { waitUntil } from './spread-helpers.js';

const cliPath = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));
const MODEL = 'sim';
const CAP = 3;
const LONG = { model: MODEL, prompt: 'Tell me a very long story.', max_tokens: 20_000, ignore_eos: true };

let gw: ChildProcess;
let url = '';
let port = 0;
let exited: Promise<unknown[]>;
const socketFiles: string[] = [];
let stderr = '';

/** The gateway's front processes: its children that run the CLI (the simulated ranks run src/sim/main.ts). */
function frontsOf(pid: number): number[] {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out.split('\n').filter(Boolean).map(Number).filter((child) => {
    try {
      const cmd = readFileSync(`/proc/${child}/cmdline`, 'utf8');
      return cmd.includes('cli.ts') && !cmd.includes('sim/main.ts') && alive(child);
    } catch {
      return false;
    }
  });
}

/** POST `path` with `body` on a fresh connection; resolves with the status, headers and parsed body. */
function post(path: string, body: unknown): Promise<{ status: number; headers: IncomingMessage['headers']; json: any }> {
  return postWith(path, body, {});
}

/** `post` with extra request headers. */
function postWith(path: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; headers: IncomingMessage['headers']; json: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST', agent: false, headers: { 'content-type': 'application/json', connection: 'close', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        let json: unknown = text;
        try {
          json = JSON.parse(text);
        } catch {
          // SSE or text: keep the text
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, json });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** GET `path` (JSON or text) on a fresh connection. */
async function get(path: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, agent: false, headers: { connection: 'close' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A streamed completion on a fresh connection: its SSE text so far, how it ended, and a way to disconnect. */
interface OpenStream {
  text(): string;
  /** Resolves once the response ended: `error` for a connection that broke (reset, front killed). */
  done: Promise<{ status: number; finished: boolean; error: string | null }>;
  destroy(): void;
}

function openStream(body: Record<string, unknown>): OpenStream {
  let text = '';
  let status = 0;
  let destroyed = false;
  const req = httpRequest({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent: false, headers: { 'content-type': 'application/json', connection: 'close' } });
  const done = new Promise<{ status: number; finished: boolean; error: string | null }>((resolve) => {
    req.on('response', (res) => {
      status = res.statusCode ?? 0;
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status, finished: text.includes('data: [DONE]'), error: null }));
      res.on('error', (err) => resolve({ status, finished: false, error: destroyed ? 'destroyed' : err.message }));
      res.on('aborted', () => resolve({ status, finished: false, error: destroyed ? 'destroyed' : 'aborted' }));
    });
    req.on('error', (err) => resolve({ status, finished: false, error: destroyed ? 'destroyed' : err.message }));
  });
  req.end(JSON.stringify({ ...body, stream: true }));
  return {
    text: () => text,
    done,
    destroy: () => {
      destroyed = true;
      req.destroy();
    },
  };
}

/** Total in-flight requests over every rank, as any front reports it (`/v1/gateway/ranks`, read from the router). */
async function inFlight(): Promise<number> {
  const view = JSON.parse((await get('/v1/gateway/ranks')).text) as { server: { in_flight: number } };
  return view.server.in_flight;
}

/** Sum of every sample of `name` in `/metrics` (whichever front answers, it is the whole gateway's). */
async function metricSum(name: string, labelFilter = ''): Promise<number> {
  const { text } = await get('/metrics');
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && l.includes(labelFilter))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** Poll `cond` every 50 ms until it holds; fails after `ms` (and stops polling). */
async function waitFor(cond: () => Promise<boolean>, what: string, ms = 30_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await cond().catch(() => false))) {
    if (performance.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

before(async () => {
  port = await freePort();
  gw = spawn(
    process.execPath,
    [
      '--import', 'tsx', cliPath, 'serve', '--workers', '2', '--port', String(port), '--model', MODEL, '--log-level', 'info', '--log-format', 'json',
      '--max-concurrent-requests', String(CAP), '--shutdown-grace-ms', '30000',
      '--sim', '2', '--sim-arg=--time-scale', '--sim-arg=1', '--sim-arg=--log-level', '--sim-arg=silent',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  exited = once(gw, 'exit');
  createInterface({ input: gw.stdout!, crlfDelay: Infinity }).on('line', (line) => {
    try {
      const m = JSON.parse(line) as { msg?: string; input?: string; output?: string };
      if (m.msg?.startsWith('engine sockets bound; ') && m.input && m.output) {
        for (const f of [m.input.slice(6), m.output.slice(6)]) if (!socketFiles.includes(f)) socketFiles.push(f);
      }
    } catch {
      // not a log line
    }
  });
  gw.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  url = `http://127.0.0.1:${port}`;
  await waitFor(async () => {
    if (gw.exitCode !== null) throw new Error(`gateway exited: ${stderr}`);
    return (await get('/ready')).status === 200;
  }, 'gateway ready', 60_000);
  assert.equal(frontsOf(gw.pid!).length, 2, 'two front processes');
});

after(() => {
  const ranks = gw.pid !== undefined ? simRanksOf(gw.pid) : [];
  const fronts = gw.pid !== undefined ? frontsOf(gw.pid) : [];
  if (gw.exitCode === null && gw.signalCode === null) gw.kill('SIGKILL');
  for (const pid of [...ranks, ...fronts].filter(alive)) process.kill(pid, 'SIGKILL');
  for (const p of socketFiles) rmSync(p, { force: true });
});

test('chat completions through both fronts, streamed and not; /metrics counts every request once', { timeout: 60_000 }, async () => {
  const before = await metricSum('model_gateway_requests_total', 'endpoint="/v1/chat/completions"');
  const body = { model: MODEL, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8 };
  for (let i = 0; i < 4; i++) {
    const r = await post('/v1/chat/completions', body);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.object, 'chat.completion');
    assert.equal(r.json.choices[0].finish_reason, 'length');
    assert.equal(r.json.usage.completion_tokens, 8);
    assert.ok(r.json.choices[0].message.content.length > 0);
  }
  for (let i = 0; i < 2; i++) {
    const r = await post('/v1/chat/completions', { ...body, stream: true });
    assert.equal(r.status, 200);
    const text = r.json as string;
    const chunks = text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    assert.ok(chunks.length >= 2, text);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
    assert.ok(text.trimEnd().endsWith('data: [DONE]'));
  }
  const after = await metricSum('model_gateway_requests_total', 'endpoint="/v1/chat/completions"');
  assert.equal(after - before, 6, 'requests_total summed over both fronts');
  assert.equal(await inFlight(), 0);
});

test('n > 1 and X-data-parallel-rank through a front: both choices, the pin placed by the router, an unknown rank 400', { timeout: 60_000 }, async () => {
  const two = await post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, n: 2 });
  assert.equal(two.status, 200, JSON.stringify(two.json));
  assert.deepEqual(two.json.choices.map((c: { index: number }) => c.index), [0, 1]);
  const pinnedBefore = await metricSum('model_gateway_rank_dispatches_total', 'dp_rank="1",pinned="true"');
  const pinned = await postWith('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 }, { 'x-data-parallel-rank': '1' });
  assert.equal(pinned.status, 200, JSON.stringify(pinned.json));
  assert.equal(await metricSum('model_gateway_rank_dispatches_total', 'dp_rank="1",pinned="true"'), pinnedBefore + 1);
  const unknown = await postWith('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 }, { 'x-data-parallel-rank': '5' });
  assert.equal(unknown.status, 400, JSON.stringify(unknown.json));
});

test('Responses: previous_response_id and GET /v1/responses/{id} work from either front', { timeout: 60_000 }, async () => {
  const first = await post('/v1/responses', { model: MODEL, input: 'Remember the word teal.', max_output_tokens: 6 });
  assert.equal(first.status, 200, JSON.stringify(first.json));
  const id = first.json.id as string;
  // Four fresh connections: at least two of them land on the front that did not serve the first turn.
  for (let i = 0; i < 4; i++) {
    const next = await post('/v1/responses', { model: MODEL, input: 'Which word?', previous_response_id: id, max_output_tokens: 4 });
    assert.equal(next.status, 200, `turn ${i}: ${JSON.stringify(next.json)}`);
    assert.equal(next.json.previous_response_id, id);
    const fetched = await get(`/v1/responses/${id}`);
    assert.equal(fetched.status, 200, fetched.text);
    assert.equal(JSON.parse(fetched.text).id, id);
  }
  const unknown = await post('/v1/responses', { model: MODEL, input: 'x', previous_response_id: 'resp_unknown', max_output_tokens: 2 });
  assert.equal(unknown.status, 404);
});

test(`the concurrency cap (${CAP}) is one count over both fronts: 429 + Retry-After beyond it, free again after`, { timeout: 60_000 }, async () => {
  const streams = Array.from({ length: CAP }, () => openStream(LONG));
  try {
    await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'every held stream streaming');
    for (let i = 0; i < 2; i++) {
      const r = await post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 });
      assert.equal(r.status, 429, JSON.stringify(r.json));
      assert.ok(r.headers['retry-after']);
      assert.equal(r.json.error.code, 'rate_limit_exceeded');
    }
  } finally {
    for (const s of streams) s.destroy();
  }
  await waitFor(async () => (await post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 })).status === 200, 'a slot free again');
  await waitFor(async () => (await inFlight()) === 0, 'in-flight back to 0');
});

test('a client disconnect reaches the engine as an ABORT and frees the in-flight slot', { timeout: 60_000 }, async () => {
  const abortsBefore = await metricSum('model_gateway_aborts_sent_total');
  const s = openStream(LONG);
  await waitUntil(() => s.text().split('data: {').length > 3, 'streaming');
  assert.equal(await inFlight(), 1);
  s.destroy();
  await waitFor(async () => (await inFlight()) === 0, 'in-flight back to 0 after the disconnect');
  await waitFor(async () => (await metricSum('model_gateway_aborts_sent_total')) === abortsBefore + 1, 'one ABORT sent');
});

test('a front SIGKILLed mid-stream: its requests are aborted at the engines, the other front serves on, a new front is forked', { timeout: 90_000 }, async () => {
  const abortsBefore = await metricSum('model_gateway_aborts_sent_total');
  const streams = Array.from({ length: 2 }, () => openStream(LONG));
  try {
    await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'both streams streaming');
    const fronts = frontsOf(gw.pid!);
    assert.equal(fronts.length, 2);
    process.kill(fronts[0]!, 'SIGKILL');
    // The killed front's streams break; the router aborts their engine requests.
    const broken = await hangGuard(Promise.race(streams.map((s) => s.done)), 20_000, 'a stream of the killed front breaking');
    assert.notEqual(broken.error, null, `the killed front's stream broke: ${JSON.stringify(broken)}`);
    const survivors = async () => (await Promise.all(streams.map((s) => Promise.race([s.done.then(() => 0), new Promise<number>((r) => setTimeout(() => r(1), 10))])))).reduce((a, b) => a + b, 0);
    await waitFor(async () => (await inFlight()) === (await survivors()), 'in-flight equals the streams still open');
    await waitFor(async () => (await metricSum('model_gateway_aborts_sent_total')) >= abortsBefore + 2 - (await survivors()), 'ABORTs sent for the orphaned requests');
    await waitFor(async () => frontsOf(gw.pid!).length === 2 && !frontsOf(gw.pid!).includes(fronts[0]!), 'a new front forked');
    await waitFor(async () => (await metricSum('model_gateway_front_exits_total')) === 1, 'front exit counted');
    // Both fronts serve again (one request after the other: fresh connections alternate between the fronts).
    for (let i = 0; i < 4; i++) {
      const r = await post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 });
      assert.equal(r.status, 200, `request ${i} after the restart: ${JSON.stringify(r.json)}`);
    }
  } finally {
    for (const s of streams) s.destroy();
  }
  await waitFor(async () => (await inFlight()) === 0, 'in-flight back to 0');
});

test('SIGTERM with streams live: /ready 503 on every front, new requests 503, the streams finish, exit 0', { timeout: 90_000 }, async () => {
  const body = { model: MODEL, prompt: 'Tell me something.', max_tokens: 120, ignore_eos: true };
  const streams = [0, 1].map(() => openStream(body));
  await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'every stream streaming');
  gw.kill('SIGTERM');
  // Both fronts (fresh connections alternate) answer 503 draining.
  await waitFor(async () => {
    const rs = await Promise.all([get('/ready'), get('/ready')]);
    return rs.every((r) => r.status === 503);
  }, '/ready 503 on both fronts');
  const late = await post('/v1/completions', body);
  assert.equal(late.status, 503);
  assert.ok(late.headers['retry-after']);
  assert.equal(late.json.error.code, 'draining');
  const outcomes = await hangGuard(Promise.all(streams.map((s) => s.done)), 60_000, 'streams finishing');
  for (const o of outcomes) {
    assert.equal(o.error, null, JSON.stringify(o));
    assert.ok(o.finished, 'stream ended with [DONE]');
  }
  for (const s of streams) assert.ok(s.text().includes('"finish_reason":"length"'), 'finished normally');
  const [code, signal] = await hangGuard(exited, 30_000, 'gateway exit');
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
});
