/**
 * The engine side of a gateway, one engine group at a time (gateway.md 2.1-2.3, 3 and 7; dp-routing.md 9.2): each
 * group's endpoints (worker URL and handshake address), its bound sockets (transport/zmq-link.ts), its engine protocol,
 * its DP policy and its engine client, with the group's own log lines (ready-response notes, lockstep or dense kind, a
 * failure of the whole group). `startEngineGroups` starts them all for `startGateway` (start.ts) and the `--workers`
 * router; sim-ranks.ts spawns their simulated ranks.
 */
import type { Tracer } from '@opentelemetry/api';
import { performance } from 'node:perf_hooks';
import { BudgetLedger } from '../engine-client/budgets.js';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { EngineClient } from '../engine-client/client.js';
import { FLOW_CONTROL_DEFAULTS } from '../engine-client/flow-control.js';
import type { ConnectedEngine } from '../engine-client/link.js';
import type { LockstepSetting } from '../engine-client/waves.js';
import { indexShapeFor } from '../engine-client/cache-aware.js';
import { createDpPolicy, type DpPolicyName, type DpPolicyOptions } from '../engine-client/policies.js';
import type { DpPolicy } from '../engine-client/policy.js';
import { KNOWN_DTYPES, isKnownDtype } from '../protocols/handshake.js';
import { createTokenSpeedProtocol } from '../protocols/tokenspeed/index.js';
import type { EngineProtocol } from '../protocols/types.js';
import { createVllmProtocol, resolveEosConfig, type VllmEosConfig } from '../protocols/vllm/index.js';
import type { EngineFamily, EngineTask } from '../server/backend.js';
import type { SimRankProcesses } from '../sim/spawn.js';
import { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { tokenIdMask } from '../tokenizer/token-id-mask.js';
import { deriveEndpoints, type EngineEndpoints } from '../transport/endpoints.js';
import { TransportError } from '../transport/errors.js';
import { ZmqEngineLink } from '../transport/zmq-link.js';
import { startGroupKvEvents, type GroupKvEvents } from './kv-events.js';
import { gatewayRuntimeDir } from '../runtime-dir.js';
import type { ResolvedGroup } from './options.js';
import type { GatewayPlan } from './plan.js';

/** One served engine group of a running gateway. */
export interface RunningGroup {
  /** The worker URL (`ipc://<path>`). */
  readonly worker: string;
  /** The group's name (`--group-name`): its `group` label in /metrics and its title in /health. */
  readonly name: string;
  readonly engine: EngineFamily;
  /** What the group serves (`--tasks`). */
  readonly tasks: readonly EngineTask[];
  readonly endpoints: EngineEndpoints;
  /** The group's engine client. */
  readonly client: EngineClient;
  /** The simulated ranks of this group, or null for real engines. */
  readonly sims: SimRankProcesses | null;
}

/** One served group while the gateway runs (and while it starts: what must be torn down if startup fails). */
export interface GroupRuntime {
  spec: ResolvedGroup;
  endpoints: EngineEndpoints;
  log: Logger;
  link: ZmqEngineLink;
  client: EngineClient;
  sims: SimRankProcesses | null;
  /** The group's KV-cache event streams and exact index (kv-events.ts). */
  kvEvents: GroupKvEvents;
}

let simCounter = 0;

/** A fresh ipc worker URL for simulated ranks: `ipc://<tmp>/model-gateway-<uid>/sim-<pid>[-<n>]`. */
export function simWorkerUrl(): string {
  const dir = gatewayRuntimeDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const n = simCounter++;
  return `ipc://${join(dir, n === 0 ? `sim-${process.pid}` : `sim-${process.pid}-${n}`)}`;
}

/**
 * Every group's endpoints, in order: its worker URL (`engineUrl`, else a fresh `simWorkerUrl`) and its handshake
 * address (`handshake`, else derived from the worker URL; gateway.md 2.3). Creates the runtime folder for a simulated
 * group. Throws RangeError when two groups end up with the same handshake address (gateway.md 2.3: a derived
 * handshake port equal to another worker's is refused), and what `deriveEndpoints` throws for a bad URL.
 */
export function groupEndpoints(specs: readonly ResolvedGroup[]): EngineEndpoints[] {
  const endpointsList = specs.map((spec) => deriveEndpoints(spec.engineUrl ?? simWorkerUrl(), spec.handshake));
  const handshakes = new Set<string>();
  for (const e of endpointsList) {
    if (handshakes.has(e.handshake)) {
      throw new RangeError(
        `engine groups ${endpointsList
          .filter((o) => o.handshake === e.handshake)
          .map((o) => o.workerUrl)
          .join(' and ')} ` +
          `both use the handshake address ${e.handshake}; rename an ipc path or set an explicit handshake`,
      );
    }
    handshakes.add(e.handshake);
  }
  return endpointsList;
}

/** A group's bound sockets and its logger, before its engine client exists. */
interface BoundLink {
  link: ZmqEngineLink;
  log: Logger;
}

/**
 * Start the engine side of every group of `plan` over `endpoints` (one per group, `groupEndpoints`): bind each group's
 * sockets in order, load the tokenizer, then build each group's engine client. A bind that fails (a live gateway owns
 * the path, a taken handshake port) ends the start with nothing to tear down but the groups before it; ranks that
 * dial in (or are adopted) meanwhile are replayed to the client when it attaches (link.ts). The tokenizer loads (1-2 s
 * of CPU) once the sockets are bound: ranks of a previous gateway reconnect and running ranks' handshakes proceed
 * meanwhile (the I/O thread queues them), so a restart serves sooner. On any failure, closes what it started (the
 * clients built, then the links bound without a client) and rethrows. `tracer`: the engine clients' spans of traced
 * requests (queue, route; null: none): the bind's `TransportError` or `ConfigError`,
 * the tokenizer's load error, an engine client's `RangeError`.
 */
export async function startEngineGroups(
  plan: GatewayPlan,
  endpoints: readonly EngineEndpoints[],
  tracer: Tracer | null = null,
): Promise<{ groups: GroupRuntime[]; tokenizer: GatewayTokenizer }> {
  const groups: GroupRuntime[] = [];
  // Links bound but without a client yet (closed on a failure before their client exists).
  const bound: BoundLink[] = [];
  // A simulated group may move to other endpoints while binding (`bindSimGroupLink`).
  const chosen = [...endpoints];
  try {
    for (const [i, spec] of plan.specs.entries()) {
      bound.push(
        spec.engineUrl === undefined && spec.handshake === undefined
          ? await bindSimGroupLink(plan, spec, chosen, i)
          : await bindGroupLink(plan, spec, chosen[i]!),
      );
    }
    const tokenizer = await loadTokenizer(plan);
    const shared = groupShared(plan, tokenizer);
    for (const [i, spec] of plan.specs.entries()) {
      groups.push(startGroupClient(plan, spec, chosen[i]!, bound[i]!, shared, tracer));
    }
    return { groups, tokenizer };
  } catch (err) {
    await closeEngineClients(groups);
    await Promise.all(bound.slice(groups.length).map((b) => b.link.close()));
    throw err;
  }
}

/** Close every group's engine client (its live requests end, its link closes); a failure is logged. Never rejects. */
export async function closeEngineClients(groups: readonly GroupRuntime[]): Promise<void> {
  await Promise.all(
    groups.map(async (g) => {
      await g.client.close().catch((err: unknown) => g.log.warn({ err }, 'engine client close failed'));
      await g.kvEvents.close();
    }),
  );
}

/** The public view of each group (`RunningGroup`); `sims` reads the group's current simulated ranks. */
export function runningGroups(groups: readonly GroupRuntime[]): RunningGroup[] {
  return groups.map((g) => ({
    worker: g.endpoints.workerUrl,
    name: g.spec.name,
    engine: g.spec.engine,
    tasks: g.spec.tasks,
    endpoints: g.endpoints,
    client: g.client,
    get sims() {
      return g.sims;
    },
  }));
}

/** How many fresh ipc paths a simulated group tries when its derived handshake port is taken. */
const SIM_BIND_ATTEMPTS = 8;

/**
 * `bindGroupLink` for simulated group `i`, whose ipc path the gateway picked (`simWorkerUrl`): its handshake port is
 * derived from that path (20000 + a hash mod 10000, engine-wire.md 1.3), so another process on the host (another
 * gateway, a test file running beside this one) can hold it. Then the group moves to a fresh path, up to
 * `SIM_BIND_ATTEMPTS` times, skipping handshakes other groups use, and `chosen[i]` is set to the endpoints it bound.
 * Its ranks are spawned later, from those endpoints. Rejects with the last bind error.
 */
async function bindSimGroupLink(
  plan: GatewayPlan,
  spec: ResolvedGroup,
  chosen: EngineEndpoints[],
  i: number,
): Promise<BoundLink> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await bindGroupLink(plan, spec, chosen[i]!);
    } catch (err) {
      if (!(err instanceof TransportError) || err.code !== 'EADDRINUSE' || attempt >= SIM_BIND_ATTEMPTS) throw err;
      const taken = chosen[i]!.handshake;
      let next = deriveEndpoints(simWorkerUrl());
      while (chosen.some((e) => e.handshake === next.handshake)) next = deriveEndpoints(simWorkerUrl());
      plan.logger.info(
        { worker: chosen[i]!.workerUrl, handshake: taken, next: next.workerUrl },
        'handshake port of a simulated group is taken: trying another path',
      );
      chosen[i] = next;
    }
  }
}

