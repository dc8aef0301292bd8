/**
 * A simulated rank whose gateway stopped reading its output PULL still stops promptly (engine.ts `close()`, the
 * SIGTERM path of main.ts): its PUSH reaches the high-water mark, the loop pauses on output backpressure, and
 * close() drops the pushes that can never complete instead of waiting on them. Time scale 0; the only waits are
 * events (backpressure reached, close settled) behind generous hang guards, never a timing assertion.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { deriveEndpoints, type EngineEndpoints } from '../../src/transport/endpoints.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { OUTPUT_BACKLOG_PAUSE, runSimEngine } from '../../src/sim/engine.js';
import { spawnSimRanks } from '../../src/sim/spawn.js';
import { TextModel } from '../../src/sim/text.js';
import type { MinimalLogger } from '../../src/logging.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard } from './helpers.js';

/** Long streaming generations: every round yields a batch, far more than the PUSH + PULL queues can hold. */
function longRequest(id: string): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 30_000, ignoreEos: true },
    stream: true,
    returnLogprob: false,
  };
}

/** Polls `cond` every 20 ms until it holds (callers wrap it in a hang guard). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 20));
}

/** A bound gateway-side link in a fresh folder; nobody ever iterates its `outputs()`. */
async function unreadLink(): Promise<{
  endpoints: EngineEndpoints;
  pending: ZmqEngineLink;
  cleanup: () => Promise<void>;
}> {
  const d = await freshDir();
  const endpoints = deriveEndpoints(`ipc://${d.dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const pending = await ZmqEngineLink.bind({ endpoints, dpSize: 1, handshakeReceiveTimeoutMs: 30_000 });
  return { endpoints, pending, cleanup: d.cleanup };
}

async function addLongRequests(link: ZmqEngineLink, n: number): Promise<void> {
  const identity = link.engines[0].identity;
  for (let i = 0; i < n; i++)
    await link.send(identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(longRequest(`long-${i}`)));
}

test('close() returns promptly while pushes are blocked because the gateway stopped reading', async () => {
  const { endpoints, pending, cleanup } = await unreadLink();
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  let link: ZmqEngineLink | null = null;
  try {
    const [, engine] = await hangGuard(
      Promise.all([
        pending.whenJoined(),
        runSimEngine({
          engineIndex: 0,
          handshakeAddress: endpoints.handshake,
          timeScale: 0,
          maxRunning: 8,
          textModel: new TextModel(tokenizer),
          vocabSize: tokenizer.vocabSize,
          eosTokenIds: tokenizer.eosTokenIds,
          initTimeoutMs: 30_000,
          closeGraceMs: 50,
        }),
      ]),
      30_000,
      'handshake',
    );
    link = pending;
    await addLongRequests(pending, 8);
    await hangGuard(
      until(() => engine.stats().outputPaused),
      60_000,
      'output backpressure (PUSH at its high-water mark)',
    );
    const paused = engine.stats();
    assert.ok(paused.pendingSends >= OUTPUT_BACKLOG_PAUSE, `pending sends ${paused.pendingSends}`);
    assert.equal(paused.outputPauses, 1);
    // The loop is paused: no new round starts while the pushes are stuck.
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(engine.stats().rounds, paused.rounds, 'no round runs while output is backed up');

    await hangGuard(engine.close(), 10_000, 'close() with blocked pushes');
    await hangGuard(engine.closed, 10_000, 'closed after close()');
    await hangGuard(
      until(() => engine.stats().pendingSends === 0),
      10_000,
      'blocked pushes failing after close',
    );
    const after = engine.stats();
    assert.ok(
      after.sendErrors >= paused.pendingSends,
      `the stuck batches were dropped (sendErrors ${after.sendErrors})`,
    );
    assert.equal(after.batchesSent, paused.batchesSent, 'nothing more was pushed');
  } finally {
    await (link ?? pending).close();
    await cleanup();
  }
});

test('a rank process exits on SIGTERM (no SIGKILL needed) while its gateway does not read its outputs', async () => {
  const { endpoints, pending, cleanup } = await unreadLink();
  const lines: Array<{ level: string; msg: string }> = [];
  const record =
    (level: string) =>
    (_obj: Record<string, unknown>, msg: string): void => {
      lines.push({ level, msg });
    };
  const logger: MinimalLogger = {
    debug: record('debug'),
    info: record('info'),
    warn: record('warn'),
    error: record('error'),
  };
  // A grace far beyond the hang guard: the rank must exit on SIGTERM alone, SIGKILL must not rescue the test.
  const sims = spawnSimRanks({
    handshakeAddress: endpoints.handshake,
    count: 1,
    extraArgs: ['--time-scale', '0', '--max-running', '8', '--log-level', 'info'],
    logger,
    stopGraceMs: 120_000,
  });
  let link: ZmqEngineLink | null = null;
  try {
    await hangGuard(pending.whenJoined(), 60_000, 'handshake with the spawned rank');
    link = pending;
    await addLongRequests(link, 8);
    await hangGuard(
      until(() => lines.some((l) => l.level === 'warn' && /output is backed up/.test(l.msg))),
      60_000,
      'the rank reporting backpressure',
    );
    await hangGuard(sims.stop(), 20_000, 'the rank exiting on SIGTERM');
    const exit = await sims.ranks[0].exited;
    assert.deepEqual({ code: exit.code, signal: exit.signal }, { code: 0, signal: null });
    assert.ok(
      lines.some((l) => /output is not being read; dropping pending batches/.test(l.msg)),
      'close() dropped the stuck batches',
    );
    assert.ok(lines.some((l) => l.msg === 'sim rank stopped'));
  } finally {
    sims.killNow();
    await Promise.all(sims.ranks.map((r) => r.exited));
    await (link ?? pending).close();
    await cleanup();
  }
});
