/**
 * Helpers of the `--workers 2` end-to-end files (workers.test.ts, workers-faults.test.ts): start `model-gateway serve
 * --workers 2` over simulated ranks, and talk to it on a fresh TCP connection per request (node:cluster hands
 * connections to the fronts round robin, so consecutive requests land on alternate fronts).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { gatewayRuntimeDir } from '../../src/runtime-dir.js';
import { freePort } from '../helpers/net.js';
import { waitFor } from '../helpers/async.js';
import { alive, simRanksOf } from '../helpers/processes.js';
import { entryPattern, nodeEntry } from '../helpers/entry.js';

export { waitFor };

const CLI = new URL('../../src/cli.ts', import.meta.url);
const CLI_FILE = entryPattern('src/cli');
const SIM_MAIN_FILE = entryPattern('sim/main');
export const MODEL = 'sim';
/** Socket idle timeout of the helpers' one-shot GET/POST requests, ms (a hang guard, not a timing assertion). */
const REQUEST_TIMEOUT_MS = 15_000;
/** A stream that runs until the test ends it. */
export const LONG = { model: MODEL, prompt: 'Tell me a very long story.', max_tokens: 20_000, ignore_eos: true };

/** The gateway's front processes: its children that run the CLI (the simulated ranks run src/sim/main.ts). */
export function frontsOf(pid: number): number[] {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out
    .split('\n')
    .filter(Boolean)
    .map(Number)
    .filter((child) => {
      try {
        const cmd = readFileSync(`/proc/${child}/cmdline`, 'utf8');
        return CLI_FILE.test(cmd) && !SIM_MAIN_FILE.test(cmd) && alive(child);
      } catch {
        return false;
      }
    });
}

/** What a POST answered. */
export interface Answer {
  status: number;
  headers: IncomingMessage['headers'];
  /** The parsed body (read field by field by the tests), or its text when it is not JSON. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tests' assertions are its type check
  json: any;
}

/** A streamed completion on a fresh connection: its SSE text so far, how it ended, and a way to disconnect. */
export interface OpenStream {
  text(): string;
  /** The client side's local TCP port (0 before the socket connected). */
  localPort(): number;
  /** Resolves once the response ended: `error` for a connection that broke (reset, front killed). */
  done: Promise<{ status: number; finished: boolean; error: string | null }>;
  destroy(): void;
}

/** How `WorkersGateway.launch` runs the gateway beyond its CLI flags. */
export interface LaunchOptions {
  /** Node arguments before the CLI script (the fronts are forked with them too, node:cluster's default). */
  nodeArgs?: string[];
  /** Environment variables added to this process's. */
  env?: Record<string, string>;
}

/** A running `serve --workers 2` and its client side. */
export class WorkersGateway {
  private stderr = '';
  private readonly socketFiles: string[] = [];
  /** The router-front channel's unix socket file, from the listening line (null before it). */
  channelFile: string | null = null;
  /** Every JSON log line the gateway (router and fronts) wrote on stdout so far, parsed. */
  readonly logs: Array<Record<string, unknown>> = [];

  /** Resolves with the exit code and signal once the gateway exited and its output was read to the end (`logs`). */
  readonly closed: Promise<unknown[]>;

  private constructor(
    readonly gw: ChildProcess,
    readonly port: number,
    readonly exited: Promise<unknown[]>,
  ) {
    this.closed = once(gw, 'close');
  }

  /** Start it over `ranks` simulated ranks with `extra` flags; resolves once `/ready` is 200 and both fronts run. */
  static async start(extra: string[], ranks = 2, launch: LaunchOptions = {}): Promise<WorkersGateway> {
    const g = await WorkersGateway.launch(extra, ranks, launch);
    // The start is over when the router logs its "listening" line (every front listens), not at the first 200.
    await waitFor(
      async () => {
        if (g.gw.exitCode !== null) throw new Error(`gateway exited: ${g.stderr}`);
        return (
          g.logged('model-gateway listening on ').length === 1 &&
          (await g.get('/ready')).status === 200 &&
          frontsOf(g.gw.pid!).length === 2
        );
      },
      'gateway started (listening line), ready, with two fronts',
      60_000,
    );
    return g;
  }