/** Create and bind one group's sockets (logs 'engine sockets bound' with the addresses; closes itself on failure). */
async function bindGroupLink(plan: GatewayPlan, spec: ResolvedGroup, endpoints: EngineEndpoints): Promise<BoundLink> {
  const { opts } = plan;
  const log = plan.logger.child({ group: spec.name, worker: endpoints.workerUrl, engine: spec.engine });
  const link = ZmqEngineLink.create({
    endpoints,
    dpSize: spec.dpSize,
    logger: log.child({ component: 'transport' }),
    ...(opts.handshakeTimeoutMs !== undefined ? { handshakeReceiveTimeoutMs: opts.handshakeTimeoutMs } : {}),
    ...(opts.sendTimeoutMs !== undefined ? { sendTimeoutMs: opts.sendTimeoutMs } : {}),
    ...(opts.sendHighWaterMark !== undefined ? { sendHighWaterMark: opts.sendHighWaterMark } : {}),
    ...(opts.maxMessageBytes !== undefined ? { maxMessageBytes: opts.maxMessageBytes } : {}),
    ...(opts.outputGate !== undefined ? { outputGate: opts.outputGate } : {}),
    // A configured worker URL outlives this process: keep the handshakes there for a restart to adopt the ranks.
    ...(spec.engineUrl !== undefined
      ? {
          rankRecords: {
            engine: spec.engine,
            ...(opts.adoptionWindowMs !== undefined ? { adoptionWindowMs: opts.adoptionWindowMs } : {}),
          },
        }
      : {}),
  });
  await link.bind();
  return { link, log };
}

