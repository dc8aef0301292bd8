/**
 * Helpers of the gateway-restart files (gateway-restart.test.ts, gateway-restart-files.test.ts): gateway processes
 * (the CLI, or a fixture script) whose JSON log lines and stderr are collected, waited on by message, and killed by
 * pid; a clean environment for them (no `MODEL_GATEWAY_*` from outside, `TMPDIR` of the test's own folder so the
 * gateways' runtime directory is the test's); and one-shot HTTP requests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { gatewayRuntimeDir } from '../../src/runtime-dir.js';
import { defaultTokenizerCacheDir } from '../../src/tokenizer/load-cache.js';
import { hangGuard } from '../helpers/async.js';
import { alive, waitAllGone } from '../helpers/processes.js';
import { nodeEntry } from '../helpers/entry.js';

/** The CLI's entry file (for {@link NodeProcess.spawn}). */
export const CLI = new URL('../../src/cli.ts', import.meta.url);

/** One parsed JSON log line. */
export type LogLine = Record<string, unknown> & { msg?: string };

/** The environment of a child gateway: this one without `MODEL_GATEWAY_*`, plus `extra`. */
export function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MODEL_GATEWAY_')));
  return { ...clean, ...extra };
}

/**
 * Makes `<dir>/tmp`, the TMPDIR for a case's processes (so their runtime directory is the case's own), and copies
 * this run's tokenizer load cache into that runtime directory (src/tokenizer/load-cache.ts): otherwise every process
 * the case starts loads the tokenizer cold, ~1 CPU-s more each. Nothing else of the runtime directory is made; with
 * no cache yet, nothing is copied.
 * @returns the path of `<dir>/tmp`.
 */
export function childTmpdir(dir: string): string {
  const tmp = join(dir, 'tmp');
  mkdirSync(tmp);
  const source = defaultTokenizerCacheDir();
  let names: string[] = [];
  try {
    names = readdirSync(source).filter((n) => /^[0-9a-f]{64}\.(tokenizer-cache|key)$/.test(n));
  } catch {
    return tmp;
  }
  if (names.length === 0) return tmp;
  const target = join(tmp, basename(gatewayRuntimeDir()), 'tokenizers');
  mkdirSync(target, { recursive: true, mode: 0o700 });
  for (const n of names) copyFileSync(join(source, n), join(target, n));
  return tmp;
}

/** A gateway (or other node) process: its log lines, stderr and exit. */
export class NodeProcess {
  readonly logs: LogLine[] = [];
  /** Non-JSON stdout lines. */
  readonly text: string[] = [];
  stderr = '';
  readonly exited: Promise<unknown[]>;
  private readonly waiters: Array<{ test: (l: LogLine) => boolean; resolve: (l: LogLine) => void }> = [];

  private constructor(readonly child: ChildProcess) {
    this.exited = once(child, 'close');
    createInterface({ input: child.stdout!, crlfDelay: Infinity }).on('line', (line) => {
      let parsed: LogLine | null = null;
      try {
        const v: unknown = JSON.parse(line);
        if (v !== null && typeof v === 'object' && !Array.isArray(v)) parsed = v as LogLine;
      } catch {
        // not JSON
      }
      if (parsed === null) {
        this.text.push(line);
        return;
      }
      this.logs.push(parsed);
      for (const w of [...this.waiters]) {
        if (!w.test(parsed)) continue;
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(parsed);
      }
    });
    child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }

  /**
   * `node <entry> <args>` with `env` (the entry's .js when the suite runs transpiled, else the .ts through tsx:
   * ../helpers/entry.ts); stdin is a pipe (for `--exit-with-parent` and the fixtures).
   */
  static spawn(entry: URL, args: string[], env: NodeJS.ProcessEnv): NodeProcess {
    return new NodeProcess(
      spawn(process.execPath, [...nodeEntry(entry), ...args], { stdio: ['pipe', 'pipe', 'pipe'], env }),
    );
  }

  get pid(): number {
    return this.child.pid!;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Log lines whose message starts with `prefix` (or satisfies `test`). */
  logged(prefix: string): LogLine[] {
    return this.logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith(prefix));
  }

  /**
   * Resolves with the first log line (seen already or later) that `test` accepts; rejects when the process exits
   * first (with its stderr) or after `ms` (a hang guard).
   */
  waitLog(test: (l: LogLine) => boolean, what: string, ms = 90_000): Promise<LogLine> {
    const seen = this.logs.find(test);
    if (seen !== undefined) return Promise.resolve(seen);
    const found = new Promise<LogLine>((resolve) => this.waiters.push({ test, resolve }));
    const died = this.exited.then(() => {
      throw new Error(`process ${this.pid} exited before ${what}; stderr: ${this.stderr.slice(-2000)}`);
    });
    died.catch(() => {});
    return hangGuard(Promise.race([found, died]), ms, what);
  }

  /** `waitLog` for a message starting with `prefix`. */
  waitLogged(prefix: string, ms?: number): Promise<LogLine> {
    return this.waitLog((l) => typeof l.msg === 'string' && l.msg.startsWith(prefix), `log line '${prefix}'`, ms);
  }

  /** SIGKILL it (if it runs) and wait for its exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.running) this.child.kill(signal);
    await hangGuard(this.exited, 30_000, `process ${this.pid} exiting`);
  }
}

/** SIGKILL every pid of `pids` still alive and wait until all are gone. Never throws for a process already gone. */
export async function killAll(pids: readonly number[]): Promise<void> {
  for (const pid of pids.filter(alive)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  await hangGuard(waitAllGone(pids), 30_000, `processes ${pids.join(', ')} exiting`);
}

/** What one request answered: status and body text. */
export interface Reply {
  status: number;
  text: string;
}

/** POST `body` as JSON to `url` (extra `headers`); a 30 s hang guard. */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, text: await res.text() };
}

/** GET `url`; a 30 s hang guard. */
export async function get(url: string): Promise<Reply> {
  const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
  return { status: res.status, text: await res.text() };
}
