/**
 * Fixtures for the sim tests: temp dirs, hang guards, a pull-style reader of a link's outputs, and one in-process
 * simulated rank or a group of spawned sim rank processes registered with a real gateway-side `ZmqEngineLink`.
 */
import { freshDir as sharedFreshDir, hangGuard } from '../helpers/async.js';
import type { EngineLink, OutputMessage } from '../../src/engine-client/link.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import type { EngineBatch } from '../../src/protocols/types.js';
import { decodeEngineCoreOutputs } from '../../src/protocols/vllm/index.js';
import { runSimEngine, type SimEngineHandle, type SimEngineOptions } from '../../src/sim/engine.js';
import { spawnSimRanks, type SimRankProcesses, type SpawnSimRanksOptions } from '../../src/sim/spawn.js';
import { TextModel } from '../../src/sim/text.js';
import type { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { freePort } from '../helpers/net.js';
import type { EngineCoreOutput, EngineCoreOutputs } from '../../src/protocols/vllm/index.js';
import type { SimRequest } from '../../src/sim/scheduler.js';

/** Reads a link's output messages one at a time (hang-guarded); subclasses decode them for one engine family. */
class RawOutputReader {
  private readonly it: AsyncIterator<OutputMessage>;
  constructor(link: EngineLink) {
    this.it = link.outputs()[Symbol.asyncIterator]();
  }
  /** The next raw message (hang-guarded). */
  async message(ms = 20_000): Promise<OutputMessage> {
    const r = await hangGuard(this.it.next(), ms, 'next output message');
    if (r.done === true) throw new Error('output stream ended');
    return r.value;
  }
}

/** Reads a link's output messages one at a time, decoding TokenSpeed batches. */
export class OutputReader extends RawOutputReader {
  /** The next decoded batch; throws on anything else. */
  async batch(ms = 20_000): Promise<EngineBatch> {
    const m = await this.message(ms);
    if (m.kind !== 'frames') throw new Error(`expected an output batch, got ${m.kind}`);
    return tokenspeedProtocol.decodeOutput(m.frames);
  }
  /** Batches until every id in `rids` got its terminal row; returns them all. */
  async untilFinished(rids: readonly string[], ms = 20_000): Promise<EngineBatch[]> {
    const pending = new Set(rids);
    const out: EngineBatch[] = [];
    while (pending.size > 0) {
      const b = await this.batch(ms);
      out.push(b);
      for (const id of b.finishedRequestIds) pending.delete(id);
    }
    return out;
  }
}

/** A fresh temporary folder for this suite's sockets (prefix `mgw-sim-`). */
export const freshDir = (): ReturnType<typeof sharedFreshDir> => sharedFreshDir('mgw-sim-');
export { hangGuard };

/** Reads a link's output messages as raw vLLM `EngineCoreOutputs` envelopes (decoded with the vLLM codec directly). */
export class VllmOutputReader extends RawOutputReader {
  /** The next envelope; throws on anything else. */
  async envelope(ms = 20_000): Promise<EngineCoreOutputs> {
    const m = await this.message(ms);
    if (m.kind !== 'frames') throw new Error(`expected an EngineCoreOutputs envelope, got ${m.kind}`);
    return decodeEngineCoreOutputs(m.frames);
  }
  /** Envelopes up to and including the first one `done` accepts. */
  async until(done: (e: EngineCoreOutputs) => boolean, ms = 20_000): Promise<EngineCoreOutputs[]> {
    const out: EngineCoreOutputs[] = [];
    for (;;) {
      const e = await this.envelope(ms);
      out.push(e);
      if (done(e)) return out;
    }
  }
  /** Envelopes until every id in `rids` got a terminal output; returns them all. */
  async untilFinished(rids: readonly string[], ms = 20_000): Promise<EngineCoreOutputs[]> {
    const pending = new Set(rids);
    return this.until((e) => {
      for (const o of e.outputs) if (o.finish_reason !== null) pending.delete(o.request_id);
      return pending.size === 0;
    }, ms);
  }
}

/** Every output of `rid` across `envelopes`, in order. */
export function outputsOf(envelopes: readonly EngineCoreOutputs[], rid: string): EngineCoreOutput[] {
  return envelopes.flatMap((e) => e.outputs.filter((o) => o.request_id === rid));
}

/** One in-process simulated rank and the gateway-side link it registered with (`startLinkedRank`). */
export interface LinkedRank {
  /** The bound gateway-side link, after the rank's handshake (one engine). */
  link: ZmqEngineLink;
  /** The in-process rank. */
  engine: SimEngineHandle;
  /** Close the rank, then the link, then remove the temp dir (idempotent parts: safe after the rank was closed). */
  close(): Promise<void>;
}

/**
 * Bind a `ZmqEngineLink` with rank slots up to the rank's engine index (IPC under a fresh temp dir, TCP handshake on a
 * free port, 20 s handshake stage timeout) and run one in-process simulated rank against it (at `opts.timeScale`, default 0), with `tokenizer`'s vocabulary
 * and EOS ids and (unless `opts.textModel` is given) a `TextModel` over it. `opts` are the remaining rank options
 * (engine family, engine index, capacity; `timeScale` defaults to 0: rounds back to back). Throws on a handshake failure or after the 30 s hang guard.
 */
export async function startLinkedRank(
  tokenizer: GatewayTokenizer,
  opts: Omit<SimEngineOptions, 'handshakeAddress' | 'vocabSize' | 'eosTokenIds' | 'initTimeoutMs'>,
): Promise<LinkedRank> {
  const d = await freshDir();
  const endpoints = deriveEndpoints(`ipc://${d.dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  // Rank slots 0..engineIndex: the rank's own index must be one of the group's (the link refuses any other).
  const link = await ZmqEngineLink.bind({
    endpoints,
    dpSize: (opts.engineIndex ?? 0) + 1,
    handshakeReceiveTimeoutMs: 20_000,
  });
  const started = hangGuard(
    Promise.all([
      link.whenJoined(1),
      runSimEngine({
        textModel: new TextModel(tokenizer),
        ...opts,
        handshakeAddress: endpoints.handshake,
        timeScale: opts.timeScale ?? 0,
        vocabSize: tokenizer.vocabSize,
        eosTokenIds: tokenizer.eosTokenIds,
        initTimeoutMs: 20_000,
      }),
    ]),
    30_000,
    'handshake',
  );
  const [, engine] = await started.catch(async (err: unknown) => {
    await link.close();
    await d.cleanup();
    throw err;
  });
  return {
    link,
    engine,
    async close() {
      await engine.close();
      await link.close();
      await d.cleanup();
    },
  };
}

/** Spawned sim rank processes and the gateway-side link they registered with (`startSpawnedRanks`). */
export interface SpawnedRanks {
  /** The bound gateway-side link, after every rank's handshake. */
  link: ZmqEngineLink;
  /** The child processes. */
  ranks: SimRankProcesses;
  /** Stop the processes, then close the link, then remove the temp dir. */
  close(): Promise<void>;
}

/**
 * Bind a `ZmqEngineLink` with rank slots up to the highest engine index spawned (IPC under a fresh temp dir, TCP
 * handshake on a free port, 60 s handshake stage timeout), start them with `spawnSimRanks` (every other option as given) and wait for their
 * handshake under a 90 s hang guard labelled `what`. On failure the processes are stopped, the link and temp dir are
 * removed, and the error is rethrown (its message followed by `diagnostics()` when given, e.g. the sim logs).
 */
export async function startSpawnedRanks(
  opts: Omit<SpawnSimRanksOptions, 'handshakeAddress'>,
  what: string,
  diagnostics?: () => string,
): Promise<SpawnedRanks> {
  const d = await freshDir();
  const endpoints = deriveEndpoints(`ipc://${d.dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const dpSize = (opts.firstEngineIndex ?? 0) + opts.count; // slots up to the highest index spawned
  const link = await ZmqEngineLink.bind({ endpoints, dpSize, handshakeReceiveTimeoutMs: 60_000 });
  const ranks = spawnSimRanks({ ...opts, handshakeAddress: endpoints.handshake });
  try {
    await hangGuard(link.whenJoined(opts.count), 90_000, what);
  } catch (error) {
    await link.close();
    await ranks.stop();
    await d.cleanup();
    if (diagnostics === undefined) throw error;
    throw new Error(`${(error as Error).message}; ${diagnostics()}`);
  }
  return {
    link,
    ranks,
    async close() {
      await ranks.stop();
      await link.close();
      await d.cleanup();
    },
  };
}

/**
 * A scheduler request with a scripted output (token ids `firstToken`, `firstToken + 1`, …; logprob −0.5 each) that
 * runs to `maxNewTokens` (ignore_eos, streaming, no logprobs).
 */
export function scriptedRequest(
  rid: string,
  promptTokenIds: number[],
  maxNewTokens = 2,
  firstToken = 5000,
): SimRequest {
  let next = firstToken;
  return {
    rid,
    promptTokenIds,
    maxNewTokens,
    minNewTokens: 0,
    stopTokenIds: null,
    ignoreEos: true,
    stream: true,
    streamInterval: null,
    returnLogprob: false,
    validationError: null,
    tokens: { next: () => ({ tokenId: next++, logprob: -0.5 }) },
  };
}
