/**
 * The `model-gateway` command line (node:util parseArgs):
 * - `model-gateway serve [options]`: start the gateway (src/gateway.ts `startGateway`); SIGINT/SIGTERM shut it down
 *   cleanly (HTTP server, engine client, sockets, simulated ranks), a second signal exits at once after the
 *   synchronous `emergencyStop()` (SIGKILL the simulated ranks, remove their ipc socket files);
 * - `model-gateway sim [options]`: run one simulated TokenSpeed rank (src/sim/main.ts) in a child process, with
 *   signals forwarded;
 * - `model-gateway --help`.
 * Exit codes: 0 success, 1 runtime failure, 2 usage error.
 */
import { spawn } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SIM_RANKS, startGateway, type GatewayOptions } from './gateway.js';
import { ignoreStdioErrors } from './log-sink.js';
import { simMainPath } from './sim/spawn.js';

/** Usage text of the CLI. */
export const USAGE = `Usage:
  model-gateway serve [options]     Start the OpenAI-compatible gateway
  model-gateway sim [sim options]   Run one simulated TokenSpeed rank (see 'model-gateway sim --help')
  model-gateway --help              Show this help

serve options:
  --port N             HTTP port (default ${DEFAULT_PORT}; 0 = any free port)
  --host ADDR          HTTP bind address (default ${DEFAULT_HOST})
  --engine-url URL     Worker URL of running engines, ipc://PATH (default: spawn simulated ranks)
  --dp-size N          Number of DP ranks that must join (default 1 with --engine-url, else --sim)
  --handshake ADDR     Explicit handshake address tcp://HOST:PORT (default: derived from the ipc path)
  --tokenizer DIR      Folder with tokenizer.json and tokenizer_config.json (default: bundled Qwen3)
  --model NAME         Served model name (default: the tokenizer folder's name, or qwen3)
  --sim N              Spawn N simulated ranks (default ${DEFAULT_SIM_RANKS} without --engine-url)
  --sim-arg ARG        Extra argument for every simulated rank (repeatable; use --sim-arg=--flag)
  --body-limit BYTES   Maximum HTTP request body size (default 8 MiB)
  --log-level LEVEL    pino level: trace, debug, info, warn, error, fatal, silent (default info)
`;

/** A command-line mistake: printed with the usage, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

function intOption(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`--${name} must be an integer ≥ ${min}, got '${value}'`);
  }
  return Number(value);
}

const LOG_LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']);

/**
 * Parse `serve` arguments into `startGateway` options. Throws `UsageError` on an unknown flag, a stray positional
 * argument or a bad value; returns `null` for `--help`.
 */
export function parseServeArgs(argv: string[]): GatewayOptions | null {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        'engine-url': { type: 'string' },
        'dp-size': { type: 'string' },
        handshake: { type: 'string' },
        tokenizer: { type: 'string' },
        model: { type: 'string' },
        sim: { type: 'string' },
        'sim-arg': { type: 'string', multiple: true },
        'body-limit': { type: 'string' },
        'log-level': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const v = parsed.values;
  if (v.help) return null;
  const port = intOption('port', v.port, 0);
  if (port !== undefined && port > 65535) throw new UsageError(`--port must be at most 65535, got ${port}`);
  const engineUrl = v['engine-url'];
  if (engineUrl !== undefined && !engineUrl.startsWith('ipc://')) {
    throw new UsageError(`--engine-url must be an ipc://PATH worker URL, got '${engineUrl}'`);
  }
  const handshake = v.handshake;
  if (handshake !== undefined && !handshake.startsWith('tcp://')) {
    throw new UsageError(`--handshake must be a tcp://HOST:PORT address, got '${handshake}'`);
  }
  const logLevel = v['log-level'];
  if (logLevel !== undefined && !LOG_LEVELS.has(logLevel)) {
    throw new UsageError(`--log-level must be one of ${[...LOG_LEVELS].join(', ')}, got '${logLevel}'`);
  }
  const opts: GatewayOptions = {};
  if (port !== undefined) opts.port = port;
  if (v.host !== undefined) opts.host = v.host;
  if (engineUrl !== undefined) opts.engineUrl = engineUrl;
  if (handshake !== undefined) opts.handshake = handshake;
  const dpSize = intOption('dp-size', v['dp-size'], 1);
  if (dpSize !== undefined) opts.dpSize = dpSize;
  const sim = intOption('sim', v.sim, 1);
  if (sim !== undefined) opts.sim = sim;
  if (v['sim-arg'] !== undefined) opts.simArgs = v['sim-arg'];
  if (v.tokenizer !== undefined) opts.tokenizerDir = v.tokenizer;
  if (v.model !== undefined) opts.modelId = v.model;
  const bodyLimit = intOption('body-limit', v['body-limit'], 1);
  if (bodyLimit !== undefined) opts.bodyLimitBytes = bodyLimit;
  if (logLevel !== undefined) opts.logLevel = logLevel;
  return opts;
}

/** `serve`: start, then wait for SIGINT/SIGTERM and close. Resolves with the exit code. */
async function serve(argv: string[]): Promise<number> {
  const opts = parseServeArgs(argv);
  if (opts === null) {
    process.stdout.write(USAGE);
    return 0;
  }
  ignoreStdioErrors();
  const gateway = await startGateway(opts);
  return new Promise<number>((resolveExit) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      if (signals > 1) {
        // Exit at once, but never leave simulated ranks or their ipc socket files behind (synchronous teardown).
        gateway.emergencyStop();
        process.stderr.write(`model-gateway: second ${signal}, simulated ranks killed, exiting now\n`);
        process.exit(1);
      }
      gateway.close().then(
        () => resolveExit(0),
        (err: unknown) => {
          process.stderr.write(`model-gateway: shutdown failed: ${err instanceof Error ? err.message : String(err)}\n`);
          resolveExit(1);
        },
      );
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/** `sim`: run src/sim/main.ts in a child (same node, tsx loader), forwarding signals; resolves with its exit code. */
function sim(argv: string[]): Promise<number> {
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), simMainPath(), ...argv], {
    stdio: 'inherit',
  });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  return new Promise((resolveExit) => {
    child.on('error', (err) => {
      process.stderr.write(`model-gateway sim: cannot start the simulator: ${err.message}\n`);
      resolveExit(1);
    });
    child.on('exit', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolveExit(code ?? (signal ? 1 : 0));
    });
  });
}

/** Run the CLI with `argv` (without node and script). Resolves with the process exit code; never throws. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve':
        return await serve(rest);
      case 'sim':
        return await sim(rest);
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        process.stdout.write(USAGE);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command '${command}'`);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`model-gateway: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    process.stderr.write(`model-gateway: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 1;
  }
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  process.exitCode = await main(process.argv.slice(2));
}
