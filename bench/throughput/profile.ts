/**
 * Reads a V8 `.cpuprofile` (written by `node --cpu-prof`) and says where the time went inside a time window: self
 * time per function (name + file:line), self time per area (a file of this repository, a package, node internals,
 * GC), and inclusive time of chosen functions. Pure apart from reading the file. Units: ms and % of the non-idle
 * samples in the window.
 *
 * Format (Chrome DevTools protocol `Profiler.Profile`): `nodes` (id, callFrame, children), `samples` (node id per
 * sample) and `timeDeltas` (µs before each sample), `startTime` in µs of the monotonic clock — the clock of
 * `process.hrtime()`, so another process can name the window.
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** One row of a summary: a label, ms and % of the window's non-idle time. */
export interface ProfileRow {
  label: string;
  ms: number;
  percent: number;
}

/**
 * A named share of the time. A sample goes to the first bucket, in order, whose `onStack` matches any frame of its
 * stack or whose `leaf` matches its own (self) frame; samples no bucket takes go to `other`.
 */
export interface ProfileBucket {
  name: string;
  onStack?: (frame: CallFrame, area: string) => boolean;
  leaf?: (frame: CallFrame, area: string) => boolean;
}

export type { CallFrame };

/** What {@link summarizeProfile} returns. */
export interface ProfileSummary {
  /** Non-idle ms in the window. */
  busyMs: number;
  /** Idle ms in the window (the event loop waiting). */
  idleMs: number;
  topSelf: ProfileRow[];
  byArea: ProfileRow[];
  inclusive: ProfileRow[];
  /** Time per bucket (every busy sample in exactly one), in bucket order, then `other`. */
  buckets: ProfileRow[];
}

/** The area a frame belongs to: a repository file (`src/server/sse.ts`), a package, node internals, or V8's own. */
export function areaOf(frame: CallFrame): string {
  const url = frame.url;
  if (url === '') return frame.functionName.startsWith('(') ? frame.functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url.split('/').slice(0, 2).join('/');
  // The bench's compiled build (./build.ts) reports its files under their source names.
  const built = /\/\.build-bench\/(.*)\.js$/.exec(url);
  if (built) return built[1]!.startsWith('_bench/') ? `bench/${built[1]!.slice(7)}.ts` : `src/${built[1]!}.ts`;
  const src = /\/((?:src|bench|test)\/.*)$/.exec(url);
  return src ? src[1]! : url;
}

function frameLabel(frame: CallFrame): string {
  const name = frame.functionName === '' ? '(anonymous)' : frame.functionName;
  if (frame.url === '') return name;
  // Files compiled on the fly by tsx report line 0 for every function: the name and file say enough there.
  return frame.lineNumber > 0 ? `${name} ${areaOf(frame)}:${frame.lineNumber + 1}` : `${name} ${areaOf(frame)}`;
}

/**
 * Summarizes the samples of `path` whose timestamps fall in [fromUs, toUs] (monotonic µs; pass -Infinity/Infinity
 * for the whole profile). `inclusiveOf`: function names whose inclusive time (any sample with the function on its
 * stack, counted once per sample) is reported. Throws when the file is not a CPU profile.
 */
export function summarizeProfile(
  path: string,
  fromUs: number,
  toUs: number,
  inclusiveOf: readonly string[],
  buckets: readonly ProfileBucket[] = [],
  top = 25,
): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  if (!Array.isArray(profile.nodes) || !Array.isArray(profile.samples)) throw new Error(`${path} is not a .cpuprofile`);
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) byId.set(n.id, n);
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

  const self = new Map<string, number>();
  const area = new Map<string, number>();
  const inclusive = new Map<string, number>(inclusiveOf.map((name) => [name, 0]));
  const bucketed = new Map<string, number>([...buckets.map((b): [string, number] => [b.name, 0]), ['other', 0]]);
  let busyUs = 0;
  let idleUs = 0;
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    // A sample stands for the time until the next one.
    const dt = profile.timeDeltas[i + 1] ?? 0;
    if (t < fromUs || t > toUs) continue;
    const node = byId.get(profile.samples[i]!);
    if (!node) continue;
    if (node.callFrame.functionName === '(idle)') {
      idleUs += dt;
      continue;
    }
    busyUs += dt;
    const label = frameLabel(node.callFrame);
    self.set(label, (self.get(label) ?? 0) + dt);
    const a = areaOf(node.callFrame);
    area.set(a, (area.get(a) ?? 0) + dt);
    const seen = new Set<string>();
    const stack: CallFrame[] = [];
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id)!.callFrame;
      stack.push(frame);
      if (inclusive.has(frame.functionName) && !seen.has(frame.functionName)) {
        seen.add(frame.functionName);
        inclusive.set(frame.functionName, inclusive.get(frame.functionName)! + dt);
      }
    }
    const bucket =
      buckets.find(
        (b) =>
          (b.leaf?.(node.callFrame, a) ?? false) ||
          (b.onStack !== undefined && stack.some((f) => b.onStack!(f, areaOf(f)))),
      )?.name ?? 'other';
    bucketed.set(bucket, bucketed.get(bucket)! + dt);
  }
  const rows = (m: Map<string, number>, limit: number): ProfileRow[] =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([label, us]) => ({ label, ms: us / 1000, percent: busyUs > 0 ? (100 * us) / busyUs : 0 }));
  const bucketRows = [...bucketed.entries()].map(([label, us]) => ({
    label,
    ms: us / 1000,
    percent: busyUs > 0 ? (100 * us) / busyUs : 0,
  }));
  return {
    busyMs: busyUs / 1000,
    idleMs: idleUs / 1000,
    topSelf: rows(self, top),
    byArea: rows(area, top),
    inclusive: rows(inclusive, inclusiveOf.length),
    buckets: bucketRows,
  };
}
