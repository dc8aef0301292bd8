/** Small test utilities shared by the socket and process tests. */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A fresh temporary folder (`<tmp>/<prefix>XXXXXX`) and a `cleanup()` that removes it recursively. */
export async function freshDir(prefix = 'mgw-'): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * Rejects after `ms` with a message naming `what` (a function is asked then, so it can say how far things got): a
 * hang guard only, never a timing assertion.
 */
export function hangGuard<T>(promise: Promise<T>, ms: number, what: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, reject) => {
    const name = () => (typeof what === 'function' ? what() : what);
    timer = setTimeout(() => reject(new Error(`hang guard: ${name()} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer));
}

/**
 * Poll the count `read()` every 100 ms until it reaches `target`; fails only when it has not moved for `idleMs` (with
 * `what` and the count then). A guard against a hang, not a deadline: on a loaded machine the count grows more slowly
 * but still grows, so the wait takes longer instead of failing.
 */
export async function progressGuard(read: () => number, target: number, idleMs: number, what: string): Promise<void> {
  let last = read();
  let movedAt = performance.now();
  while (last < target) {
    await new Promise((r) => setTimeout(r, 100));
    const now = read();
    if (now !== last) {
      last = now;
      movedAt = performance.now();
    } else if (performance.now() - movedAt > idleMs) {
      assert.fail(`progress guard: ${what} stopped at ${now} of ${target} for ${idleMs} ms`);
    }
  }
}

/**
 * Poll `cond` every 50 ms until it holds (a rejection counts as not yet); fails after `ms` with `what` and, when
 * given, what `describe()` says then. A hang guard only, never a timing assertion.
 */
export async function waitFor(
  cond: () => Promise<boolean> | boolean,
  what: string,
  ms = 30_000,
  describe?: () => unknown,
): Promise<void> {
  const deadline = performance.now() + ms;
  while (
    !(await Promise.resolve()
      .then(cond)
      .catch(() => false))
  ) {
    if (performance.now() > deadline) {
      const state =
        describe === undefined
          ? ''
          : `; state: ${JSON.stringify(
              await Promise.resolve()
                .then(describe)
                .catch((e: unknown) => String(e)),
            )}`;
      assert.fail(`${what}: not within ${ms} ms${state}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Run `round` until it is conclusive (resolves true), at most `rounds` times. For checks that need a state that may
 * end by itself (a busy worker finishing its job): a round that finds the state gone before it could tell anything
 * resolves false and is run again; a genuine failure throws, so it never passes by repetition.
 */
export async function conclusive(what: string, round: () => Promise<boolean>, rounds = 6): Promise<void> {
  for (let i = 0; i < rounds; i++) if (await round()) return;
  assert.fail(`${what}: no conclusive round in ${rounds}`);
}
