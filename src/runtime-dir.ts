/**
 * The gateway's per-user runtime directory, `<os.tmpdir()>/model-gateway-<uid>`: the simulated groups' sockets, the
 * `--workers` channel socket (transport/stale-sweep.ts sweeps what dead gateways left there) and the tokenizer load
 * cache (tokenizer/load-cache.ts). Made with mode 0700; a directory another user owns, or that group or others may
 * write, is not trusted.
 */
import { lstatSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';

/** `<os.tmpdir()>/model-gateway-<uid>` (the user name where the platform has no uid). Does not create it. */
export function gatewayRuntimeDir(): string {
  const uid = typeof process.getuid === 'function' ? process.getuid() : userInfo().username;
  return join(tmpdir(), `model-gateway-${uid}`);
}

/** Whether `dir` is a directory owned by this user and not writable by group or others (lstat; false if absent). */
export function safeDirectory(dir: string): boolean {
  try {
    const s = lstatSync(dir);
    const euid = typeof process.geteuid === 'function' ? process.geteuid() : -1;
    return s.isDirectory() && s.uid === euid && (s.mode & 0o022) === 0;
  } catch {
    return false;
  }
}
