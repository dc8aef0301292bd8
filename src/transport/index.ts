/**
 * The ZeroMQ transport (engine-wire.md sections 1-2): endpoint naming, ipc hygiene, the gateway's socket set
 * (`ZmqEngineLink`, an `EngineLink`) and the engine side used by the simulator and tests (`EngineDialer`).
 */
export { deriveEndpoints, deriveHandshakePort, fnv1a64, MAX_IPC_PATH_BYTES } from './endpoints.js';
export type { EngineEndpoints } from './endpoints.js';
export { prepareSocketPaths, recordSocketFiles, removeOwnSocketFiles, type BoundSocketFile } from './socket-paths.js';
export {
  ZmqEngineLink,
  DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS,
  DEFAULT_SEND_TIMEOUT_MS,
  DEFAULT_MAX_MESSAGE_BYTES,
} from './zmq-link.js';
export type { MaxMessageBytes, ZmqLinkOptions } from './zmq-link.js';
export { HandshakeService, type HandshakeRejectReason } from './handshake-service.js';
export { PerRankSendQueues } from './send-queues.js';
export { EngineDialer, DEFAULT_INIT_TIMEOUT_MS } from './engine-dialer.js';
export type { EngineDialerOptions, EngineRequest } from './engine-dialer.js';
export { ConfigError, HandshakeError, SendTimeoutError, TransportError } from './errors.js';
export type { HandshakeStage } from './errors.js';
export { silentLogger } from '../logging.js';
/** The transport's logger types: aliases of the shared `MinimalLogger` / `LogFn` (src/logging.ts). */
export type { MinimalLogger as TransportLogger, LogFn as TransportLogFn } from '../logging.js';