  /** Spawn it as `start` does, without waiting for anything (its log lines are collected from now on). */
  static async launch(extra: string[], ranks = 2, launch: LaunchOptions = {}): Promise<WorkersGateway> {
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [
        ...nodeEntry(CLI, launch.nodeArgs),
        'serve',
        '--workers',
        '2',
        '--port',
        String(port),
        '--model',
        MODEL,
        '--log-level',
        'info',
        '--log-format',
        'json',
        '--sim',
        String(ranks),
        '--sim-arg=--time-scale',
        '--sim-arg=1',
        '--sim-arg=--log-level',
        '--sim-arg=silent',
        '--exit-with-parent',
        ...extra,
      ],
      // stdin is the --exit-with-parent pipe: a test file cancelled by the runner takes its gateway with it.
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        ...(launch.env !== undefined ? { env: { ...process.env, ...launch.env } } : {}),
      },
    );
    const g = new WorkersGateway(child, port, once(child, 'exit'));
    createInterface({ input: child.stdout!, crlfDelay: Infinity }).on('line', (line) => {
      try {
        const m = JSON.parse(line) as { msg?: string; input?: string; output?: string; channel?: string };
        g.logs.push(m);
        if (typeof m.channel === 'string' && m.channel.startsWith('/')) g.channelFile = m.channel;
        if (m.msg?.startsWith('engine sockets bound; ') && m.input && m.output) {
          for (const f of [m.input.slice(6), m.output.slice(6)]) if (!g.socketFiles.includes(f)) g.socketFiles.push(f);
        }
      } catch {
        // not a log line
      }
    });
    child.stderr!.on('data', (d: Buffer) => (g.stderr += d.toString()));
    return g;
  }

  /** The log lines so far whose message starts with `prefix`. */
  logged(prefix: string): Array<Record<string, unknown>> {
    return this.logs.filter((m) => typeof m.msg === 'string' && m.msg.startsWith(prefix));
  }

  /** What the gateway wrote on stderr. */
  get errors(): string {
    return this.stderr;
  }

  /** Kill whatever is left (gateway, fronts, ranks) and remove its socket files. */
  cleanup(): void {
    const pid = this.gw.pid;
    const ranks = pid !== undefined ? simRanksOf(pid) : [];
    const fronts = pid !== undefined ? frontsOf(pid) : [];
    if (this.gw.exitCode === null && this.gw.signalCode === null) this.gw.kill('SIGKILL');
    for (const p of [...ranks, ...fronts].filter(alive)) process.kill(p, 'SIGKILL');
    for (const f of this.socketFiles) rmSync(f, { force: true });
    // The router's channel socket (src/fronts/router/cluster.ts): a router killed with SIGKILL cannot remove it.
    if (pid !== undefined) rmSync(join(gatewayRuntimeDir(), `fronts-${pid}.sock`), { force: true });
  }

  /** The gateway's front processes now. */
  fronts(): number[] {
    return frontsOf(this.gw.pid!);
  }

  /** POST `path` with `body` (and `headers`) on a fresh connection. */
  post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: this.port,
          path,
          method: 'POST',
          agent: false,
          headers: { 'content-type': 'application/json', connection: 'close', ...headers },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => {
            let json: unknown = text;
            try {
              json = JSON.parse(text);
            } catch {
              // SSE or text: keep the text
            }
            resolve({ status: res.statusCode ?? 0, headers: res.headers, json });
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      // A reply that never comes fails this request (a waitFor poll then retries) instead of hanging the file.
      req.setTimeout(REQUEST_TIMEOUT_MS, () =>
        req.destroy(new Error(`POST ${path}: no reply within ${REQUEST_TIMEOUT_MS} ms`)),
      );
      req.end(JSON.stringify(body));
    });
  }

  /** GET `path` on a fresh connection. */
  get(path: string): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port: this.port, path, agent: false, headers: { connection: 'close' } },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.setTimeout(REQUEST_TIMEOUT_MS, () =>
        req.destroy(new Error(`GET ${path}: no reply within ${REQUEST_TIMEOUT_MS} ms`)),
      );
      req.end();
    });
  }

  /** Open a streamed `/v1/completions` of `body` on a fresh connection. */
  openStream(body: Record<string, unknown>): OpenStream {
    let text = '';
    let status = 0;
    let destroyed = false;
    const req = httpRequest({
      host: '127.0.0.1',
      port: this.port,
      path: '/v1/completions',
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', connection: 'close' },
    });
    const done = new Promise<{ status: number; finished: boolean; error: string | null }>((resolve) => {
      req.on('response', (res) => {
        status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status, finished: text.includes('data: [DONE]'), error: null }));
        res.on('error', (err) => resolve({ status, finished: false, error: destroyed ? 'destroyed' : err.message }));
        res.on('aborted', () => resolve({ status, finished: false, error: destroyed ? 'destroyed' : 'aborted' }));
      });
      req.on('error', (err) => resolve({ status, finished: false, error: destroyed ? 'destroyed' : err.message }));
    });
    req.end(JSON.stringify({ ...body, stream: true }));
    return {
      text: () => text,
      localPort: () => req.socket?.localPort ?? 0,
      done,
      destroy: () => {
        destroyed = true;
        req.destroy();
      },
    };
  }

  /**
   * The pid of the front that holds the server side of `stream`'s connection: the socket inode of the /proc/net/tcp
   * entry from the gateway's port to the stream's local port, looked up in each front's fds (node:cluster hands
   * connections out round robin among the fronts that are free, so under load two connections can share a front).
   * Null when none holds it (yet).
   */
  frontServing(stream: OpenStream): number | null {
    const hex = (n: number) => n.toString(16).toUpperCase().padStart(4, '0');
    const want = `:${hex(this.port)}`;
    const peer = `:${hex(stream.localPort())}`;
    let inode: string | null = null;
    for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
      let rows: string[] = [];
      try {
        rows = readFileSync(table, 'utf8').split('\n').slice(1);
      } catch {
        continue;
      }
      for (const row of rows) {
        const f = row.trim().split(/\s+/);
        if (f.length > 9 && f[1]!.endsWith(want) && f[2]!.endsWith(peer)) inode = f[9]!;
      }
    }
    if (inode === null) return null;
    for (const pid of this.fronts()) {
      try {
        if (
          readdirSync(`/proc/${pid}/fd`).some((fd) => {
            try {
              return readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`;
            } catch {
              return false;
            }
          })
        )
          return pid;
      } catch {
        // the front exited meanwhile
      }
    }
    return null;
  }

  /** Total in-flight requests over every rank, as a front reports it (`/v1/gateway/ranks`, read from the router). */
  async inFlight(): Promise<number> {
    const view = JSON.parse((await this.get('/v1/gateway/ranks')).text) as { server: { in_flight: number } };
    return view.server.in_flight;
  }

  /** Sum of every sample of `name` in `/metrics` whose line contains `labelFilter` (the whole gateway's, from any front). */
  async metricSum(name: string, labelFilter = ''): Promise<number> {
    const { text } = await this.get('/metrics');
    return text
      .split('\n')
      .filter((l) => l.startsWith(`${name}{`) && l.includes(labelFilter))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  }
}
