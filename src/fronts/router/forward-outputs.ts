/**
 * The router's per-token path (router-service.ts): one placed request's outputs into its front's outbox lane, as OUT
 * records written straight into this turn's message (messages.ts `DownMessage`), or FAILED when its stream fails.
 */
import type { RequestStream } from '../../engine-client/request-stream.js';
import type { EngineOutput } from '../../protocols/types.js';
import { Tag } from '../channel/records.js';
import type { FrontOutboxes } from '../channel/outbox.js';
import { toWireError } from '../channel/wire-error.js';
import type { FrontSession } from './front-sessions.js';

/**
 * Forward one request's outputs to its front (`s`, the request's `handle` there) until the terminal one, a failure,
 * or a cancel; `forget` is called once `handle` is done with `stream` (terminal output, failure). Through the stream's
 * row mode when it has one (`listenRows`, issue 9: each row is written into this turn's message for the front
 * inside the engine client's batch step, straight from the decoded row; no output object, no delivery queue; every
 * engine client stream has it), else by iterating it (other backends, e.g. the tests' fakes).
 */
export function forwardOutputs(
  s: FrontSession,
  handle: number,
  stream: RequestStream,
  outbox: FrontOutboxes,
  forget: (s: FrontSession, handle: number, stream: RequestStream) => void,
): void {
  const lane = s.lane;
  if (stream.listenRows !== undefined) {
    stream.listenRows({
      row: (row, promptTokens, completionTokens, cachedTokens) => {
        if (row.finishReason !== null) forget(s, handle, stream);
        if (s.dropped || lane.closed) return;
        outbox.message(lane).outRow(handle, row, promptTokens, completionTokens, cachedTokens);
      },
      error: (err) => {
        forget(s, handle, stream);
        if (!s.dropped) outbox.push(s.frontId, { tag: Tag.FAILED, handle, error: toWireError(err) });
      },
    });
    return;
  }
  const onOutput = (o: EngineOutput): boolean => {
    if (s.dropped) return true;
    // Straight into this turn's message for the front (no record object): the codec writes the fields it sends.
    outbox.message(lane).out(handle, o);
    return o.finishReason !== null;
  };
  const onError = (err: unknown): void => {
    if (!s.dropped) outbox.push(s.frontId, { tag: Tag.FAILED, handle, error: toWireError(err) });
  };
  void (async () => {
    // Stop at the terminal output without calling the iterator's return() (that would cancel).
    const it = stream[Symbol.asyncIterator]();
    try {
      for (;;) {
        const next = await it.next();
        if (next.done === true || onOutput(next.value)) return;
      }
    } catch (err) {
      onError(err);
    } finally {
      forget(s, handle, stream);
    }
  })();
}
