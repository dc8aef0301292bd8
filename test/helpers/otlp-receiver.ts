/**
 * A small OTLP/HTTP traces receiver for tests (issue 32): `POST /v1/traces` with an `ExportTraceServiceRequest` in
 * protobuf (`application/x-protobuf`, the exporters' default) or JSON (`application/json`), decoded here into plain
 * spans. The protobuf reader knows the few fields a test reads (opentelemetry-proto `trace/v1/trace.proto`,
 * `common/v1/common.proto`): the ids, name, kind, times, attributes, events, status and the resource's attributes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One received span. Ids are lower-case hex; `parentSpanId` is '' for a root span; times in ns as bigint. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  /** The exporting process's resource attributes (`service.name`, `model_gateway.role`, ...). */
  resource: Record<string, unknown>;
}

/** A protobuf reader over one message's bytes: each field's number, wire type and value. */
function* fields(buf: Uint8Array): Generator<{ no: number; type: number; value: bigint | Uint8Array }> {
  let i = 0;
  const varint = (): bigint => {
    let out = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[i++]!;
      out |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return out;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const no = key >>> 3;
    const type = key & 7;
    if (type === 0) yield { no, type, value: varint() };
    else if (type === 1) {
      const v = new DataView(buf.buffer, buf.byteOffset + i, 8).getBigUint64(0, true);
      i += 8;
      yield { no, type, value: v };
    } else if (type === 2) {
      const len = Number(varint());
      yield { no, type, value: buf.subarray(i, i + len) };
      i += len;
    } else if (type === 5) {
      yield { no, type, value: BigInt(new DataView(buf.buffer, buf.byteOffset + i, 4).getUint32(0, true)) };
      i += 4;
    } else throw new Error(`protobuf wire type ${type} at byte ${i}`);
  }
}

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

function anyValue(buf: Uint8Array): unknown {
  for (const f of fields(buf)) {
    const v = f.value;
    if (f.no === 1) return text(v as Uint8Array);
    if (f.no === 2) return v === 1n;
    if (f.no === 3) return Number(BigInt.asIntN(64, v as bigint));
    if (f.no === 4) {
      const d = new DataView(new ArrayBuffer(8));
      d.setBigUint64(0, v as bigint, true);
      return d.getFloat64(0, true);
    }
    if (f.no === 5)
      return [...fields(v as Uint8Array)].filter((x) => x.no === 1).map((x) => anyValue(x.value as Uint8Array));
  }
  return null;
}

function keyValue(buf: Uint8Array, into: Record<string, unknown>): void {
  let key = '';
  let value: unknown = null;
  for (const f of fields(buf)) {
    if (f.no === 1) key = text(f.value as Uint8Array);
    else if (f.no === 2) value = anyValue(f.value as Uint8Array);
  }
  into[key] = value;
}

function protoSpan(buf: Uint8Array, resource: Record<string, unknown>): ReceivedSpan {
  const s: ReceivedSpan = {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startNs: 0n,
    endNs: 0n,
    attributes: {},
    events: [],
    status: { code: 0, message: '' },
    resource,
  };
  for (const f of fields(buf)) {
    const v = f.value;
    switch (f.no) {
      case 1:
        s.traceId = hex(v as Uint8Array);
        break;
      case 2:
        s.spanId = hex(v as Uint8Array);
        break;
      case 4:
        s.parentSpanId = hex(v as Uint8Array);
        break;
      case 5:
        s.name = text(v as Uint8Array);
        break;
      case 6:
        s.kind = Number(v);
        break;
      case 7:
        s.startNs = v as bigint;
        break;
      case 8:
        s.endNs = v as bigint;
        break;
      case 9:
        keyValue(v as Uint8Array, s.attributes);
        break;
      case 11: {
        const e = { name: '', attributes: {} as Record<string, unknown> };
        for (const g of fields(v as Uint8Array)) {
          if (g.no === 2) e.name = text(g.value as Uint8Array);
          else if (g.no === 3) keyValue(g.value as Uint8Array, e.attributes);
        }
        s.events.push(e);
        break;
      }
      case 15:
        for (const g of fields(v as Uint8Array)) {
          if (g.no === 2) s.status.message = text(g.value as Uint8Array);
          else if (g.no === 3) s.status.code = Number(g.value);
        }
        break;
    }
  }
  return s;
}

