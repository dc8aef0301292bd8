/**
 * The fronts' frame stream (src/fronts/channel/frames.ts): frames come out whole and in order however the byte stream is cut
 * (several per chunk, one across many chunks, a header cut in two), over a real unix socket too; a frame longer than
 * the limit is refused; the limit can change between frames of one chunk; a stopped reader hands on nothing more.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  FrameReader,
  MAX_FRAME_BYTES,
  checkChannelPath,
  writeFrame,
  writeFrames,
} from '../../src/fronts/channel/frames.js';
import { ConfigError } from '../../src/transport/errors.js';

function framed(payloads: Buffer[]): Buffer {
  return Buffer.concat(
    payloads.flatMap((p) => {
      const h = Buffer.alloc(4);
      h.writeUInt32LE(p.length, 0);
      return [h, p];
    }),
  );
}

test('FrameReader: whole frames in order for every way of cutting the stream into chunks', () => {
  const payloads = [Buffer.from('a'), Buffer.alloc(0), Buffer.alloc(300, 7), Buffer.from('last frame')];
  const stream = framed(payloads);
  for (const size of [1, 2, 3, 5, 64, stream.length]) {
    const got: string[] = [];
    const r = new FrameReader((f) => got.push(f.toString('hex')));
    for (let i = 0; i < stream.length; i += size) r.push(stream.subarray(i, i + size));
    assert.deepEqual(
      got,
      payloads.map((p) => p.toString('hex')),
      `chunks of ${size} bytes`,
    );
  }
});

test('FrameReader: a frame announcing more than the limit is refused', () => {
  const r = new FrameReader(() => assert.fail('no frame'));
  const h = Buffer.alloc(4);
  h.writeUInt32LE(MAX_FRAME_BYTES + 1, 0);
  assert.throws(() => r.push(h), RangeError);
});

test('FrameReader: a limit raised by onFrame applies from the next frame of the same chunk; after stop() nothing more is handed on', () => {
  const got: number[] = [];
  const r = new FrameReader((f) => {
    got.push(f.length);
    if (got.length === 1) r.maxFrameBytes = 100;
  }, 4);
  r.push(framed([Buffer.alloc(4), Buffer.alloc(100)]));
  assert.deepEqual(got, [4, 100]);
  assert.throws(() => r.push(framed([Buffer.alloc(101)])), RangeError);

  const seen: string[] = [];
  const s = new FrameReader((f) => {
    seen.push(f.toString());
    if (f.toString() === 'stop') s.stop();
  });
  s.push(framed([Buffer.from('a'), Buffer.from('stop'), Buffer.from('b')]));
  s.push(framed([Buffer.from('c')]));
  assert.deepEqual(seen, ['a', 'stop']);
});

test('writeFrame over a unix socket: the reader gets each payload as written', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'frames-'));
  const path = join(dir, 's');
  const got: string[] = [];
  const done = new Promise<void>((resolve) => {
    const server = createServer((sock) => {
      const r = new FrameReader((f) => {
        got.push(f.toString());
        if (got.length === 3) {
          sock.destroy();
          server.close();
          resolve();
        }
      });
      sock.on('data', (c: Buffer) => r.push(c));
    });
    server.listen(path, () => {
      const c = connect(path, () => {
        writeFrame(c, Buffer.from('one'));
        writeFrames(c, [Buffer.alloc(100_000, 0x61), Buffer.from('three')]);
      });
      c.on('error', () => {});
    });
  });
  await done;
  rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(
    got.map((s) => (s.length > 10 ? `${s.length}×${s[0]}` : s)),
    ['one', '100000×a', 'three'],
  );
});

test('checkChannelPath: a channel socket path over the unix socket limit is a ConfigError naming it', () => {
  const dir = `/tmp/${'d'.repeat(80)}`;
  const fits = `${dir}/${'x'.repeat(107 - dir.length - 1)}`;
  assert.equal(checkChannelPath(fits), fits);
  assert.throws(
    () => checkChannelPath(`${fits}x`),
    (err: unknown) => err instanceof ConfigError && /108 bytes, longer than the 107-byte/.test(err.message),
  );
});