/** Load the served model's tokenizer and log it. Rejects with the load error. */
async function loadTokenizer(plan: GatewayPlan): Promise<GatewayTokenizer> {
  const { tokenizerDir, hfId, servedModelNames } = plan.model;
  const tokenizer = await GatewayTokenizer.load(tokenizerDir);
  plan.logger.info(
    { tokenizerDir, ...(hfId ? { hfId } : {}), vocabSize: tokenizer.vocabSize, servedModelNames },
    'tokenizer loaded',
  );
  return tokenizer;
}

/** What every group's client shares: the tokenizer, the vLLM EOS ids, the valid token ids, the dtypes logged. */
interface GroupShared {
  tokenizer: GatewayTokenizer;
  vllmEos: VllmEosConfig | null;
  validTokenIds: ReturnType<typeof tokenIdMask>;
  /** `logReadyNotes`'s unknown dtypes already logged, for the whole gateway. */
  unknownDtypes: Set<string>;
  /** The tenants' budgets: one ledger for every group, so a tenant's budget spans them (issue 30 part 4). */
  budgets: BudgetLedger;
}

/** The shared part, resolved once: the vLLM EOS ids only when a group speaks vLLM (logged, with its warnings). */
function groupShared(plan: GatewayPlan, tokenizer: GatewayTokenizer): GroupShared {
  const { logger } = plan;
  const vllmEos = plan.specs.some((s) => s.engine === 'vllm')
    ? vllmEosFor(tokenizer, (m) => logger.warn({ component: 'eos' }, m))
    : null;
  if (vllmEos) logger.info({ eos: vllmEos }, 'vLLM EOS ids resolved');
  // Every token id an engine sends is checked against the tokenizer (engine-client/output-contract.ts).
  return {
    tokenizer,
    vllmEos,
    validTokenIds: tokenIdMask(tokenizer),
    unknownDtypes: new Set<string>(),
    budgets: new BudgetLedger(() => performance.now()),
  };
}