/** The spans of a protobuf `ExportTraceServiceRequest`. */
export function decodeProtobufTraces(body: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of fields(body)) {
    if (rs.no !== 1) continue;
    const resource: Record<string, unknown> = {};
    const scopes: Uint8Array[] = [];
    for (const f of fields(rs.value as Uint8Array)) {
      if (f.no === 1)
        for (const a of fields(f.value as Uint8Array)) if (a.no === 1) keyValue(a.value as Uint8Array, resource);
      if (f.no === 2) scopes.push(f.value as Uint8Array);
    }
    for (const scope of scopes)
      for (const f of fields(scope)) if (f.no === 2) out.push(protoSpan(f.value as Uint8Array, resource));
  }
  return out;
}

type JsonAny = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: JsonAny[] };
};
type JsonKv = { key: string; value: JsonAny };

function jsonValue(v: JsonAny): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(jsonValue);
  return null;
}

const jsonAttrs = (kvs: JsonKv[] | undefined): Record<string, unknown> =>
  Object.fromEntries((kvs ?? []).map((kv) => [kv.key, jsonValue(kv.value)]));

/** An OTLP/JSON id: hex as the spec says (some senders write base64). */
const jsonId = (id: string | undefined): string =>
  id === undefined || id === ''
    ? ''
    : /^[0-9a-f]+$/i.test(id)
      ? id.toLowerCase()
      : Buffer.from(id, 'base64').toString('hex');

/** The spans of a JSON `ExportTraceServiceRequest`. */
export function decodeJsonTraces(body: string): ReceivedSpan[] {
  type JsonSpan = {
    traceId: string;
    spanId: string;
    parentSpanId?: string;
    name: string;
    kind?: number;
    startTimeUnixNano?: string | number;
    endTimeUnixNano?: string | number;
    attributes?: JsonKv[];
    events?: Array<{ name: string; attributes?: JsonKv[] }>;
    status?: { code?: number; message?: string };
  };
  const req = JSON.parse(body) as {
    resourceSpans?: Array<{ resource?: { attributes?: JsonKv[] }; scopeSpans?: Array<{ spans?: JsonSpan[] }> }>;
  };
  return (req.resourceSpans ?? []).flatMap((rs) => {
    const resource = jsonAttrs(rs.resource?.attributes);
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((s): ReceivedSpan => ({
        traceId: jsonId(s.traceId),
        spanId: jsonId(s.spanId),
        parentSpanId: jsonId(s.parentSpanId),
        name: s.name,
        kind: s.kind ?? 0,
        startNs: BigInt(s.startTimeUnixNano ?? 0),
        endNs: BigInt(s.endTimeUnixNano ?? 0),
        attributes: jsonAttrs(s.attributes),
        events: (s.events ?? []).map((e) => ({ name: e.name, attributes: jsonAttrs(e.attributes) })),
        status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
        resource,
      })),
    );
  });
}

/** A running receiver: its traces URL, every span received so far, and the content types it was sent. */
export interface OtlpReceiver {
  readonly url: string;
  readonly spans: ReceivedSpan[];
  readonly contentTypes: Set<string>;
  /** Bodies it could not decode (each fails the test that checks `errors`). */
  readonly errors: string[];
  close(): Promise<void>;
}

/** Start a receiver on 127.0.0.1 (a free port). */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const contentTypes = new Set<string>();
  const errors: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
      contentTypes.add(type);
      try {
        if (req.method !== 'POST' || req.url !== '/v1/traces') throw new Error(`${req.method} ${req.url}`);
        spans.push(
          ...(type === 'application/json' ? decodeJsonTraces(body.toString('utf8')) : decodeProtobufTraces(body)),
        );
        res.writeHead(200, {
          'content-type': type === 'application/json' ? 'application/json' : 'application/x-protobuf',
        });
        res.end(type === 'application/json' ? '{}' : undefined);
      } catch (err) {
        errors.push(String(err));
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    contentTypes,
    errors,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
