/**
 * The gateway's composition, as the rest of the code base (cli.ts, serve-options.ts, the `--workers` router and
 * fronts) and the tests import it. One path for every process of a gateway, so an option cannot reach one and miss
 * another (issue 28):
 * - options.ts: `GatewayOptions` and `GroupOptions`, their defaults, `resolveGroups`, the served model
 *   (`resolveServedModel`, `servedNames`) and the root logger (`gatewayLogger`);
 * - plan.ts: every check before anything starts (`planGateway`);
 * - engine-groups.ts: each engine group's sockets, protocol, DP policy, engine client and log lines;
 * - sim-ranks.ts: the groups' simulated ranks;
 * - http-app.ts: the HTTP app's options, listen and close, and the checks of the listen address;
 * - shutdown.ts: close, drain and emergency stop;
 * - start.ts: `startGateway`, composing them.
 */
export {
  DEFAULT_HOST,
  DEFAULT_PORT,
  DEFAULT_SIM_RANKS,
  ENGINE_FAMILIES,
  gatewayLogger,
  resolveGroups,
  resolveServedModel,
  servedNames,
  parseTasks,
  type EngineFamily,
  type EngineTask,
  type GatewayOptions,
  type GroupOptions,
  type ResolvedGroup,
  type ServedModel,
} from './options.js';
export { planGateway, type GatewayPlan } from './plan.js';
export { logReadyNotes, simWorkerUrl, vllmEosFor, type RunningGroup } from './engine-groups.js';
export {
  HTTP_CLOSE_GRACE_MS,
  appDepsOf,
  appOptionsOf,
  assertPortFree,
  closeApp,
  isLoopbackHost,
  keysFileOf,
  listenApp,
  reloadKeys,
  responsesStoreOptionsOf,
  tenantDirectoryOf,
} from './http-app.js';
export { startGateway, startPlannedGateway, type RunningGateway } from './start.js';
