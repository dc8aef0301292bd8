/**
 * The data plane of `--workers N` (docs/workers.md section 5): one unix stream socket (`node:net`) per front,
 * carrying both directions as length-prefixed frames. Each frame is a 4-byte little-endian payload length, then the
 * payload. The first frame a front sends on its connection is its hello (`helloFrame`: its front id, 4 bytes little
 * endian, then the router's `FRONT_TOKEN_BYTES` token, which the router hands its fronts in their environment, so
 * another process that finds the socket cannot take a front's streams). Every later frame, either way, is one
 * message: a msgpack list of records.ts records (the records of one event-loop turn).
 *
 * Bounds: before the hello the router reads no frame longer than a hello (`HELLO_BYTES`); after it, none longer than
 * `MAX_FRONT_MESSAGE_BYTES` (the front's outbox never writes a longer one, outbox.ts `UpOutbox`). A longer frame
 * means a corrupt stream: the router refuses it before gathering any of it and closes the socket.
 *
 * Why not ZeroMQ (which both directions used before; issue 9, the CPU per token of the routing process and per
 * request of the fronts): a ZeroMQ send wakes libzmq's I/O thread, and a message over 128 bytes is sent zero-copy,
 * so once the I/O thread has written it, zeromq.js wakes the main thread again to release the Buffer. Each side sends
 * about one message per event-loop turn; measured on the shared 2-core machine with two receivers and one 2 KB
 * message each per ms, the sending process spent ~52 µs of CPU per ZeroMQ message and ~18 µs per frame written to a
 * unix socket (the write is one syscall from the main thread). Pure apart from the socket writes.
 */
import type { Socket } from 'node:net';
import { MAX_IPC_PATH_BYTES } from '../../transport/endpoints.js';
import { ConfigError } from '../../transport/errors.js';

/** Largest payload a router → front frame may announce (bytes); a longer one means a corrupt stream. */
export const MAX_FRAME_BYTES = 1 << 30;

/**
 * Largest front → router message (frame payload, bytes). A front's records of one turn that would pass it leave in
 * several frames; one record that alone passes it is refused in the front (outbox.ts `UpOutbox`). 64 MiB is far
 * above a SUBMIT of a prompt at any context limit (≤ 5 bytes per token id) and a Responses store write at the default
 * 8 MiB body limit.
 */
export const MAX_FRONT_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Length of the token a front's hello carries (bytes). */
export const FRONT_TOKEN_BYTES = 16;

/** Length of a front's hello frame payload (bytes). */
export const HELLO_BYTES = 4 + FRONT_TOKEN_BYTES;

/** A front's hello frame payload: `frontId` (u32 LE) then `token` (`FRONT_TOKEN_BYTES` bytes). */
export function helloFrame(frontId: number, token: Uint8Array): Buffer {
  if (token.length !== FRONT_TOKEN_BYTES)
    throw new RangeError(`a front token is ${FRONT_TOKEN_BYTES} bytes, got ${token.length}`);
  const hello = Buffer.allocUnsafe(HELLO_BYTES);
  hello.writeUInt32LE(frontId, 0);
  hello.set(token, 4);
  return hello;
}

/**
 * `path` if it can be the fronts' channel socket. Throws ConfigError for a path over the unix socket limit (node
 * would bind and connect a silently truncated path, which the router's cleanup then misses).
 */
export function checkChannelPath(path: string): string {
  const bytes = Buffer.byteLength(path, 'utf8');
  if (bytes > MAX_IPC_PATH_BYTES) {
    throw new ConfigError(
      `the --workers channel socket path ${JSON.stringify(path)} is ${bytes} bytes, longer than the ${MAX_IPC_PATH_BYTES}-byte ` +
        'Unix socket limit; set TMPDIR to a shorter directory',
    );
  }
  return path;
}

/** Write `payloads` as frames, in order, in one writev (each header and payload). */
export function writeFrames(socket: Socket, payloads: readonly Uint8Array[]): void {
  socket.cork();
  for (const payload of payloads) {
    const header = Buffer.allocUnsafe(4);
    header.writeUInt32LE(payload.length, 0);
    socket.write(header);
    socket.write(payload);
  }
  socket.uncork();
}

/** Write `payload` as one frame (header and payload in one writev). */
export function writeFrame(socket: Socket, payload: Uint8Array): void {
  writeFrames(socket, [payload]);
}

/**
 * Splits a byte stream into frames. `push(chunk)` hands every frame completed by `chunk` to `onFrame`, in order
 * (a frame inside one chunk is a view of it, no copy). Throws RangeError for a frame longer than `maxFrameBytes`
 * (default `MAX_FRAME_BYTES`; the stream is corrupt: the caller closes it), before gathering any of it. `onFrame`
 * may change `maxFrameBytes` (it applies from the next frame on) or `stop()` the reader (no frame is handed on after
 * it, not even the rest of this chunk's).
 */
export class FrameReader {
  /** Chunks of an unfinished frame (copies), their total length, and the length that completes it (or 4: header). */
  private readonly pending: Buffer[] = [];
  private pendingBytes = 0;
  private needed = 4;
  private stopped = false;

  constructor(
    private readonly onFrame: (payload: Buffer) => void,
    public maxFrameBytes = MAX_FRAME_BYTES,
  ) {}

  /** Hand on no more frames; later chunks are ignored. */
  stop(): void {
    this.stopped = true;
    this.pending.length = 0;
    this.pendingBytes = 0;
  }

  push(chunk: Buffer): void {
    if (this.stopped) return;
    let buf = chunk;
    if (this.pendingBytes > 0) {
      // Gather until the unfinished frame (or its header) is complete, then join once.
      this.pending.push(chunk);
      this.pendingBytes += chunk.length;
      if (this.pendingBytes < this.needed) return;
      buf = Buffer.concat(this.pending, this.pendingBytes);
      this.pending.length = 0;
      this.pendingBytes = 0;
    }
    let pos = 0;
    this.needed = 4;
    while (buf.length - pos >= 4) {
      const n = buf.readUInt32LE(pos);
      if (n > this.maxFrameBytes) throw new RangeError(`frame of ${n} bytes announced (at most ${this.maxFrameBytes})`);
      if (buf.length - pos - 4 < n) {
        this.needed = 4 + n;
        break;
      }
      this.onFrame(buf.subarray(pos + 4, pos + 4 + n));
      if (this.stopped) return;
      pos += 4 + n;
    }
    if (pos < buf.length) {
      // A copy of the rest: a view would keep the whole chunk alive while the frame gathers.
      const rest = Buffer.from(buf.subarray(pos));
      this.pending.push(rest);
      this.pendingBytes = rest.length;
    }
  }
}
