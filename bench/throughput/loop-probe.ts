/**
 * Event-loop delay probe, preloaded into the measured gateway process by bench:throughput
 * (`node --import tsx --import bench/throughput/loop-probe.ts src/cli.ts serve ...`), so the gateway's code is not
 * touched. A 5 ms interval timer records how late it fires into a `perf_hooks` histogram (what
 * `monitorEventLoopDelay` does natively, plus one thing it cannot: when the loop is blocked, the gap still open at
 * the time of a read is recorded too, so a loop that never turned during a window reports that window, not "no
 * samples"). Its own cost is a few µs per 5 ms. It answers over the node IPC channel the benchmark opened:
 * - `{ probe: 'reset' }` → clears the histogram (start of a measured window), answers `{ probe: 'reset' }`;
 * - `{ probe: 'read' }` → `{ probe: 'read', p50Ms, p99Ms, maxMs, meanMs, samples }` (ms the timer fired late).
 * It only runs with `BENCH_LOOP_PROBE=1` and an IPC channel, and removes the variable so forked processes stay quiet.
 * The timer and the channel are unref'd so they never keep the gateway alive.
 */
import { createHistogram, performance } from 'node:perf_hooks';

/** Timer period in ms. */
const PERIOD_MS = 5;

const enabled = typeof process.send === 'function' && process.env.BENCH_LOOP_PROBE === '1';
// Not inherited: processes this one forks (e.g. node:cluster fronts) do not answer on their own channel.
delete process.env.BENCH_LOOP_PROBE;

if (enabled) {
  const histogram = createHistogram();
  let last = performance.now();
  /** Records the lateness of a timer that should have fired PERIOD_MS after `last`. */
  const record = (now: number): void => {
    histogram.record(Math.max(1, Math.round((now - last - PERIOD_MS) * 1e6)));
    last = now;
  };
  setInterval(() => record(performance.now()), PERIOD_MS).unref();
  const ms = (ns: number): number => (Number.isFinite(ns) && histogram.count > 0 ? ns / 1e6 : Number.NaN);
  process.on('message', (message: unknown) => {
    const kind = (message as { probe?: unknown } | null)?.probe;
    if (kind === 'reset') {
      histogram.reset();
      process.send?.({ probe: 'reset' });
    } else if (kind === 'read') {
      const now = performance.now();
      if (now - last > PERIOD_MS) record(now);
      process.send?.({
        probe: 'read',
        p50Ms: ms(histogram.percentile(50)),
        p99Ms: ms(histogram.percentile(99)),
        maxMs: ms(histogram.max),
        meanMs: ms(histogram.mean),
        samples: histogram.count,
      });
    }
  });
  process.channel?.unref();
}