/**
 * Build one group's engine client over its bound link (protocol, DP policy, watchdog timeouts, lockstep setting) and
 * hook the group's log lines: its kind whenever it changes, each joined rank's ready-response notes, a group failure.
 */
function startGroupClient(
  plan: GatewayPlan,
  spec: ResolvedGroup,
  endpoints: EngineEndpoints,
  { link, log }: BoundLink,
  shared: GroupShared,
  tracer: Tracer | null,
): GroupRuntime {
  const { opts } = plan;
  const engineLog = log.child({ component: 'engine-client' });
  const kvEvents = startGroupKvEvents(
    spec.engine,
    spec.dpSize,
    spec.kvEvents,
    plan.dpPolicyName === 'cache_aware',
    log,
  );
  let client: EngineClient | null = null;
  const protocol = buildProtocol(
    spec.engine,
    () => client?.maxModelLen ?? undefined,
    shared.tokenizer,
    shared.vllmEos,
    engineLog,
  );
  client = new EngineClient({
    protocol,
    link,
    logger: engineLog,
    policy: groupPolicy(plan.dpPolicyName, { ...plan.policyOptions, kvCache: kvEvents.view }, link),
    kvCache: kvEvents.view,
    validTokenIds: shared.validTokenIds,
    ...(opts.silenceTimeoutMs !== undefined ? { silenceTimeoutMs: opts.silenceTimeoutMs } : {}),
    ...(opts.rankStallTimeoutMs !== undefined ? { rankStallTimeoutMs: opts.rankStallTimeoutMs } : {}),
    flowControl: opts.flowControl?.enabled === true ? opts.flowControl : null,
    budgets: shared.budgets,
    lockstep: spec.lockstepMode,
    ...(spec.engine === 'vllm' && opts.loraModules !== undefined ? { loraModules: opts.loraModules } : {}),
    tracing: tracer === null ? null : { tracer, group: spec.name },
  });
  const c = client;
  if (c.flowControlled) {
    const fc = opts.flowControl!;
    log.info(
      {
        maxInFlightPerRank: fc.maxInFlightPerRank ?? 'max_num_seqs',
        maxQueued: fc.maxQueued ?? FLOW_CONTROL_DEFAULTS.maxQueued,
        maxQueuedPerTenant: fc.maxQueuedPerTenant ?? FLOW_CONTROL_DEFAULTS.maxQueuedPerTenant,
        queueTimeoutMs: fc.queueTimeoutMs ?? FLOW_CONTROL_DEFAULTS.queueTimeoutMs,
      },
      'flow control on: requests wait in the gateway while every rank is saturated',
    );
  }
  const lastKind = { kind: null as string | null };
  logGroupKind(log, c, spec.lockstepMode, lastKind);
  c.on('joined', (engine) => {
    kvEvents.onJoined(engine);
    logReadyNotes(log, engine, shared.unknownDtypes);
    logGroupKind(log, c, spec.lockstepMode, lastKind);
  });
  c.on('failed', (err) =>
    log.error(
      { err, kind: err.kind },
      'engine group failed as a unit: its requests ended; its ranks must be ready again to serve',
    ),
  );
  return { spec, endpoints, log, link, client: c, sims: null, kvEvents };
}

/**
 * The vLLM EOS configuration (gateway.md 7 "At connect time"): the model folder's `config.json` then
 * `generation_config.json` `eos_token_id` values (read, with warnings for unparseable files, when the tokenizer was
 * loaded from that folder: `GatewayTokenizer.modelEos`, primary first), else the tokenizer's EOS ids; the
 * tokenizer's ids are also the per-request backstop.
 */
export function vllmEosFor(
  tokenizer: Pick<GatewayTokenizer, 'modelEos' | 'eosTokenIds'>,
  onWarning?: (m: string) => void,
): VllmEosConfig {
  const { primary, extras } = tokenizer.modelEos;
  return resolveEosConfig({
    configEosTokenId: primary === null ? undefined : [primary, ...extras],
    tokenizerEosIds: tokenizer.eosTokenIds,
    ...(onWarning ? { onWarning } : {}),
  });
}

/**
 * Log what a rank's ready response reported that the gateway does not use as is (issue #14): each note of
 * `decodeReadyResponse` (an informational key of the wrong type, treated as not reported) as a warning, and a `dtype`
 * outside `KNOWN_DTYPES` once per distinct value per gateway (`seen` holds the values already logged). Never throws.
 */
