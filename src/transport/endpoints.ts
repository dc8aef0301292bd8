/**
 * Endpoint naming for one ZMQ worker (engine-wire.md section 1.3; gateway.md section 2.3; SMG tests
 * `derive_handshake_port_matches_pinned_vectors`, `zmq_socket_addresses_derive_handshake_by_default`,
 * `zmq_socket_addresses_honor_handshake_override`).
 *
 * A worker URL `ipc://<P>` names three endpoints: input `ipc://<P>-in.sock`, output `ipc://<P>-out.sock`, and the
 * handshake `tcp://127.0.0.1:<20000 + FNV-1a-64(<P>) mod 10000>` unless an explicit `tcp://` override is given.
 */
import { Fnv1a64 } from '../protocols/kv-events/block-keys.js';
import { ConfigError } from './errors.js';

/** The addresses of one worker's socket set. */
export interface EngineEndpoints {
  /** The configured worker URL, verbatim (`ipc://<P>`). */
  workerUrl: string;
  /** `<P>`: the filesystem path after `ipc://`. */
  ipcPath: string;
  /** Input ROUTER address, `ipc://<P>-in.sock`. */
  input: string;
  /** Output PULL address, `ipc://<P>-out.sock`. */
  output: string;
  /** Handshake ROUTER address: `tcp://127.0.0.1:<derived port>` or the override. */
  handshake: string;
}

/** Handshake ports are 20000..29999, below the Linux default ephemeral range 32768..60999 (engine-wire.md 1.3). */
const PORT_BASE = 20000;
const PORT_SPAN = 10000n;

/**
 * Longest Unix socket path libzmq can bind: `sockaddr_un.sun_path` is 108 bytes on Linux including the final NUL.
 * Longer paths fail at bind time with a less helpful ENAMETOOLONG, so `deriveEndpoints` refuses them up front.
 */
export const MAX_IPC_PATH_BYTES = 107;

/**
 * FNV-1a-64 of a byte string (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`, XOR then multiply mod
 * 2^64; engine-wire.md 1.3). Returns the 64-bit hash as a BigInt in 0..2^64-1.
 */
export function fnv1a64(bytes: Uint8Array): bigint {
  const hash = new Fnv1a64();
  for (const byte of bytes) hash.byte(byte);
  return hash.value();
}

/**
 * The handshake port derived from an ipc path `<P>`: `20000 + FNV-1a-64(UTF-8 bytes of <P>) mod 10000`, always in
 * 20000..29999 (engine-wire.md 1.3). Pinned: `/tmp/smg-zmq/ts0.ipc` → 25152, `/tmp/smg-zmq/engine-31000` → 22714.
 */
export function deriveHandshakePort(ipcPath: string): number {
  return PORT_BASE + Number(fnv1a64(new TextEncoder().encode(ipcPath)) % PORT_SPAN);
}

/**
 * Derives a worker's three endpoints from its URL `ipc://<P>` (engine-wire.md 1.3; gateway.md 2.3).
 * `handshakeOverride`, when given, replaces the derived handshake address verbatim and must start with `tcp://`
 * (for engines that dial a fixed address such as TokenSpeed's default `tcp://127.0.0.1:30500`).
 *
 * Throws ConfigError when the URL does not start with `ipc://`, has an empty path or a NUL byte, when
 * `<P>-out.sock` exceeds 107 bytes (the Unix socket path limit), or when the override is not `tcp://host:port`.
 */
export function deriveEndpoints(workerUrl: string, handshakeOverride?: string): EngineEndpoints {
  if (!workerUrl.startsWith('ipc://')) {
    throw new ConfigError(
      `worker URL ${JSON.stringify(workerUrl)} must start with ipc:// (a ZMQ worker is ipc://<path>)`,
    );
  }
  const ipcPath = workerUrl.slice('ipc://'.length);
  if (ipcPath === '') {
    throw new ConfigError(`worker URL ${JSON.stringify(workerUrl)} has an empty path after ipc://`);
  }
  if (ipcPath.includes('\0')) {
    throw new ConfigError(`worker URL ${JSON.stringify(workerUrl)} contains a NUL byte`);
  }
  const output = `${ipcPath}-out.sock`;
  const outputBytes = Buffer.byteLength(output, 'utf8');
  if (outputBytes > MAX_IPC_PATH_BYTES) {
    throw new ConfigError(
      `worker URL ${JSON.stringify(workerUrl)}: socket path ${JSON.stringify(output)} is ${outputBytes} bytes, ` +
        `longer than the ${MAX_IPC_PATH_BYTES}-byte Unix socket limit; use a shorter ipc path`,
    );
  }
  let handshake: string;
  if (handshakeOverride === undefined) {
    handshake = `tcp://127.0.0.1:${deriveHandshakePort(ipcPath)}`;
  } else {
    if (!/^tcp:\/\/[^\s/]+:\d+$/.test(handshakeOverride)) {
      throw new ConfigError(
        `handshake override ${JSON.stringify(handshakeOverride)} for ${workerUrl} must be tcp://<host>:<port> ` +
          `(engines dial the handshake over tcp://)`,
      );
    }
    handshake = handshakeOverride;
  }
  return { workerUrl, ipcPath, input: `ipc://${ipcPath}-in.sock`, output: `ipc://${output}`, handshake };
}
