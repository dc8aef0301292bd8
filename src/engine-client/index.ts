/**
 * The engine client's public surface (dp-routing.md): the client, its streams, errors and DP policies.
 */
export {
  EngineClient,
  DEFAULT_SILENCE_TIMEOUT_MS,
  DEFAULT_RANK_STALL_TIMEOUT_MS,
  DECODE_ATTRIBUTION_MIN_ERRORS,
  PROBE_SCHEDULE_MS,
  type EngineClientOptions,
  type SubmitOptions,
  type CancelSignal,
  type CancellableSubmitOptions,
  type EngineClientEvents,
} from './client.js';
export type { RankState, ClientStats, GroupStatus } from './reports.js';
export {
  nextLiveness,
  isConnected,
  type RankStateName,
  type DeathCause,
  type LivenessEvent,
  type RankLiveness,
} from './rank-liveness.js';
export type { OutputListener, RequestStream } from './request-stream.js';
export { EngineClientError, type EngineClientErrorKind } from './errors.js';
export {
  createLoadPolicy,
  loadScore,
  lowestScorePosition,
  KV_PENALTY_WEIGHT,
  KV_PENALTY_THRESHOLD,
  type DpPolicy,
  type RankView,
} from './policy.js';
export {
  DP_POLICY_NAMES,
  DEFAULT_DP_POLICY,
  isDpPolicyName,
  createDpPolicy,
  createRoundRobinPolicy,
  createInFlightPolicy,
  createLoadNoClampPolicy,
  createOraclePolicy,
  inFlightScore,
  type DpPolicyName,
  type OracleSource,
} from './policies.js';
export type { ConnectedEngine, EngineLink, LinkListener, OutputMessage } from './link.js';
