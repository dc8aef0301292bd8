/**
 * The control plane of `--workers N` (docs/workers.md section 2): the cluster IPC messages between the router
 * (primary) and the fronts, and how a process knows it is a front. A handful of messages per second: a front is
 * listening, /metrics and the per-rank statistics gathered from every front, drain, close.
 */
import cluster from 'node:cluster';
import type { RankStatsExport } from '../../server/rank-stats.js';

/** The environment variable that makes a cluster worker a front: the path of the router's socket for its fronts. */
export const FRONT_CHANNEL_ENV = 'MGW_FRONT_CHANNEL';

/** The environment variable holding the router's front token (hex; frames.ts `helloFrame`). */
export const FRONT_TOKEN_ENV = 'MGW_FRONT_TOKEN';

/** Control-plane messages (cluster IPC). */
export type ControlMessage =
  | { type: 'mgw:listening'; url: string }
  | { type: 'mgw:metrics'; id: number }
  | { type: 'mgw:metrics-res'; id: number; contentType: string; body: string; error?: string }
  | { type: 'mgw:drain' }
  /**
   * `--api-keys-file`: the primary alone reads the file (at start and on SIGHUP) and sends its content to the fronts,
   * once valid: every front holds the same keys, and a front that restarts gets the last good content even when the
   * file is gone or broken meanwhile. A starting front asks for it (`-req`) before it serves.
   */
  | { type: 'mgw:keys'; text: string }
  | { type: 'mgw:keys-req' }
  | { type: 'mgw:close' }
  /** A front asks for every front's per-rank statistics; the primary asks each front (`-req` / `-part`) and answers. */
  | { type: 'mgw:rank-stats'; id: number }
  | { type: 'mgw:rank-stats-req'; reqId: string }
  | { type: 'mgw:rank-stats-part'; reqId: string; parts: RankStatsExport[] }
  | { type: 'mgw:rank-stats-res'; id: number; parts: RankStatsExport[] };

/** Whether this process is a front of `--workers N` (a cluster worker forked by `startClusterGateway`, cluster.ts). */
export function isFrontProcess(): boolean {
  return cluster.isWorker && typeof process.env[FRONT_CHANNEL_ENV] === 'string';
}
