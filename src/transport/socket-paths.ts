/**
 * Socket-directory hygiene, stale-socket removal before binding a worker's ipc endpoints and removal of the gateway's
 * own socket files when it stops (engine-wire.md section 1.4; SMG `zmq_client.rs`, PR #2076; issue #8 part 5).
 *
 * Beyond SMG: a socket file is unlinked as stale only after a connect to it was refused (a live gateway still
 * accepts connections there, and unlinking its file would cut off every rank that dials in later), and a socket
 * directory that group or others may write is refused (anyone who can write there can replace the sockets, which
 * carry no authentication; as ssh refuses a key file others can read).
 */
import { lstatSync, unlinkSync, type Stats } from 'node:fs';
import { lstat, mkdir, unlink } from 'node:fs/promises';
import { connect } from 'node:net';
import { dirname } from 'node:path';
import type { EngineEndpoints } from './endpoints.js';
import { ConfigError } from './errors.js';
import { silentLogger } from '../logging.js';
import type { MinimalLogger } from '../logging.js';

/** How long the liveness connect to an existing socket file may take, in ms, before the owner counts as live. */
export const SOCKET_PROBE_TIMEOUT_MS = 1000;

/** Strips `ipc://` from an ipc endpoint address. */
function ipcFile(address: string): string {
  return address.startsWith('ipc://') ? address.slice('ipc://'.length) : address;
}

/** `lstat` that returns null for a missing path and rethrows everything else. */
async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ENOTDIR') throw new ConfigError(`ipc path ${path}: a component of it is not a directory (ENOTDIR)`);
    throw error;
  }
}

/**
 * Creates `dir` and its missing ancestors one level at a time, each with mode 0700. Not `mkdir({ recursive: true })`:
 * on Node 20 that never returns for a path under /proc (it retries ENOENT forever). Throws ConfigError naming the
 * directory that could not be made and the errno code.
 */
async function makeSocketDirectory(dir: string): Promise<void> {
  const missing: string[] = [];
  for (let d = dir; (await lstatOrNull(d)) === null; d = dirname(d)) {
    missing.unshift(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing) {
    try {
      await mkdir(d, { mode: 0o700 });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') continue;
      throw new ConfigError(`cannot create the ipc socket directory ${d} (${code ?? String(error)})`);
    }
  }
}

/** Describes what a path is, for error messages. */
function kindOf(stats: Stats): string {
  if (stats.isSymbolicLink()) return 'a symlink';
  if (stats.isDirectory()) return 'a directory';
  if (stats.isFile()) return 'a regular file';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  return 'not a socket';
}

/** The effective uid of this process (the owner every socket directory must have). */
function effectiveUid(): number {
  if (typeof process.geteuid !== 'function') {
    throw new ConfigError('ipc sockets need a POSIX platform (process.geteuid is not available)');
  }
  return process.geteuid();
}

/**
 * Checks that the socket directory is a real directory (lstat: a symlink is refused), owned by our effective uid and
 * not writable by group or others. Throws ConfigError otherwise, saying how to fix it. Never changes its permissions
 * (engine-wire.md 1.4 step 1).
 */
function checkDirectory(dir: string, stats: Stats, workerUrl: string): void {
  if (!stats.isDirectory()) {
    throw new ConfigError(
      `socket directory ${dir} for ${workerUrl} is ${kindOf(stats)}, not a directory; refusing to bind there`,
    );
  }
  const euid = effectiveUid();
  if (stats.uid !== euid) {
    throw new ConfigError(
      `socket directory ${dir} for ${workerUrl} is owned by uid ${stats.uid}, not by this process (euid ${euid}); ` +
        `the sockets carry no authentication, so refusing to bind there (use a directory you own)`,
    );
  }
  const mode = stats.mode & 0o777;
  if ((mode & 0o022) !== 0) {
    const who = [(mode & 0o020) !== 0 ? 'its group' : '', (mode & 0o002) !== 0 ? 'others' : '']
      .filter((w) => w !== '')
      .join(' and ');
    throw new ConfigError(
      `socket directory ${dir} for ${workerUrl} is writable by ${who} (mode ${mode.toString(8).padStart(4, '0')}): ` +
        `anyone who can write there can replace the gateway's sockets, which carry no authentication. ` +
        `Fix it with: chmod 700 ${dir}   (or choose a directory only you can write)`,
    );
  }
}

/**
 * Whether a process accepts connections on the Unix socket at `path`: `live` (a connect succeeded, or did not finish
 * within `SOCKET_PROBE_TIMEOUT_MS`: a busy listener is still a listener), `stale` (ECONNREFUSED: nobody listens),
 * `gone` (ENOENT: removed meanwhile). Rethrows any other error (EACCES, ...).
 */
export async function socketOwner(path: string): Promise<'live' | 'stale' | 'gone'> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('live');
    }, SOCKET_PROBE_TIMEOUT_MS);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve('live');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      socket.destroy();
      if (error.code === 'ECONNREFUSED') resolve('stale');
      else if (error.code === 'ENOENT') resolve('gone');
      else reject(error);
    });
  });
}

