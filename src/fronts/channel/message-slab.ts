/**
 * Buffers for channel messages built one at a time (one lane's `DownMessage`s, src/fronts/channel/outbox.ts), carved out of
 * 256 KiB slabs instead of allocated one per message.
 *
 * Why (issue 9, the routing process's CPU per streamed token): a lane's message of a turn is a few KB, over the
 * 4 KiB that Node's `Buffer.allocUnsafe` serves from its shared pool, so each one was an ArrayBuffer of its own:
 * ~3 % of the router's busy time in the allocation alone at 2000 streams, plus the external memory the GC accounts
 * for. A carved buffer is a view of its slab; the slab is freed by the GC once no message of it is referenced
 * (written to the socket and dropped), and no byte of it is ever handed out twice, so nothing a socket still holds is
 * overwritten.
 */
export class MessageSlab {
  private slab: Buffer | null = null;
  /** Bytes of `slab` handed out (always a multiple of 8). */
  private used = 0;

  /** `slabBytes`: the size of each slab; a request over a quarter of it gets a buffer of its own. */
  constructor(private readonly slabBytes = 256 * 1024) {}

  /** An uninitialized buffer of `capacity` bytes (> 0) that no other `take` shares. */
  take(capacity: number): Buffer {
    if (capacity > this.slabBytes >>> 2) return Buffer.allocUnsafeSlow(capacity);
    const size = align8(capacity);
    if (this.slab === null || this.slabBytes - this.used < size) {
      this.slab = Buffer.allocUnsafeSlow(this.slabBytes);
      this.used = 0;
    }
    const b = this.slab.subarray(this.used, this.used + capacity);
    this.used += size;
    return b;
  }

  /**
   * `b`'s bytes past its first `keep` will never be written or read: if `b` is the latest buffer taken from the
   * current slab, they are handed out again. Otherwise (an older or outside buffer) a no-op.
   */
  trim(b: Uint8Array, keep: number): void {
    const slab = this.slab;
    if (slab === null || b.buffer !== slab.buffer || b.byteOffset + align8(b.length) !== this.used) return;
    this.used = b.byteOffset + align8(Math.min(keep, b.length));
  }
}

function align8(n: number): number {
  return (n + 7) & ~7;
}
