/** Shared fixtures for the transport tests: temp dirs, a recording logger, ready responses. */
import { freshDir as sharedFreshDir, hangGuard } from '../helpers/async.js';
import { fileURLToPath } from 'node:url';
import { DEFAULT_READY_RESPONSE } from '../../src/protocols/handshake.js';
import type { ReadyResponse } from '../../src/protocols/types.js';
import type { MinimalLogger } from '../../src/logging.js';
import { Dealer } from 'zeromq';

/** One recorded log call. */
export interface LogRecord {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

/** A MinimalLogger that records every call. */
export function recordingLogger(): MinimalLogger & { records: LogRecord[] } {
  const records: LogRecord[] = [];
  const at = (level: LogRecord['level']) => (obj: Record<string, unknown>, msg: string) => {
    records.push({ level, obj, msg });
  };
  return { records, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** A valid ready response for rank `rank`, with values that tell the ranks apart. */
export function readyFor(rank: number, overrides: Partial<ReadyResponse> = {}): ReadyResponse {
  return {
    ...DEFAULT_READY_RESPONSE,
    maxModelLen: 32768 + rank,
    numGpuBlocks: 1000,
    prefixGranularity: 64,
    dtype: 'bfloat16',
    vllmVersion: 'tokenspeed-test',
    dataParallelSize: 1,
    dataParallelRank: rank,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 8192,
    instanceId: `rank-${rank}`,
    ...overrides,
  };
}

/** A raw zeromq DEALER with a binary routing identity (zeromq.js types routingId as string; a Buffer passes through). */
export function rawDealer(identity: Uint8Array): Dealer {
  const dealer = new Dealer({ linger: 0 });
  (dealer as unknown as { routingId: Buffer }).routingId = Buffer.from(identity);
  return dealer;
}

/** The repository root (for spawning fixtures through tsx). */
export const repoRootDir: string = fileURLToPath(new URL('../../', import.meta.url));

/** A fresh temporary folder for this suite's sockets (prefix `mgw-tr-`). */
export const freshDir = (): ReturnType<typeof sharedFreshDir> => sharedFreshDir('mgw-tr-');
export { hangGuard };