export function logReadyNotes(log: Logger, engine: ConnectedEngine, seen: Set<string>): void {
  for (const note of engine.ready.notes ?? []) {
    log.warn({ engineIndex: engine.engineIndex, note }, 'ready response: informational key ignored');
  }
  const dtype = engine.ready.dtype;
  if (dtype !== null && !isKnownDtype(dtype) && !seen.has(dtype)) {
    seen.add(dtype);
    log.warn(
      { engineIndex: engine.engineIndex, dtype, known: KNOWN_DTYPES },
      'ready response: unknown dtype, kept as reported (it only matters for multimodal tensors, which this gateway does not send)',
    );
  }
}

/**
 * A group's DP policy, built on first use: the first select or dispatch, which needs a joined rank. The client exists
 * before any rank has joined (serve at once), and `cache_aware` sizes its prefix index from the ready response of a
 * joined rank (`indexShapeFor`; every rank of a group has the same shape). `name` and `releaseClamp` do not depend on
 * the shape; `forgetRank` before the first use has nothing to forget.
 */
function groupPolicy(
  name: DpPolicyName,
  options: DpPolicyOptions,
  link: { readonly engines: readonly ConnectedEngine[] },
): DpPolicy {
  const probe = createDpPolicy(name, options);
  let built: DpPolicy | null = null;
  const policy = (): DpPolicy => {
    if (built !== null) return built;
    const first = link.engines[0];
    built = createDpPolicy(name, first === undefined ? options : { ...options, ...indexShapeFor(first.ready) });
    return built;
  };
  return {
    name: probe.name,
    ...(probe.releaseClamp !== undefined ? { releaseClamp: probe.releaseClamp } : {}),
    select: (ranks, request) => policy().select(ranks, request),
    onDispatch: (engineIndex, request) => policy().onDispatch?.(engineIndex, request),
    predictedCachedTokens: (request) => built?.predictedCachedTokens?.(request) ?? null,
    forgetRank: (engineIndex) => built?.forgetRank?.(engineIndex),
  };
}

/** Log a group's kind (issue #14: lockstep, dense or not known yet) whenever it changes. */
function logGroupKind(log: Logger, client: EngineClient, mode: LockstepSetting, last: { kind: string | null }): void {
  const { kind, decidedBy } = client.groupKind;
  if (kind === last.kind) return;
  last.kind = kind;
  log.info(
    { kind, decidedBy, lockstepMode: mode, waveClock: client.waveClock },
    kind === 'lockstep'
      ? 'lockstep group: every submit wakes all ranks'
      : kind === 'dense'
        ? 'dense group: ranks are never woken'
        : 'group kind unknown (no data_parallel_size in the ready responses): the first submit wakes all ranks once; a wave notification makes it lockstep',
  );
}

/**
 * The engine protocol of one group. TokenSpeed: with the tokenizer's vocabulary size, so out-of-vocabulary
 * `logit_bias` keys are refused instead of answered by a silent terminal abort (engine-wire.md 4.6), and unknown
 * finish strings logged (then mapped to `stop`, engine-wire.md 4.8). vLLM: `max_model_len` read from the group's client at encode time
 * (the first joined rank's ready response, gateway.md 9.1; only a backstop, since the HTTP layer always sets a
 * concrete limit), the connect-time EOS ids (gateway.md 7), and one info line per rank process when its
 * EngineCoreOutput layout is decided (docs/wire/vllm-output.md).
 */
function buildProtocol(
  engine: EngineFamily,
  maxModelLen: () => number | undefined,
  tokenizer: GatewayTokenizer,
  vllmEos: VllmEosConfig | null,
  log: Logger,
): EngineProtocol {
  if (engine === 'vllm') {
    return createVllmProtocol({
      maxModelLen,
      ...(vllmEos ? { eos: vllmEos } : {}),
      onWarning: (message) => log.warn(message),
      onOutputLayout: ({ engineIndex, layout, source, reason }) =>
        log.info(
          { engineIndex, outputLayout: layout, decidedBy: source, reason },
          `DP rank ${engineIndex}: vLLM EngineCoreOutput in the ${layout}-field layout (from its ${source === 'shape' ? 'output shape' : 'ready response'}: ${reason})`,
        ),
    });
  }
  return createTokenSpeedProtocol({
    vocabSize: tokenizer.vocabSize,
    onUnknownFinishReason: (reason) => log.warn({ reason }, 'unknown TokenSpeed finish reason mapped to stop'),
  });
}
