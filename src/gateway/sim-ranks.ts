/**
 * The simulated ranks of a gateway's engine groups (src/sim/; issue #8 part 4: spawned once the gateway listens, so a
 * refused start spawns nothing): for a group with `sim` > 0, one process per DP rank, none for the indexes a restart
 * adopted (issue 26 part 6: their processes serve on). `waitForGroupRanks` is `GatewayOptions.waitForRanks`.
 */
import { spawnSimRanks, type SimRankProcesses, type SpawnSimRanksOptions } from '../sim/spawn.js';
import type { EngineClient } from '../engine-client/client.js';
import type { GroupRuntime } from './engine-groups.js';
import { kvEventsConfigObject } from '../protocols/kv-events/config.js';

/**
 * Spawn the simulated ranks of every group with `sim` > 0 (`GroupRuntime.sims`), skipping the engine indexes its link
 * adopted from a previous gateway (all of them: nothing spawned), and log them; simulated vLLM ranks get `maxLoras`
 * (the gateway's `--max-loras`). Throws what `spawnSimRanks` throws.
 */
export async function spawnGroupSims(groups: readonly GroupRuntime[], maxLoras?: number): Promise<void> {
  // Simulated ranks of a configured worker URL: none for the indexes a restart adopted (their processes serve on).
  const adopted = groups.map((g) => (g.spec.sim > 0 ? g.link.adoptionSettled() : Promise.resolve([])));
  for (const [i, g] of groups.entries()) {
    if (g.spec.sim === 0) continue;
    const skip = new Set(await adopted[i]!);
    if (skip.size >= g.spec.sim) continue;
    const extraArgs = [
      // The gateway's --max-loras describes its vLLM ranks: simulated ones are started with it.
      ...(g.spec.engine === 'vllm' && maxLoras !== undefined ? ['--max-loras', String(maxLoras)] : []),
      ...(g.spec.kvEvents !== null
        ? ['--kv-events-config', JSON.stringify(kvEventsConfigObject(g.spec.kvEvents))]
        : []),
      ...g.spec.simArgs,
    ];
    const spawnOpts: SpawnSimRanksOptions = {
      handshakeAddress: g.endpoints.handshake,
      count: g.spec.sim,
      engine: g.spec.engine,
      lockstep: g.spec.lockstep,
      skip,
      ...(extraArgs.length > 0 ? { extraArgs } : {}),
      logger: g.log.child({ component: 'sim' }),
    };
    g.sims = spawnSimRanks(spawnOpts);
    g.log.info(
      {
        count: g.sims.ranks.length,
        adopted: [...skip],
        lockstep: g.spec.lockstep,
        pids: g.sims.ranks.map((r) => r.child.pid),
      },
      'simulated ranks spawned',
    );
  }
}

/**
 * Resolve once every DP rank of every group has joined. Rejects when a simulated rank exits before its group joined
 * (instead of waiting forever), naming the rank, its exit and every rank's state.
 */
export async function waitForGroupRanks(groups: readonly GroupRuntime[]): Promise<void> {
  await Promise.all(
    groups.map(async (g) => {
      if (g.sims === null) return g.client.whenAllJoined();
      const early = rankExitBeforeJoin(g.sims, g.client, g.endpoints.workerUrl);
      try {
        await Promise.race([g.client.whenAllJoined(), early.promise]);
      } finally {
        early.cancel();
      }
    }),
  );
}

/** Reject when a simulated rank exits before every rank of its group joined (instead of waiting forever). */
function rankExitBeforeJoin(
  sims: SimRankProcesses,
  client: EngineClient,
  worker: string,
): { promise: Promise<never>; cancel(): void } {
  let cancelled = false;
  const promise = new Promise<never>((_, reject) => {
    for (const r of sims.ranks) {
      void r.exited.then((exit) => {
        if (!cancelled) {
          reject(
            new Error(
              `simulated rank ${exit.engineIndex} exited (code ${exit.code}, signal ${exit.signal}) before every rank of ${worker} joined (${client
                .rankStates()
                .map((s) => `rank ${s.engineIndex} ${s.state}`)
                .join(', ')})`,
            ),
          );
        }
      });
    }
  });
  promise.catch(() => {});
  return {
    promise,
    cancel: () => {
      cancelled = true;
    },
  };
}
