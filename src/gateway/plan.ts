/**
 * Every check and default of `GatewayOptions` that can fail, done before anything starts (issue #8 part 4: a refused
 * start touches nothing): `planGateway` turns the options into a `GatewayPlan` that the start (start.ts) and the
 * `--workers` router (src/fronts/router/cluster.ts) read instead of deriving the same values again.
 */
import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { checkFlowControlOptions } from '../engine-client/flow-control.js';
import { createDpPolicy, type DpPolicyName, type DpPolicyOptions } from '../engine-client/policies.js';
import { DEFAULT_SHUTDOWN_GRACE_MS } from '../lifecycle.js';
import { positiveMs } from '../option-checks.js';
import { resolveEdgeOptions, type ResolvedEdgeOptions } from '../server/edge-options.js';
import { parseKeysFile, readKeysText } from '../server/keys-file.js';
import { tracingSettings, type TracingSettings } from '../tracing.js';
import { edgeOptionsOf, warnIfOpenWithoutKey } from './http-app.js';
import {
  DEFAULT_HOST,
  DEFAULT_PORT,
  gatewayLogger,
  resolveGroups,
  resolveServedModel,
  type GatewayOptions,
  type ResolvedGroup,
  type ServedModel,
} from './options.js';

/** `GatewayOptions` checked and with their defaults: what a start reads. */
export interface GatewayPlan {
  /** The options as given (the fields not resolved here are passed on as they are). */
  readonly opts: GatewayOptions;
  /** The root logger (`gatewayLogger`). */
  readonly logger: Logger;
  /** The HTTP listener (default 30000 and 127.0.0.1; port 0 = any free port). */
  readonly port: number;
  readonly host: string;
  /** `GatewayOptions.serveHttp` (default true). */
  readonly serveHttp: boolean;
  /** The engine groups (`resolveGroups`), in configuration order. */
  readonly specs: readonly ResolvedGroup[];
  /** The unpinned DP policy of every group (default `load`) and its options (tuning plus the oracle source). */
  readonly dpPolicyName: DpPolicyName;
  readonly policyOptions: DpPolicyOptions;
  /** The HTTP edge with its defaults (server/edge-options.ts). */
  readonly edge: ResolvedEdgeOptions;
  /** `shutdown()`'s default grace in ms (default 30 000). */
  readonly shutdownGraceMs: number;
  /** The tokenizer folder and the served model names (`resolveServedModel`). */
  readonly model: ServedModel;
  /**
   * The keys file's text as read and checked here (null without `--api-keys-file`): what the process that checks keys
   * starts from, so the file is read and checked once (a 100,000-key file takes about 1 s).
   */
  readonly keysText: string | null;
  /** Tracing's settings (src/tracing.ts `tracingSettings`: the flag and the `OTEL_*` variables), or null: off. */
  readonly tracing: TracingSettings | null;
}

/**
 * Check `opts` and apply their defaults; logs a warning when the HTTP listener is reachable beyond this machine
 * without an API key. Starts nothing (it creates the logger unless `opts.logger` is given). Throws RangeError for a
 * bad option: the groups (`resolveGroups`), `workers` other than 1 (one process; `--workers N` is
 * `startClusterGateway`'s), an unknown `dpPolicy` or bad `dpPolicyOptions` or `oracle` (`createDpPolicy`), a watchdog
 * timeout that is not a positive number of ms, the HTTP edge (`resolveEdgeOptions`), a negative `shutdownGraceMs`,
 * the served model names, the tracing settings (`tracingSettings`); and what `resolveServedModel` throws for a Hugging Face id not in the local cache.
 */
export function planGateway(opts: GatewayOptions = {}): GatewayPlan {
  const logger = gatewayLogger(opts);
  const port = opts.port ?? DEFAULT_PORT;
  const host = opts.host ?? DEFAULT_HOST;
  const specs = resolveGroups(opts);
  if (opts.workers !== undefined && opts.workers !== 1) {
    throw new RangeError(
      `startGateway runs one process; ${opts.workers} workers need startClusterGateway (src/fronts/router/cluster.ts)`,
    );
  }
  const dpPolicyName = opts.dpPolicy ?? 'load';
  const policyOptions = {
    ...opts.dpPolicyOptions,
    ...(opts.oracle ? { oracle: opts.oracle } : {}),
    ...(opts.maxLoras !== undefined ? { maxLoras: opts.maxLoras } : {}),
  };
  createDpPolicy(dpPolicyName, policyOptions); // validate before starting anything
  // Validate before starting anything (each engine client checks them again when it is built, after the spawn).
  if (opts.silenceTimeoutMs !== undefined) positiveMs('silenceTimeoutMs', opts.silenceTimeoutMs);
  if (opts.rankStallTimeoutMs !== undefined) positiveMs('rankStallTimeoutMs', opts.rankStallTimeoutMs);
  if (opts.flowControl?.enabled === true) checkFlowControlOptions(opts.flowControl);
  else if (
    opts.flowControl !== undefined &&
    Object.entries(opts.flowControl).some(([k, v]) => k !== 'enabled' && v != null)
  )
    logger.warn(
      { flowControl: opts.flowControl },
      'flow control options are set but --flow-control is not: they do nothing (add --flow-control)',
    );
  const edge = resolveEdgeOptions(edgeOptionsOf(opts));
  const keysText = edge.apiKeysFile === null ? null : readKeysText(edge.apiKeysFile);
  if (keysText !== null) parseKeysFile(keysText, edge.apiKeysFile!); // a bad file stops the start (KeysFileError)
  warnIfOpenWithoutKey(logger, host, edge);
  const shutdownGraceMs = opts.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  if (!(Number.isFinite(shutdownGraceMs) && shutdownGraceMs >= 0))
    throw new RangeError(`shutdownGraceMs must be a number of ms ≥ 0, got ${shutdownGraceMs}`);
  const model = resolveServedModel(opts);
  checkLoraModules(opts, specs, model.servedModelNames, logger);
  const serveHttp = opts.serveHttp ?? true;
  const tracing = tracingSettings(opts.otlpTracesEndpoint, process.env);
  return {
    opts,
    logger,
    port,
    host,
    serveHttp,
    specs,
    dpPolicyName,
    policyOptions,
    edge,
    shutdownGraceMs,
    model,
    keysText,
    tracing,
  };
}

/**
 * The `--lora-modules` of `opts` against the gateway: a name must differ from the served model names and from the
 * other adapters' (RangeError otherwise, as vLLM refuses a duplicate at start); a path that does not exist on this
 * host (where the engines run) and adapters with no vLLM group to serve them are logged as warnings (the engines may
 * resolve paths the gateway cannot see).
 */
function checkLoraModules(
  opts: GatewayOptions,
  specs: readonly ResolvedGroup[],
  served: readonly string[],
  logger: Logger,
): void {
  const modules = opts.loraModules ?? [];
  if (modules.length === 0) return;
  const names = new Set<string>();
  for (const m of modules) {
    if (served.includes(m.name))
      throw new RangeError(`--lora-modules: '${m.name}' is a served model name; an adapter needs a name of its own`);
    if (names.has(m.name)) throw new RangeError(`--lora-modules: '${m.name}' is given twice`);
    names.add(m.name);
    if (!existsSync(m.path))
      logger.warn(
        { adapter: m.name, path: m.path },
        'LoRA adapter path does not exist on this host; the engines will refuse it unless they see it',
      );
  }
  if (!specs.some((g) => g.engine === 'vllm'))
    logger.warn({ adapters: [...names] }, '--lora-modules has no effect: only vLLM engine groups serve LoRA adapters');
}
