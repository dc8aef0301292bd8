/**
 * Socket-directory hygiene and stale-socket removal before binding a worker's ipc endpoints
 * (engine-wire.md section 1.4; SMG `zmq_client.rs`, PR #2076).
 */
import { lstat, mkdir, unlink } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { dirname } from 'node:path';
import type { EngineEndpoints } from './endpoints.js';
import { ConfigError } from './errors.js';
import { silentLogger } from '../logging.js';
import type { MinimalLogger } from '../logging.js';

/** Strips `ipc://` from an ipc endpoint address. */
function ipcFile(address: string): string {
  return address.startsWith('ipc://') ? address.slice('ipc://'.length) : address;
}

/** `lstat` that returns null for a missing path and rethrows everything else. */
async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
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
 * Checks that the socket directory is a real directory (lstat: a symlink is refused) owned by our effective uid.
 * Throws ConfigError otherwise. Never changes its permissions (engine-wire.md 1.4 step 1).
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
}

/**
 * Prepares a worker's ipc paths before binding (engine-wire.md section 1.4):
 * 1. Socket directory = parent of `<P>`, inspected with lstat. Missing: created recursively with mode 0700 (set at
 *    creation). Present: must be a directory (not a symlink) owned by the effective uid; an existing directory's
 *    permissions are never changed.
 * 2. For the input and output socket paths: absent is fine; a Unix socket is a stale leftover of a dead gateway and
 *    is unlinked (logged at warn); anything else (regular file, directory, symlink, FIFO) is refused and left alone.
 * The tcp handshake endpoint needs nothing.
 *
 * Throws ConfigError naming the path and the reason on any refusal; rethrows other filesystem errors (EACCES, ...).
 */
export async function prepareSocketPaths(endpoints: EngineEndpoints, log: MinimalLogger = silentLogger): Promise<void> {
  const workerUrl = endpoints.workerUrl;
  const dir = dirname(endpoints.ipcPath);
  let dirStats = await lstatOrNull(dir);
  if (dirStats === null) {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    log.info({ workerUrl, dir }, 'created ipc socket directory (mode 0700)');
    dirStats = await lstat(dir);
  }
  checkDirectory(dir, dirStats, workerUrl);

  for (const address of [endpoints.input, endpoints.output]) {
    const path = ipcFile(address);
    const stats = await lstatOrNull(path);
    if (stats === null) continue;
    if (stats.isSocket()) {
      try {
        await unlink(path);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
      log.warn({ workerUrl, path }, 'removed stale ipc socket left by a previous gateway');
      continue;
    }
    throw new ConfigError(
      `ipc path ${path} for ${workerUrl} exists and is ${kindOf(stats)}, not a stale socket; ` +
        `refusing to remove it (move it away or choose another worker URL)`,
    );
  }
}
