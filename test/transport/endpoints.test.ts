import { test } from 'node:test';
import assert from 'node:assert/strict';
import { deriveEndpoints, deriveHandshakePort, fnv1a64, MAX_IPC_PATH_BYTES } from '../../src/transport/endpoints.js';
import { ConfigError } from '../../src/transport/errors.js';

const utf8 = (s: string) => new TextEncoder().encode(s);

test('FNV-1a-64 matches the computed hashes of the pinned paths (engine-wire.md 1.3)', () => {
  assert.equal(fnv1a64(utf8('/tmp/smg-zmq/ts0.ipc')), 0xe4031584fc679770n);
  assert.equal(fnv1a64(utf8('/tmp/smg-zmq/engine-31000')), 0x26c5244d6800e94an);
  assert.equal(fnv1a64(new Uint8Array()), 0xcbf29ce484222325n, 'empty input is the offset basis');
});

test('handshake ports match SMG derive_handshake_port_matches_pinned_vectors', () => {
  assert.equal(deriveHandshakePort('/tmp/smg-zmq/ts0.ipc'), 25152);
  assert.equal(deriveHandshakePort('/tmp/smg-zmq/engine-31000'), 22714);
});

test('derived ports stay in 20000..29999 and hash UTF-8 bytes', () => {
  for (const p of ['/a', '/tmp/x/engine-1', '/tmp/ünïcødé/ts', 'relative/path', '/' + 'y'.repeat(90)]) {
    const port = deriveHandshakePort(p);
    assert.ok(port >= 20000 && port <= 29999, `${p} → ${port}`);
  }
  // 'é' as UTF-8 (c3 a9) and as Latin-1 (e9) must hash differently: the spec hashes UTF-8 bytes.
  assert.equal(
    deriveHandshakePort('/tmp/é'),
    20000 + Number(fnv1a64(Uint8Array.of(0x2f, 0x74, 0x6d, 0x70, 0x2f, 0xc3, 0xa9)) % 10000n),
  );
});

test('full triple for ipc:///tmp/smg-zmq/ts0.ipc (SMG zmq_socket_addresses_derive_handshake_by_default)', () => {
  assert.deepEqual(deriveEndpoints('ipc:///tmp/smg-zmq/ts0.ipc'), {
    workerUrl: 'ipc:///tmp/smg-zmq/ts0.ipc',
    ipcPath: '/tmp/smg-zmq/ts0.ipc',
    input: 'ipc:///tmp/smg-zmq/ts0.ipc-in.sock',
    output: 'ipc:///tmp/smg-zmq/ts0.ipc-out.sock',
    handshake: 'tcp://127.0.0.1:25152',
  });
});

test('an explicit tcp:// override replaces the handshake verbatim (SMG zmq_socket_addresses_honor_handshake_override)', () => {
  const ep = deriveEndpoints('ipc:///tmp/smg-zmq/ts0.ipc', 'tcp://127.0.0.1:30500');
  assert.equal(ep.handshake, 'tcp://127.0.0.1:30500');
  assert.equal(ep.input, 'ipc:///tmp/smg-zmq/ts0.ipc-in.sock');
  assert.equal(deriveEndpoints('ipc:///tmp/w', 'tcp://[::1]:30500').handshake, 'tcp://[::1]:30500');
});

test('configuration errors are ConfigError with a message naming the problem', () => {
  assert.throws(
    () => deriveEndpoints('tcp://127.0.0.1:5555'),
    (e: unknown) => e instanceof ConfigError && /must start with ipc:\/\//.test(e.message),
  );
  assert.throws(() => deriveEndpoints('http://host:8000'), ConfigError);
  assert.throws(() => deriveEndpoints('ipc://'), /empty path/);
  assert.throws(() => deriveEndpoints('ipc:///tmp/a\0b'), /NUL/);
  assert.throws(
    () => deriveEndpoints('ipc:///tmp/w', 'ipc:///tmp/hs'),
    (e: unknown) => e instanceof ConfigError && e.message.includes('tcp://'),
  );
  assert.throws(() => deriveEndpoints('ipc:///tmp/w', 'tcp://127.0.0.1'), /tcp:\/\/<host>:<port>/);
  const long = '/tmp/' + 'x'.repeat(MAX_IPC_PATH_BYTES);
  assert.throws(() => deriveEndpoints(`ipc://${long}`), /Unix socket limit/);
  // The longest accepted path: `<P>-out.sock` is exactly 107 bytes.
  const fits = '/tmp/' + 'x'.repeat(MAX_IPC_PATH_BYTES - '/tmp/'.length - '-out.sock'.length);
  assert.equal(deriveEndpoints(`ipc://${fits}`).output.length - 'ipc://'.length, MAX_IPC_PATH_BYTES);
});