/**
 * Prepares a worker's ipc paths before binding (engine-wire.md section 1.4):
 * 1. Socket directory = parent of `<P>`, inspected with lstat. Missing: created level by level with mode 0700 (set at
 *    creation). Present: must be a directory (not a symlink) owned by the effective uid and not writable by group or
 *    others; an existing directory's permissions are never changed.
 * 2. For the input and output socket paths: absent is fine; a Unix socket is probed with a connect: a live owner
 *    (another gateway serving this worker URL) is refused and left alone, a refused connect means a stale leftover of
 *    a dead process, which is unlinked (logged at warn); anything else (regular file, directory, symlink, FIFO) is
 *    refused and left alone.
 * The tcp handshake endpoint needs nothing (its bind fails with EADDRINUSE if taken).
 *
 * Throws ConfigError naming the path and the reason on any refusal; rethrows other filesystem errors (EACCES, ...).
 */
export async function prepareSocketPaths(endpoints: EngineEndpoints, log: MinimalLogger = silentLogger): Promise<void> {
  const workerUrl = endpoints.workerUrl;
  const dir = dirname(endpoints.ipcPath);
  let dirStats = await lstatOrNull(dir);
  if (dirStats === null) {
    await makeSocketDirectory(dir);
    log.info({ workerUrl, dir }, 'created ipc socket directory (mode 0700)');
    dirStats = await lstat(dir);
  }
  checkDirectory(dir, dirStats, workerUrl);

  for (const address of [endpoints.input, endpoints.output]) {
    const path = ipcFile(address);
    const stats = await lstatOrNull(path);
    if (stats === null) continue;
    if (!stats.isSocket()) {
      throw new ConfigError(
        `ipc path ${path} for ${workerUrl} exists and is ${kindOf(stats)}, not a stale socket; ` +
          `refusing to remove it (move it away or choose another worker URL)`,
      );
    }
    const owner = await socketOwner(path);
    if (owner === 'live') {
      throw new ConfigError(
        `ipc socket ${path} for ${workerUrl} is in use: a live process accepts connections on it (another gateway is ` +
          `serving this worker URL); refusing to take it over. Stop that gateway or choose another worker URL`,
      );
    }
    if (owner === 'gone') continue;
    try {
      await unlink(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    log.warn(
      { workerUrl, path },
      'removed stale ipc socket left by a dead process (nothing accepted a connection on it)',
    );
  }
}

/** One socket file the gateway bound, identified by device and inode so a later owner's file is never removed. */
export interface BoundSocketFile {
  path: string;
  dev: number;
  ino: number;
}

/**
 * Records the input and output socket files right after they were bound (lstat of each; a missing file is left
 * out). Never throws.
 */
export function recordSocketFiles(endpoints: EngineEndpoints): BoundSocketFile[] {
  const out: BoundSocketFile[] = [];
  for (const address of [endpoints.input, endpoints.output]) {
    const path = ipcFile(address);
    try {
      const s = lstatSync(path);
      if (s.isSocket()) out.push({ path, dev: s.dev, ino: s.ino });
    } catch {
      // not there (cannot happen right after a successful bind); nothing to remove later
    }
  }
  return out;
}

/**
 * Removes the recorded socket files that are still the ones this process bound (same device and inode, still a
 * socket): libzmq leaves ipc files behind on close, and a file replaced since (by a newer gateway) is not ours.
 * Synchronous, so it also runs on an emergency exit. Returns the paths removed. Never throws.
 */
export function removeOwnSocketFiles(files: readonly BoundSocketFile[], log: MinimalLogger = silentLogger): string[] {
  const removed: string[] = [];
  for (const f of files) {
    try {
      const s = lstatSync(f.path);
      if (!s.isSocket() || s.dev !== f.dev || s.ino !== f.ino) {
        log.info({ path: f.path }, 'ipc socket file was replaced since this gateway bound it; left in place');
        continue;
      }
      unlinkSync(f.path);
      removed.push(f.path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT')
        log.warn({ path: f.path, err: error }, 'could not remove ipc socket file');
    }
  }
  return removed;
}
