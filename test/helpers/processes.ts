/** Process inspection for the tests that kill gateways and simulated ranks (Linux: pgrep and /proc). */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { entryPattern } from './entry.js';

const SIM_MAIN = entryPattern('sim/main');

/** The children of `pid` that run src/sim/main.ts or its transpiled .js (tsx may add a helper child such as esbuild's service). */
export function simRanksOf(pid: number): number[] {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' });
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
  return out
    .split('\n')
    .filter(Boolean)
    .map(Number)
    .filter((child) => {
      try {
        return SIM_MAIN.test(readFileSync(`/proc/${child}/cmdline`, 'utf8'));
      } catch {
        return false;
      }
    });
}

/**
 * True while `pid` runs. A SIGSTOPped process is alive; an exited one whose new parent has not reaped it yet is a
 * zombie and counts as gone (`kill(pid, 0)` would still succeed on it).
 */
export function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Resolves once none of `pids` is alive (poll every 50 ms; wrap it in a hang guard). */
export async function waitAllGone(pids: readonly number[]): Promise<void> {
  while (pids.some(alive)) await new Promise((r) => setTimeout(r, 50));
}
