/**
 * What `/health` shows without `?verbose=1` (issue #10 part 8: socket paths and process ids only on request, and
 * behind the API key when one is set; auth.ts). Applied as a filter to whatever body health.ts builds, so it keeps
 * working as that body grows.
 */

/** Keys dropped from the plain body: process ids. */
const PID_KEY = /^(pid|pids)$|Pids?$/;
/** Addresses left after the worker names are replaced: any other ipc path or tcp address. */
const ADDRESS = /\b(ipc|tcp):\/\/[^\s"',;)]+/g;

/**
 * A copy of `body` with, in every string, each group's worker URL (`ipc://<path>`, and `<path>` alone, which the
 * socket file names extend) replaced by the group's name (`--group-name`) and every other `ipc://` or `tcp://` address
 * by `<scheme>://<hidden>`, and without keys that hold process ids (`pid`, `pids`, `…Pid`, `…Pids`). Pure.
 */
export function redactHealth<T>(body: T, groups: readonly { worker: string; name: string }[]): T {
  // Longest first: one worker's path may be a prefix of another's (sim-<pid> and sim-<pid>-1).
  const names = groups
    .map(({ worker: w, name }) => ({ url: w, path: w.startsWith('ipc://') ? w.slice('ipc://'.length) : null, name }))
    .sort((a, b) => b.url.length - a.url.length);
  const redactString = (s: string): string => {
    let out = s;
    for (const n of names) {
      out = out.split(n.url).join(n.name);
      if (n.path !== null && n.path !== '') out = out.split(n.path).join(n.name);
    }
    return out.replace(ADDRESS, (_m, scheme: string) => `${scheme}://<hidden>`);
  };
  const walk = (value: unknown): unknown => {
    if (typeof value === 'string') return redactString(value);
    if (Array.isArray(value)) return value.map(walk);
    if (value !== null && typeof value === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value)) if (!PID_KEY.test(k)) out[redactString(k)] = walk(v);
      return out;
    }
    return value;
  };
  return walk(body) as T;
}
