/**
 * The streamed (SSE) answer of a generation request (issue 28 part 3): the headers and opening chunk wait for the first
 * engine output (sse.ts), every event of every choice is folded into the accumulator and sent in the endpoint's shape
 * (a plain content delta as one pre-built record), then the closing events; from the first byte on, errors travel
 * as an SSE error event. A client that leaves, or stops reading past the stall timeout, ends the run (499).
 */
import type { FastifyReply } from 'fastify';
import type { BackendStream } from './backend.js';
import { isEmptyDelta } from './choice-output.js';
import { toApiError } from './errors.js';
import { ClientDisconnectedError, makeUsage, type Usage } from './generation.js';
import { GenerationRun } from './generation-run.js';
import type { RespondParts } from './respond-buffered.js';
import { endDisconnected, endStalled } from './request-record.js';
import type { SseEvent } from './response-shape.js';
import { ClientStalledError, OPENING_HOLD_MS, SseWriter, type StreamBackpressure } from './sse.js';

/** Stream `choices` to the client; resolves with the (hijacked) reply once the response ended. Never rejects. */
export async function respondStreamed(
  a: RespondParts & {
    streams: readonly BackendStream[];
    includeUsage: boolean;
    /** vLLM's `continuous_usage_stats` (with `includeUsage`): every chunk carries the usage so far. */
    continuousUsage?: boolean;
    backpressure: StreamBackpressure;
  },
): Promise<FastifyReply> {
  const { outputs, record, disconnect, reply } = a;
  const requestId = record.facts.requestId;
  reply.hijack();
  const continuous = a.includeUsage && a.continuousUsage === true;
  const usageSoFar = (): Usage => {
    let completion = 0;
    for (const t of record.trackers) completion += t.tokensSeen;
    return makeUsage(record.facts.promptTokens, completion);
  };
  const writer = a.shape.stream(a.base, {
    includeUsage: a.includeUsage,
    n: a.streams.length,
    ...(continuous ? { continuousUsage: usageSoFar } : {}),
  });
  let run: GenerationRun | null = null;
  const sse = new SseWriter(
    reply.raw,
    a.backpressure,
    (bufferedBytes) =>
      record.facts.request.log.debug(
        { responseId: requestId, bufferedBytes },
        'client is not keeping up: stream paused at the buffer bound',
      ),
    { pause: () => run?.pause(), resume: () => run?.resume(), stalled: (err) => run?.fail(err) },
  );
  // The headers and the opening chunk wait for the first engine output (at most OPENING_HOLD_MS), so they leave in
  // the same write as it (sse.ts `start`).
  sse.start(a.headers, { holdMs: OPENING_HOLD_MS });
  disconnect.setProbe(() => sse.probe());
  const send = (list: readonly SseEvent[]) => {
    for (const e of list) {
      if (e.record !== undefined) sse.sendRecord(e.record);
      else sse.send(e.data, e.event);
    }
  };
  // Without logprobs, a plain choice's delta (the bulk of a stream) is one pre-built record (StreamShaper.textRecord).
  const textRecord =
    outputs.topLogprobs === null && !continuous && a.base.promptTokenIds === undefined ? writer.textRecord : undefined;
  run = new GenerationRun(a.choices, (index, ev) => {
    sse.release();
    const out = outputs.outputs[index]!;
    if (textRecord !== undefined && ev.type === 'delta' && ev.text !== '' && out.appendContent(ev.text)) {
      sse.sendRecord(textRecord(index, ev.text));
      return;
    }
    const delta = outputs.take(index, ev);
    if (ev.type === 'finish') {
      send(writer.finish(index, delta, out.result!, outputs.render(index, ev.logprobs)));
      return;
    }
    // Text a reasoning or tool-call parser held back or consumed (`<think>`, a tool call's markup) leaves nothing to
    // send: vLLM's serving_chat.py skips such a delta. With logprobs the chunk still goes out, carrying them.
    if (!out.plain && ev.text !== '' && ev.logprobs.length === 0 && isEmptyDelta(delta)) return;
    send(writer.delta(index, delta, outputs.render(index, ev.logprobs)));
  });
  const onDisconnect = () => run!.fail(new ClientDisconnectedError());
  disconnect.signal.addEventListener('abort', onDisconnect, { once: true });
  try {
    send(writer.opening());
    run.start();
    await run.done;
    const closing = writer.closing(outputs.usage(), outputs.results());
    if (a.shape.settled !== undefined) await a.shape.settled(); // Responses only: no extra turn elsewhere
    send(closing);
    record.count(200, outputs.outcome());
  } catch (err) {
    if (err instanceof ClientStalledError) return endStalled(record, reply, a.streams, err);
    if (err instanceof ClientDisconnectedError || disconnect.signal.aborted) return endDisconnected(record, reply);
    const apiErr = toApiError(err);
    // Mid-stream: the HTTP status is already 200; the error travels as an SSE event (logged with its own status).
    record.countFailure(200, apiErr);
    send(writer.error(apiErr));
  } finally {
    disconnect.signal.removeEventListener('abort', onDisconnect);
  }
  if (writer.doneSentinel) sse.done();
  else sse.end();
  return reply;
}
