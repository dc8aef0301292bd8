/**
 * Removal of the socket files a dead gateway left behind (issue 26 part 6). libzmq and node leave a Unix socket's file
 * in place when its process is killed, and `prepareSocketPaths` (socket-paths.ts) only cleans the two paths the
 * starting gateway is about to bind. What stayed forever:
 * - the simulated groups' sockets `<runtime dir>/sim-<pid>[-<n>]-{in,out}.sock`: each gateway picks a new path from its
 *   own pid (gateway/engine-groups.ts `simWorkerUrl`), so no later gateway ever binds the dead one's;
 * - the `--workers N` router's channel socket `<runtime dir>/fronts-<pid>.sock` (fronts/router/cluster.ts), likewise;
 * - the sockets of other engine groups a dead gateway served beside the ones the next gateway is configured with.
 *
 * The runtime dir is `<os.tmpdir()>/model-gateway-<uid>` (mode 0700). A file is removed only when all of these hold:
 * its owner is named (the pid in a runtime-dir file name, or the `gatewayPid` of the rank records file `<P>-ranks.json`
 * beside `<P>-in.sock` / `<P>-out.sock`, rank-records.ts), that pid is not this process and runs no process any more
 * (`kill(pid, 0)` fails with ESRCH), the path is a socket (lstat: never a symlink or anything else) and a connect to it
 * is refused (nobody listens). A live gateway's files fail the pid test (and the connect test), so they are never
 * touched; a reused pid keeps a dead gateway's file, which is the safe side. Only directories owned by this user and
 * not writable by group or others are swept. The rank records files themselves stay: the engines they name may still
 * run, for a gateway started on those endpoints to adopt.
 */
import { lstatSync, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from './describe.js';
import { RANK_RECORDS_SUFFIX } from './rank-records.js';
import { socketOwner } from './socket-paths.js';
import { silentLogger, type MinimalLogger } from '../logging.js';
import { gatewayRuntimeDir, safeDirectory } from '../runtime-dir.js';

/** True while `pid` names a process (ours or another user's: EPERM counts as running). */
export function pidRunning(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Runtime-dir socket names and the pid that owns them: `sim-<pid>[-<n>]-{in,out}.sock`, `fronts-<pid>.sock`. */
const RUNTIME_SOCKET = /^(?:sim-(\d+)(?:-\d+)?-(?:in|out)|fronts-(\d+))\.sock$/;

/** Candidate files of dead owners in `dir`: (path, owner pid) pairs, from names and from rank records files. */
function candidates(dir: string, runtime: boolean): Array<{ path: string; pid: number }> {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const out: Array<{ path: string; pid: number }> = [];
  for (const name of names) {
    const m = runtime ? RUNTIME_SOCKET.exec(name) : null;
    if (m !== null) {
      out.push({ path: join(dir, name), pid: Number(m[1] ?? m[2]) });
      continue;
    }
    if (!name.endsWith(RANK_RECORDS_SUFFIX)) continue;
    let pid: unknown;
    try {
      pid = (JSON.parse(readFileSync(join(dir, name), 'utf8')) as { gatewayPid?: unknown }).gatewayPid;
    } catch {
      continue; // unreadable or corrupt: names no owner
    }
    if (typeof pid !== 'number') continue;
    const base = join(dir, name.slice(0, -RANK_RECORDS_SUFFIX.length));
    out.push({ path: `${base}-in.sock`, pid }, { path: `${base}-out.sock`, pid });
  }
  return out;
}

/**
 * Remove the socket files of dead gateways (see the module docs) from the runtime dir (default
 * `gatewayRuntimeDir()`; pass null to skip it) and from `workerDirs` (the socket directories of the configured engine
 * groups). Resolves with the paths removed, each logged at info. Never rejects: a file that cannot be checked or
 * removed is left in place (logged at warn unless it vanished meanwhile).
 */
export async function sweepDeadGatewayFiles(
  workerDirs: readonly string[],
  log: MinimalLogger = silentLogger,
  runtimeDir: string | null = gatewayRuntimeDir(),
): Promise<string[]> {
  const dirs = new Map<string, boolean>();
  for (const d of workerDirs) dirs.set(d, false);
  if (runtimeDir !== null) dirs.set(runtimeDir, true);
  const removed: string[] = [];
  for (const [dir, runtime] of dirs) {
    if (!safeDirectory(dir)) continue;
    for (const { path, pid } of candidates(dir, runtime)) {
      if (pid === process.pid || pidRunning(pid)) continue;
      try {
        if (!lstatSync(path).isSocket()) continue;
        if ((await socketOwner(path)) !== 'stale') continue;
        unlinkSync(path);
        removed.push(path);
        log.info(
          { path, deadGatewayPid: pid },
          `removed a socket file left by a dead gateway (pid ${pid} is gone and nothing listens there)`,
        );
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT')
          log.warn(
            { path, err: errorMessage(error) },
            "could not check or remove a dead gateway's socket file; left in place",
          );
      }
    }
  }
  return removed;
}
