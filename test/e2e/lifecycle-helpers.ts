/**
 * Helpers of the rank-lifecycle end-to-end tests (issue #8: rejoin, stall, lockstep rebuild, serve-at-once,
 * handshake hardening): wait for a rank's liveness state, start replacement rank processes with a given engine index
 * (`spawnSimRanks` with `firstEngineIndex` and `count: 1`, as an operator restarting an engine would), and read
 * /health and /ready. Waits are hang guards only; times are measured for diagnostics, never asserted.
 */
import assert from 'node:assert/strict';
import type { EngineClient } from '../../src/engine-client/client.js';
import type { EngineFamily } from '../../src/gateway/index.js';
import { spawnSimRanks, type SimRankProcess, type SimRankProcesses } from '../../src/sim/spawn.js';
import { waitUntil } from './spread-helpers.js';

/** Resolves with `performance.now()` once rank `index` of `client` is in `state` (hang guard 30 s). */
export async function waitRank(client: EngineClient, index: number, state: string): Promise<number> {
  await waitUntil(
    () => client.rankStates().find((r) => r.engineIndex === index)?.state === state,
    `rank ${index} ${state}`,
    () => client.rankStates().map((r) => `${r.engineIndex}:${r.state}`),
    30_000,
  );
  return performance.now();
}

/** Replacement rank processes started by a test; `stopAll()` stops every one of them (call it in `after`). */
export class Replacements {
  private readonly started: SimRankProcesses[] = [];

  /**
   * Start one new rank process with engine index `index` dialing `group`'s handshake address (the group's engine
   * family; with `lockstepDpSize`, a rank of a lockstep vLLM group of that many ranks), with `extraArgs`. `group` is a
   * `TestGateway.groups()` entry. Returns the process and when it was spawned.
   */
  spawn(
    group: { engine: EngineFamily; handshake: string },
    index: number,
    extraArgs: readonly string[],
    lockstepDpSize?: number,
  ): { rank: SimRankProcess; spawnedAt: number } {
    const lockArgs = lockstepDpSize !== undefined ? ['--lockstep', '--dp-size', String(lockstepDpSize)] : [];
    const sims = spawnSimRanks({
      handshakeAddress: group.handshake,
      count: 1,
      firstEngineIndex: index,
      engine: group.engine,
      extraArgs: [...lockArgs, ...extraArgs],
    });
    this.started.push(sims);
    return { rank: sims.ranks[0]!, spawnedAt: performance.now() };
  }

  /** SIGKILL a replacement (or any rank process) and wait for its exit. */
  static async kill(rank: SimRankProcess): Promise<void> {
    rank.child.kill('SIGKILL');
    await rank.exited;
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.started.map((s) => s.stop()));
  }
}

/** GET `path` and parse the JSON body. */
export async function getJson(
  url: string,
  path: string,
): Promise<{ status: number; body: Record<string, unknown> & { status: string; groups: GroupBody[] } }> {
  const res = await fetch(`${url}${path}`);
  return {
    status: res.status,
    body: (await res.json()) as Record<string, unknown> & { status: string; groups: GroupBody[] },
  };
}

/** One group of a /health or /ready body. */
export interface GroupBody {
  worker: string;
  alive: boolean;
  status: string;
  message: string;
  joined: number;
  expected: number;
  ranks: { engineIndex: number; state: string; cause: string | null }[];
}

/** Assert /health and /ready both say every group is fully up (200 `ok` / `ready`, every rank ready). */
export async function assertAllUp(url: string): Promise<void> {
  const health = await getJson(url, '/health');
  assert.equal(health.status, 200, JSON.stringify(health.body));
  assert.equal(health.body.status, 'ok');
  assert.ok(
    health.body.groups.every((g) => g.ranks.every((r) => r.state === 'ready')),
    JSON.stringify(health.body.groups),
  );
  const ready = await getJson(url, '/ready');
  assert.equal(ready.status, 200);
  assert.equal(ready.body.status, 'ready');
}

/** Format ms for diagnostics. */
export const fmt = (x: number): string => `${x.toFixed(0)} ms`;
