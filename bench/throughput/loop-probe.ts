/**
 * Event-loop delay probe, preloaded into the measured gateway by bench:throughput (`node --import
 * bench/throughput/loop-probe.ts …`, inherited by the processes it forks: the `--workers N` fronts, the simulated
 * ranks), so the gateway's code is not touched. A 5 ms interval timer records how late it fires into a `perf_hooks`
 * histogram (what `monitorEventLoopDelay` does natively, plus one thing it cannot: when the loop is blocked, the gap
 * still open at the time of a read is recorded too, so a loop that never turned during a window reports that window,
 * not "no samples"). Its own cost is a few µs per 5 ms.
 *
 * Each process connects to the unix socket the benchmark listens on (`BENCH_LOOP_PROBE_SOCK`), says `{"pid": N}`,
 * and answers newline-delimited commands there (./gateway-process.ts picks the gateway's processes by pid):
 * - `reset` → clears the histogram (start of a measured window), answers `{"probe":"reset"}`;
 * - `read` → `{"probe":"read", p50Ms, p99Ms, maxMs, meanMs, samples}` (ms the timer fired late).
 * Without the variable it does nothing. The timer and the socket are unref'd so they never keep a process alive, and
 * a socket error (the benchmark gone) only stops the answers.
 */
import { createConnection } from 'node:net';
import { createHistogram, performance } from 'node:perf_hooks';

/** Timer period in ms. */
const PERIOD_MS = 5;

const socketPath = process.env.BENCH_LOOP_PROBE_SOCK;

if (socketPath !== undefined && socketPath !== '') {
  const histogram = createHistogram();
  let last = performance.now();
  /** Records the lateness of a timer that should have fired PERIOD_MS after `last`. */
  const record = (now: number): void => {
    histogram.record(Math.max(1, Math.round((now - last - PERIOD_MS) * 1e6)));
    last = now;
  };
  setInterval(() => record(performance.now()), PERIOD_MS).unref();
  const ms = (ns: number): number => (Number.isFinite(ns) && histogram.count > 0 ? ns / 1e6 : Number.NaN);
  const answer = (command: string): object | null => {
    if (command === 'reset') {
      histogram.reset();
      return { probe: 'reset' };
    }
    if (command !== 'read') return null;
    const now = performance.now();
    if (now - last > PERIOD_MS) record(now);
    return {
      probe: 'read',
      p50Ms: ms(histogram.percentile(50)),
      p99Ms: ms(histogram.percentile(99)),
      maxMs: ms(histogram.max),
      meanMs: ms(histogram.mean),
      samples: histogram.count,
    };
  };
  const sock = createConnection(socketPath);
  sock.on('error', () => sock.destroy());
  sock.setEncoding('utf8');
  sock.write(`${JSON.stringify({ pid: process.pid })}\n`);
  let pending = '';
  sock.on('data', (chunk: string) => {
    pending += chunk;
    for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n')) {
      const reply = answer(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
      if (reply !== null) sock.write(`${JSON.stringify(reply)}\n`);
    }
  });
  sock.unref();
}
