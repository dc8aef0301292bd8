/**
 * CPU time of a process tree from Linux `/proc` (the guide's unit of performance: CPU time of the gateway's own
 * processes, simulated ranks counted apart). `/proc/<pid>/stat` fields 14 and 15 (`utime`, `stime`, in clock ticks of
 * `sysconf(_SC_CLK_TCK)`, 100 on Linux) cover every thread of the process (libuv pool, V8 GC and compiler threads).
 * Roles are told apart by command line: a simulated rank runs `src/sim/main.ts` (or the compiled `sim/main.js`); any other descendant of the gateway
 * node process is a front (a `--workers N` HTTP process); anything else (tsx's esbuild service) is `other`; the root is
 * `gateway` with one process or `routing` with fronts.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

/** The role of one process in the measured tree. */
export type ProcessRole = 'gateway' | 'routing' | 'front' | 'rank' | 'other';

/** One process of the tree. */
export interface TreeProcess {
  pid: number;
  role: ProcessRole;
}

/** Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`; 100 when it cannot be read). */
export const CLK_TCK: number = (() => {
  try {
    const v = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(v) && v > 0 ? v : 100;
  } catch {
    return 100;
  }
})();

/** `utime + stime` of `pid` in µs, or null when the process is gone. */
export function cpuMicros(pid: number): number | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  return ((utime + stime) * 1e6) / CLK_TCK;
}

/** Direct children of `pid` (over all its threads), [] when gone. */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const task of tasks) {
    try {
      for (const s of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' '))
        if (s !== '') out.push(Number(s));
    } catch {
      // thread exited meanwhile
    }
  }
  return out;
}

/** The argv of `pid` ([] when gone). */
function commandLine(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

function roleOf(pid: number): ProcessRole {
  const argv = commandLine(pid);
  if (argv.some((a) => /sim[/\\]main\.[jt]s$/.test(a))) return 'rank';
  return argv[0] === process.execPath || /(^|\/)node$/.test(argv[0] ?? '') ? 'front' : 'other';
}

/** The gateway rooted at `rootPid` and all its descendants, each with its role (see the module comment). */
export function processTree(rootPid: number): TreeProcess[] {
  const descendants: number[] = [];
  const queue = [rootPid];
  while (queue.length > 0) {
    for (const child of childPids(queue.shift()!)) {
      descendants.push(child);
      queue.push(child);
    }
  }
  const children = descendants.map((pid) => ({ pid, role: roleOf(pid) }));
  const root: TreeProcess = { pid: rootPid, role: children.some((c) => c.role === 'front') ? 'routing' : 'gateway' };
  return [root, ...children];
}

/** CPU µs of every process of `tree` right now (a process that is gone counts 0). */
export function sampleTree(tree: readonly TreeProcess[]): Map<number, number> {
  return new Map(tree.map((p) => [p.pid, cpuMicros(p.pid) ?? 0]));
}

/** CPU µs spent between two samples, summed per role. */
export function cpuByRole(
  tree: readonly TreeProcess[],
  before: Map<number, number>,
  after: Map<number, number>,
): Record<ProcessRole, number> {
  const out: Record<ProcessRole, number> = { gateway: 0, routing: 0, front: 0, rank: 0, other: 0 };
  for (const p of tree) out[p.role] += Math.max(0, (after.get(p.pid) ?? 0) - (before.get(p.pid) ?? 0));
  return out;
}
