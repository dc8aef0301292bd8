/**
 * The simulated rank's spans (issue 32 part 1): started with `--otlp-traces-endpoint`, a rank gives every request that
 * arrives with `trace_headers` (engine-wire.md 5.2 element 14) a span, a child of the gateway's request span, from
 * its arrival to its terminal row (or its abort). A traced vLLM engine does the same with its own spans, so a test can
 * see the gateway's trace reach an engine and continue there.
 */
import { SpanKind, SpanStatusCode, type Span, type Tracer } from '@opentelemetry/api';
import { contextOf } from '../tracing.js';
import type { SimRow } from './scheduler.js';

/** At most this many requests are traced at once; more go untraced (a rank's running set is far smaller). */
const MAX_OPEN_SPANS = 65_536;

/** The open spans of one rank's traced requests, by request id. */
export class SimRequestSpans {
  private readonly open = new Map<string, Span>();

  constructor(
    private readonly tracer: Tracer,
    private readonly engineIndex: number,
  ) {}

  /** Request `rid` arrived with `headers` and `promptTokens` prompt tokens: open its span. */
  start(rid: string, headers: Readonly<Record<string, string>>, promptTokens: number): void {
    if (this.open.size >= MAX_OPEN_SPANS || this.open.has(rid)) return;
    const span = this.tracer.startSpan(
      'sim_engine_request',
      {
        kind: SpanKind.SERVER,
        attributes: {
          'gen_ai.request.id': rid,
          'gen_ai.usage.input_tokens': promptTokens,
          'model_gateway.dp_rank': this.engineIndex,
        },
      },
      contextOf(headers),
    );
    this.open.set(rid, span);
  }

  /** Rows the rank emits: a terminal row ends its request's span with the token counts and finish reason. */
  rows(rows: readonly SimRow[]): void {
    if (this.open.size === 0) return;
    for (const r of rows) {
      if (r.finishedReason === '') continue;
      const span = this.open.get(r.rid);
      if (span === undefined) continue;
      this.open.delete(r.rid);
      span.setAttributes({
        'gen_ai.usage.output_tokens': r.completionTokens,
        'gen_ai.usage.cached_tokens': r.cachedTokens,
        'gen_ai.response.finish_reasons': [r.finishedReason],
      });
      span.end();
    }
  }

  /** The gateway aborted `rids`: their spans end marked aborted. */
  aborted(rids: readonly string[]): void {
    for (const rid of rids) {
      const span = this.open.get(rid);
      if (span === undefined) continue;
      this.open.delete(rid);
      span.setAttribute('gen_ai.response.finish_reasons', ['abort']);
      span.end();
    }
  }

  /** The rank stops: every open span ends as failed. */
  closeAll(): void {
    for (const span of this.open.values()) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: 'the rank stopped' });
      span.end();
    }
    this.open.clear();
  }
}
