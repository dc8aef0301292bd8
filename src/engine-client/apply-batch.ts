/**
 * One decoded output batch applied to the group state (dp-routing.md section 8 and 12.3 rule 2): store load → wave →
 * route → release → clamp, in one synchronous step, so no submit is scored between a rank's report and the release
 * of what it finished. Like group-state.ts, no function here takes a callback or returns a promise
 * (eslint.config.js). What the rows cost their consumers (detokenization, SSE, writes) runs after this step, in
 * slices (delivery-queue.ts, issue 9).
 */
import type { EngineBatch, WaveEvent } from '../protocols/types.js';
import { planBatch } from './batch-plan.js';
import type { FailureScope } from './failure-scope.js';
import type { GroupState } from './group-state.js';
import type { OutputContract } from './output-contract.js';
import type { OutputFaults } from './output-faults.js';
import { isConnected } from './rank-liveness.js';
import { logGuardTransition } from './reports.js';

/** The parts of the engine client a batch passes through besides the group state. */
export interface BatchSteps {
  readonly scope: FailureScope;
  readonly contract: OutputContract;
  readonly faults: OutputFaults;
}

/**
 * Apply `batch`: a stalled rank that speaks is back in rotation; store the load report BEFORE any release (only for
 * a connected rank: a dead rank's late batch must not resurrect a load); apply the wave event; route the rows
 * (batch-plan.ts `planBatch`: each live request's stream takes its rows now, its push-mode listener hears of them
 * in the sliced delivery that follows); release `finished` from the batch's rank for EVERY batch (the clamp, 10.3);
 * drop rows naming another rank's requests and ABORT them at the sender (14.6, issue 26); re-arm the batch's rank's
 * timers; and drop rows for requests their rank no longer owns, counting them and ABORTing each id once.
 */
export function applyBatch(g: GroupState, steps: BatchSteps, batch: EngineBatch): void {
  // A utility reply carries no rows and no load (and may not name its rank): it only settles its call.
  if (batch.utility !== undefined) {
    g.utility.settle(batch.utility);
    return;
  }
  const rank = batch.engineIndex;
  const slot = g.ranks.slot(rank);
  if (slot !== undefined) slot.counters.batches++;
  const live = slot !== undefined && isConnected(slot.liveness.state);
  const now = g.now();
  if (live) g.markHeard(rank, now);
  else if (slot?.liveness.state === 'dead') g.heardWhileDead.add(rank);
  if (live && batch.load) {
    logGuardTransition(g.logger, rank, g.routing.storeLoad(rank, batch.load, now));
    // Each report says which adapters the rank holds requests for; one without adapter counts says none.
    if (batch.loraAdapters !== undefined) g.loraCounts.set(rank, batch.loraAdapters);
    else g.loraCounts.delete(rank);
  }
  if (live && batch.wave) observeWave(g, steps.scope, rank, batch.wave);

  const plan = planBatch(batch, (id) => g.registry.get(id));
  // Service rates only from a connected rank, through each entry's own sample (no lookup per row).
  const rates = live ? g.routing.rates : null;
  const { entries, rows } = plan;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const row = steps.contract.check(entry, rows[i]!, rank); // the row itself, unless the engine broke the contract
    if (row === null) continue;
    if (rates !== null && entry.service !== undefined) rates.observeRow(rank, entry.service, row, now);
    if (row.finishReason !== null) {
      g.registry.removeEntry(entry);
      entry.stream.deliver(row);
    } else if (!entry.stream.deliver(row)) {
      steps.scope.abandon(entry); // consumer gone (cannot normally happen: a cancel retires synchronously)
    }
  }
  for (const e of plan.closedWithoutTerminal) {
    g.registry.removeEntry(e);
    e.stream.closeWithoutTerminal();
  }
  g.release(rank, plan.finished);
  if (slot?.liveness.state === 'stalled') g.transition(rank, { kind: 'heard' });
  g.syncRankTimers(rank, true);
  if (plan.mismatches > 0) steps.faults.mismatches(rank, plan.mismatches, plan.foreign, now);
  const unknown = plan.unknownRows;
  if (unknown.length === 0) return;
  for (const id of unknown) {
    g.routing.noteRow(rank, id);
    steps.scope.orphanRow(id, plan.finished.has(id));
  }
  steps.contract.unknownRows(unknown, rank);
  if (live && g.foreign.isAdopted(rank)) steps.faults.foreignRows(slot, unknown, plan.finished);
  if (!live)
    g.logger.debug({ engineIndex: rank, rows: unknown.length }, 'output from a rank that is not connected dropped');
}

/**
 * `observe_wave(event)` (13.3), the batch's step 3: complete(w) → clock ← max(clock, w + 1), no wake; start(w) →
 * clock ← max(clock, w), then `wake_group()` (13.2: clock + 1, START_DP_WAVE to every connected rank in identity
 * order, `FailureScope.wakeUnwatched`). In `auto` mode the first notification makes a group of unknown kind lockstep
 * (waves.ts; logged), and wakes it when requests are in flight. A dense group logs and ignores the event.
 */
function observeWave(g: GroupState, scope: FailureScope, rank: number, event: WaveEvent): void {
  const before = g.waves.decidedBy;
  const decision = g.waves.observe(event, g.registry.size > 0);
  if (decision === 'ignored') {
    g.logger.warn(
      { engineIndex: rank, wave: event, decidedBy: g.waves.decidedBy },
      g.waves.decidedBy === 'option'
        ? 'wave notification ignored: the group is configured dense (lockstep: false)'
        : 'wave notification from a group that is not lockstep ignored (every rank reported data_parallel_size <= 1; dp-routing.md 13.1)',
    );
    return;
  }
  if (before === null && g.waves.decidedBy === 'wave-notification') {
    g.logger.info(
      { engineIndex: rank, wave: event, waveClock: g.waves.value, inFlight: g.registry.size },
      'lockstep group detected from a wave notification (no data_parallel_size in the ready responses); waking it on every submit from now on',
    );
  } else {
    g.logger.debug({ engineIndex: rank, wave: event, clock: g.waves.value }, 'wave notification applied');
  }
  if (decision !== 'wake') return;
  const wave = g.waves.bump();
  if (wave !== null) scope.wakeUnwatched(wave);
}
